"""vLLM 0.8.5 V0's default scheduler (`Scheduler._schedule_default`, conformance/RULES.md V0):
prefill first, a step that prefills runs no decode (SGLang's step order too: its preset adds
the future-token gate, `kvsched.engine.future_tokens`); with `policy: priority`, V0's
priority preemption in steps without a prefill."""

from __future__ import annotations

from kvsched.blocks import blocks_for
from kvsched.engine import future_tokens, head_of_line
from kvsched.engine.mechanism import Scheduler
from kvsched.engine.plan import StepPlan
from kvsched.sequence import Seq


class VllmV0Scheduler(Scheduler):
    """Prefill first: chunks under way, admissions; a decode pass only if nothing prefilled."""

    def _assemble(self, plan: StepPlan) -> None:
        budget = self._budget
        budget = self._continue_prefills(plan, budget)
        budget = self._admit(plan, budget, allow_prefill=True, allow_swap=False)
        head_of_line.track(self, plan)
        if plan.prefills:
            return
        if self._v0_priority:
            self._v0_priority_preemption(plan)
        admitted_victims = len(plan.preempted)  # by priority preemption, not retraction
        if self.reservation is not None:  # SGLang's decode pass has no token budget
            budget = max(budget, len(self.running))
        budget = self._decode(plan, budget)
        if self.reservation is not None and plan.tick:
            future_tokens.after_decode(self, plan, len(plan.preempted) > admitted_victims)
        if len(plan.preempted) == admitted_victims or self._admit_after_preempt:
            self._admit(plan, budget, allow_prefill=False, allow_swap=True)

    def _v0_priority_preemption(self, plan: StepPlan) -> None:
        """vLLM 0.8.5 `_schedule_priority_preemption` (RULES.md V0-5), in a step that
        admitted no prefill: sort the running requests by (priority, arrival); while the
        worst of them is worse than the waiting head and the head could not be admitted
        now, preempt that worst one (recompute, to the waiting front); then sort the
        waiting queue (swapped requests aside) by (priority, arrival)."""
        def key(seq: Seq) -> tuple[int, float]:
            return seq.request.priority, seq.request.arrival_time

        running = sorted(self.running.values(), key=key)
        for seq in running:  # the running queue's order is the victims' order (tail first)
            self._admissions += 1
            seq.admit_seq = self._admissions
        self.running = {seq.index: seq for seq in running}
        waiting = self.waiting
        head = waiting.first_unswapped()
        if head is not None:
            tokens = head.prompt_len + head.generated
            need = blocks_for(tokens, self._block_size)
            uncached = tokens  # what it would compute, with prefix caching its count's rest
            prefix = self.prefix
            if prefix is not None and prefix.v0:
                counted = self.v0_counted(head, prefix.computed_count(
                    head, prefix.match(head, False, True)))
                uncached = tokens - counted if counted < tokens else 1
            self.tick += 1  # _preempt counts a decoding victim as at the start of a pass
            while running and key(running[-1]) > key(head):
                if (len(self.running) < self._max_num_seqs
                        and uncached <= self._budget
                        and self.pool.can_admit(need)):
                    break
                self._preempt(running.pop(), plan, cause=head)
            self.tick -= 1
        waiting.sort_unswapped(key)
