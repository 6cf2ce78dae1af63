from kvsched.engine.mechanism cimport Scheduler
from kvsched.engine.plan cimport StepPlan

cdef class LessonScheduler(Scheduler):
    cpdef _assemble(self, StepPlan plan)
    cpdef _admit_after_running(self, StepPlan plan, long long budget)
