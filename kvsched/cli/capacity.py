"""`kvsched capacity`: the highest request rate within SLOs (registered on
`kvsched.cli.shared.app`; `kvsched.cli.commands` imports this module so that the command
exists).

Annotations are objects, not strings, as in kvsched.cli.commands (typer reads them at each
start)."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

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
from kvsched.errors import KvschedError
from kvsched.paths import CAPACITY, check_name, check_replaceable

if TYPE_CHECKING:  # (kvsched.backends loads multiprocessing: only `capacity` needs it)
    from kvsched.backends import Backend
    from kvsched.cli.progress import ProbeTally
    from kvsched.scenario import Scenario

BackendOpt = Annotated[str, typer.Option(
    "--backend", metavar="local|ray",
    help="Run the points here (-j processes) or as Ray tasks.")]
AddressOpt = Annotated[str | None, typer.Option(
    "--address", metavar="ADDR", help="With --backend ray: an existing Ray cluster, HOST:PORT "
    "or ray://HOST:PORT (default: start a local Ray); one where no Ray answers fails within "
    "seconds.")]


def backend_of(name: str, address: str | None = None) -> "Backend":
    """The --backend value, or one clear error line (Ray not installed included, and an
    --address where nothing answers, within seconds)."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.backends import RAY_MISSING, Backend, check_address, ray_available

    try:
        backend = Backend(name)
    except ValueError:
        raise KvschedError(f"--backend: unknown backend '{name}'; expected local or ray") from None
    if backend is Backend.RAY and not ray_available():
        raise KvschedError(RAY_MISSING)
    if backend is Backend.RAY:
        check_address(address)
    elif address is not None:
        raise KvschedError("--address needs --backend ray")
    return backend


@app.command(epilog="Example: kvsched capacity scenarios/pool60.yaml --slo ttft_p99=2 "
                    "--slo e2e_p99=30 --variant baseline")
@friendly
def capacity(
    scenario: Annotated[Path | None, typer.Argument(
        metavar="[SCENARIO]", help="Scenario file (default: the lesson's demo).")] = None,
    slo: Annotated[list[str], typer.Option(
        "--slo", metavar="METRIC=LIMIT",
        help="An SLO on any summary key: holds when METRIC <= LIMIT (repeatable).")] = [],  # noqa: B006
    tolerance: Annotated[float, typer.Option(
        metavar="T", help="Relative step of the search: the answer holds and x(1+T) "
        "fails.")] = 0.02,
    budget: Annotated[str | None, typer.Option(
        metavar=Range, help="A grid of max_num_batched_tokens, as in sweep.")] = None,
    blocks: Annotated[str | None, typer.Option(
        metavar=Range, help="A grid of num_blocks, as in sweep.")] = None,
    policy: Annotated[str | None, typer.Option(metavar="NAMES", help="Policies.")] = None,
    preemption: Annotated[str | None, typer.Option(
        metavar="MODES", help="Preemption modes.")] = None,
    set_: Annotated[list[str], typer.Option(
        "--set", metavar="KEY=V1,V2",
        help="Any field, fixed or as a grid axis (engine keys: kvsched keys).")] = [],  # noqa: B006
    variant: Variants = [],  # noqa: B006
    seed: Seed = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, metavar="N",
                                      help="Parallel processes (local backend).")] = 1,
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    out: Out = Path("results"),
    name: Annotated[str | None, typer.Option(
        metavar="NAME", help="Results go to OUT/capacity-NAME/.")] = None,
    plot: Annotated[bool, typer.Option(
        "--plot", help="Also draw capacity.png (runs every probe in full) and print its "
        "path; kvsched plot OUT/capacity-NAME draws it again.")] = False,
    full_probes: Annotated[bool, typer.Option(
        "--full-probes", help="Run every probe to its end, even once its TTFT/e2e/queue "
        "SLO is already lost (same answer, slower; every probe gets its figures).")] = False,
) -> None:
    """For each variant (or grid point), the highest request rate at which every --slo
    holds (and no request starves), searched on a geometric grid of step --tolerance.
    Progress on stderr: a bar that moves with each probe on a terminal, else a line now and
    then."""
    # (loaded when the command runs: `kvsched --help` stays fast)
    from tabulate import tabulate

    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.analysis.capacity import SloTarget, capacity_frame, run_capacity, write_capacity
    from kvsched.analysis.sweep import OPTION_PATHS, SweepSource, parse_axis, parse_set_axis
    from kvsched.scenario import load_scenario

    check_name(name)
    check_out(out)
    chosen = backend_of(backend, address)
    targets = [SloTarget.parse(text) for text in slo]
    axes = []
    for option, text in (("budget", budget), ("blocks", blocks), ("policy", policy),
                         ("preemption", preemption)):
        if text is not None:
            axes.append(parse_axis(f"--{option}", OPTION_PATHS[option], text))
    axes += [parse_set_axis(text) for text in set_]
    path = scenario or lesson_scenario_path()
    loaded = load_scenario(path, (), seed)
    source = SweepSource(path.read_text(encoding="utf-8"), str(scenario or "lesson (embedded)"),
                         path.parent, (), seed)
    folder = out / f"capacity-{name or loaded.name}"
    check_replaceable(folder, CAPACITY)
    # rich: only when progress is drawn
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    # (loaded when the command runs: `kvsched --help` stays fast)
    from kvsched.analysis.capacity import Probe, search_labels
    from kvsched.cli.progress import ProbeTally, run_heartbeat
    from kvsched.runner import select

    unit = "steps" if not _seconds(loaded) else "s"
    tally = ProbeTally(search_labels(axes, [v.name for v in select(loaded, variant)]),
                       tolerance, unit)
    work_begins()
    console = Console(stderr=True)
    with run_heartbeat("capacity", not console.is_terminal) as beat, \
            Progress(TextColumn("capacity"), BarColumn(),
                     TextColumn("{task.fields[searches]}, {task.completed:.0f} of about "
                                "{task.total:.0f} probes; {task.fields[latest]}"),
                     TimeElapsedColumn(), console=console, transient=True,
                     disable=not console.is_terminal) as progress:
        task = progress.add_task("capacity", total=tally.total, searches=_searches(tally),
                                 latest=tally.latest())
        beat.status = lambda: tally.text(folder.name)

        def show() -> None:
            progress.update(task, completed=tally.done, total=tally.total,
                            searches=_searches(tally), latest=tally.latest())

        def on_probe(index: int, probe: Probe) -> None:
            tally.probe(index, probe)
            show()

        def on_done() -> None:
            tally.search_done()
            show()

        results = run_capacity(source, targets, axes, variant, tolerance, chosen, jobs, address,
                               on_done, early_abort=not (full_probes or plot),
                               on_probe=on_probe)
        if not results:
            raise KvschedError("nothing to search")
        beat.status = f"writing {folder}/" + (" and drawing capacity.png" if plot else "")
        write_capacity(folder, results, targets, tolerance, source, axes, plot)
    frame = capacity_frame(results, targets)
    per = "requests/s" if _seconds(loaded) else "requests/step"
    slos = ", ".join(f"{t.metric} <= {t.limit:g}" + (f" ({t.written})" if t.written else "")
                     for t in targets)
    typer.echo(f"capacity: highest rate with {slos} (tolerance {tolerance:g}; {per})")
    typer.echo(tabulate(frame.to_dict("records"), headers="keys", floatfmt=".4g",
                        missingval="-"))
    typer.echo(f"records: {folder}/capacity.csv")
    if plot:
        typer.echo(f"wrote {folder}/capacity.png")


def _searches(tally: "ProbeTally") -> str:
    done, searches = sum(tally.finished), len(tally.labels)
    return f"{done} of {searches} search{'es' if searches != 1 else ''} done"


def _seconds(scenario: "Scenario") -> bool:
    return scenario.variants[0].spec.time.kind != "steps"
