"""One replica: its scheduler, time model, thrash monitor and admission gate.

The loop (`kvsched.cluster.loop.run_loop`, or `kvsched.cluster.replicas` for several) owns the
clock and the arrivals; an `Engine` only answers "run your next step starting at `now`"
(`step`) and "run, in one move, the pure-decode steps that would follow" (`stretch`).
"""

from __future__ import annotations

from collections.abc import Callable

from kvsched.admission import AdmissionController, SloAdmission
from kvsched.backpressure import Action, Backpressure, ThrashMonitor
from kvsched.config import EngineConfig, StepOrder
from kvsched.engine import arrivals
from kvsched.engine.plan import StepPlan
from kvsched.engine.rules import scheduler_class
from kvsched.engine.stretch import decode_stretch
from kvsched.engine.view import EngineView
from kvsched.histogram import GapHistogram, NoGaps
from kvsched.kinds import EventKind
from kvsched.policies.base import Policy
from kvsched.prefix import Prefix
from kvsched.records import StepOutcome
from kvsched.records.steplog import Stretch
from kvsched.sequence import Seq
from kvsched.timing import TimeModel, constant_duration, stretch_pricer

_outcome = tuple.__new__


class Engine:
    """A simulated engine replica. `step` and `stretch` return what the recorder keeps."""

    def __init__(self, config: EngineConfig, policy: Policy, clock: TimeModel,
                 admission: SloAdmission | None = None,
                 backpressure: Backpressure | None = None,
                 record_batches: bool = False, events: list[tuple] | None = None,
                 stretches: bool = True, utilisation: bool = True, itl: bool = True) -> None:
        self.config = config
        self.stretches = stretches  # False: every step on its own (the exact path, for checks)
        self.clock = clock
        # Time models that price a step from its real batch (each prefill chunk with its
        # cached context) take a BatchShape, or its fields (`step_duration`: the roofline,
        # no shape made a step); the others keep the four-integer `duration`.
        self._step_duration = getattr(clock, "step_duration", None)
        self._duration_shape = getattr(clock, "duration_shape", None)
        self._shape: type | None = None
        if self._duration_shape is not None:  # (hardware models only: their module)
            from kvsched.timing.roofline import BatchShape

            self._shape = BatchShape
        # The roofline also gives each step's MFU and memory-bandwidth utilisation.
        # `utilisation=False` skips them (a third of a roofline run's cost) for a caller that
        # reads no mfu or mbu: a capacity probe.
        has_utilisation = utilisation and self._step_duration is not None and hasattr(
            clock, "stretch_utilisation")
        self._utilisation = (getattr(clock, "step_utilisation", None) if has_utilisation
                             else None)
        self.sched = scheduler_class(config)(config, policy, events, record_batches)
        self.sched.fast_loops = stretches
        if not itl:  # nobody reads the itl_* figures: count no gaps
            self.sched.gaps.itl = NoGaps()
        self.events = self.sched.events
        self.monitor = ThrashMonitor(backpressure or Backpressure())
        self.gate = (AdmissionController(admission, clock, config.max_num_batched_tokens)
                     if admission else None)
        self.record_batches = record_batches
        self.batches: list[tuple] | None = [] if record_batches else None
        # vLLM V1 lists a step's batch in running-list order, then admissions: by admission
        self._batch_in_admission_order = config.step_order is StepOrder.RUNNING_LOOP
        self._steady = False  # the last step was pure decode and nothing arrived since
        step_time = constant_duration(clock)  # (every step alike: no model to ask)
        self._constant_time = step_time is not None
        self._step_time = step_time or 0.0
        self._block_size = config.block_size
        self._pricer = stretch_pricer(clock)  # a decode stretch's step durations
        # A host tier's loads overlap the forward of the step that admits them, layer by layer
        # (SGLang's HiCache loads layer N+1 while computing layer N): the step lasts the
        # longer of the two. Blocks x bytes over the host link; a block's bytes are given, or
        # the roofline's.
        self._load_per_block = 0.0
        if config.kv_offload_blocks:
            block_bytes = config.kv_offload_block_bytes or getattr(clock, "block_bytes", None)
            if not block_bytes:
                raise ValueError("kv_offload: block_bytes is needed unless the time model is "
                                 "a roofline (whose model gives it)")
            self._load_per_block = block_bytes * 8 / (config.kv_offload_gbps * 1e9)

    # -- what the world outside the engine reads of it ----------------------------------------

    def view(self, index: int = 0) -> EngineView:
        """This replica's counts now, as its gate, its router and the loop read them."""
        sched = self.sched
        return EngineView(index, self.config.num_blocks, sched.waiting.size,
                          len(sched.running) + len(sched.prefilling), sched.pool.free,
                          num_decoding=len(sched.running),
                          queued_tokens=sched.waiting.queued_tokens, kv_tokens=sched.kv_tokens)

    def cached_prefix_len(self, prefix: Prefix | None, prompt_len: int) -> int:
        """Tokens of a prompt of `prefix`'s tokens the prefix cache holds now (whole blocks);
        0 without prefix caching or prefix identity."""
        tracker = self.sched.prefix
        if tracker is None or prefix is None:
            return 0
        return tracker.cache.match(prefix, prompt_len)

    @property
    def final_blocks_used(self) -> int:
        pool = self.sched.pool
        return pool.num_blocks - pool.free

    def host_counts(self) -> tuple[int, int, int, int, int] | None:
        """The host tier's (tokens loaded at first admissions, at all admissions, blocks
        stored, dropped, loaded); None without one."""
        prefix = self.sched.prefix
        if prefix is None or prefix.host is None:
            return None
        host = prefix.host
        return (prefix.host_first_tokens, prefix.host_tokens, host.stored, host.dropped,
                host.loaded)

    @property
    def itl(self) -> GapHistogram | None:
        """The inter-token gaps counted so far (None when the engine counts none)."""
        itl = self.sched.gaps.itl
        return None if isinstance(itl, NoGaps) else itl

    def on_done(self, callback: Callable[[Seq], None] | None) -> None:
        """Call `callback` with each request as it finishes or is turned away."""
        self.sched.on_done = callback

    def generated(self, seq: Seq) -> int:
        """Tokens `seq` has produced so far."""
        return self.sched.generated(seq)

    def held(self) -> list[Seq]:
        """The requests in the engine: queued, decoding, prefilling."""
        sched = self.sched
        return [*sched.waiting, *sched.running.values(), *sched.prefilling.values()]

    def close_all_runs(self) -> None:
        """The run stops early: settle what the decode clock keeps lazily."""
        self.sched.close_all_runs()

    def explain_starvation(self, step: int, now: float) -> None:
        """The run is over: name, for every request still waiting, why it never ran."""
        arrivals.explain_starvation(self.sched, step, now)

    # -- arrivals -------------------------------------------------------------------------

    def arrive(self, seq: Seq, step: int, now: float) -> None:
        """A request reaches this replica: through the admission gate into the queue."""
        self._steady = False
        sched = self.sched
        if self.gate is not None and not arrivals.unschedulable_reason(sched, seq):
            reason = self.gate.rejects(seq, self.view(), now)
            if reason:
                seq.join_step = step
                sched.reject(seq, step, reason)
                return
        arrivals.arrive(sched, seq, step)

    # -- steps ----------------------------------------------------------------------------

    def step(self, step: int, now: float) -> StepOutcome | None:
        """Run step `step` from `now`: what it did, or None when nothing can run."""
        sched = self.sched
        monitor = self.monitor
        plan = sched.schedule(step, now)
        idle = plan.is_idle
        if idle and monitor.signal:  # idle: nothing can thrash, stop holding back
            monitor.clear()
            self.events.append((step, now, "", EventKind.BACKPRESSURE, "off: the engine is idle"))
            sched.admitting, sched.reserving = True, False
            plan = sched.schedule(step, now)
            idle = plan.is_idle
        if idle:
            self._steady = False
            return None
        num_decodes = plan.num_decodes + len(plan.swap_ins)
        computed = plan.prefill_tokens + plan.recomputed_tokens
        swapped = plan.swapped_out_blocks + plan.swapped_in_blocks
        mfu = mbu = None
        if self._constant_time:
            duration = self._step_time
        elif self._step_duration is not None:
            chunks = plan.prefill_chunks
            duration = self._step_duration(chunks, num_decodes, plan.kv_read_tokens, swapped)
            if self._utilisation is not None:
                mfu, mbu = self._utilisation(chunks, num_decodes, plan.kv_read_tokens, duration)
        elif self._duration_shape is None:
            duration = self.clock.duration(computed, num_decodes, plan.kv_read_tokens, swapped)
        else:
            assert self._shape is not None
            shape = self._shape(tuple(plan.prefill_chunks), num_decodes, plan.kv_read_tokens,
                                swapped)
            duration = self._duration_shape(shape)
        if plan.loaded_blocks:  # the host tier's loads, overlapped with the forward
            load = plan.loaded_blocks * self._load_per_block
            if load > duration:
                duration = load
        # Queues and blocks as the batch runs, before postprocess frees the finished.
        num_running = len(sched.running) + len(sched.prefilling)
        num_waiting = sched.waiting.size
        pool = sched.pool
        blocks_free = pool.free
        end = now + duration
        sched.postprocess(plan, end)
        signal = monitor.signal
        ratio = monitor.update(plan.recomputed_tokens + swapped * self._block_size,
                               plan.num_decodes + len(plan.produced))
        changed = monitor.signal != signal
        if changed:  # admissions open or close from the next step: not a steady state
            self._backpressure_changed(plan, ratio)
        if self.gate is not None:
            self.gate.observe(now, end, plan.num_admitted)
        if self.batches is not None:
            _record_batch(self.batches, plan, self._batch_in_admission_order)
        cached = evicted = 0
        prefix = sched.prefix
        if prefix is not None:
            cached, evicted = prefix.blocks_cached(), prefix.take_evicted()
        self._steady = self.stretches and not changed and (
            plan.is_pure_decode and plan.num_decodes == len(sched.running) or self._settled())
        return _outcome(StepOutcome, (  # (tuple.__new__: StepOutcome's own __new__ is Python)
            step, now, duration, num_running, num_waiting, len(plan.prefills),
            plan.prefill_tokens, num_decodes, plan.recomputed_tokens, computed + num_decodes,
            pool.num_blocks - blocks_free, blocks_free, len(plan.preempted), plan.num_admitted,
            plan.num_finished, plan.swapped_out_blocks, plan.swapped_in_blocks, ratio,
            int(monitor.signal), mfu, mbu, cached, evicted))

    def stretch(self, step: int, now: float, next_arrival: float,
                max_steps: int) -> Stretch | None:
        """The steps from `step` that repeat the pure-decode step just run, in one move;
        None when the next step must run on its own. Identical records either way."""
        if not self._steady or not self.monitor.is_quiet:
            return None
        stretch = decode_stretch(self.sched, step, now,
                                 self._step_time if self._constant_time else None,
                                 self._pricer, next_arrival, max_steps)
        if stretch is None:
            return None
        if self._utilisation is not None:
            stretch.mfu, stretch.mbu = self.clock.stretch_utilisation(  # type: ignore[attr-defined]
                stretch.num_decodes, stretch.kv_first, stretch.durations)
        self.monitor.skip(stretch.num_steps, stretch.num_decodes)
        if self.gate is not None:
            self.gate.observe_quiet(stretch.starts, stretch.durations)
        if stretch.num_finished:
            self._steady = self._settled()
        return stretch

    def _settled(self) -> bool:
        """Nothing waits, nothing is half prefilled, no head-of-line state to release: the
        next step can only decode what runs (no need to watch one step first)."""
        sched = self.sched
        return not sched.waiting.size and not sched.prefilling and sched.hol_head is None

    def _backpressure_changed(self, plan: StepPlan, ratio: float) -> None:
        monitor, sched = self.monitor, self.sched
        config = monitor.config
        if monitor.signal:
            detail = (f"on: thrash ratio {ratio:.3g} > {config.threshold:g} over "
                      f"{config.window} steps" + {
                          Action.NONE: "", Action.PAUSE: "; admissions paused",
                          Action.RESERVE: "; admitting only what the pool can finish"
                      }[config.act])
        else:
            detail = f"off: thrash ratio {ratio:.3g} < {config.release:g}"
        self.events.append((plan.step, plan.time, "", EventKind.BACKPRESSURE, detail))
        action = config.act
        sched.admitting = not (monitor.signal and action is Action.PAUSE)
        sched.reserving = monitor.signal and action is Action.RESERVE


def _record_batch(batches: list[tuple], plan: StepPlan, in_admission_order: bool) -> None:
    step, time = plan.step, plan.time
    if in_admission_order:
        rows = [(seq, "decode", 1) for seq in plan.decoded or ()]
        rows += [(seq, "prefill", tokens) for seq, tokens in plan.prefills]
        rows.sort(key=lambda row: row[0].admit_seq)
        batches.extend((step, time, seq.request.request_id, kind, tokens)
                       for seq, kind, tokens in rows)
        return
    for seq in plan.decoded or ():
        batches.append((step, time, seq.request.request_id, "decode", 1))
    for seq, tokens in plan.prefills:
        batches.append((step, time, seq.request.request_id, "prefill", tokens))
    for seq in plan.swap_ins:
        batches.append((step, time, seq.request.request_id, "swap_in", 1))
