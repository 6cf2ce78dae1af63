"""vLLM 0.8.5 V0's chunked scheduler (`_schedule_chunked_prefill`, conformance/RULES.md V0-6):
the lesson's order, but while prefills are under way one running queue takes decodes and
chunks in its order (victims from its tail), and the queue is rebuilt after the step; the
partial-prefill limit (`kvsched.partial_prefills`) sizes each step's chunks."""

from __future__ import annotations

from collections import deque
from itertools import chain

from kvsched.engine.mechanism import admission_key, by_admission
from kvsched.engine.plan import StepPlan
from kvsched.engine.rules.lesson import LessonScheduler
from kvsched.sequence import Seq, SeqState

RUNNING = SeqState.RUNNING
PREFILLING = SeqState.PREFILLING


class VllmV0ChunkedScheduler(LessonScheduler):
    """Decode first, with V0's running queue while chunks are under way."""

    def _assemble(self, plan: StepPlan) -> None:
        if self.partial is not None:
            self.partial.begin(self.prefilling.values(), self.waiting)
        if not (self._queue_tail and self.prefilling):
            LessonScheduler._assemble(self, plan)
            return
        budget, walked = self._v0_queue_loop(plan, self._budget)
        admitted = len(plan.prefills)
        self._admit_after_running(plan, budget)
        self._v0_requeue(plan, *walked, admitted)

    def _v0_queue_loop(self, plan: StepPlan, budget: int
                       ) -> tuple[int, tuple[list[Seq], list[Seq], list[Seq]]]:
        """vLLM V0's chunked running loop (RULES.md V0-6) while prefills are under way: one
        queue, decodes and chunks in its order; a request that gets no tokens ends the loop
        (those not reached lead the next queue); a request that cannot append (V0-2)
        preempts the queue's tail, or itself when it is the last. Returns the budget left and
        (not reached, decoded, chunked) in queue order."""
        pool = self.pool
        block_size = self._block_size
        tick = self._open_pass(plan)
        queue = deque(sorted(chain(self.running.values(), self.prefilling.values()),
                             key=admission_key))
        cap = self._chunk_cap if self.partial is None else self.partial.slot
        decoded: list[Seq] = []
        chunks: dict[Seq, int] = {}
        while queue:
            seq = queue[0]
            decoding = seq.state is RUNNING
            if self._v0_round:  # whole blocks of the budget and slot, decodes too
                slot = self._budget if self.partial is None else self.partial.slot
                n = min(1 if decoding else seq.prefill_left,
                        min(budget, slot) // block_size * block_size)
            else:
                n = min(1 if decoding else min(seq.prefill_left, cap), budget)
            if n < 1:
                break
            queue.popleft()
            grows = decoding and seq.prompt_len + seq.base + tick - 1 > seq.blocks * block_size
            touched = 1 if decoding or (seq.prompt_len + seq.generated) % block_size else 0
            victim = None
            while touched > pool.free and victim is not seq:
                victim = queue.pop() if queue else seq
                self._preempt(victim, plan, cause=seq)
            if victim is seq:
                break  # nothing was left behind it
            if decoding:
                if grows:
                    self._grow(seq, 1)
                self._decoded(seq, tick, grows, decoded)
            else:
                chunks[seq] = n
            budget -= n
        self._end_pass(plan, tick, decoded, chunks)
        return budget, (list(queue), decoded, list(chunks))

    def _v0_requeue(self, plan: StepPlan, left: list[Seq], decoded: list[Seq],
                    chunked: list[Seq], admitted: int) -> None:
        """The running queue after a V0 chunked step (S:1387-1402): those the loop did not
        reach, the swap-ins, the decodes, the chunks that completed a prompt, those that did
        not, then the new prefills."""
        swapped = plan.swap_ins
        swapped_prefills = [s for s, _ in plan.prefills[admitted:] if s in self._swapped_in]
        done = [s for s in chunked if s.state is RUNNING]
        going = [s for s in chunked if s.state is PREFILLING]
        seen = {id(s) for s in chain(left, swapped, swapped_prefills, decoded, done, going)}
        new = [s for s, _ in plan.prefills[admitted:] if id(s) not in seen]
        for seq in chain(left, swapped, swapped_prefills, decoded, done, going, new):
            if seq.state is RUNNING or seq.state is PREFILLING:
                self._admissions += 1
                seq.admit_seq = self._admissions
        self.running = by_admission(self.running)
        self.prefilling = by_admission(self.prefilling)
