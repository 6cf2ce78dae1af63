"""kvsched: a laboratory for the scheduler of an LLM serving engine.

    from kvsched import EngineConfig, Request, simulate
    result = simulate([Request("r0", 0, 1461, 32)], EngineConfig(num_blocks=180))
    result.summary["ttft_p99"]
"""

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
from kvsched.request import Request, Status
from kvsched.simulator import simulate
from kvsched.timing import ConstantStep, LinearStep, StepClock

__version__ = "0.1.0"

__all__ = [
    "BATCH_COLUMNS",
    "EVENT_COLUMNS",
    "REQUEST_COLUMNS",
    "STEP_COLUMNS",
    "ConstantStep",
    "EngineConfig",
    "LinearStep",
    "PreemptionMode",
    "Request",
    "RequestRecord",
    "Requeue",
    "RunResult",
    "Status",
    "StepClock",
    "Unschedulable",
    "Victim",
    "__version__",
    "builtin_policies",
    "make_policy",
    "simulate",
]
