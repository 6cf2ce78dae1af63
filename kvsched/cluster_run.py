"""A variant with `cluster:`: its replicas built from the spec, run, and its records written
with a `replica` column (requests.csv, steps.csv, events.csv: appended after the usual
columns; steps.csv lists replica 0's steps, then replica 1's, ...; events.csv is in time
order, ties in replica order).

As a single run does, a cluster run under `kvsched run` streams its steps and events while
it goes (`ClusterSpool`): each replica's steps into a part file, its events into a spool of
pickled chunks (exact floats, so the merge by time is the in-memory one); writing the
records then joins the parts, so that the bytes are those written from memory.
"""

from __future__ import annotations

import heapq
import pickle
import shutil
from collections.abc import Callable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from kvsched.backpressure import Action, Backpressure
from kvsched.cluster import ClusterResult, ReplicaSetup, run_cluster
from kvsched.csvout import RowCsv, StepCsv, write_rows
from kvsched.errors import KvschedError
from kvsched.records import EVENT_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS
from kvsched.request import Request
from kvsched.routers import load_router, make_router
from kvsched.scenario import Variant
from kvsched.schema import ClusterSpec, RunSpec, replica_engines
from kvsched.steplog import (
    COMPACT_COLUMNS,
    RecordMode,
    StepLog,
    compact_row,
    replica_chunk,
)
from kvsched.variant_parts import admission_of, policy_of, slo_of, time_model_of

ROUTER_SEED_TAG = 12  # the router's generator: the scenario seed, tagged apart from the workload's


def replica_specs(spec: RunSpec) -> list[RunSpec]:
    """One RunSpec per replica: the variant's, with the replica's engine keys and time."""
    cluster = spec.cluster
    assert cluster is not None
    out = []
    for entry, engine in zip(cluster.replicas, replica_engines(spec), strict=True):
        time = entry.time if entry.time is not None else spec.time
        out.extend([spec.model_copy(update={"engine": engine, "time": time})] * entry.count)
    return out


def check_router_loads(variant: Variant) -> None:
    """Import the variant's router class (a user's module) now, or raise its error."""
    cluster = variant.spec.cluster
    assert cluster is not None
    try:
        load_router(cluster.router.name, [variant.scenario.base_dir])
    except ValueError as exc:
        raise variant.error(("cluster", "router"), str(exc)) from None


class ClusterSpool:
    """Where a cluster run streams its records: part files in the variant's folder, one per
    replica (`.steps-K.csv`, rows only, unless records are `summary`; `.events-K.pickle`),
    joined by `write_cluster_records` and removed."""

    def __init__(self, folder: Path, records: RecordMode, num_replicas: int) -> None:
        self.folder = folder
        self.records = records
        self.chunk = replica_chunk(num_replicas)
        self._files: list[Any] = []

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

    def event_sink(self, index: int) -> Callable[[list[tuple]], None]:
        handle = self.events_part(index).open("wb")
        self._files.append(handle)
        return lambda chunk: pickle.dump(chunk, handle, protocol=pickle.HIGHEST_PROTOCOL)

    def close(self) -> None:
        for open_file in self._files:
            open_file.close()
        self._files = []


def run_cluster_variant(variant: Variant, requests: Sequence[Request],
                        keep_steps: bool = True,
                        spool: ClusterSpool | None = None) -> ClusterResult:
    """Simulate a variant that has `cluster:` (`spool`: stream its records there)."""
    spec = variant.spec
    cluster: ClusterSpec = spec.cluster  # type: ignore[assignment]
    specs = replica_specs(spec)
    setups = [ReplicaSetup(s.engine.to_config(), time_model_of(s)) for s in specs]
    units = {setup.clock.unit for setup in setups}
    if len(units) > 1:
        raise variant.error(("cluster", "replicas"), "every replica's time model must count "
                            "in the same unit (steps or seconds), got " + ", ".join(sorted(units)))
    policies = [policy_of(variant) for _ in specs]
    admission = admission_of(spec)
    pressure = spec.backpressure
    rng = np.random.default_rng([spec.seed, ROUTER_SEED_TAG])
    try:
        router = make_router(cluster.router.name, cluster.router.params(), len(setups), rng,
                             [variant.scenario.base_dir])
    except ValueError as exc:
        raise variant.error(("cluster", "router"), str(exc)) from None
    try:
        return run_cluster(requests, setups, policies, router,
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
                               spool.event_sink(k) for k in range(len(setups))])
    except ValueError as exc:  # a user router that returned a bad index
        raise KvschedError(f"{variant.scenario.source}: cluster.router: {exc}") from None


def write_cluster_records(folder: Path, result: ClusterResult, records: RecordMode,
                          streamed: bool = False) -> None:
    """requests.csv, steps.csv (unless records: summary) and events.csv of a cluster run
    (`streamed`: its steps and events are in `ClusterSpool` part files in `folder`)."""
    write_rows(folder / "requests.csv", (*REQUEST_COLUMNS, "replica"),
               ((*r.as_row(), replica) for r, replica in zip(result.requests, result.replica_of,
                                                             strict=True)))
    columns = STEP_COLUMNS if records is RecordMode.FULL else COMPACT_COLUMNS
    if streamed:
        replicas = range(len(result.replicas))
        spool = ClusterSpool(folder, records, len(replicas))
        if records is not RecordMode.SUMMARY:
            _join_parts(folder / "steps.csv", (*columns, "replica"),
                        [spool.steps_part(k) for k in replicas])
        _merge_events(folder / "events.csv", [spool.events_part(k) for k in replicas])
        return
    if records is not RecordMode.SUMMARY:
        write_rows(folder / "steps.csv", (*columns, "replica"), _step_rows(result, records))
    write_rows(folder / "events.csv", (*EVENT_COLUMNS, "replica"),
               ((*e, replica) for e, replica in zip(result.events, result.event_replicas,
                                                    strict=True)))


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


def _tagged(path: Path, index: int) -> Iterator[tuple[float, int, tuple]]:
    for chunk in _chunks(path):
        for event in chunk:
            yield event[1], index, event


def _merge_events(path: Path, parts: list[Path]) -> None:
    """events.csv from the replicas' spooled events, merged as `cluster._merged_events`
    merges them in memory (by time, ties by replica); the spools removed."""
    streams = [_tagged(part, index) for index, part in enumerate(parts)]
    merged = heapq.merge(*streams, key=lambda t: (t[0], t[1]))
    writer = RowCsv(path, (*EVENT_COLUMNS, "replica"))
    try:
        for batch in iter(lambda: list(islice(merged, 1 << 15)), []):
            writer([(*event, index) for _, index, event in batch])
    finally:
        writer.close()
    for part in parts:
        part.unlink()


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
