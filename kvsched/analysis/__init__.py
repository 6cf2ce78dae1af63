"""Studies over many runs of a scenario: a sweep over a grid of variants (`sweep`), and the
highest request rate at which a variant still meets its SLOs (`capacity`: the search,
`capacity_grid`: where it probes next, `slo_watch`: ending a probe once its SLO is provably
lost). Each run goes through `kvsched.runner`, which diagnoses it (`kvsched.records.diagnosis`).

Nothing is imported here: `from kvsched.analysis.capacity import run_capacity`, say."""
