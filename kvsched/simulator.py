"""The simulation loop: arrivals, the clock, one engine's steps and stretches, the records."""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvsched.admission import Slo, SloAdmission
from kvsched.backpressure import Backpressure
from kvsched.config import EngineConfig
from kvsched.engine import Engine
from kvsched.metrics import summarize
from kvsched.policies import Fcfs
from kvsched.policies.base import Policy
from kvsched.records import RequestRecord, RunResult
from kvsched.request import Request, Status
from kvsched.scheduler import Scheduler
from kvsched.sequence import Seq, SeqState
from kvsched.steplog import StepLog
from kvsched.timing import StepClock, TimeModel


def simulate(requests: Sequence[Request], config: EngineConfig | None = None,
             policy: Policy | None = None, time_model: TimeModel | None = None, *,
             admission: SloAdmission | None = None, slo: Slo | None = None,
             backpressure: Backpressure | None = None,
             record_batches: bool = False, step_log: StepLog | None = None,
             stretches: bool = True) -> RunResult:
    """Run `requests` through the engine until nothing is left to do (or `max_steps`).

    Requests are served in arrival order (simultaneous arrivals in input order); the records
    list them in input order. The same inputs always give the same records.
    `admission` turns requests away at arrival; `slo` only measures (goodput); the thrash
    monitor always runs (`backpressure` sets its window and thresholds, and whether it acts).
    `step_log` receives the step records (by default all are kept: `RunResult.steps`).
    `stretches=False` runs every step through the exact per-step rules instead of jumping
    over steady decode stretches: the same records, slower (for checking the fast path).
    """
    config = config or EngineConfig()
    policy = policy or Fcfs()
    clock = time_model or StepClock()
    if slo is None and admission is not None:
        slo = Slo(ttft=admission.ttft_slo)
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        duplicate = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise ValueError(f"duplicate request_id '{duplicate}'")

    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_time)
    seqs = [Seq.of(requests[i], k, config.block_size) for k, i in enumerate(order)]
    engine = Engine(config, policy, clock, admission, backpressure, record_batches,
                    stretches=stretches)
    log = step_log if step_log is not None else StepLog(config.usable_blocks)
    step, now, stopped_early = run_loop(engine, seqs, log, config.max_steps,
                                        clock.whole_steps)
    stats = log.close()
    sched = engine.sched
    if stopped_early:
        sched.close_all_runs()
    leftover = Status.UNFINISHED if stopped_early else Status.STARVED
    if not stopped_early:
        _explain_starvation(sched, step, now)
    position = [0] * len(seqs)
    for seq in seqs:
        position[order[seq.index]] = seq.index
    records = [_record(seqs[k], leftover, sched) for k in position]
    pool = sched.pool
    summary = summarize(records, stats, slo, final_blocks_used=pool.num_blocks - pool.free)
    return RunResult(config, clock.unit, records, log, engine.events, engine.batches, summary)


def run_loop(engine: Engine, seqs: list[Seq], log: StepLog, max_steps: int,
             whole_steps: bool) -> tuple[int, float, bool]:
    """Feed `seqs` (in arrival order) to `engine` on one clock until nothing is left to do.

    Returns the next step number, the time, and whether `max_steps` stopped the run."""
    arrivals = [seq.request.arrival_time for seq in seqs]
    num_arrivals = len(seqs)
    next_arrival = 0
    step = 0
    executed = 0  # steps run (step numbers also jump over idle time on the step clock)
    now = 0.0
    while True:
        # A hair of slack: times summed step by step drift (0.1 * 8 = 0.7999999999999999).
        horizon = now + 1e-9 * (1.0 + now)
        while next_arrival < num_arrivals and arrivals[next_arrival] <= horizon:
            seq = seqs[next_arrival]
            next_arrival += 1
            now = max(now, seq.request.arrival_time)  # absorb the drift, never start early
            engine.arrive(seq, step, now)
        upcoming = arrivals[next_arrival] if next_arrival < num_arrivals else math.inf
        stretch = engine.stretch(step, now, upcoming, max_steps - executed)
        if stretch is not None:
            log.stretch(stretch)
            step += stretch.num_steps
            executed += stretch.num_steps
            now = stretch.end
        else:
            row = engine.step(step, now)
            if row is None:  # nothing runs, nothing can be admitted: wait for the next arrival
                if next_arrival == num_arrivals:
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
            now = row[1] + row[2]
        if executed >= max_steps:
            return step, now, True


def _explain_starvation(sched: Scheduler, step: int, now: float) -> None:
    """Name, for every request still waiting at the end, why it never ran."""
    queued = list(sched.waiting)
    head = queued[0] if queued else None
    budget = sched.config.max_num_batched_tokens
    for seq in queued:
        if seq.unschedulable:
            reason = seq.unschedulable
        elif seq.state is SeqState.PREEMPTED and not sched.config.chunked_prefill \
                and seq.prompt_len + seq.generated > budget:
            reason = (f"recompute of {seq.prompt_len + seq.generated} tokens after preemption "
                      f"> max_num_batched_tokens {budget}")
        elif head is not None and seq is not head:
            reason = f"queued behind {head.request.request_id}, which can never run"
        else:
            reason = "never admitted"
        seq.end_reason = reason
        sched.events.append((step, now, seq.request.request_id, "starve", reason))


def _record(seq: Seq, leftover: Status, sched: Scheduler) -> RequestRecord:
    request = seq.request
    arrival = request.arrival_time
    if seq.state is SeqState.FINISHED:
        status = Status.FINISHED
    elif seq.state is SeqState.REJECTED:
        status = Status.REJECTED
    else:
        status = leftover

    def since_arrival(t: float | None) -> float | None:
        return None if t is None else t - arrival

    ttft_steps = (None if seq.first_token_step is None
                  else seq.first_token_step - seq.join_step + 1)
    return RequestRecord(
        request_id=request.request_id,
        arrival_time=arrival,
        prompt_len=request.prompt_len,
        output_len=request.output_len,
        priority=request.priority,
        class_name=request.class_name,
        status=status.value,
        first_scheduled_time=seq.first_scheduled_time,
        first_token_time=seq.first_token_time,
        finish_time=seq.finish_time,
        ttft=since_arrival(seq.first_token_time),
        ttft_steps=ttft_steps,
        e2e_latency=since_arrival(seq.finish_time),
        queue_time=since_arrival(seq.first_scheduled_time),
        num_preemptions=seq.num_preemptions,
        num_recomputed_tokens=seq.num_recomputed_tokens,
        num_swapped_blocks=seq.num_swapped_blocks,
        max_token_gap=seq.max_token_gap,
        generated_tokens=sched.generated(seq),
        reason=seq.end_reason,
    )
