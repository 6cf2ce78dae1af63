"""A cluster: N engine replicas behind a router, on one clock.

The loop knows each replica's next step (the time it starts, `_Replica.now`, unless the
replica is idle or stopped) and merges with them the arrivals, already in time order: the
router sends each to one replica, where it joins at that replica's next step, through its
own admission gate. It always handles the earliest; an arrival goes before a step that
starts at the same time (as in the single-replica loop), steps at the same time go in
replica order. Each
replica is a full `Engine` (its own queue, KV pool, rules and time model); a replica's
decode stretch is bounded by the next arrival anywhere in the cluster, since the router
may send it there.

One replica behind any router gives `simulate()`'s records (tested); a run without
`cluster:` does not come here at all.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from kvsched.admission import SloAdmission
from kvsched.backpressure import Backpressure
from kvsched.cluster.loop import collector_off, put_record
from kvsched.cluster.pd import Disaggregation, Phases, pd_summary
from kvsched.config import EngineConfig
from kvsched.engine.replica import Engine
from kvsched.engine.view import RouteLike
from kvsched.events import EventSink, EventStream
from kvsched.histogram import GapHistogram
from kvsched.kinds import unended_turn
from kvsched.policies.base import Policy
from kvsched.records import RequestRecord, RunResult
from kvsched.records.metrics import host_summary, summarize
from kvsched.records.slo import Slo
from kvsched.records.steplog import StepLog, StepStats, replica_chunk
from kvsched.records.table import RecordSubset, RecordTable
from kvsched.request import Request, Status
from kvsched.routers import EngineView, Router, RouteRequest
from kvsched.sequence import Seq
from kvsched.timing import TimeModel
from kvsched.turns import ARRIVAL_SLACK, ArrivalQueue, check_ids, check_turns

_new = tuple.__new__
"""A named tuple made in one C call: `EngineView` and `RouteRequest` spelled whole (their
own `__new__` is Python code, a frame per view, four views and a request an arrival)."""
_UNSEEN = (0, 0, 0)
"""A replica's view leaves the fields after its prefix lookup (decodes, queued and KV
tokens) at their defaults: written out as literals in the tuple `_new` makes (a tuple
joined or three globals read per view cost R5 0.1-0.4%), so checked here against
`EngineView`'s declaration, at import."""
if tuple([EngineView._field_defaults[name] for name in EngineView._fields[6:]]) != _UNSEEN:
    raise ImportError("EngineView's fields after `prefix` changed: update _Replica.view")



_PRUNE = 4096  # delayed views: drop snapshots and routing times older than this many

REPLICA_KEYS = ("num_requests", "num_finished", "num_rejected", "ttft_p50", "ttft_p99",
                "e2e_p99", "num_preemptions", "busy_fraction", "peak_blocks_used",
                "num_steps", "duration")
"""What each entry of the summary's `replicas` list holds (with `replica` and `num_blocks`)."""


@dataclass(frozen=True, slots=True)
class ReplicaSetup:
    """What one replica is built from."""

    config: EngineConfig
    clock: TimeModel


@dataclass(frozen=True, slots=True)
class ClusterResult(RunResult):
    """A cluster run: the cluster's records (every request, events of all replicas
    interleaved by time) and summary, plus each replica's own `RunResult` in `replicas`.
    `replica_of[i]`: the replica request i (input order) was routed to (None: a turn
    whose previous turn never ended, so it never arrived);
    `event_replicas[k]`: the replica of `events[k]`."""

    replicas: tuple[RunResult, ...] = ()
    replica_of: tuple[int | None, ...] = ()
    event_replicas: tuple[int, ...] = ()
    imbalance_ttft_ratio: float = 3.0
    imbalance_queue: int = 8
    idle_witness: tuple[int, int, float, int] | None = None  # queue, replica, time, idle one
    phases: tuple[Phases | None, ...] | None = None  # P/D: each split request's (input order)


class _Replica:
    """A replica's engine and its place on the cluster clock."""

    __slots__ = ("index", "engine", "log", "events", "backlog", "drain_at", "whole_steps",
                 "max_steps", "step", "now", "executed", "pending", "idle", "stopped", "due",
                 "waiting", "running", "free", "history", "num_blocks", "_fixed")

    def __init__(self, index: int, engine: Engine, log: StepLog, whole_steps: bool,
                 max_steps: int, event_sink: EventSink | None = None,
                 chunk: int = 1 << 15) -> None:
        self.index = index
        self.engine = engine
        self.log = log
        self.events = EventStream(engine.events, event_sink, chunk)
        # (EventStream.poll, inlined: its list and size, read an advance without a call)
        self.backlog = self.events.events
        self.drain_at = float(self.events._chunk)
        self.whole_steps = whole_steps
        self.max_steps = max_steps
        self.num_blocks = engine.config.num_blocks
        self.step = 0
        self.now = 0.0
        self.executed = 0
        self.pending: list[Seq] = []  # routed here, to be taken in by its next step
        self.idle = False  # no step scheduled: waits for an arrival
        self.stopped = False  # reached max_steps: steps no more
        self.due = True  # its next step, at `now`, is on the cluster's clock
        # Queued, running and free blocks as its current batch runs (pending not counted);
        # `history`: each such (time, waiting, running, free), for views of the past.
        self.waiting = self.running = 0
        self.free = self.num_blocks
        self.history: list[tuple[float, int, int, int]] | None = None
        # A view's fields that never change, made once (a view is made per arrival): its
        # index, size and prefix lookup (a partial of the engine's, not a bound method of
        # this replica: made each time, and a cycle if kept).
        self._fixed = (index, self.num_blocks, partial(_lookup, engine))

    def observe(self, time: float, waiting: int, running: int, free: int) -> None:
        self.waiting, self.running, self.free = waiting, running, free
        if self.history is not None:
            self.history.append((time, waiting, running, free))

    def view(self, now: float, delay: float, routed_at: list[float]) -> EngineView:
        """As a router may see it at `now`: live, or as of `now - delay`."""
        if self.history is None or delay == 0:
            index, num_blocks, lookup = self._fixed
            return _new(EngineView, (index, num_blocks, self.waiting + len(self.pending),
                                     self.running, self.free, lookup, 0, 0, 0))  # (_UNSEEN)
        seen = now - delay
        history = self.history
        k = bisect_right(history, seen, key=_snapshot_time)
        _, waiting, running, free = history[k - 1] if k else (0.0, 0, 0, self.num_blocks)
        # Requests routed here after that snapshot and by `seen` were queued then.
        since = history[k - 1][0] if k else -math.inf
        lo = bisect_right(routed_at, since)
        hi = bisect_right(routed_at, seen)
        # Arrivals come in time order: what is older than this view is never needed again.
        if k > _PRUNE:
            del history[:k - 1]
        if lo > _PRUNE:
            del routed_at[:lo]
        index, num_blocks, lookup = self._fixed
        return _new(EngineView, (index, num_blocks, waiting + max(0, hi - lo), running, free,
                                 lookup, 0, 0, 0))  # (_UNSEEN)


def _lookup(engine: Engine, request: RouteLike) -> int:
    """Prompt tokens of `request` the prefix cache of `engine` holds now (a view's
    `prefix`)."""
    return engine.cached_prefix_len(request.prefix, request.prompt_len)


def _snapshot_time(snapshot: tuple[float, int, int, int]) -> float:
    return snapshot[0]


def run_cluster(requests: Sequence[Request], setups: Sequence[ReplicaSetup], policies:
                Sequence[Policy], router: Router, *, signal_delay: float = 0.0,
                admissions: Sequence[SloAdmission | None] | None = None,
                slo: Slo | None = None, backpressure: Backpressure | None = None,
                keep_steps: bool = True, imbalance_ttft_ratio: float = 3.0,
                imbalance_queue: int = 8, stretches: bool = True,
                step_logs: Sequence[StepLog] | None = None,
                event_sinks: Sequence[EventSink] | None = None,
                pd: Disaggregation | None = None) -> ClusterResult:
    """Run `requests` through the replicas built from `setups`, routed by `router`, until
    nothing is left to do. A replica that reaches its `max_steps` stops there (what it holds
    or is sent later ends `unfinished`, as in a single run) while the others go on: a stop
    that does not depend on how far another replica's stretch jumped. Same inputs, same
    records. `stretches=False` runs every step on its own (the exact path, for checking the
    stretch bound). `step_logs` (one per replica, instead of logs that keep or drop steps
    as `keep_steps` says) and `event_sinks` stream each replica's records as in a single
    run: the result's events are then those the diagnosis reads. `pd`: the replicas form a
    prefill and a decode pool (`kvsched.cluster.pd`), whose routers replace `router`."""
    check_ids(requests)  # (columns' ids are distinct: no Request made of each to see it)
    if not setups:
        raise ValueError("a cluster needs at least one replica")
    if slo is None and admissions and admissions[0] is not None:
        slo = Slo(ttft=admissions[0].ttft_slo)
    check_turns(requests)
    records = RecordTable(requests)
    # The collector off from here: the replicas and the arrival queue's first chunk live on,
    # and a full pass over them before the loop (0.03 s of R5) only walked them again.
    with collector_off():
        queue = ArrivalQueue(requests)
        replicas = []
        for index, setup in enumerate(setups):
            config = setup.config
            admission = admissions[index] if admissions else None
            engine = Engine(config, policies[index], setup.clock, admission, backpressure,
                            stretches=stretches)
            log = step_logs[index] if step_logs else StepLog(
                config.num_blocks, keep=keep_steps, chunk=replica_chunk(len(setups)))
            replica = _Replica(index, engine, log, setup.clock.whole_steps, config.max_steps,
                               event_sinks[index] if event_sinks else None,
                               replica_chunk(len(setups)))
            if signal_delay > 0:
                replica.history = [(0.0, 0, 0, replica.num_blocks)]
            replicas.append(replica)
        loop = _Loop(replicas, router, signal_delay, queue, pd)
        for replica in replicas:
            if pd is not None and replica.index in pd.prefill:
                replica.engine.on_done(pd.prefilled)
            else:
                replica.engine.on_done(_recorder(loop, records, replica.engine, queue))
        if pd is not None:
            pd.ended = _release_next_turns(queue)
        # Blocks of a request depend on the block size of the replica it lands on: a Seq is
        # made when the router has chosen.
        routed: list[int | None] = [None] * len(requests)  # all set by the loop
        seqs: list[Seq | None] = [None] * len(requests)  # None: recorded as it ended
        loop.run()
    for replica in replicas:
        replica.engine.on_done(None)
    ran_on: list[tuple[int, ...]] = [()] * len(requests)  # replicas a request ran a phase on
    phases: list[Phases | None] = [None] * len(requests)
    for k, i in enumerate(loop.order):
        routed[i] = loop.routed[k]
        seqs[i] = loop.seqs[k]
        if routed[i] is not None:
            ran_on[i] = (routed[i],)  # type: ignore[assignment]
        if pd is not None and k in pd.phases:
            split = phases[i] = pd.phases[k]
            seqs[i] = pd.client_seq(k, requests[i])
            if split.decode_replica is not None:
                ran_on[i] = (split.prefill_replica, split.decode_replica)  # type: ignore[assignment]
    never_released = queue.unreleased()
    for i in never_released:  # a turn whose previous turn never ended: it never arrived
        seq = Seq.of(requests[i], len(requests), setups[0].config.block_size)
        seq.end_reason = unended_turn(requests[i].after)
        seqs[i] = seq

    replica_results = []
    for replica in replicas:
        if replica.stopped:
            replica.engine.close_all_runs()
        else:
            replica.engine.explain_starvation(replica.step, replica.now)
        replica.events.close()
    for i in range(len(requests)):
        if routed[i] is None:
            put_record(records, i, seqs[i], Status.UNFINISHED, replicas[0].engine)  # type: ignore[arg-type]
            continue
        if seqs[i] is None:  # recorded as it ended
            continue
        replica = replicas[ran_on[i][-1]]  # where it ended (a split one: its decode instance)
        leftover = Status.UNFINISHED if replica.stopped else Status.STARVED
        put_record(records, i, seqs[i], leftover, replica.engine)  # type: ignore[arg-type]
    # The replica each request's first and last phase ran on (-1: none).
    first = np.array([on[0] if on else -1 for on in ran_on], dtype=np.int64)
    last = np.array([on[-1] if on else -1 for on in ran_on], dtype=np.int64)
    for replica in replicas:
        stats = replica.log.close()
        mine = RecordSubset(records, np.flatnonzero((first == replica.index)
                                                    | (last == replica.index)))
        summary = summarize(mine, stats, slo,
                            final_blocks_used=replica.engine.final_blocks_used,
                            itl=replica.engine.itl)
        host = replica.engine.host_counts()
        if host is not None:
            summary = host_summary(summary, mine, [host])
        replica_results.append(RunResult(replica.engine.config, setups[replica.index].clock.unit,
                                         mine, replica.log, replica.events.kept, None,
                                         summary))
    events, event_replicas = _merged_events(replica_results)
    summary = _cluster_summary(records, replicas, replica_results, slo, loop.idle_witness)
    if pd is not None:
        summary = pd_summary(summary, pd, phases)
    hosts = [h for r in replicas if (h := r.engine.host_counts()) is not None]
    if hosts:
        summary = host_summary(summary, records, hosts)
    return ClusterResult(setups[0].config, setups[0].clock.unit, records,
                         ClusterSteps(replica_results), events, None, summary,
                         tuple(replica_results), tuple(routed),
                         tuple(event_replicas),
                         imbalance_ttft_ratio, imbalance_queue, loop.idle_witness,
                         tuple(phases) if pd is not None else None)


def _recorder(loop: _Loop, records: RecordTable, engine: Engine,
              queue: ArrivalQueue) -> Callable[[Seq], None]:
    """A replica's `on_done` (not a P/D prefill instance's): a request that finished or was
    rejected there has its record made at once and its run state let go, as a single run
    does (kept to the end, every request's `Seq` lived on and the collector's pass as the
    loop ended walked them all: 0.12 s of R5's 1.8), and its next turns may come. A split
    request's record waits for the end, where its two phases are read together."""
    release = _release_next_turns(queue)
    pd = loop.pd

    def done(seq: Seq) -> None:
        k = seq.index
        if pd is None or k not in pd.phases:
            put_record(records, loop.order[k], seq, Status.STARVED, engine)
            loop.seqs[k] = None
        release(seq)
    return done


def _release_next_turns(queue: ArrivalQueue) -> Callable[[Seq], None]:
    def done(seq: Seq) -> None:  # finished or rejected: its next turns may come
        end = seq.finish_time if seq.finish_time is not None else seq.request.arrival_time
        queue.ended(seq.request.request_id, end)
    return done


class _Loop:
    """The cluster's clock: arrivals routed, each replica's next step or stretch."""

    __slots__ = ("replicas", "router", "delay", "arrivals", "order", "routed", "seqs",
                 "idle_witness", "_routed_at", "pd")

    # (A plain class typed in cluster.pxd: C calls to the replicas in the compiled build.)
    def __init__(self, replicas: list[_Replica], router: Router, delay: float,
                 arrivals: ArrivalQueue, pd: Disaggregation | None = None) -> None:
        self.pd = pd  # P/D: two pools, a link between them (None: one pool, `router`)
        self.replicas = replicas
        self.router = router
        self.delay = delay
        self.arrivals = arrivals
        self.order: list[int] = []  # input index of each arrival index
        self.routed: list[int | None] = []
        self.seqs: list[Seq | None] = []
        self.idle_witness: tuple[int, int, float, int] | None = None
        self._routed_at: list[list[float]] = []

    def run(self) -> None:
        """Run until every arrival is routed and no replica has a step left."""
        arrivals = self.arrivals
        self._routed_at = [[] for _ in self.replicas]
        pd = self.pd
        slack, never = ARRIVAL_SLACK, math.inf  # (C doubles in the compiled build)
        while True:
            arrival = arrivals.next_time()
            replica = self._first_due()
            if pd is not None and pd.link.busy:
                # Deliveries are events of this clock: after arrivals, before steps, of
                # the same time (a delivery by a step's start joins it, as an arrival does).
                due = pd.link.next_time()
                if due < arrival and (replica is None
                                      or due <= replica.now + 1e-9 * (1.0 + due)):
                    self._deliver(due)
                    continue
            if arrival < never:
                if replica is None:
                    self._route(arrival)
                    continue
                start = replica.now
                # A hair of slack, as in run_loop: an arrival by a step's start joins it.
                if arrival <= start + slack * (1.0 + start):
                    self._route(arrival)
                    continue
            elif replica is None:
                # Nothing runs anywhere: what is still queued starves, its next turns come.
                if arrivals.holding and self._release_stuck():
                    continue
                return
            replica.due = False
            if self._advance(replica):
                replica.stopped = True
            elif not replica.idle:
                replica.due = True

    def _first_due(self) -> _Replica | None:
        """The replica whose next step starts first (ties: the lowest index); None when
        none has one. (A scan: a replica's field in C each, where a heap made a tuple, a
        float and two ints a step and called heapq twice.)"""
        first = None
        for replica in self.replicas:
            if replica.due and (first is None or replica.now < first.now):
                first = replica
        return first

    def _release_stuck(self) -> bool:
        """Every replica is idle or stopped: the requests an idle replica still holds
        starve, found so now (the latest idle replica's time), and their next turns are
        released (a stopped replica's end unfinished: their turns stay held). True if a
        turn was released."""
        idle = [r for r in self.replicas if not r.stopped]
        if not idle:
            return False
        held = [seq.request.request_id for r in idle for seq in r.engine.held()]
        return self.arrivals.release_stuck(held, max(r.now for r in idle))

    def _route(self, now: float) -> None:
        i, request = self.arrivals.pop()
        k = len(self.order)
        self.order.append(i)
        self.routed.append(None)
        self.seqs.append(None)
        pd = self.pd
        if pd is None:
            replica = self._pick(request, now, self.replicas, self.router, True)
        elif pd.decider.splits(request.prompt_len):  # to a prefill instance, one token
            replica = self._pick(request, now, [self.replicas[j] for j in pd.prefill],
                                 pd.prefill_router, True)
            request = pd.prefill_request(request)
            pd.phases[k] = Phases(prefill_replica=replica.index)
        else:  # kept whole: served by a decode instance as a colocated one would
            replica = self._pick(request, now, [self.replicas[j] for j in pd.decode],
                                 pd.decode_router, True)
        seq = Seq.of(request, k, replica.engine.config.block_size)
        if pd is not None and k in pd.phases:
            pd.phases[k].prefill = seq
        self.routed[k] = replica.index
        self.seqs[k] = seq
        self._send(seq, replica, now)

    def _deliver(self, now: float) -> None:
        """The link's next event: transfers delivered now go to a decode instance each."""
        pd = self.pd
        assert pd is not None
        pool = [self.replicas[j] for j in pd.decode]
        for k, _, _ in pd.link.advance(now):
            original = self.arrivals.requests[self.order[k]]
            replica = self._pick(original, now, pool, pd.decode_router, False)
            seq = pd.decode_seq(k, original, now, replica.engine.config.block_size)
            pd.phases[k].decode_replica = replica.index
            self._send(seq, replica, now)

    def _pick(self, request: Request, now: float, pool: list[_Replica], router: Router,
              watch: bool) -> _Replica:
        """The replica of `pool` that `router` sends `request` to (`watch`: an arrival,
        for the idle-witness)."""
        seen = _new(RouteRequest, (request.request_id, request.arrival_time,
                                   request.prompt_len, request.priority, request.class_name,
                                   request.session, request.prefix))
        views: list[EngineView] = []
        for replica in pool:  # (typed: C calls in the compiled build)
            views.append(replica.view(now, self.delay, self._routed_at[replica.index]))
        if watch:
            self._watch_idle(views, now)
        if len(pool) != len(self.replicas):  # a pool of a P/D cluster: its own indices
            views = [v._replace(index=n) for n, v in enumerate(views)]
        choice = router.route(seen, views)
        if type(choice) is not int and (  # (the exact type first: no lookup of np.integer)
                isinstance(choice, bool) or not isinstance(choice, (int, np.integer))) \
                or not 0 <= choice < len(pool):
            raise ValueError(f"router returned {choice!r} for {request.request_id}; expected "
                             f"a replica index 0..{len(pool) - 1}")
        return pool[int(choice)]

    def _send(self, seq: Seq, replica: _Replica, now: float) -> None:
        """`seq` joins `replica` at its next step (waking it if idle)."""
        replica.pending.append(seq)
        if self.delay > 0:
            self._routed_at[replica.index].append(now)
        if replica.idle and not replica.stopped:  # wake it: its next step starts now
            replica.idle = False
            if replica.whole_steps:
                replica.step = max(replica.step, math.ceil(now))
                replica.now = float(replica.step)
            else:
                replica.now = max(replica.now, now)
            replica.due = True

    def _watch_idle(self, views: list[EngineView], now: float) -> None:
        """Remember the longest queue seen while another replica had nothing to do."""
        # (plain loops: a generator and max() with a key cost a microsecond an arrival)
        for view in views:
            if view.num_waiting == 0 and view.num_running == 0:  # nothing outstanding
                idle = view.index
                break
        else:
            return
        worst = views[0]
        for view in views:  # the longest queue, ties to the lowest index
            if view.num_waiting > worst.num_waiting or (
                    view.num_waiting == worst.num_waiting and view.index < worst.index):
                worst = view
        if worst.num_waiting and (self.idle_witness is None
                                  or worst.num_waiting > self.idle_witness[0]):
            self.idle_witness = (worst.num_waiting, worst.index, now, idle)

    def _advance(self, replica: _Replica) -> bool:
        """Take in what was routed to `replica`, then run its next step or stretch.
        True when it reached `max_steps`."""
        engine = replica.engine
        slack = ARRIVAL_SLACK  # (a C double in the compiled build)
        if len(replica.backlog) >= replica.drain_at:
            replica.events.drain()
        arrivals = self.arrivals
        while replica.pending:
            pending = replica.pending
            replica.pending = []
            for seq in pending:
                replica.now = max(replica.now, seq.request.arrival_time)  # never start early
                engine.arrive(seq, replica.step, replica.now)
            # A rejection may have released a next turn due by now: route it before the
            # step (it joins this step if it lands here, as in a single run).
            horizon = replica.now + slack * (1.0 + replica.now)
            while (due := arrivals.next_time()) <= horizon:
                self._route(due)
        upcoming = arrivals.next_time()
        if self.pd is not None:  # a delivery may come to a decode instance before then
            upcoming = min(upcoming, self.pd.bound(self.replicas))
        if arrivals.holding:
            # Another replica's step may end a turn and release the next one, which the
            # router may send here: a stretch must not jump past that step's start.
            first = self._first_due()
            if first is not None:
                upcoming = min(upcoming, first.now)
        stretch = engine.stretch(replica.step, replica.now, upcoming,
                                 replica.max_steps - replica.executed)
        if stretch is not None:
            replica.log.stretch(stretch)
            if replica.history is not None:
                for start, used in zip(stretch.starts, stretch.blocks_used, strict=True):
                    replica.observe(start, stretch.num_waiting, stretch.num_running,
                                    replica.num_blocks - used)
            else:
                replica.observe(stretch.starts[-1], stretch.num_waiting, stretch.num_running,
                                replica.num_blocks - stretch.blocks_used[-1])
            replica.step += stretch.num_steps
            replica.executed += stretch.num_steps
            replica.now = stretch.end
        else:
            row = engine.step(replica.step, replica.now)
            if row is None:  # nothing runs, nothing can be admitted: wait for an arrival
                replica.idle = True
                view = engine.view()
                replica.observe(replica.now, view.num_waiting, view.num_running,
                                view.num_free_blocks)
                return False
            replica.log.row(row)
            replica.observe(row.time, row.num_waiting, row.num_running, row.blocks_free)
            replica.step += 1
            replica.executed += 1
            replica.now = row.time + row.duration
        return replica.executed >= replica.max_steps


class ClusterSteps:
    """The cluster's step records: each replica's `StepLog`, read together."""

    def __init__(self, replicas: Sequence[RunResult]) -> None:
        self.logs = [r.step_log for r in replicas]
        self.num_blocks = sum(log.num_blocks for log in self.logs)
        self.kept: list | None = None if any(log.kept is None for log in self.logs) else []

    def rows(self) -> list[tuple]:
        """Every step of every replica (STEP_COLUMNS rows), by start time then replica."""
        tagged = [(row[1], index, row) for index, log in enumerate(self.logs)
                  for row in log.rows()]
        tagged.sort(key=lambda t: (t[0], t[1]))
        return [row for _, _, row in tagged]

    def rows_by_replica(self) -> list[tuple[int, list[tuple]]]:
        return [(index, log.rows()) for index, log in enumerate(self.logs)]


def _merged_events(results: Sequence[RunResult]) -> tuple[list[tuple], list[int]]:
    """Every replica's events interleaved by time (ties: replica order), each replica's kept
    in the order it made them (a finish, stamped at its step's end, may precede the next
    step's events in time order but not in the record): `merge_by_time`'s order."""
    streams = [result.events for result in results]
    order, tags = merge_by_time([time_keys([event[1] for event in s]) for s in streams])
    flat = [event for s in streams for event in s]
    return [flat[j] for j in order.tolist()], tags.tolist()


def time_keys(times: Sequence[float], start: float = -math.inf) -> np.ndarray:
    """A stream's merge keys: each time raised to the largest before it (`start`: the
    largest of the stream's earlier chunks)."""
    return np.maximum(np.maximum.accumulate(np.asarray(times, dtype=np.float64)), start)


def merge_by_time(keys: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The order `heapq.merge` gives streams of events by (time, stream), as positions into
    the streams' concatenation, and the stream of each, from each stream's `time_keys`.

    A stream's times may run back (a finish before the next step's events); the merge takes
    the least head each time, so an event whose time is below one before it in its stream
    goes as soon as it is a head (that earlier event, larger, was the least): exactly as if
    it had that larger time. With those keys every stream is in order, and the merge is a
    stable sort by key of the streams laid end to end (ties: stream, then place). A sort in
    numpy, not a heap a Python call an event (0.03 s of R5's 58k events)."""
    order = np.argsort(np.concatenate([np.zeros(0), *keys]), kind="stable")
    tags = np.repeat(np.arange(len(keys)), [len(k) for k in keys])
    return order, tags[order]


def _merged_stats(replicas: Sequence[_Replica]) -> StepStats:
    """The replicas' step sums added up (`end`: the last replica's; peaks: the highest)."""
    total = StepStats()
    for replica in replicas:
        s = replica.log.stats
        total.num_steps += s.num_steps
        total.end = max(total.end, s.end)
        total.busy_time += s.busy_time
        total.prefill_tokens += s.prefill_tokens
        total.decode_tokens += s.decode_tokens
        total.recomputed_tokens += s.recomputed_tokens
        total.swapped_blocks += s.swapped_blocks
        total.blocks_used_sum += s.blocks_used_sum
        total.peak_blocks_used = max(total.peak_blocks_used, s.peak_blocks_used)
        total.thrash_ratio_max = max(total.thrash_ratio_max, s.thrash_ratio_max)
        total.backpressure_steps += s.backpressure_steps
    return total


def _cluster_summary(records: Sequence[RequestRecord], replicas: Sequence[_Replica],
                     results: Sequence[RunResult], slo: Slo | None,
                     witness: tuple[int, int, float, int] | None) -> dict[str, Any]:
    """SUMMARY_KEYS over every request (steps summed over the replicas: `num_steps` counts
    replica steps, `busy_fraction` is the mean replica's, `peak_blocks_used` the highest
    replica's), then CLUSTER_KEYS, then `replicas`: one entry per replica."""
    final = sum(r.engine.final_blocks_used for r in replicas)
    stats = _merged_stats(replicas)
    itl = GapHistogram.merged([h for r in replicas if (h := r.engine.itl) is not None])
    summary = summarize(records, stats, slo, final_blocks_used=final, itl=itl)
    n = len(replicas)
    if stats.num_steps and stats.end:
        summary["busy_fraction"] = stats.busy_time / (stats.end * n)
    per = [r.summary for r in results]
    counts = [s["num_requests"] for s in per]
    p99s = [s["ttft_p99"] for s in per if s["ttft_p99"] is not None]
    busy = [s["busy_fraction"] for s in per if s["busy_fraction"] is not None]
    mean = sum(counts) / n
    summary |= {
        "num_replicas": n,
        "replica_requests_min": min(counts),
        "replica_requests_max": max(counts),
        "replica_load_imbalance": max(counts) / mean if mean else None,
        "replica_ttft_p99_min": min(p99s) if p99s else None,
        "replica_ttft_p99_max": max(p99s) if p99s else None,
        "replica_ttft_p99_ratio": max(p99s) / min(p99s) if p99s and min(p99s) > 0 else None,
        "replica_busy_fraction_min": min(busy) if busy else None,
        "replica_busy_fraction_max": max(busy) if busy else None,
        "max_queue_while_idle": witness[0] if witness else 0,
    }
    summary["replicas"] = [
        {"replica": i, "num_blocks": replicas[i].num_blocks,
         **{key: s[key] for key in REPLICA_KEYS}} for i, s in enumerate(per)]
    return summary

