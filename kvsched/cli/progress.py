"""What a long command says while it works, on stderr.

On a terminal, rich's bars (made by the commands). Off a terminal (a log file, CI, a pipe
into `tee`) a `Heartbeat`: a plain line every `EVERY` seconds once the command has run for
`FIRST` seconds, naming what it is doing and how far it got, so that a short command stays
as quiet as before and a long one is never silent. The lines come from a thread that only
reads what the command's callbacks last stored: the callbacks cost an assignment, the
records are the same with and without it."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from kvsched.analysis.capacity import Probe

FIRST = 5.0
"""Seconds a command runs before its first plain line (a shorter one prints none)."""

EVERY = 15.0
"""Seconds between plain lines after the first."""

RICH_TERMINAL = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
"""Variables that make rich treat a stream as a terminal when it is not a tty."""


def on_terminal() -> bool:
    """Whether stderr is a terminal (as rich decides: a tty, or told so by FORCE_COLOR...);
    answered without importing rich when stderr is plainly not one."""
    if sys.stderr is None:  # closed by the shell (`2>&-`)
        return False
    if not sys.stderr.isatty() and not any(os.environ.get(name) for name in RICH_TERMINAL):
        return False
    # rich: only when progress is drawn
    from rich.console import Console

    return Console(stderr=True).is_terminal


def elapsed_text(seconds: float) -> str:
    """12 s, 3 min 05 s, 2 h 01 min."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole // 60 % 60:02d} min"


class Heartbeat:
    """A plain progress line on stderr every `every` seconds after the first `first`,
    while the `with` block runs: `kvsched COMMAND: <status()> (<elapsed>)`. `status` is set
    by the command as it moves from one phase to the next; it is called on the heartbeat's
    thread and must only read."""

    def __init__(self, command: str, status: Callable[[], str] | str = "starting",
                 first: float | None = None, every: float | None = None,
                 stream: TextIO | None = None) -> None:
        self.command = command
        self.first = FIRST if first is None else first
        self.every = EVERY if every is None else every
        self.stream = stream
        self.started = time.monotonic()
        self._status: Callable[[], str] = lambda: ""
        self.status = status
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def status(self) -> Callable[[], str]:
        return self._status

    @status.setter
    def status(self, status: Callable[[], str] | str) -> None:
        self._status = status if callable(status) else (lambda: status)

    def line(self) -> str:
        """The line the heartbeat prints now."""
        try:
            status = self._status()
        except Exception:  # noqa: BLE001 - a status read mid-update: say less, never fail
            status = "working"
        took = elapsed_text(time.monotonic() - self.started)
        return " ".join(f"kvsched {self.command}: {status} ({took})".split())

    def _beat(self) -> None:
        wait = self.first
        while not self._stop.wait(wait):
            stream = self.stream or sys.stderr
            if stream is None:  # stderr closed: nobody to tell
                return
            try:
                stream.write(self.line() + "\n")
                stream.flush()
            except (OSError, ValueError):  # a pipe whose reader has gone
                return
            wait = self.every

    def __enter__(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._beat, name="kvsched-heartbeat",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


class RunTally:
    """What `run` has done so far, as its progress callback reports it."""

    def __init__(self, scenario: str, units: dict[str, str] | None = None) -> None:
        self.scenario = scenario
        self.units = units or {}  # variant -> its time unit (steps or s)
        self.variant: str | None = None
        self.arrived = self.total = 0
        self.now = 0.0

    def update(self, variant: str, arrived: int, total: int, now: float) -> None:
        self.variant, self.arrived, self.total, self.now = variant, arrived, total, now

    def text(self) -> str:
        if self.variant is None:
            return f"running {self.scenario}"
        unit = self.units.get(self.variant, "s")
        of = f" of {self.total:,}" if self.total else ""
        clock = "step" if unit == "steps" else "simulated time"
        at = f"{self.now:,.0f}" if unit == "steps" else f"{self.now:,.6g} s"
        return (f"running {self.scenario}/{self.variant}: {self.arrived:,}{of} requests "
                f"arrived, {clock} {at}")


class CountTally:
    """Points of a sweep (or searches of a capacity search) done so far, with an estimate of
    the time left once a few are done."""

    def __init__(self, what: str, total: int, noun: str) -> None:
        self.what, self.total, self.noun = what, total, noun
        self.done = 0
        self.started = time.monotonic()

    def advance(self) -> None:
        self.done += 1

    def text(self) -> str:
        left = ""
        if 0 < self.done < self.total:
            rate = (time.monotonic() - self.started) / self.done
            left = f", about {elapsed_text(rate * (self.total - self.done))} left"
        return f"{self.what}: {self.done:,} of {self.total:,} {self.noun} done{left}"


BRACKET_GUESS = 8
"""Probes a search is assumed to still need before it has found a rate that holds and one
that fails (the shipped scenarios' searches take 7 to 16 in all)."""


class ProbeTally:
    """A capacity search's probes as they come: how many, the last one's rate and verdict,
    and a running estimate of the probes still needed (a bisection of each search's bracket
    between its highest rate that holds and its lowest that fails), so that a bar can move
    with every probe."""

    def __init__(self, labels: list[str], tolerance: float, unit: str) -> None:
        self.labels, self.unit = labels, unit
        self.step = math.log1p(tolerance)
        self.probes = [0] * len(labels)
        self.lo: list[float | None] = [None] * len(labels)
        self.hi: list[tuple[float, bool] | None] = [None] * len(labels)  # (scale, aborted)
        self.finished = [False] * len(labels)
        self.last: tuple[int, Probe] | None = None

    def probe(self, index: int, probe: Probe) -> None:
        self.probes[index] += 1
        if probe.holds:
            self.lo[index] = max(self.lo[index] or probe.scale, probe.scale)
        elif self.hi[index] is None or probe.scale <= self.hi[index][0]:  # type: ignore[index]
            self.hi[index] = (probe.scale, probe.aborted)
        self.last = (index, probe)

    def search_done(self, index: int | None = None) -> None:
        """A search ended. Without its index (searches sharing workers end in any order):
        the first unfinished one whose bracket has closed, else the first unfinished."""
        if index is None:
            open_ = [i for i, done in enumerate(self.finished) if not done]
            closed = [i for i in open_ if self._width(i) is not None
                      and self._width(i) <= 1.5]  # type: ignore[operator]
            index = (closed or open_ or [0])[0]
        self.finished[index] = True

    def _width(self, index: int) -> float | None:
        """Grid steps between search `index`'s highest rate that holds and its lowest that
        fails (None until it has both)."""
        lo, hi = self.lo[index], self.hi[index]
        if lo is None or hi is None:
            return None
        return math.log(hi[0] / lo) / self.step

    def left(self, index: int) -> int:
        """Probes search `index` is expected to need still."""
        if self.finished[index]:
            return 0
        width, hi = self._width(index), self.hi[index]
        if width is None or hi is None:
            return BRACKET_GUESS
        rerun = 1 if hi[1] else 0  # an early-stopped answer above is run again in full
        return max(1, math.ceil(math.log2(max(width, 1.0))) + rerun)

    @property
    def done(self) -> int:
        return sum(self.probes)

    @property
    def total(self) -> int:
        return self.done + sum(self.left(i) for i in range(len(self.labels)))

    def latest(self) -> str:
        if self.last is None:
            return "first probe running"
        index, probe = self.last
        verdict = "holds" if probe.holds else "fails"
        if probe.aborted:
            verdict = "fails (stopped early: SLO lost)"
        per = "step" if self.unit == "steps" else "s"
        return (f"{self.labels[index]}: probe {self.probes[index]} at {probe.rate:.4g} "
                f"requests/{per} {verdict}")

    def text(self, what: str) -> str:
        searches = len(self.labels)
        ended = sum(self.finished)
        return (f"{what}: {ended} of {searches} search{'es' if searches != 1 else ''} done, "
                f"{self.done} probes run (about {self.total} in all); {self.latest()}")


def run_heartbeat(command: str, enabled: bool, **kwargs: Any) -> Heartbeat | _Silent:
    """A Heartbeat when `enabled` (stderr is not a terminal), else a stand-in that
    accepts the same status updates and prints nothing."""
    return Heartbeat(command, **kwargs) if enabled else _Silent()


class _Silent:
    """A heartbeat that never beats (on a terminal, where rich's bars speak)."""

    status: Any = None

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None
