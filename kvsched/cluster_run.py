"""A variant with `cluster:`: its replicas built from the spec, run, and its records written
with a `replica` column (requests.csv, steps.csv, events.csv: appended after the usual
columns; steps.csv lists replica 0's steps, then replica 1's, ...)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from kvsched.backpressure import Action, Backpressure
from kvsched.cluster import ClusterResult, ReplicaSetup, run_cluster
from kvsched.csvout import write_rows
from kvsched.errors import KvschedError
from kvsched.records import EVENT_COLUMNS, REQUEST_COLUMNS, STEP_COLUMNS
from kvsched.request import Request
from kvsched.routers import load_router, make_router
from kvsched.scenario import Variant
from kvsched.schema import ClusterSpec, EngineSpec, RunSpec
from kvsched.steplog import COMPACT_COLUMNS, RecordMode, compact_row

ROUTER_SEED_TAG = 12  # the router's generator: the scenario seed, tagged apart from the workload's


def replica_specs(spec: RunSpec) -> list[RunSpec]:
    """One RunSpec per replica: the variant's, with the replica's engine keys and time."""
    cluster = spec.cluster
    assert cluster is not None
    out = []
    for entry in cluster.replicas:
        engine = spec.engine
        if entry.engine is not None:
            given = {key: getattr(entry.engine, key) for key in entry.engine.model_fields_set}
            engine = EngineSpec.model_validate({**spec.engine.model_dump(), **given})
        time = entry.time if entry.time is not None else spec.time
        out.extend([spec.model_copy(update={"engine": engine, "time": time})] * entry.count)
    return out


def check_router_loads(variant: Variant) -> None:
    """Import the variant's router class (a user's module) now, or raise its error."""
    cluster = variant.spec.cluster
    assert cluster is not None
    try:
        load_router(cluster.router.name)
    except ValueError as exc:
        raise variant.error(("cluster", "router"), str(exc)) from None


def run_cluster_variant(variant: Variant, requests: list[Request],
                        keep_steps: bool = True) -> ClusterResult:
    """Simulate a variant that has `cluster:`."""
    from kvsched.runner import admission_of, policy_of, slo_of, time_model_of

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
        router = make_router(cluster.router.name, cluster.router.params(), len(setups), rng)
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
                           imbalance_queue=cluster.imbalance_queue)
    except ValueError as exc:  # a user router that returned a bad index
        raise KvschedError(f"{variant.scenario.source}: cluster.router: {exc}") from None


def write_cluster_records(folder: Path, result: ClusterResult, records: RecordMode) -> None:
    """requests.csv, steps.csv (unless records: summary) and events.csv of a cluster run."""
    write_rows(folder / "requests.csv", (*REQUEST_COLUMNS, "replica"),
               ((*r.as_row(), replica) for r, replica in zip(result.requests, result.replica_of,
                                                             strict=True)))
    if records is not RecordMode.SUMMARY:
        columns = STEP_COLUMNS if records is RecordMode.FULL else COMPACT_COLUMNS
        write_rows(folder / "steps.csv", (*columns, "replica"), _step_rows(result, records))
    write_rows(folder / "events.csv", (*EVENT_COLUMNS, "replica"),
               ((*e, replica) for e, replica in zip(result.events, result.event_replicas,
                                                    strict=True)))


def _step_rows(result: ClusterResult, records: RecordMode) -> Iterator[tuple]:
    for index, replica in enumerate(result.replicas):
        log = replica.step_log
        if records is RecordMode.FULL:
            for row in log.rows():
                yield (*row, index)
            continue
        for segment in log.kept or ():
            if type(segment) is tuple:
                yield (segment[0], 1, *segment[1:], index)
            else:
                yield (*compact_row(segment, log.num_blocks), index)
