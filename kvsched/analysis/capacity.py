"""Capacity: the highest request rate at which a variant still meets its SLOs.

The rate is scaled by a factor x applied to the variant's workload: a synthetic
workload's arrival rate times x (a `fixed` interval divided by x), a trace's `time_scale`
divided by x (arrivals x times denser). The search runs on the geometric grid
x = (1 + tolerance)^k from x = 1, each next k guessed from the probes' SLO margins
(`kvsched.analysis.capacity_grid`), until the answer holds at x and fails at x * (1 + tolerance),
one tolerance step above (with the same seed, the same requests, only denser). The SLOs
hold when every `metric <= limit` (any summary key) and no request starved or was left
unfinished.

A probe stops early once its TTFT, e2e or queue-time target is provably lost
(`kvsched.analysis.slo_watch`): the verdict is the full run's, only its figures are unknown. The
first failing probe (`scale_above`) is then run again in full, so that the answer and its
figures are those of full probes; `early_abort=False` runs every probe in full.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Generator, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from kvsched.analysis.capacity_grid import search_steps
from kvsched.analysis.slo_watch import SloWatch
from kvsched.analysis.sweep import Axis, SweepSource, grid, grid_spec
from kvsched.backends import Backend, process_pool, run_jobs, stop_pool
from kvsched.errors import KvschedError, ScenarioError
from kvsched.paths import CAPACITY, replace_dir
from kvsched.records.diagnosis import INCIDENT_KEYS
from kvsched.records.metric_names import VLLM_NAMES, refusal, resolve
from kvsched.records.metrics import CLUSTER_KEYS, OFFLOAD_KEYS, PD_KEYS, SUMMARY_KEYS
from kvsched.records.steplog import StepLog
from kvsched.report import write_csv, write_json
from kvsched.runner import requests_of, run_variant, select, staging
from kvsched.scenario import (
    Scenario,
    Variant,
    is_known_metric,
    known_classes,
    time_unit_of,
    unknown_value,
)
from kvsched.schema import Fixed, SyntheticWorkload, TraceWorkload

MAX_FACTOR = 1024.0  # the search looks no further than 1024x (or 1/1024x) the given rate
DEFAULT_TOLERANCE = 0.02
UTILISATION_KEYS = frozenset({"mfu_mean", "mbu_mean"})  # the summary keys that need them


@dataclass(frozen=True)
class SloTarget:
    """`metric <= limit` on a run's summary. A vLLM name (`kvsched.records.metric_names`) is read as
    its summary key, the limit in the key's unit (p99_ttft_ms=500 is ttft_p99 <= 0.5), so the
    search and its records are those of the key; `written` keeps the name for its checks."""

    metric: str
    limit: float
    written: str | None = None

    @classmethod
    def parse(cls, text: str) -> SloTarget:
        key, sep, value = text.partition("=")
        key = key.strip()
        try:
            limit = float(value)
        except ValueError:
            limit = math.nan
        if not sep or not key or not math.isfinite(limit):
            raise ScenarioError("--slo", f"expected METRIC=LIMIT (e.g. ttft_p99=2), got '{text}'")
        if limit < 0:  # every summary key is a count, a time or a share: none is negative
            raise ScenarioError("--slo", f"{key}: expected a limit >= 0, got {value.strip()} "
                                         "(no summary value is below 0: no rate could meet it)")
        metric, factor = resolve(key)
        return cls(metric, limit / factor, key if metric != key else None)


@dataclass(frozen=True)
class Probe:
    """One run of the search: its scale, request rate, SLO figures and verdict."""

    scale: float
    rate: float
    values: tuple[float | None, ...]  # None for every target when the probe was aborted
    holds: bool
    aborted: bool = False  # stopped once the SLO was provably lost (figures unknown)
    lost: bool = False  # the SLO was provably lost before the end (aborted or not)


@dataclass(frozen=True)
class Capacity:
    """A variant's answer: the highest `scale` (and `rate`) on the grid that holds, and the
    first that fails above it. None when even 1/MAX_FACTOR fails (`scale`) or when even
    MAX_FACTOR holds (`scale_above`)."""

    variant: str
    point: dict[str, Any]
    base_rate: float
    scale: float | None
    scale_above: float | None
    probes: tuple[Probe, ...]
    num_gpus: int = 1  # the variant's GPUs: its replicas' (both pools of a P/D cluster) x tp

    @property
    def rate(self) -> float | None:
        return None if self.scale is None else self.base_rate * self.scale

    @property
    def goodput_per_gpu(self) -> float | None:
        """DistServe's per-GPU goodput: the highest rate at which the SLOs hold, per GPU."""
        rate = self.rate
        return None if rate is None else rate / self.num_gpus

    @property
    def rate_above(self) -> float | None:
        return None if self.scale_above is None else self.base_rate * self.scale_above

    def probe_at(self, scale: float | None) -> Probe | None:
        return next((p for p in self.probes if p.scale == scale), None)


def check_targets(targets: Sequence[SloTarget], scenario: Scenario) -> None:
    """Refuse an SLO on a key no summary has (before anything runs)."""
    if not targets:
        raise ScenarioError("--slo", "give at least one --slo METRIC=LIMIT (e.g. ttft_p99=2)")
    classes = known_classes(scenario)
    diagnosis = {*INCIDENT_KEYS, "incident_imbalance"}  # not in a run's summary: no SLO
    units = {time_unit_of(variant.spec) for variant in scenario.variants}
    for target in targets:
        problem = refusal(target.written or target.metric, units)
        if problem is not None:
            raise ScenarioError("--slo", problem)
        if target.metric in diagnosis or not is_known_metric(target.metric, classes):
            keys = [k for k in (*SUMMARY_KEYS, *CLUSTER_KEYS, *PD_KEYS, *OFFLOAD_KEYS,
                                *VLLM_NAMES) if k not in diagnosis]
            raise ScenarioError("--slo", unknown_value("summary key", target.metric, keys))


def scalable(variant: Variant) -> None:
    """Refuse a workload whose rate cannot be scaled."""
    workload = variant.spec.workload
    if isinstance(workload, TraceWorkload):
        return
    if isinstance(workload, SyntheticWorkload) and workload.arrival.kind != "all_at_once":
        return
    raise variant.error(("workload",), "capacity scales the arrival rate: it needs a trace or "
                        "a synthetic workload with poisson, gamma or fixed arrivals")


def scaled(variant: Variant, scale: float) -> Variant:
    """The variant with its arrival rate multiplied by `scale`."""
    workload = variant.spec.workload
    new: TraceWorkload | SyntheticWorkload
    if isinstance(workload, TraceWorkload):
        new = workload.model_copy(update={"time_scale": workload.time_scale / scale})
    else:
        assert isinstance(workload, SyntheticWorkload)
        arrival = workload.arrival
        if isinstance(arrival, Fixed):
            arrival = arrival.model_copy(update={"interval": arrival.interval / scale})
        else:
            arrival = arrival.model_copy(update={"rate": arrival.rate * scale})  # type: ignore[union-attr]
        new = workload.model_copy(update={"arrival": arrival})
    return replace(variant, spec=variant.spec.model_copy(update={"workload": new}))


def base_rate(variant: Variant) -> float:
    """Requests per time unit at scale 1: the synthetic rate as given, or a trace's
    requests over the span of its (scaled) arrivals."""
    workload = variant.spec.workload
    if isinstance(workload, SyntheticWorkload):
        arrival = workload.arrival
        return 1.0 / arrival.interval if isinstance(arrival, Fixed) else arrival.rate  # type: ignore[union-attr]
    arrivals = [r.arrival_time for r in requests_of(variant)]
    span = max(arrivals) - min(arrivals)
    if not span > 0:  # a time scale moves no arrival: there is no rate to search over
        raise variant.error(("workload",), (
            f"capacity scales the arrival rate, but the trace's {len(arrivals):,} request(s) "
            f"all arrive at one instant ({min(arrivals):g}): there is no rate to scale; run "
            f"it as a burst with `kvsched run`, or give arrivals that spread over time"))
    return (len(arrivals) - 1) / span


def holds(summary: dict[str, Any], targets: Sequence[SloTarget]) -> tuple[bool, tuple]:
    values = tuple(summary.get(t.metric) for t in targets)
    ok = (summary["num_starved"] == 0 and summary["num_unfinished"] == 0
          and all(v is not None and v <= t.limit for v, t in zip(values, targets, strict=True)))
    return ok, values


def run_probe(variant: Variant, targets: Sequence[SloTarget], scale: float, rate: float,
              early_abort: bool = True) -> Probe:
    """One run of the search at `scale` (stopped early if its SLO is provably lost)."""
    run = scaled(variant, scale)
    log = StepLog(run.spec.engine.to_config().num_blocks, keep=False)  # sums only
    requests = requests_of(run)
    watch = SloWatch(((t.metric, t.limit) for t in targets), len(requests))
    abort = None
    if watch and run.spec.cluster is None:
        abort = watch if early_abort else _Observer(watch)
    # MFU and MBU cost a third of a roofline probe, the ITL histogram a tenth: each is
    # measured only for an SLO on it.
    utilisation = any(t.metric in UTILISATION_KEYS for t in targets)
    itl = any(t.metric.startswith("itl_") for t in targets)
    summary = run_variant(run, requests=requests, step_log=log, abort=abort,
                          utilisation=utilisation, itl=itl).summary
    if watch.fired and early_abort:
        return Probe(scale, rate * scale, (None,) * len(targets), False, aborted=True, lost=True)
    ok, values = holds(summary, targets)
    return Probe(scale, rate * scale, values, ok, lost=watch.fired)


class _Observer:
    """The watch asked as with early abort, never stopping the run: a full probe then
    knows whether an early one would have stopped (and left its figures unknown)."""

    def __init__(self, watch: SloWatch) -> None:
        self.watch = watch

    def __call__(self, now: float, live: Iterable[Any]) -> bool:
        if not self.watch.fired:
            self.watch(now, live)
        return False


def search(variant: Variant, targets: Sequence[SloTarget], tolerance: float,
           point: dict[str, Any] | None = None, early_abort: bool = True,
           on_probe: Callable[[Probe], None] | None = None) -> Capacity:
    """`variant`'s capacity on the grid (1 + tolerance)^k (see the module docstring);
    `on_probe` after each probe (a progress bar)."""
    rate = base_rate(variant)  # a trace's is read from the whole trace: once per search
    steps = _search_steps(variant, rate, targets, tolerance, point, early_abort)
    scale, early = next(steps)
    while True:
        probe = run_probe(variant, targets, scale, rate, early)
        if on_probe:
            on_probe(probe)
        try:
            scale, early = steps.send(probe)
        except StopIteration as done:
            return done.value


ProbeAsk = tuple[float, bool]  # (scale, early_abort): the probe a search needs next


def _search_steps(variant: Variant, rate: float, targets: Sequence[SloTarget],
                  tolerance: float, point: dict[str, Any] | None,
                  early_abort: bool) -> Generator[ProbeAsk, Probe, Capacity]:
    """One search as a generator: it yields the probes it needs one at a time, is sent
    each one's result, and returns the capacity; whoever runs the probes (`search` here,
    or workers shared by several searches) gets the same answer."""
    step = math.log1p(tolerance)
    k_max = int(math.log(MAX_FACTOR) / step)
    probes: dict[int, Probe] = {}
    grid_steps = search_steps(lambda k: math.exp(k * step), step, k_max)
    k = next(grid_steps)
    while True:
        if k not in probes:
            probes[k] = yield math.exp(k * step), early_abort
        try:
            k = grid_steps.send((probes[k].holds, margin(probes[k], targets)))
        except StopIteration as done:
            lo, hi = done.value
            break
    if hi is not None and probes[hi].aborted:  # the answer's figures come from full runs
        probes[hi] = yield probes[hi].scale, False
    ordered = tuple(probes[k] for k in sorted(probes))
    return Capacity(variant.name, dict(point or {}), rate,
                    None if lo is None else probes[lo].scale,
                    None if hi is None else probes[hi].scale, ordered, num_gpus(variant))


def num_gpus(variant: Variant) -> int:
    """GPUs a variant runs on: each replica's tensor-parallel size (1 without a model), over
    the replicas of its cluster, both pools of a P/D one (its decode pool's alone under
    `pd_decider: never`)."""
    spec = variant.spec
    if spec.cluster is None:
        return getattr(spec.time, "tp", 1)
    # the cluster's modules: only for a cluster's variants
    from kvsched.cluster.run import replica_specs

    return sum(getattr(s.time, "tp", 1) for s in replica_specs(spec))


def margin(probe: Probe, targets: Sequence[SloTarget]) -> float | None:
    """A probe's highest value / limit (how far it is from its SLO), what the search
    guesses from. None when an early probe would not know it (the SLO was lost before the
    end), when a failing probe's figures are within the limits (it failed by starving),
    or for a limit that is not positive: the same with and without early abort."""
    pairs = list(zip(probe.values, targets, strict=True))
    if probe.lost or any(v is None or t.limit <= 0 for v, t in pairs):
        return None
    value = max(float(v) / t.limit for v, t in pairs if v is not None)
    return value if probe.holds == (value <= 1) else None


def _search_job(job: tuple[SweepSource, dict[str, Any], str, tuple[SloTarget, ...], float,
                           bool], on_probe: Callable[[Probe], None] | None = None) -> Capacity:
    source, point, name, targets, tolerance, early_abort = job
    scenario = source.load(point)
    variant = next(v for v in scenario.variants if v.name == name)
    return search(variant, targets, tolerance, point, early_abort, on_probe)


def run_capacity(source: SweepSource, targets: Sequence[SloTarget], axes: Sequence[Axis] = (),
                 variants: Sequence[str] = (), tolerance: float = DEFAULT_TOLERANCE,
                 backend: Backend = Backend.LOCAL, jobs: int = 1, address: str | None = None,
                 on_done: Callable[[], None] | None = None,
                 early_abort: bool = True,
                 on_probe: Callable[[int, Probe], None] | None = None) -> list[Capacity]:
    """A capacity per grid point (one point without axes) and selected variant
    (`early_abort=False`: every probe runs in full, so every probe has its figures), in
    the order of `search_labels`. `on_done` after each search; `on_probe(index, probe)`
    after each probe of search `index` run on this machine (Ray's are not seen one by
    one)."""
    if not 0 < tolerance < 1:
        raise KvschedError(f"--tolerance: expected a value in (0, 1), got {tolerance:g}")
    points = grid(axes) if axes else [{}]
    source = replace(source, options=tuple((a.path, a.option.split()[0]) for a in axes))
    scenario = source.load({})
    check_targets(targets, scenario)
    names = [v.name for v in select(scenario, variants)]
    for point in points:  # refuse a bad value or workload before anything runs
        loaded = source.load(point)
        for variant in loaded.variants:
            if variant.name in names:
                scalable(variant)
    work = [(source, point, name, tuple(targets), tolerance, early_abort) for point in points
            for name in names]
    if backend is Backend.LOCAL and address is None and jobs > 1 and len(work) > 1:
        return _searches_sharing_workers(work, jobs, on_done, on_probe)
    if backend is Backend.LOCAL and address is None:  # here, one after the other
        results = []
        for index, job in enumerate(work):
            told = None if on_probe is None else functools.partial(on_probe, index)
            results.append(_search_job(job, told))
            if on_done:
                on_done()
        return results
    return run_jobs(_search_job, work, backend, jobs, address, on_done)


def search_labels(axes: Sequence[Axis], variants: Sequence[str]) -> list[str]:
    """How each search of `run_capacity` is named, in its order: the variant, and the
    grid point's values when there are axes."""
    return [name + "".join(f" {path.rsplit('.', 1)[-1]}={value}"
                           for path, value in point.items())
            for point in (grid(axes) if axes else [{}]) for name in variants]


@dataclass
class _Shared:
    """A search under way on shared workers: its generator, the probe it waits for (None
    once it ended) and what a worker needs to run that probe."""

    steps: Generator[ProbeAsk, Probe, Capacity]
    ask: ProbeAsk | None
    job: tuple[SweepSource, dict[str, Any], str, tuple[SloTarget, ...], float]


def _searches_sharing_workers(work: Sequence[tuple], workers: int,
                              on_done: Callable[[], None] | None,
                              on_probe: Callable[[int, Probe], None] | None = None
                              ) -> list[Capacity]:
    """Every search at once, probe by probe, on `workers` processes: a worker takes the
    next probe of any search that waits for one, so no worker idles while a long search
    ends on the other (a search as one job left one core idle for its last probes). Each
    search asks for the same probes in the same order as alone: the same answers."""
    searches: list[_Shared] = []
    for source, point, name, targets, tolerance, early_abort in work:
        variant = next(v for v in source.load(point).variants if v.name == name)
        rate = base_rate(variant)
        steps = _search_steps(variant, rate, targets, tolerance, point, early_abort)
        searches.append(_Shared(steps, next(steps), (source, point, name, targets, rate)))
    results: list[Capacity | None] = [None] * len(work)
    pool = process_pool(min(workers, len(work)))
    running: dict[Future[Probe], int] = {}
    try:
        while True:
            for index, shared in enumerate(searches):
                if (shared.ask is not None and index not in running.values()
                        and len(running) < workers):
                    running[pool.submit(_probe_job, (*shared.job, *shared.ask))] = index
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=running.__getitem__):
                index = running.pop(future)
                shared = searches[index]
                probe = future.result()
                if on_probe:
                    on_probe(index, probe)
                try:
                    shared.ask = shared.steps.send(probe)
                except StopIteration as done:
                    shared.ask = None
                    results[index] = done.value
                    if on_done:
                        on_done()
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown()
    return results  # type: ignore[return-value]  # every search ended


def _probe_job(job: tuple[SweepSource, dict[str, Any], str, tuple[SloTarget, ...], float,
                          float, bool]) -> Probe:
    source, point, name, targets, rate, scale, early_abort = job
    key = (source, repr(sorted(point.items())), name)
    variant = _LOADED.get(key)
    if variant is None:  # a worker loads each variant once, not once per probe
        variant = _LOADED[key] = next(v for v in source.load(point).variants if v.name == name)
    return run_probe(variant, targets, scale, rate, early_abort)


_LOADED: dict[tuple[SweepSource, str, str], Variant] = {}  # a worker's variants, by job


def capacity_frame(results: Sequence[Capacity], targets: Sequence[SloTarget]) -> pd.DataFrame:
    """capacity.csv: one row per point and variant: the axes, `variant`, `rate` (requests
    per time unit, the highest that holds), `scale` (its factor on the scenario's rate),
    `rate_above`/`scale_above` (the first that fails), `tolerance`-step SLO figures at both
    (`<metric>` and `<metric>_above`), `num_gpus`, `goodput_per_gpu` (`rate` / `num_gpus`)
    and `num_runs`."""
    rows = []
    for result in results:
        at, above = result.probe_at(result.scale), result.probe_at(result.scale_above)
        row: dict[str, Any] = {**result.point, "variant": result.variant,
                               "rate": result.rate, "scale": result.scale,
                               "rate_above": result.rate_above,
                               "scale_above": result.scale_above}
        for i, target in enumerate(targets):
            row[target.metric] = at.values[i] if at else None
            row[f"{target.metric}_above"] = above.values[i] if above else None
        row["num_gpus"] = result.num_gpus
        row["goodput_per_gpu"] = result.goodput_per_gpu
        row["num_runs"] = len(result.probes)
        rows.append(row)
    return pd.DataFrame.from_records(rows)


def probes_frame(results: Sequence[Capacity], targets: Sequence[SloTarget]) -> pd.DataFrame:
    """capacity_probes.csv: every run of the searches (what `--plot` draws); an `aborted`
    probe stopped once its SLO was lost, its SLO figures empty."""
    rows = [{**result.point, "variant": result.variant, "scale": p.scale, "rate": p.rate,
             **{t.metric: v for t, v in zip(targets, p.values, strict=True)},
             "holds": p.holds, "aborted": p.aborted}
            for result in results for p in result.probes]
    return pd.DataFrame.from_records(rows)


def write_capacity(folder: Path, results: Sequence[Capacity], targets: Sequence[SloTarget],
                   tolerance: float, source: SweepSource, axes: Sequence[Axis] = (),
                   plot: bool = False) -> None:
    """`capacity.csv`, `capacity_probes.csv`, `capacity.json` (the scenario, grid, SLOs,
    tolerance and time unit: the marker of a capacity folder) and with `plot`
    `capacity.png` (`kvsched.plots.capacity`, which `kvsched plot` redraws it with), staged
    beside `folder` and renamed into its place: a previous search of the same name is
    replaced whole (anything else there is refused, left as it is), and an OS error (disk
    full...) leaves nothing partial."""
    slo = [{"metric": t.metric, "limit": t.limit, **({"written": t.written} if t.written
                                                      else {})} for t in targets]
    names = {result.variant for result in results}
    units = {time_unit_of(v.spec) for v in source.load({}).variants if v.name in names}
    spec = {**grid_spec(source, axes), "slo": slo, "tolerance": tolerance,
            "time_unit": units.pop() if len(units) == 1 else None}
    answers, probes = capacity_frame(results, targets), probes_frame(results, targets)
    with staging(folder.parent, folder.name) as staged:
        write_csv(answers, staged / "capacity.csv")
        write_csv(probes, staged / "capacity_probes.csv")
        write_json(spec, staged / "capacity.json")
        if plot:
            # matplotlib: only when pictures are drawn
            from kvsched.plots.capacity import draw_capacity
            from kvsched.plots.run import save_png

            figure = draw_capacity(answers, probes, slo, tolerance, spec["time_unit"],
                                   f"{folder.name} ({source.source})",
                                   [axis.path for axis in axes])
            save_png(figure, staged / "capacity.png")
        replace_dir(staged, folder, CAPACITY)
