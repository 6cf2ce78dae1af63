"""The lesson's engine: running decodes first (each a token of the budget), then the chunks of
prefills under way, then admissions from the waiting head (MISSION.md's two queues; vLLM V0's
chunked scheduler is this order too, `kvsched.engine.rules.vllm_v0_chunked`)."""

from __future__ import annotations

from kvsched.engine import future_tokens, head_of_line
from kvsched.engine.mechanism import Scheduler
from kvsched.engine.plan import StepPlan


class LessonScheduler(Scheduler):
    """Decode first: the decode pass (in bulk when it fits), the chunks under way, admissions."""

    def _assemble(self, plan: StepPlan) -> None:
        budget = self._decode(plan, self._budget)
        if self.reservation is not None and plan.tick:
            future_tokens.after_decode(self, plan, bool(plan.preempted))
        if self.prefilling:
            budget = self._continue_prefills(plan, budget)
        self._admit_after_running(plan, budget)

    def _admit_after_running(self, plan: StepPlan, budget: int) -> None:
        """Admissions with the budget the running requests left (none after a preemption
        where the rules say so)."""
        if not plan.preempted or self._admit_after_preempt:
            allow_swap = not plan.preempted or self._swap_in_after_preempt
            self._admit(plan, budget, True, allow_swap)
            if self._stopped_at is not None or self._hol_head is not None:
                head_of_line.track(self, plan)  # (else no head-of-line state to change)
