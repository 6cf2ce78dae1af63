"""The engine's event stream: the events a run hands to a sink in chunks, and those kept in
memory for the diagnosis. The loops (`kvsched.cluster.loop`, `kvsched.cluster.replicas`)
write to it; `kvsched.simulator` makes it."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from kvsched.kinds import EventKind

if TYPE_CHECKING:
    from kvsched.sequence import Seq

EventSink = Callable[[list[tuple]], None]
Progress = Callable[[int, float], None]
Abort = Callable[[float, Iterable["Seq"]], bool]

DIAGNOSIS_EVENTS = frozenset({EventKind.HOL_BLOCK, EventKind.HOL_RELEASE, EventKind.BACKPRESSURE,
                              EventKind.REJECT, EventKind.STARVE})
"""The events a run keeps in memory when they are streamed to a file."""


class EventStream:
    """Hands the engine's events to a sink in chunks (when there is one), so a long run
    does not hold them all; keeps those the diagnosis reads."""

    __slots__ = ("events", "sink", "kept", "_chunk")

    def __init__(self, events: list[tuple], sink: EventSink | None,
                 chunk: int = 1 << 15) -> None:
        self.events = events
        self.sink = sink
        self.kept: list[tuple] = events if sink is None else []
        self._chunk = chunk if sink is not None else math.inf

    def poll(self) -> None:
        if len(self.events) >= self._chunk:
            self.drain()

    def drain(self) -> None:
        if self.sink is None or not self.events:
            return
        chunk = self.events[:]
        del self.events[:]
        self.sink(chunk)
        self.kept.extend(e for e in chunk if e[3] in DIAGNOSIS_EVENTS)

    def close(self) -> None:
        self.drain()
