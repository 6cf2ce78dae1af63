"""The step scheduler's names where they were before the engine became a package
(`kvsched.engine`): importable from here still."""

from kvsched.engine.gaps import GapTracker
from kvsched.engine.mechanism import Scheduler
from kvsched.engine.plan import Event, StepPlan
from kvsched.engine.stretch import MAX_STRETCH
from kvsched.engine.texts import V0_PREEMPTION_WARNING, model_len_rejection, v0_rejection
from kvsched.records.steplog import Stretch

__all__ = ["MAX_STRETCH", "V0_PREEMPTION_WARNING", "Event", "GapTracker", "Scheduler",
           "StepPlan", "Stretch", "model_len_rejection", "v0_rejection"]
