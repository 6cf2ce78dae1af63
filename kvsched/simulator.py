"""Running requests through one engine: the compiled loop (`kvsched.fastcore`) when it
carries the run, the Python loop (`kvsched.cluster.loop`) otherwise; both hand their events to an
`EventStream` (`kvsched.events`)."""

from __future__ import annotations

from collections.abc import Sequence

from kvsched import fastcore
from kvsched.admission import SloAdmission
from kvsched.backpressure import Backpressure
from kvsched.config import EngineConfig
from kvsched.events import (  # noqa: F401  (DIAGNOSIS_EVENTS: kept here for callers)
    DIAGNOSIS_EVENTS,
    Abort,
    EventSink,
    EventStream,
    Progress,
)
from kvsched.policies.base import Policy
from kvsched.policies.fcfs import Fcfs
from kvsched.records import RunResult
from kvsched.records.metrics import summarize
from kvsched.records.slo import Slo
from kvsched.records.steplog import StepLog, Timeline
from kvsched.records.table import RecordTable
from kvsched.request import Request
from kvsched.request_columns import RequestColumns
from kvsched.timing import StepClock, TimeModel
from kvsched.turns import check_ids, check_turns


def simulate(requests: Sequence[Request], config: EngineConfig | None = None,
             policy: Policy | None = None, time_model: TimeModel | None = None, *,
             admission: SloAdmission | None = None, slo: Slo | None = None,
             backpressure: Backpressure | None = None,
             record_batches: bool = False, step_log: StepLog | None = None,
             event_sink: EventSink | None = None, stretches: bool = True,
             progress: Progress | None = None, abort: Abort | None = None,
             utilisation: bool = True, itl: bool = True) -> RunResult:
    """Run `requests` through the engine until nothing is left to do (or `max_steps`).

    Requests are served in arrival order (simultaneous arrivals in input order); the records
    list them in input order. The same inputs always give the same records.
    `admission` turns requests away at arrival; `slo` only measures (goodput); the thrash
    monitor always runs (`backpressure` sets its window and thresholds, and whether it acts).
    `step_log` receives the step records (by default all are kept: `RunResult.steps`).
    `event_sink`, if given, receives the events in chunks as the run makes them, and
    `RunResult.events` then keeps only those the diagnosis reads (`DIAGNOSIS_EVENTS`).
    `progress(arrived, now)` is called now and then (every few thousand loop turns) with
    the requests arrived so far and the simulated time, for a progress bar.
    `abort(now, live)` is asked as often, with the requests arrived and not yet recorded:
    True stops the run there, as `max_steps` does (the rest count as unfinished); capacity
    probes use it to stop once their SLO is already lost.
    `stretches=False` runs every step through the exact per-step rules, request by
    request, instead of jumping over steady decode stretches and walking only the requests
    that change: the same records, slower (for checking the fast paths).
    `utilisation=False` leaves a hardware time model's `mfu` and `mbu` out (empty columns,
    None in the summary), and `itl=False` the `itl_*` figures (None), for a caller that
    reads none of them (a capacity probe): every other record is the same.
    """
    config = config or EngineConfig()
    policy = policy or Fcfs()
    clock = time_model or StepClock()
    if slo is None and admission is not None:
        slo = Slo(ttft=admission.ttft_slo)
    check_ids(requests)
    check_turns(requests)
    if abort is None and fastcore.carries(requests, config, policy, clock, admission,
                                          record_batches):
        compiled = _simulate_compiled(requests, config, clock, slo,  # type: ignore[arg-type]
                                      step_log, event_sink, stretches, progress, itl)
        if compiled is not None:
            return compiled

    from kvsched.cluster.loop import simulate_python  # (the engine's modules: only when it runs)

    return simulate_python(requests, config, policy, clock, admission=admission, slo=slo,
                           backpressure=backpressure, record_batches=record_batches,
                           step_log=step_log, event_sink=event_sink, stretches=stretches,
                           progress=progress, abort=abort, utilisation=utilisation, itl=itl)


def _simulate_compiled(requests: RequestColumns, config: EngineConfig, clock: TimeModel,
                       slo: Slo | None, step_log: StepLog | None,
                       event_sink: EventSink | None, stretches: bool,
                       progress: Progress | None, itl: bool) -> RunResult | None:
    """`simulate` through the compiled loop (`kvsched.fastcore`); None if it gave up."""
    log = step_log if step_log is not None else StepLog(config.usable_blocks)
    if log.stats.num_steps or log.kept:  # its sums go on from there: the Python loop's
        return None
    records = RecordTable(requests)
    times = requests.arrival_time
    log.stats.timeline = Timeline(float(times.min()), float(times.max()))
    events = EventStream([], event_sink)
    drain = events.drain if event_sink is not None else None
    # A sink that writes CSV lines takes them made; the diagnosis' head-of-line events are
    # kept beside them (backpressure, rejections and starvation never happen in a compiled
    # run).
    text = getattr(event_sink, "text", None)
    out = fastcore.run(requests, config, clock, records, log, events.events, drain,
                       int(min(events._chunk, 2**62)), progress, stretches, itl, text,
                       events.kept)
    if out is None:
        return None
    free, gaps = out
    stats = log.close()
    events.close()
    summary = summarize(records, stats, slo, final_blocks_used=config.usable_blocks - free,
                        itl=gaps)
    return RunResult(config, clock.unit, records, log, events.kept, None, summary)
