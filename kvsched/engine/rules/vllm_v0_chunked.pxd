from kvsched.engine.plan cimport StepPlan
from kvsched.engine.rules.lesson cimport LessonScheduler

cdef class VllmV0ChunkedScheduler(LessonScheduler):
    cpdef _assemble(self, StepPlan plan)
