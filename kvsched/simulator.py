"""The simulation loop: arrivals, one scheduled step after another, the clock, the records."""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvsched.admission import AdmissionController, Slo, SloAdmission
from kvsched.backpressure import Action, Backpressure, ThrashMonitor
from kvsched.config import EngineConfig
from kvsched.metrics import summarize
from kvsched.policies import Fcfs
from kvsched.policies.base import Policy
from kvsched.records import RequestRecord, RunResult
from kvsched.request import Request, Status
from kvsched.scheduler import Scheduler, StepPlan
from kvsched.sequence import Seq, SeqState
from kvsched.timing import StepClock, TimeModel


def simulate(requests: Sequence[Request], config: EngineConfig | None = None,
             policy: Policy | None = None, time_model: TimeModel | None = None, *,
             admission: SloAdmission | None = None, slo: Slo | None = None,
             backpressure: Backpressure | None = None,
             record_batches: bool = False) -> RunResult:
    """Run `requests` through the engine until nothing is left to do (or `max_steps`).

    Requests are served in arrival order (simultaneous arrivals in input order); the records
    list them in input order. The same inputs always give the same records.
    `admission` turns requests away at arrival; `slo` only measures (goodput); the thrash
    monitor always runs (`backpressure` sets its window and thresholds, and whether it acts).
    """
    config = config or EngineConfig()
    policy = policy or Fcfs()
    clock = time_model or StepClock()
    if slo is None and admission is not None:
        slo = Slo(ttft=admission.ttft_slo)
    monitor = ThrashMonitor(backpressure or Backpressure())
    action = monitor.config.act
    gate = AdmissionController(admission, clock) if admission else None
    ids = [r.request_id for r in requests]
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"duplicate request_id '{duplicate}'")

    order = sorted(range(len(requests)), key=lambda i: requests[i].arrival_time)
    seqs = [Seq.of(requests[i], k, config.block_size) for k, i in enumerate(order)]
    arrivals = [seq.request.arrival_time for seq in seqs]
    events: list[tuple] = []
    steps: list[tuple] = []
    batches: list[tuple] | None = [] if record_batches else None
    sched = Scheduler(config, policy, events, record_batches)
    pool = sched.pool
    duration_of = clock.duration

    num_arrivals = len(seqs)
    next_arrival = 0
    step = 0
    now = 0.0
    stopped_early = False
    while True:
        # A hair of slack: times summed step by step drift (0.1 * 8 = 0.7999999999999999).
        horizon = now + 1e-9 * (1.0 + now)
        while next_arrival < num_arrivals and arrivals[next_arrival] <= horizon:
            seq = seqs[next_arrival]
            next_arrival += 1
            now = max(now, seq.request.arrival_time)  # absorb the drift, never start early
            if gate is not None and not sched.unschedulable_reason(seq):
                reason = gate.rejects(seq, sched, now)
                if reason:
                    seq.join_step = step
                    sched.reject(seq, step, reason)
                    continue
            sched.add(seq, step)
        plan = sched.schedule(step, now)
        if plan.is_idle and monitor.signal:  # idle: nothing can thrash, stop holding back
            monitor.clear()
            sched.events.append((step, now, "", "backpressure", "off: the engine is idle"))
            sched.admitting, sched.reserving = True, False
            continue
        if plan.is_idle:  # nothing runs, nothing can be admitted: wait for the next arrival
            if next_arrival == num_arrivals:
                break
            if clock.whole_steps:
                step = math.ceil(arrivals[next_arrival])
                now = float(step)
            else:
                now = arrivals[next_arrival]
            continue
        num_decodes = plan.num_decodes + len(plan.swap_ins)
        computed = plan.prefill_tokens + plan.recomputed_tokens
        duration = duration_of(computed, num_decodes, plan.kv_read_tokens,
                               plan.swapped_out_blocks + plan.swapped_in_blocks)
        # Queues and blocks as the batch runs, before postprocess frees the finished.
        num_running = len(sched.running) + len(sched.prefilling)
        num_waiting = len(sched.waiting)
        blocks_free = pool.free
        end = now + duration
        sched.postprocess(plan, end)
        signal = monitor.signal
        moved = (plan.swapped_out_blocks + plan.swapped_in_blocks) * config.block_size
        ratio = monitor.update(plan.recomputed_tokens + moved,
                               plan.num_decodes + len(plan.produced))
        if monitor.signal != signal:
            _backpressure_event(sched, plan, monitor, ratio)
            sched.admitting = not (monitor.signal and action is Action.PAUSE)
            sched.reserving = monitor.signal and action is Action.RESERVE
        if gate is not None:
            gate.observe(now, end, plan.num_admitted)
        steps.append((
            step, now, duration, num_running, num_waiting, len(plan.prefills),
            plan.prefill_tokens, num_decodes, plan.recomputed_tokens, computed + num_decodes,
            pool.num_blocks - blocks_free, blocks_free, len(plan.preempted), plan.num_admitted,
            plan.num_finished, plan.swapped_out_blocks, plan.swapped_in_blocks, ratio,
            int(monitor.signal),
        ))
        if batches is not None:
            _record_batch(batches, plan)
        step += 1
        now = end
        if len(steps) >= config.max_steps:
            stopped_early = True
            break

    if stopped_early:
        sched.close_all_runs()
    leftover = Status.UNFINISHED if stopped_early else Status.STARVED
    if not stopped_early:
        _explain_starvation(sched, step, now)
    records = [_record(seq, leftover, sched) for seq in sorted(seqs, key=lambda s: order[s.index])]
    summary = summarize(records, steps, slo, final_blocks_used=pool.num_blocks - pool.free)
    return RunResult(config, clock.unit, records, steps, events, batches, summary)


def _backpressure_event(sched: Scheduler, plan: StepPlan, monitor: ThrashMonitor,
                        ratio: float) -> None:
    config = monitor.config
    if monitor.signal:
        detail = (f"on: thrash ratio {ratio:.3g} > {config.threshold:g} over {config.window} "
                  f"steps" + {Action.NONE: "", Action.PAUSE: "; admissions paused",
                             Action.RESERVE: "; admitting only what the pool can finish"
                             }[config.act])
    else:
        detail = f"off: thrash ratio {ratio:.3g} < {config.release:g}"
    sched.events.append((plan.step, plan.time, "", "backpressure", detail))


def _record_batch(batches: list[tuple], plan: StepPlan) -> None:
    step, time = plan.step, plan.time
    for seq in plan.decoded or ():
        batches.append((step, time, seq.request.request_id, "decode", 1))
    for seq, tokens in plan.prefills:
        batches.append((step, time, seq.request.request_id, "prefill", tokens))
    for seq in plan.swap_ins:
        batches.append((step, time, seq.request.request_id, "swap_in", 1))


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
