"""Sweeps: one scenario over the grid of every combination of the values given.

Values: `A..B` doubles from A up to B (128..8192: 128, 256, ..., 8192), `A..B:+S` steps by S,
`A..B:xF` multiplies by F, and `a,b,c` is taken as it is.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from kvsched.backends import Backend, run_jobs
from kvsched.errors import KvschedError, ScenarioError, excerpt
from kvsched.paths import SWEEP, replace_dir
from kvsched.records.diagnosis import diagnose, incident_flags
from kvsched.records.steplog import StepLog
from kvsched.report import write_csv, write_json
from kvsched.runner import policy_of, run_variant, select, slo_of, staging, thresholds_of
from kvsched.scenario import Assignment, Scenario, load_scenario_text

OPTION_PATHS = {
    "budget": "engine.max_num_batched_tokens",
    "blocks": "engine.num_blocks",
    "policy": "policy",
    "preemption": "engine.preemption",
}
"""The sweep command's shorthand options and the scenario field each one sets."""

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_RANGE = re.compile(rf"^({_NUMBER})\.\.({_NUMBER})(?::([+x*])({_NUMBER}))?$")
MAX_POINTS = 100_000  # runs in one sweep: grid points x variants


@dataclass(frozen=True)
class Axis:
    """One swept field: its dotted path, its values, and whether they double (log axis)."""

    path: str
    values: tuple[Any, ...]
    geometric: bool
    option: str  # how the user named it: --budget, --set engine.watermark, ...


def parse_axis(option: str, path: str, text: str) -> Axis:
    """Parse a value list or range given to `option`, or raise a one-line error."""
    text = text.strip()
    match = _RANGE.match(text)
    if match:
        values, geometric = _expand_range(option, text, match)
        return Axis(path, tuple(values), geometric, option)
    if ".." in text:
        raise _bad(option, text)
    items = [item.strip() for item in text.split(",")]
    if not text or any(not item for item in items):
        raise _bad(option, text)
    values = [_scalar(item) for item in items]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if option in ("--budget", "--blocks") and not numeric:
        raise _bad(option, text)
    ratios = numeric and len(values) > 2 and all(
        b == 2 * a for a, b in zip(values, values[1:], strict=False))
    return Axis(path, tuple(values), bool(ratios), option)


def _expand_range(option: str, text: str, match: re.Match[str]) -> tuple[list[Any], bool]:
    start, end = _scalar(match[1]), _scalar(match[2])
    kind, step = match[3], match[4]
    if start > end:
        raise ScenarioError(option, f"range '{text}' runs backwards: start must be <= end")
    if kind is None or kind in "x*":
        factor = 2 if kind is None else _scalar(step)
        if start <= 0:
            raise ScenarioError(option, f"range '{text}': a multiplying range must start > 0")
        if factor <= 1:
            raise ScenarioError(option, f"range '{text}': the factor must be > 1")
        count = int(math.log(end / start) / math.log(factor) + 1e-9) + 1
        if count > MAX_POINTS:
            raise _too_many(option, text, count)
        values, value = [], start
        while value <= end * (1 + 1e-9):
            values.append(_tidy(value))
            value = value * factor
        return values, True
    increment = _scalar(step)
    if increment <= 0:
        raise ScenarioError(option, f"range '{text}': the step must be > 0")
    count = (end - start) / increment + 1
    if count > MAX_POINTS:
        raise _too_many(option, text, count)
    count = int(count + 1e-9)
    return [_tidy(start + k * increment) for k in range(count)], False


def _too_many(option: str, text: str, count: float) -> ScenarioError:
    return ScenarioError(option, f"range '{excerpt(text)}' has {count:,.0f} values; "
                                 f"a sweep has at most {MAX_POINTS:,} points")


def _tidy(value: float) -> int | float:
    rounded = round(value, 10)
    return int(rounded) if float(rounded).is_integer() else rounded


def _scalar(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _bad(option: str, text: str) -> ScenarioError:
    return ScenarioError(option, "expected A..B, A..B:+S, A..B:xF or a comma list, "
                                 f"got '{excerpt(text)}'")


def parse_set_axis(text: str) -> Axis:
    """`--set KEY=V1,V2` (or a range) as an axis."""
    key, sep, values = text.partition("=")
    if not sep or not key.strip():
        raise ScenarioError("--set", f"expected KEY=V1,V2,..., got '{excerpt(text)}'")
    return parse_axis(f"--set {key.strip()}", key.strip(), values)


def grid(axes: Sequence[Axis]) -> list[dict[str, Any]]:
    """Every combination of the axes' values, the first axis varying slowest."""
    check_size(axes)
    return [dict(zip([a.path for a in axes], combo, strict=True))
            for combo in itertools.product(*(a.values for a in axes))]


def check_size(axes: Sequence[Axis], variants: int = 1) -> int:
    """The number of runs in the grid (points x variants), refused over `MAX_POINTS` before
    any point is built."""
    count = math.prod(len(a.values) for a in axes) * variants
    if count > MAX_POINTS:
        sizes = " x ".join(f"{len(a.values):,}" for a in axes)
        per = f" x {variants} variants" if variants > 1 else ""
        raise KvschedError(f"the sweep has {count:,} points ({sizes}{per}); "
                           f"at most {MAX_POINTS:,}")
    return count


# -- running ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepSource:
    """A scenario as text, so that worker processes can load it again (picklable)."""

    text: str
    source: str
    base_dir: Path
    sets: tuple[Assignment, ...] = ()
    seed: int | None = None

    options: tuple[tuple[str, str], ...] = ()  # swept path -> the option that sets it

    def load(self, point: dict[str, Any]) -> Scenario:
        named = dict(self.options)
        extra = tuple(Assignment(tuple(path.split(".")), value, f"{path}={value}",
                                 named.get(path, "--set"))
                      for path, value in point.items())
        return load_scenario_text(self.text, self.source, self.base_dir, self.sets + extra,
                                  self.seed)


def _run_point(job: tuple[SweepSource, dict[str, Any], str]) -> dict[str, Any]:
    """One grid point: its summary, diagnosed on its own (no baseline to compare with)."""
    source, point, variant_name = job
    scenario = source.load(point)
    variant = next(v for v in scenario.variants if v.name == variant_name)
    # A point keeps only its summary (records: summary): nothing per step is held.
    num_blocks = variant.spec.engine.to_config().num_blocks
    result = run_variant(variant, step_log=StepLog(num_blocks, keep=False))
    spec = variant.spec
    incidents = diagnose(result, thresholds_of(spec), None, slo_of(spec))
    flags = incident_flags(incidents, spec.cluster is not None)
    return {"time_unit": result.time_unit, **result.summary, **flags,
            "incidents": "; ".join(incident.kind for incident in incidents)}


def run_sweep(source: SweepSource, axes: Sequence[Axis], variants: Sequence[str] = (),
              jobs: int = 1, on_point: Callable[[], None] | None = None,
              backend: Backend = Backend.LOCAL, address: str | None = None,
              on_checked: Callable[[], None] | None = None) -> pd.DataFrame:
    """One row per grid point and variant: the point's values, `variant`, the summary keys.

    Every point is validated before anything runs (`on_checked` after each grid point);
    `jobs` > 1 runs points in processes, `backend` ray as Ray tasks (see
    `kvsched.backends`); the rows are the same either way. `on_point` after each run.
    """
    source = replace(source, options=tuple((a.path, a.option.split()[0]) for a in axes))
    names = [v.name for v in select(source.load({}), variants)]
    check_size(axes, len(names))
    points = grid(axes)
    for point in points:  # refuse a bad value before spending time on the others
        for variant in select(source.load(point), names):
            policy_of(variant)
        if on_checked:
            on_checked()
    work = [(source, point, name) for point in points for name in names]
    summaries = run_jobs(_run_point, work, backend, jobs, address, on_point)
    rows = [{**point, "variant": name, **summary}
            for (_, point, name), summary in zip(work, summaries, strict=True)]
    return pd.DataFrame.from_records(rows)


def write_sweep(folder: Path, frame: pd.DataFrame, axes: Sequence[Axis],
                source: SweepSource) -> None:
    """`summary.csv` and `sweep.json` (the grid, and each variant's `slo` targets as
    `variant_slo`, which sweep.png draws), staged beside `folder` and renamed into its
    place: a previous sweep of the same name is replaced whole (anything else there is
    refused, left as it is), other sweeps are untouched, and an OS error (disk full...)
    leaves nothing partial."""
    slos = {v.name: v.spec.slo.model_dump(exclude_none=True) for v in source.load({}).variants
            if v.spec.slo is not None}
    with staging(folder.parent, folder.name) as staged:
        write_csv(frame, staged / "summary.csv")
        write_json({**grid_spec(source, axes), "variant_slo": slos}, staged / "sweep.json")
        replace_dir(staged, folder, SWEEP)


def grid_spec(source: SweepSource, axes: Sequence[Axis]) -> dict[str, Any]:
    """The scenario and grid of a sweep or capacity search, for its marker file."""
    return {"source": source.source, "seed": source.seed,
            "axes": [{"path": a.path, "option": a.option, "values": list(a.values),
                      "geometric": a.geometric} for a in axes]}
