"""The `kvsched` command: parse, call the library, render. Input errors exit 2 with one line.

No `from __future__ import annotations` here: typer reads every command's annotations at
each start, and as strings each would be compiled and evaluated (about 10 ms a start)."""

import atexit
import functools
import gc
import json
import math
import os
import shutil
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from kvsched.cli import shared
from kvsched.cli.shared import (
    Out,
    Range,
    Seed,
    Variants,
    app,
    check_out,
    friendly,
    lesson_scenario_path,
    work_begins,
)
from kvsched.errors import KvschedError, excerpt, one_line
from kvsched.paths import RUN, SWEEP, check_name, check_replaceable, write_file
from kvsched.records.mode import RecordMode

# kvsched does no linear algebra: numpy's BLAS thread pool (made when numpy is imported, by
# the commands below) would only cost start-up time. A value already set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Nor does it use pydantic plugins: pydantic looks for them (reading every installed
# package's entry points) when it builds the scenario's schema, 2 ms a start; typer turns
# them off for its own validators the same way. A value already set is kept.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

if TYPE_CHECKING:  # the commands import what they use: `kvsched --help` stays fast
    from collections.abc import Sequence

    from kvsched.analysis.sweep import Axis
    from kvsched.cli.progress import RunTally
    from kvsched.request import Request
    from kvsched.runner import ScenarioRun
    from kvsched.scenario import Scenario

def shipped_scenarios_dir() -> Path:
    local = Path("scenarios")
    if local.is_dir():
        return local
    return Path(__file__).resolve().parents[2] / "scenarios"  # (kvsched/cli/../..)


# -- run ------------------------------------------------------------------------------


Files = Annotated[list[Path], typer.Argument(metavar="SCENARIO", show_default=False,
                                              help="Scenario YAML files (one or more).")]
Columns = Annotated[str | None, typer.Option(
    "--columns", metavar="KEY,...", help="The table's columns, in this order: summary keys or "
    "vLLM benchmark names, e.g. ttft_p99,p99_itl_ms,num_preemptions.")]


TraceOut = Annotated[Path | None, typer.Option(
    "--trace-out", metavar="FILE.json", help="Also write the run as a Chrome trace (open it in "
    "Perfetto or chrome://tracing).")]
TraceWindow = Annotated[str | None, typer.Option(
    "--trace-window", metavar="START..END", help="Only what overlaps this interval of the "
    "run's clock goes into the trace (a big run's trace is refused over a million events).")]


@app.command(epilog="Example: kvsched run scenarios/pool60.yaml --set engine.num_blocks=90")
@friendly
def run(
    scenarios: Files,
    out: Out = Path("results"),
    seed: Seed = None,
    set_: Annotated[list[str], typer.Option(
        "--set", metavar="KEY=VALUE",
        help="Override a field in every variant, e.g. engine.num_blocks=60 (engine keys: "
             "kvsched keys).")] = [],  # noqa: B006
    variant: Variants = [],  # noqa: B006
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print a JSON list of summaries instead of tables.")] = False,
    check: Annotated[bool, typer.Option(
        "--check/--no-check", help="Exit 1 when an expectation fails.")] = True,
    record_batches: Annotated[bool, typer.Option(
        "--record-batches", help="Also write batches.csv: what ran in each step.")] = False,
    plot: Annotated[bool, typer.Option(
        "--plot", help="Also draw the run's pictures (timelines, ttft.png, latency.png) and "
        "print their paths.")] = False,
    wide: Annotated[bool, typer.Option(
        "--wide", help="Every column, however wide the terminal.")] = False,
    records: Annotated[RecordMode, typer.Option(
        "--records", case_sensitive=False,
        help="steps.csv with a row per step (full), a row per decode stretch (compact), or "
             "none (summary: requests, events and the summary only).")] = RecordMode.FULL,
    columns: Columns = None,
    report: Annotated[bool, typer.Option(
        "--report", help="Also write report.html: the run to explore in a browser (see "
        "kvsched report).")] = False,
    trace_out: TraceOut = None,
    trace_window: TraceWindow = None,
) -> None:
    """Run every variant of each scenario, write records to OUT/<scenario>/, compare them.
    A long run says how far it got on stderr: a bar on a terminal, else a line now and then."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.cli.progress import on_terminal, run_heartbeat

    with run_heartbeat("run", not on_terminal()) as beat:
        _run(scenarios, out, seed, set_, variant, as_json, check, record_batches, plot, wide,
             records, columns, beat, report, trace_out, trace_window)


def _run(scenarios: list[Path], out: Path, seed: int | None, set_: list[str],
         variant: list[str], as_json: bool, check: bool, record_batches: bool, plot: bool,
         wide: bool, records: RecordMode, columns: str | None, beat: Any,
         report: bool = False, trace_out: Path | None = None,
         trace_window: str | None = None) -> None:
    """`run`'s work; `beat.status` says what it is doing (a plain line now and then when
    stderr is not a terminal)."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.cli.progress import RunTally
    from kvsched.runner import prepare, replaced_by, run_scenario, staging, write_scenario
    from kvsched.scenario import Assignment, load_scenario, time_unit_of

    beat.status = "reading the scenario files"
    window = check_trace_options(trace_out, trace_window)
    if trace_out is not None and len(scenarios) != 1:
        raise KvschedError(f"--trace-out: give one scenario (got {len(scenarios)}): a trace "
                           "shows one run folder")
    sets = [Assignment.parse(text) for text in set_]
    loaded = [load_scenario(path, sets, seed) for path in scenarios]
    picked = column_names(columns, loaded, variant)
    for i, scenario in enumerate(loaded):
        twin = next((o for o in loaded[:i] if o.name == scenario.name), None)
        if twin is not None:
            raise KvschedError(f"{scenario.source}: name '{scenario.name}' is also the name of "
                               f"{twin.source}: both would write {out}/{scenario.name}/")
    check_out(out)
    for scenario in loaded:
        check_replaceable(out / scenario.name, RUN)
    beat.status = "making the workloads (reading traces, drawing requests)"
    workloads = [prepare(scenario, variant) for scenario in loaded]  # all valid before any run
    for scenario, requests in zip(loaded, workloads, strict=True):
        _unit_warnings(scenario, variant, requests)
    work_begins()
    payload: list[dict[str, Any]] = []
    failed = False
    for scenario, requests in zip(loaded, workloads, strict=True):
        tally = RunTally(scenario.name, {v.name: time_unit_of(v.spec)
                                         for v in scenario.variants})
        beat.status = tally.text
        with staging(out, scenario.name) as staged:
            with run_progress(scenario.name, tally) as progress:
                result = run_scenario(scenario, variant, record_batches, workloads=requests,
                                      records=records, spool=staged, progress=progress)
            beat.status = (f"writing the records{' and pictures' if plot else ''} of "
                           f"{scenario.name}")
            replaced, kept = replaced_by(result, out)
            drawn: list[str] = []
            folder = write_scenario(result, out, functools.partial(
                _extra_files, drawn, plot, report) if plot or report else None, staged)
        if replaced:
            note = f"; kept {', '.join(kept)}" if kept else ""
            typer.echo(one_line(f"replaced the previous results of {', '.join(replaced)} in "
                                f"{out / scenario.name}/ (folders and summary.csv rows){note}"),
                       err=True)
        failed |= not result.passed
        for message in _idle_warnings(result, requests):
            typer.echo(one_line(f"warning: {scenario.source}: {message}"), err=True)
        if as_json:
            payload += [{"scenario": scenario.name, "variant": r.name, **r.summary}
                        for r in result.runs]
            for line in check_failures(result):
                typer.echo(line, err=True)
        else:
            typer.echo(render_run(result, folder, table_width(wide), picked), nl=False)
        for picture in drawn:  # (stdout carries the JSON with --json)
            typer.echo(f"wrote {folder / picture}", err=as_json)
        if not as_json:
            typer.echo()
    if as_json:
        typer.echo(json.dumps(payload, indent=2))
    if trace_out is not None:
        folder = out / loaded[0].name
        try:
            _write_trace(folder, trace_out, window, err=as_json)
        except KvschedError as exc:
            raise KvschedError(f"{exc} (the run's records are in {folder}/: kvsched report "
                               f"{folder} --trace-out FILE --trace-window START..END)"
                               ) from None
    if check and failed:
        raise typer.Exit(1)


def column_names(text: str | None, scenarios: "list[Scenario]", names: list[str]) -> list[str]:
    """--columns as names, each a figure the selected runs will have (`is_known_metric`, or a
    vLLM name they can read), or one error line with the nearest names, before any run."""
    if text is None:
        return []
    # (loaded when the command runs: `kvsched --help` stays fast)
    from difflib import get_close_matches

    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.records.diagnosis import INCIDENT_KEYS
    from kvsched.records.metric_names import VLLM_NAMES, refusal, resolve
    from kvsched.records.metrics import CLUSTER_KEYS, OFFLOAD_KEYS, PD_KEYS, SUMMARY_KEYS
    from kvsched.scenario import is_known_metric, known_classes, time_unit_of

    picked = [name.strip() for name in text.split(",")]
    if not all(picked):
        raise KvschedError(f"--columns: expected KEY,KEY,... (summary keys), got '{excerpt(text)}'")
    units = {time_unit_of(v.spec) for scenario in scenarios for v in scenario.variants
             if not names or v.name in names}
    for name in picked:
        problem = refusal(name, units)
        if problem is not None:
            raise KvschedError(f"--columns: {problem}")
        key = resolve(name)[0]
        if key == "incidents" or any(is_known_metric(key, known_classes(s)) for s in scenarios):
            continue
        pool = [*SUMMARY_KEYS, *CLUSTER_KEYS, *PD_KEYS, *OFFLOAD_KEYS, *INCIDENT_KEYS,
                *VLLM_NAMES, "incidents"]
        close = get_close_matches(name, pool, n=3, cutoff=0.6)
        hint = f" (nearest: {', '.join(close)})" if close else ""
        raise KvschedError(f"--columns: unknown summary key '{excerpt(name)}'{hint}; expected "
                           "summary keys (summary.json) or vLLM benchmark names (README)")
    return picked


def check_failures(result: "ScenarioRun") -> list[str]:
    """A line per failed expectation (scenario/variant, the claim, the measured figure): what
    stderr says when stdout carries JSON rather than the checks' table."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.report import fmt
    from kvsched.runner import describe

    return [one_line(f"check failed: {result.scenario.name}/{describe(check.expectation)}; "
                     f"measured {fmt(check.actual)}" + (f" ({check.detail})" if check.detail
                                                         else ""))
            for check in result.checks if check.passed is False]


def _unit_warnings(scenario: "Scenario", names: list[str],
                   workloads: "dict[str, Sequence[Request]]") -> None:
    """Valid values that look like a unit slip, one stderr line each (as `validate`), and the
    KV pool each `num_blocks: auto` variant derived from its GPU."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.schema import derived_pool, unit_warnings
    from kvsched.timing.serve_defaults import defaults_line
    from kvsched.workload.trace_notes import timestamp_slip, traces_of

    messages = [m for v in scenario.variants for m in unit_warnings(v.spec)]
    messages += [slip for trace in traces_of(scenario, workloads, names)
                 if (slip := timestamp_slip(trace.spec, trace.requests))]
    for message in dict.fromkeys(messages):
        typer.echo(f"warning: {scenario.source}: {message}", err=True)
    for variant in scenario.variants:
        if names and variant.name not in names:
            continue
        for line in (defaults_line(variant.resolved), derived_pool(variant.resolved,
                                                                   variant.spec)):
            if line is not None:
                typer.echo(one_line(f"{scenario.name}/{variant.name}: {line}"), err=True)


def _idle_warnings(result: "ScenarioRun", workloads: "dict[str, Sequence[Request]]") -> list[str]:
    """After a run: replays of hours that kept the engine almost idle (a trace in ms?)."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.schema import TraceWorkload
    from kvsched.workload.trace_notes import idle_slip

    messages = []
    for run in result.runs:
        trace, requests = run.variant.spec.workload, workloads.get(run.name)
        if isinstance(trace, TraceWorkload) and requests is not None and result.time_unit != \
                "steps" and (slip := idle_slip(trace, requests, run.summary)):
            messages.append(slip)
    return list(dict.fromkeys(messages))


@contextmanager
def run_progress(name: str, tally: "RunTally") -> Iterator[Callable[[str, int, int, float],
                                                                   None]]:
    """A long run is not silent: on a terminal a bar per variant on stderr (requests
    arrived, simulated time, time spent); off a terminal the figures go to `tally`, which
    the command's heartbeat prints now and then."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.cli.progress import on_terminal

    if not on_terminal():
        yield tally.update
        return
    # rich: only when progress is drawn
    from rich.console import Console

    console = Console(stderr=True)
    # rich: only when progress is drawn
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("requests arrived, t={task.fields[now]}"), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def update(variant: str, arrived: int, total: int, now: float) -> None:
            if variant not in tasks:
                tasks[variant] = bar.add_task(f"run {name}/{variant}", total=total, now="0")
            bar.update(tasks[variant], completed=arrived, now=f"{now:,.6g}")

        yield update


def _extra_files(drawn: list[str], plot: bool, report: bool, folder: Path,
                 result: "ScenarioRun") -> None:
    """Draw the pictures and write report.html into the staged folder, adding their names
    to `drawn`; a drawing problem must not cost the run its records."""
    if plot:
        # matplotlib: only when pictures are drawn
        from kvsched.plots.run import plot_run_folder

        try:
            drawn += [path.name for path in plot_run_folder(folder)]
        except Exception as exc:  # noqa: BLE001 - report and keep the records
            typer.echo(f"warning: {result.scenario.name}: plots not drawn: {exc}", err=True)
    if report:
        # the report's modules: only when a report is written
        from kvsched.report_view.html import write_report

        try:
            drawn.append(write_report(folder).name)
        except Exception as exc:  # noqa: BLE001 - report and keep the records
            typer.echo(f"warning: {result.scenario.name}: report.html not written: {exc}",
                       err=True)


def check_trace_options(trace_out: Path | None, window: str | None) -> "tuple[float, float] | None":
    """Refuse, before any work, a --trace-out that cannot be written or a bad --trace-window."""
    if trace_out is None and window is None:
        return None  # (a plain run imports nothing of the report)
    from kvsched.report_view.trace import parse_window

    parsed = parse_window(window)
    if trace_out is None:
        if window is not None:
            raise KvschedError("--trace-window: give --trace-out FILE.json too")
        return None
    if trace_out.is_dir():
        raise KvschedError(f"--trace-out: {trace_out} is a folder; give a file name")
    parent = trace_out.parent
    if not parent.is_dir():
        raise KvschedError(f"--trace-out: {trace_out}: no such folder {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise KvschedError(f"--trace-out: {parent} is not writable")
    return parsed


def _write_trace(folder: Path, trace_out: Path, window: "tuple[float, float] | None",
                 err: bool = False) -> None:
    # the report's modules: only when a trace is written
    from kvsched.report_view.run_view import read_run
    from kvsched.report_view.trace import Trace

    trace = Trace(read_run(folder), window)
    trace.write(trace_out)
    typer.echo(f"wrote {trace_out} ({trace.num_events:,} events)", err=err)


def headline(scenario: "Scenario") -> str:
    """The first sentence of a scenario's description."""
    return scenario.description.strip().split(". ")[0].rstrip(".")


def table_width(wide: bool) -> int | None:
    """How wide tables may be: the terminal's width (or $COLUMNS), unlimited with --wide or
    when the output goes to a file or a pipe."""
    if wide or not (sys.stdout.isatty() or os.environ.get("COLUMNS")):
        return None
    return max(40, shutil.get_terminal_size().columns)


def render_run(result: "ScenarioRun", folder: Path, width: int | None = None,
               picked: list[str] | None = None) -> str:
    # (loaded when the command runs: `kvsched --help` stays fast)
    from tabulate import tabulate

    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.report import comparison_table, fmt, incident_kinds
    from kvsched.runner import describe, missing_baselines

    scenario = result.scenario
    title = f"== {scenario.name}" + (f": {headline(scenario)}" if scenario.description else "")
    if scenario.assignments:  # the description was written for the file's own values
        changed = [f"--seed {a.value}" if a.option == "--seed" else f"--set {a.text}"
                   for a in scenario.assignments]
        title += f" [overridden: {', '.join(changed)}]"
    lines = [one_line(title)]
    summaries = [(r.name, r.summary) for r in result.runs]
    lines.append(comparison_table(summaries, result.time_unit,
                                  extra=[("incidents", incident_kinds)], width=width,
                                  admission=any(r.variant.spec.admission is not None
                                                for r in result.runs), picked=picked or ()))
    lines.append("")
    lines.append("diagnosis:" + ("" if any(s["incidents"] for _, s in summaries)
                                 else " no incident"))
    for name, summary in summaries:
        for incident in summary["incidents"]:
            lines.append(f"  {name}: {incident['message']}")
    for baseline in missing_baselines(result):
        lines.append(f"  (comparisons with the baseline '{baseline}' skipped: it was not run; "
                     f"add --variant {baseline})")
    if result.checks:
        lines.append("")
        rows = []
        for check in result.checks:
            verdict = {True: "pass", False: "FAIL", None: "skip"}[check.passed]
            note = check.detail or (check.expectation.note or "")
            rows.append([verdict, describe(check.expectation), fmt(check.actual), note])
        lines.append(tabulate(rows, headers=["check", "expectation", "measured", "note"],
                              tablefmt="simple", disable_numparse=True))
    lines.append(f"records: {folder}/")
    return "\n".join(lines) + "\n"


# -- sweep ----------------------------------------------------------------------------


@app.command(epilog="Example: kvsched sweep --budget 128..8192 --policy fcfs,spf -j 2")
@friendly
def sweep(
    scenario: Annotated[Path | None, typer.Argument(
        metavar="[SCENARIO]", help="Scenario file (default: the lesson's demo).")] = None,
    budget: Annotated[str | None, typer.Option(
        metavar=Range, help="max_num_batched_tokens values, e.g. 128..8192.")] = None,
    blocks: Annotated[str | None, typer.Option(
        metavar=Range, help="num_blocks values, e.g. 60..480.")] = None,
    policy: Annotated[str | None, typer.Option(
        metavar="NAMES", help="Policies, e.g. fcfs,spf.")] = None,
    preemption: Annotated[str | None, typer.Option(
        metavar="MODES", help="Preemption modes: recompute,swap.")] = None,
    set_: Annotated[list[str], typer.Option(
        "--set", metavar="KEY=V1,V2",
        help="Sweep any field, e.g. engine.watermark=0,0.01,0.05 (engine keys: kvsched "
             "keys).")] = [],  # noqa: B006
    variant: Variants = [],  # noqa: B006
    seed: Seed = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", metavar="N",
                                      help="Parallel processes (>= 1).")] = 1,
    backend: Annotated[str, typer.Option(
        metavar="local|ray", help="Run the points here (-j processes) or as Ray tasks.")
    ] = "local",
    address: Annotated[str | None, typer.Option(
        metavar="ADDR", help="With --backend ray: an existing Ray cluster, HOST:PORT or "
        "ray://HOST:PORT (default: a local Ray); one where no Ray answers fails within "
        "seconds.")] = None,
    out: Out = Path("results"),
    name: Annotated[str | None, typer.Option(
        metavar="NAME", help="Results go to OUT/sweep-NAME/.")] = None,
    plot: Annotated[bool, typer.Option(
        "--plot", help="Also draw sweep.png (requests completed/starved, incidents, latency "
        "over the completed requests) and print its path.")] = False,
    wide: Annotated[bool, typer.Option(
        "--wide", help="Every column, however wide the terminal.")] = False,
    columns: Columns = None,
) -> None:
    """Run the grid of all values given; A..B doubles, A..B:+S steps, A..B:xF multiplies.
    Progress on stderr: a bar on a terminal, else a line now and then."""
    # rich: only when progress is drawn
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.analysis.sweep import (
        OPTION_PATHS,
        SweepSource,
        check_size,
        parse_axis,
        parse_set_axis,
        run_sweep,
        write_sweep,
    )
    from kvsched.cli.capacity import backend_of
    from kvsched.cli.progress import CountTally, run_heartbeat
    from kvsched.report import sweep_table
    from kvsched.scenario import load_scenario

    if jobs < 1:
        raise KvschedError(f"--jobs: expected a number of processes >= 1, got {jobs}")
    check_name(name)
    check_out(out)
    chosen = backend_of(backend, address)
    axes: list[Axis] = []
    for option, text in (("budget", budget), ("blocks", blocks), ("policy", policy),
                         ("preemption", preemption)):
        if text is not None:
            axes.append(parse_axis(f"--{option}", OPTION_PATHS[option], text))
    axes += [parse_set_axis(text) for text in set_]
    if not axes:
        raise KvschedError("nothing to sweep: give --budget, --blocks, --policy, "
                           "--preemption or --set KEY=V1,V2")
    path = scenario or lesson_scenario_path()
    loaded = load_scenario(path, (), seed)  # validates the file and names errors
    picked = column_names(columns, [loaded], variant)
    source = SweepSource(path.read_text(encoding="utf-8"), str(scenario or "lesson (embedded)"),
                         path.parent, (), seed)
    points = check_size(axes, len(variant or loaded.variants))
    folder = out / f"sweep-{name or loaded.name}"
    check_replaceable(folder, SWEEP)
    work_begins()
    console = Console(stderr=True)
    checked = CountTally(f"checking {folder.name} (every point, before any runs)",
                         points // max(len(variant or loaded.variants), 1), "grid points")
    done = CountTally(f"running {folder.name}", points, "runs")
    with run_heartbeat("sweep", not console.is_terminal) as beat, \
            Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                     TimeElapsedColumn(), console=console, transient=True,
                     disable=not console.is_terminal) as progress:
        task = progress.add_task("sweep: checking the points", total=points)
        beat.status = lambda: (done if done.done else checked).text()

        def on_point() -> None:
            if not done.done:
                progress.update(task, description="sweep")
            done.advance()
            progress.advance(task)

        frame = run_sweep(source, axes, variant, jobs, on_point, chosen, address,
                          on_checked=checked.advance)
        beat.status = f"writing {folder}/summary.csv"
        existed = folder.exists()
        write_sweep(folder, frame, axes, source)
        if plot:
            # matplotlib: only when pictures are drawn
            from kvsched.plots.sweep import plot_sweep_folder

            beat.status = f"drawing {folder}/sweep.png"
            plot_sweep_folder(folder)
    if existed:
        typer.echo(one_line(f"replaced: {folder}/ (the previous sweep named "
                            f"'{name or loaded.name}'; give --name to keep both)"), err=True)
    typer.echo(sweep_table(frame, [axis.path for axis in axes], table_width(wide), picked))
    typer.echo(f"records: {folder}/summary.csv")
    if plot:
        typer.echo(f"wrote {folder}/sweep.png")


# -- validate, policies, scenarios ------------------------------------------------------


def check_file(path: Path) -> "tuple[Scenario, str]":
    """Validate a scenario file without running it or generating its workload (a user's
    policy module is not imported either): the scenario and its largest request count."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.runner import count_of
    from kvsched.scenario import load_scenario

    scenario = load_scenario(path)
    counts = [count_of(v) for v in scenario.variants]
    most, exact = max(counts)
    return scenario, f"{most:,}" if exact and all(e for _, e in counts) else f"about {most:,}"


@app.command(epilog="Example: kvsched validate scenarios/*.yaml")
def validate(scenarios: Files) -> None:
    """Check scenario files (schema, variants, trace files) without running them; say what
    each trace holds (requests, span, mean rate)."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.schema import derived_pool, unit_warnings
    from kvsched.timing.serve_defaults import defaults_line
    from kvsched.workload.trace_notes import span_line, timestamp_slip, traces_of

    bad = 0
    for path in scenarios:
        try:
            scenario, count = check_file(path)
        except KvschedError as exc:
            typer.echo(f"error: {one_line(str(exc))}", err=True)
            bad += 1
            continue
        typer.echo(one_line(f"ok: {path}: {scenario.name}, {len(scenario.variants)} variant(s), "
                            f"{count} requests, {len(scenario.expectations)} expectation(s)"))
        for message in dict.fromkeys(m for v in scenario.variants for m in unit_warnings(v.spec)):
            typer.echo(one_line(f"warning: {path}: {message}"), err=True)
        traces = traces_of(scenario)
        for trace in traces:
            typer.echo(one_line(f"  {span_line(trace, named=len(traces) > 1)}"))
            if slip := timestamp_slip(trace.spec, trace.requests):
                typer.echo(one_line(f"warning: {path}: {slip}"), err=True)
        for v in scenario.variants:
            for line in (defaults_line(v.resolved), derived_pool(v.resolved, v.spec)):
                if line is not None:
                    typer.echo(one_line(f"  {v.name}: {line}"))
    if bad:
        raise typer.Exit(2)


@app.command(epilog="Example: kvsched policies")
def policies() -> None:
    """The built-in waiting-queue policies and their parameters."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from tabulate import tabulate

    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.policies import builtin_policies

    rows = [[info.name, ", ".join(f"{k}={v}" for k, v in info.params.items()) or "none",
             info.summary.splitlines()[0]] for info in builtin_policies()]
    typer.echo(tabulate(rows, headers=["policy", "parameters", "order"], tablefmt="simple"))
    typer.echo("\nYour own: policy: {name: package.module:ClassName, <params>} "
               "(a class with key(request, enqueue_time) -> tuple, or with "
               "order(seqs, now, view) -> list to re-rank the queue every step).")


@app.command(epilog="Example: kvsched presets")
def presets() -> None:
    """The engine presets (engine.preset): the engine each reproduces and what it sets."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.presets import describe

    typer.echo(describe())


@app.command(epilog="Example: kvsched keys victim requeue")
@friendly
def keys(
    names: Annotated[list[str] | None, typer.Argument(
        metavar="KEY", help="Only these keys (default: every engine key).")] = None,
) -> None:
    """The engine keys (engine: in a scenario, --set engine.KEY= in sweep and capacity): each
    default, the presets' values, the values it takes and what it means."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.doc_tables import keys_text
    from kvsched.schema import ENGINE_ALIASES, EngineSpec

    wanted = [key for name in names or []
              for key in (("chunked_prefill", "max_num_batched_tokens")
                          if name == "chunked_prefill_size" else (ENGINE_ALIASES.get(name, name),))]
    unknown = [name for name in wanted if name not in EngineSpec.model_fields]
    if unknown:
        raise KvschedError(f"KEY: no engine key '{unknown[0]}'; expected one of "
                           f"{', '.join(EngineSpec.model_fields)}")
    typer.echo(keys_text(wanted).rstrip("\n"))


@app.command(epilog="Example: kvsched scenarios")
@friendly
def scenarios(
    folder: Annotated[Path | None, typer.Option("--dir", help="Where to look.")] = None,
) -> None:
    """The scenarios that ship in scenarios/: name, variants and what each shows."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from tabulate import tabulate

    where = folder or shipped_scenarios_dir()
    files = sorted(where.glob("*.yaml"))
    if not files:
        raise KvschedError(f"no scenario files in {where}/")
    rows = []
    for path in files:
        try:
            scenario, _ = check_file(path)
        except KvschedError as exc:
            rows.append([str(path), "-", f"INVALID: {excerpt(exc, 120)}"])
            continue
        variants = ", ".join(v.name for v in scenario.variants)
        rows.append([str(path), variants, headline(scenario)])
    typer.echo(tabulate(rows, headers=["file", "variants", "what it shows"], tablefmt="simple"))


@app.command(epilog="Example: kvsched plot results/pool60")
@friendly
def plot(
    folder: Annotated[Path, typer.Argument(
        help="results/<scenario>, results/sweep-<name> or results/capacity-<name>.")],
) -> None:
    """Draw the pictures of a past run, sweep or capacity search from its CSV files."""
    # matplotlib: only when pictures are drawn
    from kvsched.plots.folders import plot_folder

    work_begins()  # (drawing a long run's pictures takes seconds and makes garbage)
    for path in plot_folder(folder):
        typer.echo(f"wrote {path}")


@app.command(epilog="Example: kvsched report results/pool60 --trace-out pool60-trace.json")
@friendly
def report(
    folder: Annotated[Path, typer.Argument(help="A run's folder: results/<scenario>.")],
    trace_out: TraceOut = None,
    trace_window: TraceWindow = None,
) -> None:
    """Write <folder>/report.html: the run's step timeline (zoom and pan), its requests'
    phases, latency distributions and incidents, per variant and replica, in one file that
    opens in a browser from disk."""
    # the report's modules: only for this command (`kvsched --help` stays fast)
    from kvsched.report_view.html import render, report_data
    from kvsched.report_view.run_view import read_run
    from kvsched.report_view.trace import Trace

    window = check_trace_options(trace_out, trace_window)
    work_begins()
    run_view = read_run(folder)
    trace = Trace(run_view, window) if trace_out is not None else None  # refused before writing
    path = folder / "report.html"
    write_file(path, render(report_data(run_view)), option=str(folder))
    typer.echo(f"wrote {path}")
    if trace is not None and trace_out is not None:
        trace.write(trace_out)
        typer.echo(f"wrote {trace_out} ({trace.num_events:,} events)")


# -- step-time, fit-linear --------------------------------------------------------------


ModelOpt = Annotated[str, typer.Option(
    "--model", metavar="ID", help="Hugging Face id (e.g. meta-llama/Llama-3.1-8B) or a "
    "config.json path.")]
GpuOpt = Annotated[str, typer.Option("--gpu", metavar="NAME", help="e.g. h100-sxm, a100-80gb.")]
TpOpt = Annotated[int, typer.Option("--tp", min=1, metavar="N", help="Tensor-parallel GPUs.")]


class WeightDtype(StrEnum):
    """The layers' weights, as `time.weight_dtype`."""

    BF16 = "bf16"
    FP8 = "fp8"


class KvCacheDtype(StrEnum):
    """The KV cache's elements, as `engine.kv_cache_dtype` (auto: the model's bf16)."""

    AUTO = "auto"
    FP8 = "fp8"


WeightDtypeOpt = Annotated[WeightDtype, typer.Option(
    "--weight-dtype", case_sensitive=False, help="The layers' weights (time.weight_dtype): "
    "fp8 reads half the bytes and computes at the GPU's fp8 peak.")]
KvDtypeOpt = Annotated[KvCacheDtype, typer.Option(
    "--kv-cache-dtype", case_sensitive=False, help="The KV cache (engine.kv_cache_dtype): "
    "fp8 reads half the bytes of K and V.")]
BATCH_COLUMNS = ("num_prefill_requests", "prefill_tokens_each", "prefill_cached_kv_each",
                 "num_decode_requests", "mean_kv_context")


MAX_BATCH_SEQS = 2 ** 20
"""Sequences (prefill chunks, decodes) one step may hold: a thousand times vLLM's largest
max_num_seqs, and small enough to build (10**17 chunks ran out of memory)."""


def batch_problem(num_prefills: int, tokens: int, cached: int, num_decodes: int,
                  context: int) -> str | None:
    """Why a step-time batch is empty or absurd, or None: it must hold a prefill chunk of
    at least one token or a decode; at most MAX_BATCH_SEQS chunks and decodes; token counts
    at most 2**40, as a request's lengths (beyond them the roofline's floats overflow)."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.request import MAX_LEN

    for name, value, limit in (("prefill chunks", num_prefills, MAX_BATCH_SEQS),
                               ("decodes", num_decodes, MAX_BATCH_SEQS),
                               ("tokens per prefill chunk", tokens, MAX_LEN),
                               ("cached tokens per chunk", cached, MAX_LEN),
                               ("decode context", context, MAX_LEN)):
        if value > limit:
            shown = f"{value:,}" if value < 10 ** 15 else f"{float(value):.3g}"
            return f"{shown} {name}: at most {limit:,} in a step"
    if num_prefills and not tokens:
        return f"{num_prefills:,} prefill chunks of 0 tokens: a chunk has at least one"
    if not (num_prefills and tokens) and not num_decodes:
        return "an empty batch (no prefill token and no decode): nothing to time"
    return None


def _count(text: str, option: str, syntax: str) -> tuple[int, int]:
    """'AxB' or 'A@B' as two integers >= 0."""
    sep = "x" if "x" in syntax else "@"
    parts = text.lower().split(sep)
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise KvschedError(f"{option}: expected {syntax}, got '{text}'")
    return int(parts[0]), int(parts[1])


@app.command("step-time", epilog="Example: kvsched step-time --model meta-llama/Llama-3.1-8B "
             "--gpu h100-sxm --prefill 1024x2 --decode 16@512")
@friendly
def step_time(
    model: ModelOpt,
    gpu: GpuOpt,
    tp: TpOpt = 1,
    batches: Annotated[Path | None, typer.Option(
        "--batches", metavar="FILE.csv", help="One batch a row (" + ", ".join(BATCH_COLUMNS)
        + "): the rows with predicted_ms added go to --out (the file is only read).")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="FILE.csv", help="With --batches: write the rows there, whole or not "
        "at all (default: print them).")] = None,
    prefill: Annotated[str | None, typer.Option(
        metavar="TOKENSxN", help="N prefill chunks of TOKENS each, e.g. 1024x2.")] = None,
    cached: Annotated[int, typer.Option(
        min=0, metavar="TOKENS", help="Cached context of each prefill chunk.")] = 0,
    decode: Annotated[str | None, typer.Option(
        metavar="N@CONTEXT", help="N decodes of CONTEXT tokens each, e.g. 16@512.")] = None,
    weight_dtype: WeightDtypeOpt = WeightDtype.BF16,
    kv_cache_dtype: KvDtypeOpt = KvCacheDtype.AUTO,
) -> None:
    """How long one step takes on this model and GPU (the roofline time model)."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.timing.roofline import BatchShape

    roofline = _roofline(model, gpu, tp, weight_dtype, kv_cache_dtype)
    if batches is None:
        tokens, num_chunks = _count(prefill, "--prefill", "TOKENSxN") if prefill else (0, 0)
        num_decodes, context = _count(decode, "--decode", "N@CONTEXT") if decode else (0, 0)
        problem = batch_problem(num_chunks, tokens, cached, num_decodes, context)
        if problem is not None:
            raise KvschedError(f"step-time: {problem} (--prefill TOKENSxN, --cached, "
                               "--decode N@CONTEXT)")
        shape = BatchShape(((tokens, cached),) * num_chunks, num_decodes, num_decodes * context)
        typer.echo(f"{roofline.duration_shape(shape) * 1e3:.3f} ms")
        return
    if out is not None and _same_file(out, batches):
        raise KvschedError(f"--out: {out} is the --batches file; step-time never writes over "
                           "its input: give another file")
    header, rows = _read_batches(batches)
    at = [header.index(column) for column in BATCH_COLUMNS]
    if "predicted_ms" not in header:
        header.append("predicted_ms")
    slot = header.index("predicted_ms")
    for line, row in rows:
        num_prefills, tokens, cached_kv, num_decodes, context = (
            _whole(batches, line, column, row[i]) for column, i in zip(BATCH_COLUMNS, at,
                                                                      strict=True))
        problem = batch_problem(num_prefills, tokens, cached_kv, num_decodes, context)
        if problem is not None:
            raise KvschedError(f"{batches}: row {line}: {problem}")
        shape = BatchShape(((tokens, cached_kv),) * num_prefills, num_decodes,
                           num_decodes * context)
        predicted = str(round(roofline.duration_shape(shape) * 1e3, 4))
        row[slot:slot + 1] = [predicted]
    text = _csv_text([header, *(row for _, row in rows)])
    if out is None:
        typer.echo(text, nl=False)
        return
    write_file(out, text)
    typer.echo(f"wrote {out}: {len(rows)} batches, predicted_ms added")


def _same_file(one: Path, other: Path) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:  # one of them does not exist (yet)
        return one.resolve() == other.resolve()


def _read_batches(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """A --batches file's header and its rows (with their line), each row with as many
    fields as the header and the batch columns present, or one error line."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    import csv
    import stat

    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise KvschedError(f"{path}: cannot read: not a regular file (a folder, a FIFO...); "
                               "expected a CSV file")
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle, strict=True)
            lines = [(reader.line_num, row) for row in reader if row]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise KvschedError(f"{path}: cannot read: {excerpt(reason, 120)}") from None
    if not lines:
        raise KvschedError(f"{path}: empty; expected a header row ({', '.join(BATCH_COLUMNS)})")
    (_, header), rows = lines[0], lines[1:]
    missing = [c for c in BATCH_COLUMNS if c not in header]
    if missing:
        raise KvschedError(f"{path}: missing column(s) {', '.join(missing)}")
    twice = next((c for c in header if header.count(c) > 1), None)
    if twice is not None:
        raise KvschedError(f"{path}: column '{excerpt(twice)}' appears twice in the header")
    for line, row in rows:
        if len(row) != len(header):
            raise KvschedError(f"{path}: row {line}: {len(row)} fields, expected "
                               f"{len(header)} (one per column of the header)")
    return header, rows


def _whole(path: Path, line: int, column: str, text: str) -> int:
    """A cell of a batch column as an integer >= 0 (`2048`, `2048.0`, `2e3`)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0 and value.is_integer()):
        raise KvschedError(f"{path}: row {line}: {column} must be an integer >= 0, "
                           f"got '{excerpt(text)}'")
    return int(text) if text.strip().isdigit() else int(value)


def _csv_text(rows: list[list[str]]) -> str:
    # (loaded when the command runs: `kvsched --help` stays fast)
    import csv
    import io

    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def _roofline(model: str, gpu: str, tp: int, weight_dtype: str = "bf16",
              kv_cache_dtype: str = "auto") -> Any:
    """The roofline, its ValueErrors (tp that does not divide the heads) as input errors."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.timing.roofline import RooflineStep

    try:
        return RooflineStep(model, gpu, tp, weight_dtype=str(weight_dtype),
                            kv_cache_dtype=str(kv_cache_dtype))
    except ValueError as exc:
        raise KvschedError(str(exc)) from None


@app.command("fit-linear", epilog="Example: kvsched fit-linear --model meta-llama/Llama-3.1-8B "
             "--gpu h100-sxm")
@friendly
def fit_linear_command(model: ModelOpt, gpu: GpuOpt, tp: TpOpt = 1,
                       weight_dtype: WeightDtypeOpt = WeightDtype.BF16,
                       kv_cache_dtype: KvDtypeOpt = KvCacheDtype.AUTO) -> None:
    """Fit `time: {kind: linear}` coefficients to the roofline over a grid of batches."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.timing.stepfit import fit_linear

    fit = fit_linear(_roofline(model, gpu, tp, weight_dtype, kv_cache_dtype))
    linear = fit.model
    typer.echo(f"time: {{kind: linear, base: {linear.base:.6g}, "
               f"per_prefill_token: {linear.per_prefill_token:.6g}, "
               f"per_decode: {linear.per_decode:.6g}, per_kv_token: {linear.per_kv_token:.6g}, "
               f"per_swapped_block: {linear.per_swapped_block:.6g}}}")
    typer.echo(f"# fitted on {fit.num_batches} batches: {fit.median_error:.1f}% median, "
               f"{fit.max_error:.1f}% max error against the roofline")


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM ends kvsched as Ctrl-C does: staging folders are removed, workers stopped."""
    raise SystemExit(128 + signum)


from kvsched.cli import capacity  # noqa: E402, F401  (registers `capacity`)


def main() -> None:
    """The console script: every failure, usage errors included, is one line on stderr."""
    # Start-up (imports, the schema, the scenario and its workload) makes tens of thousands
    # of objects that live to the end and no garbage worth a pass: the collector's passes
    # over them were about 30 ms of the half-second Azure run.
    shared.quiet_start()
    try:  # typer 0.26 and later vendor click (and ignore an installed click)
        from typer._click import exceptions as click_errors
    except ImportError:  # pragma: no cover - earlier typer depends on click
        from click import exceptions as click_errors  # type: ignore[no-redef]

    no_args: Any = getattr(click_errors, "NoArgsIsHelpError", ())  # click < 8.2 has none
    signal.signal(signal.SIGTERM, _terminate)
    try:
        code = app(prog_name="kvsched", standalone_mode=False)
    except no_args as exc:
        exc.show()
        code = exc.exit_code
    except click_errors.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "kvsched"
        typer.echo(f"error: {one_line(exc.format_message())} (see {command} --help)", err=True)
        code = exc.exit_code
    except click_errors.ClickException as exc:
        typer.echo(f"error: {one_line(exc.format_message())}", err=True)
        code = exc.exit_code
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        code = 130
    except BaseException:  # SystemExit from a signal, say: the usual way out
        gc.unfreeze()
        raise
    _leave(code if isinstance(code, int) else 0)


def _leave(code: int) -> NoReturn:
    """End the console script. A command that started no thread or process and ran no code
    of the user's skips the interpreter's teardown (freeing every module's objects one by
    one: 10 ms of the half-second Azure run), once the atexit handlers have run and both
    streams are flushed. One that did leaves the usual way, with what start-up froze out of
    the collector's reach given back to it: it waits for `capacity`'s and `sweep`'s workers,
    and closes (so flushes) a file a user's policy or router left open. kvsched's own files
    are closed by then (each writer closes in a `with` or `finally` block)."""
    threads = sys.modules.get("threading")
    if ((threads is not None and threads.active_count() > 1)
            or "multiprocessing" in sys.modules or _user_code_loaded()):
        gc.unfreeze()  # what `work_begins` froze is finalized by the teardown again
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:  # (None when the shell closed it)
                stream.flush()
    except (OSError, ValueError):  # a closed pipe, say: Python's own exit reports it
        sys.exit(code)
    os._exit(code)


def _user_code_loaded() -> bool:
    """Whether a module from outside Python's and kvsched's folders was imported: a user's
    policy or router (`package.module:Class`), which may hold files open for the teardown to
    flush."""
    kvsched_folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (kvsched/cli/..)
    folders = (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, kvsched_folder)
    roots = tuple({os.path.join(f(folder), "") for folder in folders
                   for f in (os.path.abspath, os.path.realpath)})
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and not path.startswith(roots):  # (a path unlike these: treated as the user's)
            return True
    return False


if __name__ == "__main__":  # pragma: no cover
    main()
