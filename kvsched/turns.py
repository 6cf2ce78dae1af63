"""Arrival order with closed-loop turns: the requests a loop takes in, earliest first.

A request with `after` (a conversation's next turn) has no arrival time of its own: it is
held until the request it names ends (finishes, is rejected, or is found starved), then
arrives `think_time` later, as a copy of itself with that arrival time. Timed requests come
in time order (simultaneous ones in input order); a released turn comes after the timed
requests due at its time (released turns among themselves by time, then input index): a
cluster learns of a release only when a replica takes in or steps, after it has routed what
was already due. Both the single-replica loop and the cluster loop read this queue.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import fields, replace

import numpy as np

from kvsched.request import Request
from kvsched.request_columns import RequestColumns

try:
    import cython
except ImportError:  # (the source run as Python where Cython is not installed)
    from kvsched.compiled import PurePython as cython
if not cython.compiled:  # C's own calls in the compiled build (turns.pxd)
    PyObject_GenericSetAttr = object.__setattr__

    def PyType_GenericAlloc(kind: type[Request], items: int) -> Request:
        return object.__new__(kind)

_CHUNK = 1 << 14

ARRIVAL_SLACK = 1e-9
"""A hair of slack: an arrival at most `ARRIVAL_SLACK * (1 + t)` after time `t` is due at `t`
(times summed step by step drift: 0.1 * 8 = 0.7999999999999999). The single loop, the
cluster loop and the decode stretches read it; the C loop (kvsched/_fastcore.c) writes the
same number."""


def check_ids(requests: Sequence[Request]) -> None:
    """ValueError naming the first request id used twice (columns' ids are distinct)."""
    if isinstance(requests, RequestColumns):
        return
    seen: set[str] = set()
    for request in requests:
        if request.request_id in seen:
            raise ValueError(f"duplicate request_id '{request.request_id}'")
        seen.add(request.request_id)


def check_turns(requests: Sequence[Request]) -> None:
    """Every `after` names an earlier request of the list (so turns cannot wait in a
    circle), or ValueError naming the first that does not."""
    if isinstance(requests, RequestColumns) or all(r.after is None for r in requests):
        return  # nothing to check, and no index of ids to build for a long trace
    position: dict[str, int] = {}
    for i, request in enumerate(requests):
        after = request.after
        if after is not None and position.get(after, i) >= i:
            where = "a later request" if after in {r.request_id for r in requests} \
                else "no request of the workload"
            raise ValueError(f"request {request.request_id}: after '{after}' names {where}; "
                             f"expected the id of an earlier request")
        position.setdefault(request.request_id, i)


class ArrivalQueue:
    """The requests in the order a loop takes them in; held turns join once released.

    The timed arrivals are kept as arrays and read a chunk at a time as Python numbers, so
    that a long workload costs 16 bytes a request here, not the 60 of two lists."""

    __slots__ = ("requests", "times", "_order", "_next", "_chunk_times", "_chunk_order",
                 "_chunk_requests", "_k", "_released", "_waiters", "_held")

    def __init__(self, requests: Sequence[Request]) -> None:
        self.requests = requests
        self._waiters: dict[str, list[int]] = {}  # predecessor id -> held input indices
        if isinstance(requests, RequestColumns):  # no turns: every request is timed
            timed = np.arange(len(requests))
            arrival = requests.arrival_time
        else:
            for i, request in enumerate(requests):
                if request.after is not None:
                    self._waiters.setdefault(request.after, []).append(i)
            timed = np.fromiter((i for i, r in enumerate(requests) if r.after is None),
                                dtype=np.int64)
            arrival = np.fromiter((requests[i].arrival_time for i in timed.tolist()),
                                  dtype=np.float64, count=len(timed))
        order = np.argsort(arrival, kind="stable")  # simultaneous ones in input order
        self._order = timed[order].astype(np.int32 if len(requests) < 2**31 else np.int64)
        self.times = arrival[order]  # the timed arrivals only
        self._held = len(requests) - len(timed)
        self._next = 0  # timed arrivals taken
        self._chunk_times: list[float] = []
        self._chunk_order: list[int] = []
        self._k = 0  # position in the chunk
        self._load()
        self._released: list[tuple[float, int, Request]] = []  # heap: (time, input index, copy)

    def _load(self) -> None:
        """The next chunk of timed arrivals, as Python floats and ints."""
        start = self._next
        stop = min(start + _CHUNK, len(self.times))
        self._chunk_times = self.times[start:stop].tolist()
        self._chunk_order = self._order[start:stop].tolist()
        requests = self.requests
        # (columns: the chunk's requests made at once; a list holds them already)
        self._chunk_requests = (column_requests(requests, self._order[start:stop])
                                if isinstance(requests, RequestColumns) else None)
        self._k = 0
        if stop == len(self.times) and start:  # the last chunk: the arrays are done with
            self.times, self._order = self.times[:0], self._order[:0]

    @property
    def holding(self) -> bool:
        """Some turn is still held: an end anywhere may bring an arrival forward."""
        return self._held > 0

    def next_time(self) -> float:
        """The arrival time of the next request (inf when none is due yet)."""
        k = self._k
        timed = self._chunk_times[k] if k < len(self._chunk_times) else math.inf
        return min(timed, self._released[0][0]) if self._released else timed

    def pop(self) -> tuple[int, Request]:
        """The next request (input index, request as it arrives); only after next_time()
        was finite."""
        released = self._released
        k = self._k
        if released and (k >= len(self._chunk_times) or released[0][0] < self._chunk_times[k]):
            _, i, request = heapq.heappop(released)
            return i, request
        i = self._chunk_order[k]
        made = self._chunk_requests
        request = made[k] if made is not None else self.requests[i]
        self._next += 1
        self._k = k + 1
        if self._k == len(self._chunk_times):
            self._load()
        return i, request

    def ended(self, request_id: str, time: float) -> None:
        """`request_id` ended at `time`: its next turns arrive `think_time` later."""
        if not self._waiters:
            return
        for i in self._waiters.pop(request_id, ()):
            request = self.requests[i]
            at = time + request.think_time
            heapq.heappush(self._released, (at, i, replace(request, arrival_time=at)))
            self._held -= 1

    def release_stuck(self, request_ids: Iterable[str], time: float) -> bool:
        """The loop has nothing left to run or take in: the requests still queued starve,
        so their next turns are released from `time`. True if any was."""
        before = self._held
        for request_id in request_ids:
            self.ended(request_id, time)
        return self._held < before

    def unreleased(self) -> list[int]:
        """Input indices of the turns never released (their previous turn never ended)."""
        return sorted(i for waiting in self._waiters.values() for i in waiting)


def column_requests(columns: RequestColumns, indices: np.ndarray) -> list[Request]:
    """The requests of `columns` at `indices`, made from each column read once for all of
    them (a loop takes a chunk of arrivals at a time: numpy's per-item reads cost more than
    the requests themselves)."""
    ids = (indices if columns.id_numbers is None else columns.id_numbers[indices]).tolist()
    return plain_requests(ids, columns.arrival_time[indices].tolist(),
                          columns.prompt_len[indices].tolist(),
                          columns.output_len[indices].tolist(),
                          columns.priority[indices].tolist(),
                          columns.class_codes[indices].tolist(), columns.class_names)


_OWN = ("request_id", "arrival_time", "prompt_len", "output_len", "priority", "class_name")
_REST = tuple((field.name, field.default) for field in fields(Request) if field.name not in _OWN)
"""The fields a request of columns leaves at their defaults (no prefix, session or turn)."""


def plain_requests(ids: list[int], arrivals: list[float], prompts: list[int], outputs: list[int],
                   priorities: list[int], codes: list[int],
                   names: tuple[str, ...]) -> list[Request]:
    """The requests `r{ids[k]}` of these values (`codes[k]` indexes `names`, -1: no class),
    made without the dataclass's __init__: a frozen one sets each field through
    object.__setattr__, a generic call of ~1.4k instructions in Python 3.11 (ten of them
    made most of an arrival's cost); compiled, each is one C call, and so is the
    allocation. __post_init__ only checks, and `RequestColumns._check` checked the whole
    table."""
    made = []
    for k in range(len(ids)):
        request = PyType_GenericAlloc(Request, 0)  # (object.__new__'s own allocation)
        code = codes[k]
        PyObject_GenericSetAttr(request, "request_id", f"r{ids[k]}")
        PyObject_GenericSetAttr(request, "arrival_time", arrivals[k])
        PyObject_GenericSetAttr(request, "prompt_len", prompts[k])
        PyObject_GenericSetAttr(request, "output_len", outputs[k])
        PyObject_GenericSetAttr(request, "priority", priorities[k])
        PyObject_GenericSetAttr(request, "class_name", names[code] if code >= 0 else None)
        for name, default in _REST:
            PyObject_GenericSetAttr(request, name, default)
        made.append(request)
    return made
