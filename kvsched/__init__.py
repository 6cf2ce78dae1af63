"""kvsched: a laboratory for the scheduler of an LLM serving engine.

    from kvsched import EngineConfig, Request, simulate
    result = simulate([Request("r0", 0, 1461, 32)], EngineConfig(num_blocks=180))
    result.summary["ttft_p99"]

Names are imported on first use, so that `kvsched --help` does not pay for numpy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from kvsched import _moved
from kvsched import compiled as _compiled

_compiled.install()  # a compiled module's build is taken only while it matches its source
_moved.install()  # the old paths of moved modules (kvsched.capacity...) give the new modules

__version__ = "0.1.0"

_EXPORTS = {
    "EngineConfig": "kvsched.config", "PreemptionMode": "kvsched.config",
    "Requeue": "kvsched.config", "Unschedulable": "kvsched.config", "Victim": "kvsched.config",
    "builtin_policies": "kvsched.policies", "make_policy": "kvsched.policies",
    "BATCH_COLUMNS": "kvsched.records", "EVENT_COLUMNS": "kvsched.records",
    "REQUEST_COLUMNS": "kvsched.records", "STEP_COLUMNS": "kvsched.records",
    "RequestRecord": "kvsched.records", "RunResult": "kvsched.records",
    "Request": "kvsched.request", "Status": "kvsched.request",
    "simulate": "kvsched.simulator",
    "RecordMode": "kvsched.records.steplog", "StepLog": "kvsched.records.steplog",
    "ConstantStep": "kvsched.timing", "LinearStep": "kvsched.timing",
    "StepClock": "kvsched.timing",
}

__all__ = [
    "BATCH_COLUMNS", "EVENT_COLUMNS", "REQUEST_COLUMNS", "STEP_COLUMNS", "ConstantStep",
    "EngineConfig", "LinearStep", "PreemptionMode", "RecordMode", "Request", "RequestRecord",
    "Requeue", "RunResult", "Status", "StepClock", "StepLog", "Unschedulable", "Victim",
    "__version__", "builtin_policies", "make_policy", "simulate",
]
assert sorted(__all__) == sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvsched' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from kvsched.config import EngineConfig, PreemptionMode, Requeue, Unschedulable, Victim
    from kvsched.policies import builtin_policies, make_policy
    from kvsched.records import (
        BATCH_COLUMNS,
        EVENT_COLUMNS,
        REQUEST_COLUMNS,
        STEP_COLUMNS,
        RequestRecord,
        RunResult,
    )
    from kvsched.records.steplog import RecordMode, StepLog
    from kvsched.request import Request, Status
    from kvsched.simulator import simulate
    from kvsched.timing import ConstantStep, LinearStep, StepClock
