"""A variant with `cluster:`: its replicas built from the spec, run, and its records written
with a `replica` column (requests.csv, steps.csv, events.csv: appended after the usual
columns; steps.csv lists replica 0's steps, then replica 1's, ...; events.csv is in time
order, ties in replica order).

As a single run does, a cluster run under `kvsched run` streams its steps and events while
it goes (`ClusterSpool`): each replica's steps into a part file, its events into a spool of
chunks (held in memory up to a bound, then pickled: exact floats, so the merge by time is
the in-memory one), merged into events.csv as the run ends; writing the records then joins
the step parts, so that the bytes are those written from memory.
"""

from __future__ import annotations

import math
import pickle
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from kvsched.backpressure import Action, Backpressure
from kvsched.cluster.loop import collector_off
from kvsched.cluster.pd import Disaggregation, PdDecider, Phases
from kvsched.cluster.replicas import (
    ClusterResult,
    ReplicaSetup,
    merge_by_time,
    run_cluster,
    time_keys,
)
from kvsched.cluster.transfer import Link
from kvsched.errors import KvschedError
from kvsched.records import EVENT_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS
from kvsched.records.csvout import RowCsv, StepCsv, write_rows
from kvsched.records.steplog import (
    COMPACT_COLUMNS,
    RecordMode,
    StepLog,
    compact_row,
    replica_chunk,
)
from kvsched.records.table import TableRows, rows_of
from kvsched.request import Request
from kvsched.routers import Router, load_router, make_router
from kvsched.scenario import Variant
from kvsched.schema import (
    ClusterSpec,
    PromptOver,
    RooflineTime,
    RouterSpec,
    RunSpec,
    replica_engines,
)
from kvsched.variant_parts import admission_of, policy_of, slo_of, time_model_of

ROUTER_SEED_TAG = 12  # the router's generator: the scenario seed, tagged apart from the workload's
PREFILL_ROUTER_SEED_TAG = 13  # a P/D cluster's prefill router (its decode router takes 12)

EVENTS_HELD = 1 << 17
"""Events a cluster run's spool holds in memory (shared by its replicas) before it pickles
the rest to part files: pickled and read back, R5's 58k events cost 1.6% of its run."""

PD_REQUEST_COLUMNS = ("prefill_replica", "decode_replica", "transfer_start", "transfer_time",
                      "transfer_bytes")
"""Appended after `replica` in a P/D run's requests.csv: the replica that computed the
prompt (a split request's prefill instance, else the replica that served it whole), the one
that streamed its tokens (empty if none did), when its KV transfer was asked for (the
prefill's end), how long it took to arrive, and its bytes (empty when not split)."""


def replica_specs(spec: RunSpec) -> list[RunSpec]:
    """One RunSpec per replica: the variant's, with the replica's engine keys and time."""
    cluster = spec.cluster
    assert cluster is not None
    out = []
    for entry, engine in zip(cluster.replicas, replica_engines(spec), strict=True):
        time = entry.time if entry.time is not None else spec.time
        out.extend([spec.model_copy(update={"engine": engine, "time": time})] * entry.count)
    return out


def pool_routers(cluster: ClusterSpec) -> list[tuple[tuple, RouterSpec]]:
    """The routers a cluster runs, each with its field: `router`, or each P/D pool's own
    (the decode pool's alone under `pd_decider: never`)."""
    if cluster.decode is None:
        return [(("cluster", "router"), cluster.router)]
    pools = [("prefill", cluster.prefill)] if cluster.is_pd else []
    pools.append(("decode", cluster.decode))
    return [(("cluster", key, "router"), pool.router) if pool.router is not None
            else (("cluster", "router"), cluster.router) for key, pool in pools if pool]


def check_router_loads(variant: Variant) -> None:
    """Import the variant's router classes (a user's module) now, or raise the error."""
    cluster = variant.spec.cluster
    assert cluster is not None
    for field, router in pool_routers(cluster):
        try:
            load_router(router.name, [variant.scenario.base_dir])
        except ValueError as exc:
            raise variant.error(field, str(exc)) from None


def _router(variant: Variant, field: tuple, spec: RouterSpec, num_replicas: int,
            tag: int) -> Router:
    try:
        return make_router(spec.name, spec.params(), num_replicas,
                           np.random.default_rng([variant.spec.seed, tag]),
                           [variant.scenario.base_dir])
    except ValueError as exc:
        raise variant.error(field, str(exc)) from None


def kv_bytes_per_token(spec: RunSpec) -> float:
    """Bytes of KV one prompt token moves over a P/D link: given, or K and V of every
    layer of the prefill pool's roofline model at its engine's KV dtype (all KV heads: every
    tensor-parallel rank sends its share)."""
    cluster = spec.cluster
    assert cluster is not None and cluster.transfer is not None
    if cluster.transfer.kv_bytes_per_token is not None:
        return cluster.transfer.kv_bytes_per_token
    # the model catalogue: only when the link's bytes per token come from the model
    from kvsched.timing.hardware import KV_DTYPE_BYTES
    from kvsched.timing.kvpool import kv_block_bytes

    first = replica_specs(spec)[0]
    time = first.time
    assert isinstance(time, RooflineTime)
    return kv_block_bytes(time.model, 1, 1, KV_DTYPE_BYTES[first.engine.kv_cache_dtype])


class EventSpool:
    """One replica's events, chunk by chunk in the order the run hands them on: held in
    memory while `room` (events) lasts, pickled to `path` from the first chunk that does not
    fit on."""

    __slots__ = ("path", "room", "held", "_file")

    def __init__(self, path: Path, room: int) -> None:
        self.path = path
        self.room = room
        self.held: list[list[tuple]] = []
        self._file: BinaryIO | None = None  # the part file, once a chunk did not fit

    def __call__(self, chunk: list[tuple]) -> None:
        if self._file is None and len(chunk) <= self.room:
            self.room -= len(chunk)
            self.held.append(chunk)
            return
        if self._file is None:
            self._file = self.path.open("wb")
        pickle.dump(chunk, self._file, protocol=pickle.HIGHEST_PROTOCOL)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def chunks(self) -> Iterator[list[tuple]]:
        """Every chunk in order, each let go once read (the part file then removed)."""
        held, self.held = self.held[::-1], []
        while held:
            yield held.pop()
        if self._file is not None:
            self.close()
            yield from _chunks(self.path)
            self.path.unlink()


class ClusterSpool:
    """Where a cluster run streams its records: part files in the variant's folder, one per
    replica (`.steps-K.csv`, rows only, unless records are `summary`, joined by
    `write_cluster_records` and removed), and each replica's `EventSpool` (its part file
    `.events-K.pickle`), merged into events.csv by `write_events` as the run ends."""

    def __init__(self, folder: Path, records: RecordMode, num_replicas: int) -> None:
        self.folder = folder
        self.records = records
        self.chunk = replica_chunk(num_replicas)
        self._room = EVENTS_HELD // max(1, num_replicas)
        self._files: list[Any] = []
        self._events: list[EventSpool] = []

    def steps_part(self, index: int) -> Path:
        return self.folder / f".steps-{index}.csv"

    def events_part(self, index: int) -> Path:
        return self.folder / f".events-{index}.pickle"

    def step_log(self, index: int, num_blocks: int) -> StepLog:
        if self.records is RecordMode.SUMMARY:
            return StepLog(num_blocks, keep=False, chunk=self.chunk)
        writer = StepCsv(self.steps_part(index), self.records, num_blocks, replica=index,
                         header=False)
        self._files.append(writer)
        return StepLog(num_blocks, keep=False, sink=writer, chunk=self.chunk)

    def event_sink(self, index: int) -> EventSpool:
        spool = EventSpool(self.events_part(index), self._room)
        self._events.append(spool)
        return spool

    def write_events(self) -> None:
        """events.csv from every replica's events (all handed on: the run ended)."""
        _merge_events(self.folder / "events.csv", [spool.chunks() for spool in self._events])
        self._events = []

    def close(self) -> None:
        for open_file in [*self._files, *self._events]:
            open_file.close()
        self._files = []


def run_cluster_variant(variant: Variant, requests: Sequence[Request],
                        keep_steps: bool = True,
                        spool: ClusterSpool | None = None) -> ClusterResult:
    """Simulate a variant that has `cluster:` (`spool`: stream its records there)."""
    spec = variant.spec
    cluster: ClusterSpec = spec.cluster  # type: ignore[assignment]
    specs = replica_specs(spec)
    # The replicas of one entry share its time model (what it caches, a batch size's layer
    # times, is then priced once, not once a replica: 25 ms of R5's four).
    models = {id(s): time_model_of(s) for s in specs}
    setups = [ReplicaSetup(s.engine.to_config(), models[id(s)]) for s in specs]
    units = {setup.clock.unit for setup in setups}
    if len(units) > 1:
        raise variant.error(("cluster", "replicas"), "every replica's time model must count "
                            "in the same unit (steps or seconds), got " + ", ".join(sorted(units)))
    policies = [policy_of(variant) for _ in specs]
    admission = admission_of(spec)
    pressure = spec.backpressure
    routers = pool_routers(cluster)
    prefill = cluster.num_prefill
    router = _router(variant, *routers[-1], len(setups) - prefill, ROUTER_SEED_TAG)
    pd = None
    if cluster.is_pd:
        transfer = cluster.transfer
        assert transfer is not None
        decider = cluster.pd_decider
        link = Link(transfer.bandwidth_gbps * 1e9 / 8,
                    (transfer.latency_ms + transfer.per_request_ms) / 1000)
        pd = Disaggregation(range(prefill), range(prefill, len(setups)),
                            _router(variant, *routers[0], prefill, PREFILL_ROUTER_SEED_TAG),
                            router, link, kv_bytes_per_token(spec),
                            PdDecider(decider.prompt_over if isinstance(decider, PromptOver)
                                      else 0))
    try:
        # The collector off until the run's engines are gone (run_cluster's own pause ends
        # inside it, while they live: its next pass then walked their objects, ~25k in R5,
        # and kept them a generation longer).
        with collector_off(pass_after=False):
            result = run_cluster(requests, setups, policies, router,
                               signal_delay=cluster.signal_delay,
                               admissions=[admission] * len(setups), slo=slo_of(spec),
                               backpressure=Backpressure(pressure.window, pressure.threshold,
                                                         pressure.release, Action(pressure.act)),
                               keep_steps=keep_steps,
                               imbalance_ttft_ratio=cluster.imbalance_ttft_ratio,
                               imbalance_queue=cluster.imbalance_queue,
                               step_logs=None if spool is None else [
                                   spool.step_log(k, setup.config.num_blocks)
                                   for k, setup in enumerate(setups)],
                               event_sinks=None if spool is None else [
                                   spool.event_sink(k) for k in range(len(setups))],
                               pd=pd)
    except ValueError as exc:  # a user router that returned a bad index
        raise KvschedError(f"{variant.scenario.source}: cluster.router: {exc}") from None
    if spool is not None:
        spool.write_events()
    return result


def write_cluster_records(folder: Path, result: ClusterResult, records: RecordMode,
                          streamed: bool = False) -> None:
    """requests.csv, steps.csv (unless records: summary) and events.csv of a cluster run
    (`streamed`: its steps are in `ClusterSpool` part files in `folder`, its events.csv
    written as it ended)."""
    rows = rows_of(result.requests)  # (a table's rows, not records made of them first)
    if result.phases is None:
        assert isinstance(rows, TableRows)
        # `replica` as one more typed column of the table's (-1: none, an empty cell): the
        # rows are then CSV text made in C, not tuples through the csv module (0.1 s of R5)
        replica = np.array([-1 if k is None else k for k in result.replica_of], dtype=np.int64)
        write_rows(folder / "requests.csv", (*REQUEST_COLUMNS, "replica"),
                   TableRows(rows.table, [("I", replica)]))
    else:
        write_rows(folder / "requests.csv", (*REQUEST_COLUMNS, "replica", *PD_REQUEST_COLUMNS),
                   ((*row, replica, *_phase_row(replica, phases)) for row, replica, phases
                    in zip(rows, result.replica_of, result.phases, strict=True)))
    columns = STEP_COLUMNS if records is RecordMode.FULL else COMPACT_COLUMNS
    if streamed:
        replicas = range(len(result.replicas))
        spool = ClusterSpool(folder, records, len(replicas))
        if records is not RecordMode.SUMMARY:
            _join_parts(folder / "steps.csv", (*columns, "replica"),
                        [spool.steps_part(k) for k in replicas])
        return
    if records is not RecordMode.SUMMARY:
        write_rows(folder / "steps.csv", (*columns, "replica"), _step_rows(result, records))
    write_rows(folder / "events.csv", (*EVENT_COLUMNS, "replica"),
               ((*e, replica) for e, replica in zip(result.events, result.event_replicas,
                                                    strict=True)))


def _phase_row(replica: int | None, phases: Phases | None) -> tuple:
    """A request's PD_REQUEST_COLUMNS."""
    if phases is None:  # kept whole (or never arrived): one replica did everything
        return (replica, replica, None, None, None)
    return (phases.prefill_replica, phases.decode_replica, phases.transfer_start,
            phases.transfer_time, phases.transfer_bytes if phases.transfer_time is not None
            else None)


def _join_parts(path: Path, header: tuple[str, ...], parts: list[Path]) -> None:
    """The header, then each part's rows in turn; the parts removed."""
    with path.open("wb") as out:
        out.write((",".join(header) + "\n").encode())
        for part in parts:
            with part.open("rb") as handle:
                shutil.copyfileobj(handle, out, 1 << 20)
            part.unlink()


def _chunks(path: Path) -> Iterator[list[tuple]]:
    with path.open("rb") as handle:
        while True:
            try:
                yield pickle.load(handle)
            except EOFError:
                return


class _Spool:
    """One replica's spooled events, a chunk at a time, with their merge keys (`time_keys`)."""

    __slots__ = ("chunks", "events", "keys", "top", "finished")

    def __init__(self, chunks: Iterator[list[tuple]]) -> None:
        self.chunks = chunks
        self.events: list[tuple] = []  # read and not yet written
        self.keys = np.zeros(0)
        self.top = -math.inf  # the largest time read so far
        self.finished = False  # every chunk read

    def fill(self) -> None:
        """The next chunk, if every event read is written."""
        while not self.events and not self.finished:
            chunk = next(self.chunks, None)
            if chunk is None:
                self.finished = True
                return
            self.events, self.keys = chunk, time_keys([e[1] for e in chunk], self.top)
            if chunk:
                self.top = float(self.keys[-1])

    def take(self, bound: tuple[float, int] | None, index: int) -> tuple[list[tuple], np.ndarray]:
        """The events (and keys) that merge before `bound`, (key, stream), the least last key
        read of a stream not finished (None: all)."""
        n = len(self.events)
        if bound is not None:  # this stream's ties to the bound's key go first if it is first
            n = int(np.searchsorted(self.keys, bound[0], "right" if index <= bound[1] else "left"))
        events, keys = self.events[:n], self.keys[:n]
        self.events, self.keys = self.events[n:], self.keys[n:]
        return events, keys


def _merge_events(path: Path, streams: list[Iterator[list[tuple]]]) -> None:
    """events.csv from the replicas' spooled events (each replica's chunks, in order),
    merged as `cluster._merged_events` merges them in memory (`merge_by_time`), a chunk of
    each at a time: what can go now is what no unread event can precede (a stream's keys
    only grow). The
    collector is off meanwhile: the chunks of tuples it reads and writes live across a few of
    its passes, which then count them as long-lived and walk everything the run holds (two
    full passes, 0.17 s of R5's 3.2 s). Nor a pass as it ends: the chunks are gone by then,
    and a full pass there walked all the run still holds to free only what the replicas'
    prefix caches left (0.07 s of R5's 2.2 s)."""
    spools = [_Spool(chunks) for chunks in streams]
    writer = RowCsv(path, (*EVENT_COLUMNS, "replica"))
    try:
        with collector_off(pass_after=False):
            while True:
                for spool in spools:
                    spool.fill()
                if not any(spool.events for spool in spools):
                    break
                bound = min(((float(s.keys[-1]), k) for k, s in enumerate(spools)
                             if not s.finished), default=None)
                taken = [spool.take(bound, k) for k, spool in enumerate(spools)]
                order, tags = merge_by_time([keys for _, keys in taken])
                flat = [event for events, _ in taken for event in events]
                rows = [flat[j] for j in order.tolist()]
                writer.columns([*zip(*rows, strict=True), tags.tolist()], len(rows))
    finally:
        writer.close()


def _step_rows(result: ClusterResult, records: RecordMode) -> Iterator[tuple]:
    for index, replica in enumerate(result.replicas):
        log = replica.step_log
        if records is RecordMode.FULL:
            for row in log.rows():
                yield (*row, index)
            continue
        for segment in log.kept or ():
            if isinstance(segment, tuple):
                yield (segment[0], 1, *segment[1:], index)
            else:
                yield (*compact_row(segment, log.num_blocks), index)
