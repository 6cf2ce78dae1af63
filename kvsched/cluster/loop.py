"""The Python loop: arrivals, the clock, one `Engine`'s steps and stretches, the records.

The reference for every run (the compiled loop, `kvsched.fastcore`, carries the runs it can
and is compared with this one); `kvsched.simulator.simulate` imports it only for a run the
compiled loop does not carry, so that a compiled run imports none of the engine's modules.
"""

from __future__ import annotations

import gc
import math
from array import array
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from kvsched.admission import SloAdmission
from kvsched.backpressure import Backpressure
from kvsched.config import EngineConfig
from kvsched.engine.replica import Engine
from kvsched.events import EventStream
from kvsched.kinds import unended_turn
from kvsched.policies.base import Policy
from kvsched.records import RunResult
from kvsched.records.metrics import host_summary, summarize
from kvsched.records.slo import Slo
from kvsched.records.steplog import StepLog, Timeline
from kvsched.records.table import RecordTable
from kvsched.request import Request, Status
from kvsched.sequence import Seq, SeqState
from kvsched.timing import TimeModel
from kvsched.turns import ARRIVAL_SLACK, ArrivalQueue

if TYPE_CHECKING:
    from kvsched.events import Abort, EventSink, Progress

ABORT_EVERY = 1024
"""How many loop turns apart `abort` is asked (a power of two)."""


def simulate_python(requests: Sequence[Request], config: EngineConfig, policy: Policy,
                    clock: TimeModel, *, admission: SloAdmission | None, slo: Slo | None,
                    backpressure: Backpressure | None, record_batches: bool,
                    step_log: StepLog | None, event_sink: EventSink | None, stretches: bool,
                    progress: Progress | None, abort: Abort | None, utilisation: bool,
                    itl: bool) -> RunResult:
    """`kvsched.simulator.simulate` (its arguments checked and defaulted) on the Python
    engine."""
    engine = Engine(config, policy, clock, admission, backpressure, record_batches,
                    stretches=stretches, utilisation=utilisation, itl=itl)
    seqs = Arrivals(requests, config.block_size)
    order = seqs.order
    records = RecordTable(requests)

    def done(seq: Seq) -> None:  # a finished or rejected request's record, made at once
        put_record(records, order[seq.index], seq, Status.STARVED, engine)
        del seqs.live[seq.index]
        seqs.ended(seq)

    engine.on_done(done)
    log = step_log if step_log is not None else StepLog(config.usable_blocks)
    if len(seqs.times):
        log.stats.timeline = Timeline(float(seqs.times[0]), float(seqs.times[-1]))
    events = EventStream(engine.events, event_sink)
    with collector_off():
        step, now, stopped_early = run_loop(engine, seqs, log, config.max_steps,
                                            clock.whole_steps, events, progress, abort)
    stats = log.close()
    if stopped_early:
        engine.close_all_runs()
    leftover = Status.UNFINISHED if stopped_early else Status.STARVED
    if not stopped_early:
        engine.explain_starvation(step, now)
    events.close()
    engine.on_done(None)
    for seq in seqs.remaining():  # still queued or running, or never arrived (max_steps)
        status = Status.UNFINISHED if seq.index in seqs.never_released else leftover
        put_record(records, order[seq.index], seq, status, engine)
    summary = summarize(records, stats, slo, final_blocks_used=engine.final_blocks_used,
                        itl=engine.itl)
    host = engine.host_counts()
    if host is not None:
        summary = host_summary(summary, records, [host])
    return RunResult(config, clock.unit, records, log, events.kept, engine.batches,
                     summary)


class Arrivals:
    """The requests in arrival order (simultaneous ones in input order; a held turn once its
    previous turn ended, see `kvsched.turns`), each made into a `Seq` only when the loop
    reaches it, and forgotten once its record is made: a long trace never holds every
    request's run state at once."""

    __slots__ = ("queue", "order", "live", "never_released", "_block_size")

    def __init__(self, requests: Sequence[Request], block_size: int) -> None:
        self.queue = ArrivalQueue(requests)
        # The input index of each arrival index, in 4 bytes (8 for a long workload).
        self.order = array("i" if len(requests) < 2**31 else "q")
        self.live: dict[int, Seq] = {}  # made and not yet recorded, by arrival index
        self.never_released: set[int] = set()  # arrival indices of turns never released
        self._block_size = block_size

    @property
    def times(self) -> np.ndarray:
        """Arrival times of the requests that have their own (held turns have none), in
        order."""
        return self.queue.times

    def __len__(self) -> int:
        return len(self.queue.requests)

    def next_time(self) -> float:
        return self.queue.next_time()

    def pop(self) -> Seq:
        """The next arrival as a `Seq` (only after next_time() was finite)."""
        i, request = self.queue.pop()
        return self._make(i, request)

    def _make(self, i: int, request: Request) -> Seq:
        k = len(self.order)
        self.order.append(i)
        seq = Seq.of(request, k, self._block_size)
        self.live[k] = seq
        return seq

    def ended(self, seq: Seq) -> None:
        """`seq` finished or was rejected: release its next turns."""
        end = seq.finish_time if seq.finish_time is not None else seq.request.arrival_time
        self.queue.ended(seq.request.request_id, end)

    def release_stuck(self, now: float) -> bool:
        """Nothing can run and nothing is due: what is still in the engine starves, so its
        next turns are released from `now`. True if any was."""
        return self.queue.release_stuck(
            [seq.request.request_id for seq in self.live.values()], now)

    def remaining(self) -> list[Seq]:
        """Every request without a record yet, made now if it never arrived (a turn never
        released says its previous turn did not end)."""
        while self.queue.next_time() < math.inf:
            self.pop()
        requests = self.queue.requests
        for i in self.queue.unreleased():
            seq = self._make(i, requests[i])
            seq.end_reason = unended_turn(requests[i].after)
            self.never_released.add(seq.index)
        return [self.live[k] for k in sorted(self.live)]


LOOP_LEFT = 50_000
"""Objects a loop may leave to the collector before it makes one full pass as it ends."""


@contextmanager
def collector_off(pass_after: bool = True) -> Iterator[None]:
    """The cyclic garbage collector off while a loop runs: the loop makes a step's plan,
    row and lists per event, few of which live long and none in a cycle, and the
    collector's passes over them cost a sixth of the run. Back on (if it was) after.

    A long loop leaves hundreds of thousands of objects that live on (the records not yet
    written, the prefix cache's tree, the requests), all counted as new: left to the
    collector, its next passes walk them three times (as new, then as middle-aged, then in
    a full pass once they count as long-lived: 0.9 s of R5's 4.3 s). One full pass as the
    loop ends walks them once, and counts them as long-lived. `pass_after=False` for a
    stretch that leaves nothing that lives on (no pass: what others made before it is
    walked by the collector's own passes, if the process lives that long)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
            if pass_after and gc.get_count()[0] > LOOP_LEFT:
                gc.collect()


def run_loop(engine: Engine, seqs: Arrivals, log: StepLog, max_steps: int,
             whole_steps: bool, events: EventStream | None = None,
             progress: Progress | None = None,
             abort: Abort | None = None) -> tuple[int, float, bool]:
    """Feed `seqs` (in arrival order) to `engine` on one clock until nothing is left to do.

    Returns the next step number, the time, and whether `max_steps` (or `abort`) stopped
    the run."""
    queue = seqs.queue  # (methods called on typed objects: C calls in the compiled build)
    step = 0
    executed = 0  # steps run (step numbers also jump over idle time on the step clock)
    now = 0.0
    # The events drained to their sink a chunk at a time (EventStream.poll, inlined).
    stream = events if events is not None and events.sink is not None else None
    backlog = stream.events if stream is not None else []
    drain_at = stream._chunk if stream is not None else 0
    turns = 0
    abort_mask = ABORT_EVERY - 1
    slack = ARRIVAL_SLACK  # (a C double in the compiled build)
    while True:
        if stream is not None and len(backlog) >= drain_at:
            stream.drain()
        turns += 1
        if progress is not None and not turns & 4095:
            progress(len(seqs.order), now)
        if abort is not None and not turns & abort_mask and abort(now, seqs.live.values()):
            return step, now, True
        horizon = now + slack * (1.0 + now)
        upcoming = queue.next_time()
        while upcoming <= horizon:
            # Everything due, then what a rejection among them released (as a cluster
            # routes what is due before its replica takes it in).
            batch = [seqs.pop()]
            while queue.next_time() <= horizon:
                batch.append(seqs.pop())
            for seq in batch:
                now = max(now, seq.request.arrival_time)  # absorb the drift, never start early
                engine.arrive(seq, step, now)
            upcoming = queue.next_time()
        stretch = engine.stretch(step, now, upcoming, max_steps - executed)
        if stretch is not None:
            log.stretch(stretch)
            step += stretch.num_steps
            executed += stretch.num_steps
            now = stretch.end
        else:
            row = engine.step(step, now)
            if row is None:  # nothing runs, nothing can be admitted: wait for the next arrival
                if upcoming == math.inf:
                    if seqs.release_stuck(now):  # turns held by what starves: they come
                        continue
                    return step, now, False
                if whole_steps:
                    step = math.ceil(upcoming)
                    now = float(step)
                else:
                    now = upcoming
                continue
            log.row(row)
            step += 1
            executed += 1
            now = row.time + row.duration
        if executed >= max_steps:
            return step, now, True


def put_record(records: RecordTable, i: int, seq: Seq, leftover: Status, engine: Engine) -> None:
    state = seq.state
    if state is FINISHED:
        status = _FINISHED
    elif state is REJECTED:
        status = _REJECTED
    else:
        status = leftover.value
    first_step = seq.first_token_step
    records.put(i, seq, status, engine.generated(seq), seq.first_scheduled_time,
                seq.first_token_time,
                None if first_step is None else first_step - seq.join_step + 1,
                seq.finish_time, seq.max_token_gap, seq.prefix_hit_tokens,
                bool(seq.num_preemptions or seq.num_recomputed_tokens or seq.num_swapped_blocks
                     or seq.cached_tokens or seq.end_reason is not None))


_FINISHED, _REJECTED = Status.FINISHED.value, Status.REJECTED.value
# (Module constants: an enum member read through its class costs a lookup in Python 3.11.)
FINISHED, REJECTED = SeqState.FINISHED, SeqState.REJECTED
