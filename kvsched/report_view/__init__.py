"""A run folder seen whole: the interactive HTML report and the Chrome trace of a run.

Readers only: they read what `kvsched run` wrote (`summary.csv`, each variant's `run.json`,
`summary.json`, `requests.csv`, `events.csv`, `steps.csv` in full or compact mode, and
`batches.csv` when recorded) and never change it.

- `run_view`: the records of a run folder, per variant and per replica, as columns.
- `phases`: each request's life as intervals (queued, prefill, decode, preempted, swapped).
- `spans`: the diagnosis' incidents as time intervals with the records under them.
- `envelope`: the step timeline as min/max envelopes at several resolutions, packed.
- `html`: the self-contained `report.html` (script and style from `kvsched/data/`).
- `trace`: the Chrome trace event format (Perfetto, chrome://tracing).
"""
