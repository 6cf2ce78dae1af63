"""One rule module per engine family, each a `Scheduler` subclass whose `_assemble` decides a
step from the mechanism's operations (`kvsched.engine.mechanism`); `scheduler_class` picks
the family an `EngineConfig` describes (its step order, and for decode-first steps whether
vLLM V0's chunked running queue or partial prefills are on)."""

from __future__ import annotations

from kvsched.config import EngineConfig, StepOrder, Victim
from kvsched.engine.mechanism import Scheduler
from kvsched.engine.rules.lesson import LessonScheduler
from kvsched.engine.rules.vllm_v0 import VllmV0Scheduler
from kvsched.engine.rules.vllm_v0_chunked import VllmV0ChunkedScheduler
from kvsched.engine.rules.vllm_v1 import VllmV1Scheduler


def scheduler_class(config: EngineConfig) -> type[Scheduler]:
    """The scheduler of the engine family `config` describes."""
    if config.step_order is StepOrder.RUNNING_LOOP:
        return VllmV1Scheduler
    if config.step_order is StepOrder.PREFILL_FIRST:
        return VllmV0Scheduler
    if config.victim is Victim.QUEUE_TAIL or config.max_num_partial_prefills > 1:
        return VllmV0ChunkedScheduler
    return LessonScheduler
