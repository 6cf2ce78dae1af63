"""vLLM V0's limit on concurrent partial prefills (vLLM 0.8.5 `PartialPrefillMetadata`).

With chunked prefill and `max_num_partial_prefills > 1`, each step counts the prefills
under way and those the waiting queue could start (in queue order, skipping long ones
beyond `max_long_partial_prefills`), up to `max_num_partial_prefills`; every prefill chunk
of the step is then at most `max_num_batched_tokens // that count`. A waiting request with
more than `long_prefill_token_threshold` tokens to compute is *long*: while
`max_long_partial_prefills` long ones are under way or admitted in the step, a long head is
set aside for the step and the shorter requests behind it are tried, so short prompts pass
long ones. The threshold only classifies here (V0 does not cap chunks with it); it
defaults to 4% of `max_model_len`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kvsched.sequence import Seq, SeqState

if TYPE_CHECKING:
    from kvsched.config import EngineConfig


class PartialPrefills:
    """One step's partial-prefill bookkeeping; `begin` starts each step."""

    __slots__ = ("max_num", "max_long", "threshold", "budget", "slot", "long_prefills")

    def __init__(self, max_num: int, max_long: int, threshold: int, budget: int) -> None:
        self.max_num = max_num
        self.max_long = max_long
        self.threshold = threshold
        self.budget = budget
        self.slot = budget  # most tokens one prefill chunk may take this step
        self.long_prefills = 0

    def begin(self, prefilling: Iterable[Seq], waiting: Iterable[Seq]) -> None:
        """`from_queues`: the prefills under way and those the queue could start."""
        threshold, max_num, max_long = self.threshold, self.max_num, self.max_long
        prefills = long_prefills = 0
        for seq in prefilling:
            prefills += 1
            if seq.prefill_left > threshold:
                long_prefills += 1
        waiting_long = 0
        for seq in waiting:
            if seq.state is SeqState.SWAPPED:
                continue  # V0's swapped queue is not the waiting queue
            if prefills >= max_num:
                break
            if seq.prompt_len + seq.generated > threshold:
                if long_prefills + waiting_long >= max_long:
                    continue
                waiting_long += 1
            prefills += 1
        schedulable = min(prefills, max_num)
        self.slot = self.budget // schedulable if schedulable else self.budget
        self.long_prefills = long_prefills

    def can_schedule(self, seq: Seq) -> bool:
        """Whether the head may start now: not a long one beyond the long limit."""
        return not (seq.prompt_len + seq.generated > self.threshold
                    and self.long_prefills >= self.max_long)

    def admitted(self, seq: Seq) -> None:
        if seq.prompt_len + seq.generated > self.threshold:
            self.long_prefills += 1


def make_partial_prefills(config: EngineConfig) -> PartialPrefills | None:
    """The rule's state for one engine, or None when at most one prefill runs at a time."""
    if config.max_num_partial_prefills <= 1:
        return None
    threshold = config.long_prefill_token_threshold
    if not threshold:
        assert config.max_model_len is not None  # EngineConfig checks it
        threshold = int(config.max_model_len * 0.04)
    return PartialPrefills(config.max_num_partial_prefills, config.max_long_partial_prefills,
                           threshold, config.max_num_batched_tokens)
