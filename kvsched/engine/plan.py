"""One step's decision, as a value: what the rules assembled, before the step's end applies it."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsched.sequence import Seq

Event = tuple[int, float, str, str, str]  # step, time, request_id, event, detail


@dataclass(slots=True)
class StepPlan:
    """One step's decision. `tick` is the decode pass the step runs (0: no decode pass)."""

    step: int
    time: float
    tick: int = 0
    num_decodes: int = 0  # running requests that decoded (swap-ins not included)
    decoded: list[Seq] | None = None  # who decoded, kept only when batches are recorded
    prefills: list[tuple[Seq, int]] = field(default_factory=list)  # seq, chunk tokens
    # (chunk tokens, context tokens already in the cache), as the prefills: a BatchShape's
    prefill_chunks: list[tuple[int, int]] = field(default_factory=list)
    swap_ins: list[Seq] = field(default_factory=list)
    produced: list[Seq] = field(default_factory=list)  # (re)prefills completed, swap-ins
    preempted: list[Seq] = field(default_factory=list)
    num_admitted: int = 0
    num_finished: int = 0
    prefill_tokens: int = 0  # first-time prefill tokens
    recomputed_tokens: int = 0  # prefill tokens recomputed after a preemption
    kv_read_tokens: int = 0  # KV tokens the step's decodes attend over
    swapped_out_blocks: int = 0
    swapped_in_blocks: int = 0

    @property
    def is_idle(self) -> bool:
        return not (self.tick or self.prefills or self.swap_ins or self.preempted)

    @property
    def is_pure_decode(self) -> bool:
        """Only decodes ran and nobody finished: the next steps may repeat it (a stretch)."""
        return not (self.prefills or self.swap_ins or self.preempted or self.num_admitted
                    or self.num_finished) and self.num_decodes > 0
