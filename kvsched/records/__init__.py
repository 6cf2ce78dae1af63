"""What a run records, and how it is written and summed up:

- `rows`: the records' contracts, one row per request, step, event and batch entry (column
  names, `StepOutcome`, `RequestRecord`, `RunResult`); its names are this package's face, as
  when `kvsched.records` was that one module;
- `table`: a run's request records as columns; `metrics`: the summary of a run, and
  `metric_names`: vLLM's benchmark names for its keys; `diagnosis`: what went wrong in a
  run, with evidence (its incidents);
- `steplog`: the step records as a run keeps them (exact rows and decode stretches, the
  step sums, the timeline), compiled with the engine, which cimports its types;
- `csvout`: the CSV files, through `floatfmt` (`%.10g` a column at a time) and `fastcsv`
  (the C writer and reader, when built); `mode`: how much of the step record a run writes."""

from kvsched.records.rows import *  # noqa: F403
