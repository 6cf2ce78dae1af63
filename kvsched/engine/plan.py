"""One step's decision, as a value: what the rules assembled, before the step's end applies it."""

from __future__ import annotations

from kvsched.sequence import Seq

Event = tuple[int, float, str, str, str]  # step, time, request_id, event, detail


class StepPlan:
    """One step's decision. `tick` is the decode pass the step runs (0: no decode pass)."""

    __slots__ = ("step", "time", "tick", "num_decodes", "decoded", "prefills", "prefill_chunks",
                 "swap_ins", "produced", "preempted", "num_admitted", "num_finished",
                 "prefill_tokens", "recomputed_tokens", "kv_read_tokens", "swapped_out_blocks",
                 "swapped_in_blocks", "loaded_blocks")

    # (A plain class with its fields typed in plan.pxd: a C struct in the compiled build.)
    def __init__(self, step: int, time: float) -> None:
        self.step = step
        self.time = time
        self.tick = 0
        self.num_decodes = 0  # running requests that decoded (swap-ins not included)
        self.decoded: list[Seq] | None = None  # who decoded, kept only when batches are recorded
        self.prefills: list[tuple[Seq, int]] = []  # seq, chunk tokens
        # (chunk tokens, context tokens already in the cache), as the prefills: a BatchShape's
        self.prefill_chunks: list[tuple[int, int]] = []
        self.swap_ins: list[Seq] = []
        self.produced: list[Seq] = []  # (re)prefills completed, swap-ins
        self.preempted: list[Seq] = []
        self.num_admitted = 0
        self.num_finished = 0
        self.prefill_tokens = 0  # first-time prefill tokens
        self.recomputed_tokens = 0  # prefill tokens recomputed after a preemption
        self.kv_read_tokens = 0  # KV tokens the step's decodes attend over
        self.swapped_out_blocks = 0
        self.swapped_in_blocks = 0
        self.loaded_blocks = 0  # read back from the host tier for this step's admissions

    @property
    def is_idle(self) -> bool:
        return not (self.tick or self.prefills or self.swap_ins or self.preempted)

    @property
    def is_pure_decode(self) -> bool:
        """Only decodes ran and nobody finished: the next steps may repeat it (a stretch)."""
        return not (self.prefills or self.swap_ins or self.preempted or self.num_admitted
                    or self.num_finished) and self.num_decodes > 0
