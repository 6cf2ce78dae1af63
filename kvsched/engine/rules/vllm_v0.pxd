from kvsched.engine.mechanism cimport Scheduler
from kvsched.engine.plan cimport StepPlan

cdef class VllmV0Scheduler(Scheduler):
    cpdef _assemble(self, StepPlan plan)
