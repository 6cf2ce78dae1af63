"""The `kvsched` typer app and what its commands share: the error funnel (`friendly`), the
collector's start-up pause (`quiet_start`, `work_begins`) and the common options. The commands
register on `app` from `kvsched.cli.commands` and `kvsched.cli.capacity`, which both import
this module (and neither the other's).

No `from __future__ import annotations` here: typer reads every command's annotations at
each start (see `kvsched.cli.commands`)."""

import functools
import gc
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from kvsched import __version__
from kvsched.errors import KvschedError, one_line
from kvsched.paths import out_problem

app = typer.Typer(
    help="A laboratory for the scheduler of an LLM serving engine: run YAML scenarios, "
         "sweep budgets and pools, compare TTFT, throughput and preemptions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

F = TypeVar("F", bound=Callable[..., Any])


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kvsched {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True,
        help="Print the version and exit.")] = False,
) -> None:
    """A laboratory for the scheduler of an LLM serving engine: run YAML scenarios, sweep
    budgets and pools, compare TTFT, throughput and preemptions."""


def friendly(command: F) -> F:
    """Turn the library's input errors into one line on stderr and exit code 2."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except KvschedError as exc:
            typer.echo(f"error: {one_line(str(exc))}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


_quiet_start = False
"""Whether `main` turned the collector off for start-up (see `work_begins`)."""


def quiet_start() -> None:
    """Turn the collector off for start-up (`main` does, first): imports, the schema, the
    scenario and its workload make tens of thousands of objects that live to the end and no
    garbage worth a pass."""
    global _quiet_start
    if gc.isenabled():
        gc.disable()
        _quiet_start = True


def work_begins() -> None:
    """Start-up is over: the collector `main` turned off goes back on, with what start-up
    made (modules, classes, the schema's validators, the loaded workloads) frozen out of
    its passes. The commands that run engines call it once their input is loaded, and
    `plot` before it draws; the others are short and end with it off."""
    global _quiet_start
    if _quiet_start:
        _quiet_start = False
        gc.freeze()
        gc.enable()


def lesson_scenario_path() -> Path:
    """The embedded default scenario: the lesson's 20-request demo."""
    return Path(str(resources.files("kvsched") / "data" / "lesson.yaml"))


Out = Annotated[Path, typer.Option("--out", "-o", metavar="DIR",
                                    help="Folder for the records.")]
Seed = Annotated[int | None, typer.Option("--seed", metavar="N",
                                           help="Override every variant's seed.")]
Variants = Annotated[list[str], typer.Option("--variant", metavar="NAME",
                                              help="Only this variant (repeatable).")]


def check_out(out: Path) -> None:
    """Refuse an --out that cannot hold results before anything runs."""
    problem = out_problem(out)
    if problem:
        raise KvschedError(f"--out {problem}")


Range = "A..B|A..B:+S|A..B:xF|a,b"
