"""Running a scenario: every variant through the engine, its expectations checked, its records
written to `<out>/<scenario>/` all at once or not at all."""

from __future__ import annotations

import csv
import operator
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvsched import __version__
from kvsched.backpressure import Action, Backpressure
from kvsched.errors import ScenarioError
from kvsched.paths import RUN, replace_dir, write_error
from kvsched.records import BATCH_COLUMNS, EVENT_COLUMNS, REQUEST_COLUMNS, RunResult
from kvsched.records.csvout import RowCsv, StepCsv, cell_text, write_rows
from kvsched.records.diagnosis import Incident, Thresholds, diagnose, incident_flags
from kvsched.records.metric_names import read
from kvsched.records.steplog import RecordMode, StepLog
from kvsched.records.table import rows_of
from kvsched.report import summary_rows, write_json
from kvsched.request import Request
from kvsched.scenario import Scenario, Variant, unknown_value
from kvsched.schema import (
    Expectation,
    ProfiledTime,
    RunSpec,
    TraceWorkload,
)
from kvsched.simulator import Abort, simulate
from kvsched.timing.serve_defaults import derived_defaults
from kvsched.variant_parts import admission_of, policy_of, slo_of, time_model_of
from kvsched.workload import build_requests, count_requests

if TYPE_CHECKING:
    from kvsched.cluster.run import ClusterSpool

OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
    "==": operator.eq, "!=": operator.ne,
}


@dataclass(frozen=True)
class VariantRun:
    """One variant's run: its result, the incidents its diagnosis found, and how its records
    were written."""

    name: str
    variant: Variant
    result: RunResult
    incidents: tuple[Incident, ...] = ()
    records: RecordMode = RecordMode.FULL
    steps_file: Path | None = None  # steps.csv, already streamed during the run
    streamed: bool = False  # events.csv (and steps.csv unless summary) written during the run

    @property
    def summary(self) -> dict[str, Any]:
        """The run's summary, the diagnosis flags, and `incidents` with their evidence."""
        return {**self.result.summary,
                **incident_flags(list(self.incidents), self.variant.spec.cluster is not None),
                "incidents": [incident.as_dict() for incident in self.incidents]}


@dataclass(frozen=True)
class CheckResult:
    """One of the scenario's expectations, checked against its runs."""

    expectation: Expectation
    actual: float | None  # the metric, or the ratio with `ratio_to`
    passed: bool | None  # None: skipped (a variant it needs was not run)
    detail: str


@dataclass(frozen=True)
class ScenarioRun:
    """A scenario's runs, one per variant run, and its expectations checked."""

    scenario: Scenario
    runs: list[VariantRun]
    checks: list[CheckResult]

    @property
    def passed(self) -> bool:
        return all(check.passed is not False for check in self.checks)

    @property
    def time_unit(self) -> str:
        return self.runs[0].result.time_unit if self.runs else "steps"


def requests_of(variant: Variant) -> Sequence[Request]:
    """The variant's workload, built (files read, seeded generators drawn)."""
    assert variant.spec.workload is not None
    return build_requests(variant.spec.workload, variant.spec.seed,
                          variant.scenario.base_dir, variant.error)


def check_profiles(variant: Variant) -> None:
    """Read every `profiled` time model's folder of the variant and its fleet now (its CSVs'
    columns and values), so that `validate` and `run` refuse a bad one naming the field."""
    spec = variant.spec
    times: list[tuple[tuple, object]] = [(("time",), spec.time)]
    if spec.cluster is not None:
        times += [(("cluster", "replicas", i, "time"), entry.time)
                  for i, entry in enumerate(spec.cluster.replicas)]
    for field, time in times:
        if isinstance(time, ProfiledTime):
            from kvsched.timing.profiled import ProfiledStep, ProfileError  # pandas: only if needed

            try:
                ProfiledStep(Path(time.profiles), time.model, time.tp)
            except ProfileError as exc:
                raise variant.error((*field, "profiles"), str(exc)) from None


def count_of(variant: Variant) -> tuple[int, bool]:
    """The variant's request count (and whether exact), its files checked, nothing generated."""
    assert variant.spec.workload is not None
    check_profiles(variant)
    return count_requests(variant.spec.workload, variant.scenario.base_dir, variant.error)


def run_variant(variant: Variant, record_batches: bool = False,
                requests: Sequence[Request] | None = None,
                step_log: StepLog | None = None,
                event_sink: Callable[[list[tuple]], None] | None = None,
                progress: Callable[[int, float], None] | None = None,
                abort: Abort | None = None,
                cluster_spool: ClusterSpool | None = None,
                utilisation: bool = True, itl: bool = True) -> RunResult:
    """Simulate one variant (`requests`: its workload, if already built; `step_log`: where
    the step records go, by default all kept in memory; `abort`: as `simulate`'s, single
    runs only: a cluster runs to the end; `cluster_spool`: where a cluster streams its
    steps and events, instead of `step_log` and `event_sink`; `utilisation=False`, `itl=False`:
    no mfu / mbu, no itl_* figures, as `simulate`'s)."""
    spec = variant.spec
    policy = policy_of(variant)
    admission = admission_of(spec)
    pressure = spec.backpressure
    if requests is None:
        requests = requests_of(variant)
    if spec.cluster is not None:
        # clusters only: a single engine leaves the routers and the cluster loop unloaded
        from kvsched.cluster.run import run_cluster_variant

        return run_cluster_variant(variant, requests,
                                   keep_steps=step_log is None or step_log.kept is not None,
                                   spool=cluster_spool)
    return simulate(requests, spec.engine.to_config(), policy, time_model_of(spec),
                    admission=admission, slo=slo_of(spec),
                    backpressure=Backpressure(pressure.window, pressure.threshold,
                                              pressure.release, Action(pressure.act)),
                    record_batches=record_batches, step_log=step_log, event_sink=event_sink,
                    progress=progress, abort=abort, utilisation=utilisation, itl=itl)


def thresholds_of(spec: RunSpec) -> Thresholds:
    return Thresholds(**spec.diagnosis.model_dump(exclude={"baseline"}))


def baseline_name(variant: Variant) -> str:
    """The variant a run's diagnosis compares with (`diagnosis.baseline`, else the first)."""
    return variant.spec.diagnosis.baseline or variant.scenario.variants[0].name


def missing_baselines(run: ScenarioRun) -> list[str]:
    """Baselines some run should be compared with but that were not run (--variant)."""
    ran = {r.name for r in run.runs}
    wanted = {baseline_name(r.variant) for r in run.runs}
    return sorted(wanted - ran)


def diagnose_runs(runs: list[VariantRun]) -> list[VariantRun]:
    """Each run with its incidents; comparisons are against the run's baseline variant
    (`diagnosis.baseline`, by default the first variant of the scenario)."""
    by_name = {run.name: run for run in runs}
    out = []
    for run in runs:
        spec = run.variant.spec
        name = baseline_name(run.variant)
        baseline = by_name.get(name) if name != run.name else None
        incidents = diagnose(run.result, thresholds_of(spec),
                             baseline.result if baseline else None, slo_of(spec))
        out.append(replace(run, incidents=tuple(incidents)))
    return out


def select(scenario: Scenario, names: Iterable[str]) -> list[Variant]:
    """The variants called `names` (all when empty), or an error naming the valid ones."""
    wanted = list(names)
    known = [v.name for v in scenario.variants]
    for name in wanted:
        if name not in known:
            raise ScenarioError(scenario.source, unknown_value("variant", name, known),
                                "--variant")
    return [v for v in scenario.variants if not wanted or v.name in wanted]


def prepare(scenario: Scenario, variants: Iterable[str] = ()) -> dict[str, Sequence[Request]]:
    """Build every selected variant's workload now, so that bad input (a trace with a bad
    column, a user's policy class or router that does not load) is refused before anything
    runs or is written."""
    workloads = {}
    for variant in select(scenario, variants):
        policy_of(variant)  # a user's policy class that does not load is refused now
        check_profiles(variant)
        if variant.spec.cluster is not None:
            # clusters only: a single engine leaves the routers and the cluster loop unloaded
            from kvsched.cluster.run import check_router_loads

            check_router_loads(variant)
        workloads[variant.name] = requests_of(variant)
    return workloads


def run_scenario(scenario: Scenario, variants: Iterable[str] = (), record_batches: bool = False,
                 on_done: Callable[[VariantRun], None] | None = None,
                 workloads: dict[str, Sequence[Request]] | None = None,
                 records: RecordMode = RecordMode.FULL,
                 spool: Path | None = None,
                 progress: Callable[[str, int, int, float], None] | None = None) -> ScenarioRun:
    """Run the selected variants (`workloads`: from `prepare`, or built here).

    `records`: what of the step records is kept; with a `spool` folder (a staging folder
    from `staging`), each variant streams its `steps.csv` into `spool/<variant>/` as it
    runs instead of holding its steps in memory. `progress(variant, arrived, total, now)`
    is called now and then during each run (a progress bar)."""
    runs = []
    for variant in select(scenario, variants):
        requests = workloads.get(variant.name) if workloads else None
        num_blocks = variant.spec.engine.to_config().usable_blocks  # the pool StepLog sees
        steps_file = writer = event_writer = cluster_spool = None
        stream = spool is not None
        if spool is not None:
            (spool / variant.name).mkdir()
        if spool is not None and variant.spec.cluster is not None:  # parts, joined when written
            from kvsched.cluster.run import ClusterSpool

            cluster_spool = ClusterSpool(spool / variant.name, records,
                                         sum(r.count for r in variant.spec.cluster.replicas))
            log = StepLog(num_blocks, keep=False)  # unused: each replica streams its own
        elif records is RecordMode.SUMMARY:
            log = StepLog(num_blocks, keep=False)
        elif spool is not None:
            steps_file = spool / variant.name / "steps.csv"
            writer = StepCsv(steps_file, records, num_blocks)
            log = StepLog(num_blocks, keep=False, sink=writer)
        else:
            log = StepLog(num_blocks)
        if spool is not None and cluster_spool is None:
            event_writer = RowCsv(spool / variant.name / "events.csv", EVENT_COLUMNS)
        try:
            total = len(requests) if requests is not None else 0
            tick = None if progress is None else (
                lambda arrived, now, name=variant.name, total=total: progress(
                    name, arrived, total, now))
            result = run_variant(variant, record_batches, requests, log, event_writer, tick,
                                 cluster_spool=cluster_spool)
        finally:
            for open_file in (writer, event_writer, cluster_spool):
                if open_file is not None:
                    open_file.close()
        run = VariantRun(variant.name, variant, result, records=records, steps_file=steps_file,
                         streamed=stream)
        runs.append(run)
        if on_done:
            on_done(run)
    runs = diagnose_runs(runs)
    summaries = {run.name: run.summary for run in runs}
    return ScenarioRun(scenario, runs, check_expectations(scenario.expectations, summaries))


def check_expectations(expectations: Iterable[Expectation],
                       summaries: dict[str, dict[str, Any]]) -> list[CheckResult]:
    checks = []
    for expectation in expectations:
        needed = [expectation.variant] + ([expectation.ratio_to] if expectation.ratio_to else [])
        if any(name not in summaries for name in needed):
            checks.append(CheckResult(expectation, None, None, "skipped: variant not run"))
            continue
        actual = _figure(summaries[expectation.variant], expectation)
        if expectation.ratio_to:
            reference = _figure(summaries[expectation.ratio_to], expectation)
            actual = None if actual is None or not reference else actual / reference
        if actual is None:
            why = ("the reference figure is 0 or missing" if expectation.ratio_to
                   else "the metric has no value")
            checks.append(CheckResult(expectation, None, False, why))
            continue
        passed = OPERATORS[expectation.op](actual, expectation.value)
        checks.append(CheckResult(expectation, float(actual), passed, ""))
    return checks


def _figure(summary: dict[str, Any], expectation: Expectation) -> float | None:
    """The expectation's figure, in the unit of the names it is written with (a vLLM name
    in ms reads its key times 1000, `kvsched.records.metric_names`)."""
    value = read(summary, expectation.metric)
    if value is None or expectation.per is None:
        return value
    divisor = read(summary, expectation.per)
    return value / divisor if divisor else None


def describe(expectation: Expectation) -> str:
    """`pool60: num_preemptions / baseline > 5` style text for tables."""
    metric = expectation.metric
    if expectation.per:
        metric = f"{metric} / {expectation.per}"
    if expectation.ratio_to:
        metric = f"({metric}) vs {expectation.ratio_to}" if expectation.per else (
            f"{metric} vs {expectation.ratio_to}")
    value = f"{expectation.value:g}"
    return f"{expectation.variant}: {metric} {expectation.op} {value}"


# -- writing ---------------------------------------------------------------------------


def _make_staging(out_dir: Path, name: str) -> Path:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out_dir))
    except OSError as exc:
        raise write_error(out_dir, exc) from None
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp makes it private; results are ordinary folders
    return staging


@contextmanager
def staging(out_dir: Path, name: str) -> Iterator[Path]:
    """A hidden folder in `out_dir` to write a scenario's records into (streamed steps
    included); removed if anything fails before `write_scenario` renames it into place."""
    folder = _make_staging(out_dir, name)
    try:
        yield folder
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise write_error(out_dir / name, exc) from None
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    shutil.rmtree(folder, ignore_errors=True)  # gone already when it was renamed


def write_scenario(run: ScenarioRun, out_dir: Path,
                   extra_files: Callable[[Path, ScenarioRun], None] | None = None,
                   staged: Path | None = None) -> Path:
    """Write `<out_dir>/<scenario>/` whole: into a temporary folder (`staged`, from `staging`,
    when the run streamed into one), then renamed into place.

    Only what this run produced is replaced: the folders and `summary.csv` rows of the
    variants that ran. Other variants' folders, rows and pictures already there are kept.
    A `<scenario>` that is not a run's folder (a user's file, a folder without
    `<variant>/run.json`) is refused and left as it is (`paths.check_replaceable`).
    An OS error (disk full, read-only folder) leaves nothing partial and is one line (the
    `staging` context turns it into one and removes the folder).
    """
    if staged is None:
        with staging(out_dir, run.scenario.name) as folder:
            return write_scenario(run, out_dir, extra_files, folder)
    final = out_dir / run.scenario.name
    for variant_run in run.runs:
        _write_variant(staged / variant_run.name, variant_run)
    header, body = summary_rows([(r.name, r.summary) for r in run.runs])
    if final.is_dir():
        header, body = _keep_others(final, staged, header, body, run)
    write_rows(staged / "summary.csv", header, body)
    if extra_files:
        extra_files(staged, run)
    replace_dir(staged, final, RUN)
    return final


def replaced_by(run: ScenarioRun, out_dir: Path) -> tuple[list[str], list[str]]:
    """(variants whose results in `<out_dir>/<scenario>/` this run replaces, variants there
    it keeps), for telling the user before writing."""
    final = out_dir / run.scenario.name
    if not final.is_dir():
        return [], []
    present = sorted(p.name for p in final.iterdir() if p.is_dir() and not p.name.startswith("."))
    ran = {r.name for r in run.runs}
    return [n for n in present if n in ran], [n for n in present if n not in ran]


def _drawn_for(name: str, ran: set[str], kept: set[str]) -> bool:
    """Whether `name` is the timeline of a variant that ran: timeline-<variant>.png, or a
    cluster replica's timeline-<variant>-r<i>.png (unless that is another variant's own)."""
    if not (name.startswith("timeline-") and name.endswith(".png")):
        return False
    variant = name[len("timeline-"):-len(".png")]
    if variant in ran:
        return True
    if variant in kept:
        return False
    base, _, replica = variant.rpartition("-r")
    return bool(base) and replica.isdigit() and base in ran


def _keep_others(final: Path, staging_dir: Path, header: list[str], body: list[list],
                 run: ScenarioRun) -> tuple[list[str], list[list]]:
    """Bring into `staging_dir` what `final` holds of variants this run did not produce, and
    return the summary with their rows (as they were, cell for cell), in scenario order."""
    ran = {r.name for r in run.runs}
    # report.html, ttft.png and latency.png show every variant: never kept, so a stale one
    # cannot outlive a rerun (--report and --plot draw them again over all the variants)
    own = {"summary.csv", "report.html", "ttft.png", "latency.png"}
    others = {entry.name for entry in final.iterdir() if entry.is_dir()} - ran
    for entry in sorted(final.iterdir()):
        if entry.name.startswith(".") or entry.name in own or (
                entry.is_dir() and entry.name in ran) or _drawn_for(entry.name, ran, others):
            continue
        if entry.is_dir():
            shutil.copytree(entry, staging_dir / entry.name, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, staging_dir / entry.name)
    try:
        with (final / "summary.csv").open(newline="", encoding="utf-8") as handle:
            old = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error):
        return header, body  # nothing readable to keep
    if not old or "variant" not in old[0]:
        return header, body
    old_header = old[0]
    kept = [dict(zip(old_header, row, strict=False)) for row in old[1:]]
    kept = [row for row in kept if row.get("variant") not in ran]
    if not kept:
        return header, body
    new = [dict(zip(header, (cell_text(v) for v in row), strict=True)) for row in body]
    merged_header = old_header + [name for name in header if name not in old_header]
    order = {v.name: i for i, v in enumerate(run.scenario.variants)}
    rows = sorted(kept + new, key=lambda row: order.get(row.get("variant", ""), len(order)))
    return merged_header, [[row.get(name, "") for name in merged_header] for row in rows]


def _link_or_copy(source: str | Path, target: str | Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _write_variant(folder: Path, run: VariantRun) -> None:
    folder.mkdir(exist_ok=run.streamed)
    result = run.result
    if getattr(result, "replicas", ()):  # a cluster: records with a replica column
        from kvsched.cluster.run import write_cluster_records

        write_cluster_records(folder, result, run.records, run.streamed)  # type: ignore[arg-type]
    else:
        _write_records(folder, run)
    write_json({"variant": run.name, "time_unit": result.time_unit, **run.summary},
               folder / "summary.json")
    write_json({**run_record(run.variant, result), "records": run.records.value},
               folder / "run.json")


def _write_records(folder: Path, run: VariantRun) -> None:
    result = run.result
    write_rows(folder / "requests.csv", REQUEST_COLUMNS,
               rows_of(result.requests))
    if run.steps_file is None and run.records is not RecordMode.SUMMARY:
        write_steps(folder / "steps.csv", result, run.records)
    if not run.streamed:
        write_rows(folder / "events.csv", EVENT_COLUMNS, result.events)
    if result.batches is not None:
        write_rows(folder / "batches.csv", BATCH_COLUMNS, result.batches)


def write_steps(path: Path, result: RunResult, records: RecordMode = RecordMode.FULL) -> None:
    """`steps.csv` of a run that kept its step records."""
    log = result.step_log
    if log.kept is None:
        raise ValueError("this run did not keep its step records")
    writer = StepCsv(path, records, log.num_blocks)
    try:
        for start in range(0, len(log.kept), 1 << 15):
            writer(log.kept[start:start + (1 << 15)])
    finally:
        writer.close()


def run_record(variant: Variant, result: RunResult) -> dict[str, Any]:
    """Enough to rerun the variant: the resolved configuration as a standalone scenario;
    `engine_defaults` names the values taken from the GPU's defaults and why."""
    scenario = variant.scenario
    resolved = variant.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    resolved.get("diagnosis", {}).pop("baseline", None)  # names a variant of the original
    if variant.spec.cluster is not None and variant.spec.cluster.decode is not None:
        resolved["cluster"].pop("replicas", None)  # a P/D cluster's are its pools
    workload = resolved.get("workload", {})
    base = scenario.base_dir.resolve()
    if isinstance(variant.spec.workload, TraceWorkload):
        workload["path"] = str(base / variant.spec.workload.path)
    for entry in [workload] + list(workload.get("mix", [])):
        for key in ("prompt_len", "output_len"):
            length = entry.get(key)
            if isinstance(length, dict) and length.get("kind") == "empirical":
                length["path"] = str(base / length["path"])
    return {
        "kvsched_version": __version__,
        "source": scenario.source,
        "scenario": scenario.name,
        "variant": variant.name,
        "seed": variant.spec.seed,
        "set": [a.text for a in scenario.assignments],
        "time_unit": result.time_unit,
        "watermark_blocks": result.config.watermark_blocks,
        "engine_defaults": derived_defaults(variant.resolved),
        "resolved": {"name": f"{scenario.name}-{variant.name}", **resolved},
    }
