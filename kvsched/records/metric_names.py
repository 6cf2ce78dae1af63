"""vLLM's benchmark names (`vllm bench serve`'s result JSON) for kvsched's summary keys: the one
table `--columns`, `--slo` and `expect` read, so a name means the same figure everywhere.

An `_ms` name is its kvsched key in milliseconds (the key times 1000: kvsched's times are
seconds); a run whose time model counts steps has no milliseconds, so it refuses them. vLLM's
`std_*_ms` has no kvsched figure and is refused too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MS = 1000.0

_TIMES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
_STATS = {"mean": "mean", "median": "p50", "p50": "p50", "p90": "p90", "p95": "p95",
          "p99": "p99"}

ALIASES: dict[str, tuple[str, float]] = {
    **{f"{stat}_{name}_ms": (f"{key}_{ours}", MS)
       for name, key in _TIMES.items() for stat, ours in _STATS.items()},
    "completed": ("num_finished", 1.0),
    **{key: (key, 1.0) for key in ("request_throughput", "output_throughput",
                                   "total_token_throughput", "request_goodput")},
}
"""vLLM's name -> (kvsched's summary key, factor from the key's unit to the name's)."""

NO_EQUIVALENT = tuple(f"std_{name}_ms" for name in _TIMES)


def resolve(name: str) -> tuple[str, float]:
    """The summary key a name reads and the factor it is scaled by (a key reads itself)."""
    return ALIASES.get(name, (name, 1.0))


def refusal(name: str, time_units: Iterable[str]) -> str | None:
    """Why `name` cannot be read from runs whose times are in `time_units` (steps, s), or
    None when it can."""
    if name in NO_EQUIVALENT:
        return (f"'{name}': kvsched has no standard deviation; use mean_, median_, p90_, p95_ "
                f"or p99_{name[4:]}")
    key, factor = resolve(name)
    if factor != 1 and "steps" in time_units:
        return (f"'{name}' is in milliseconds, but this run's times are in steps (time: "
                f"{{kind: steps}}); name '{key}' instead, or give a time model in seconds")
    return None


def read(summary: dict[str, Any], name: str, time_unit: str = "s") -> Any:
    """The figure `name` names in a summary, in the name's unit (None where there is none,
    and for a millisecond name of a step-unit run)."""
    key, factor = resolve(name)
    value = summary.get(key)
    if factor == 1 or value is None:
        return value
    return None if time_unit == "steps" else value * factor

VLLM_NAMES = tuple(name for name, (key, _) in ALIASES.items() if key != name)
"""The names that are vLLM's only (not also kvsched keys): for suggestions."""
