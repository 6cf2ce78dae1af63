"""Reading runs: what went wrong in one, with evidence (`diagnosis`), and the highest request
rate at which a variant still meets its SLOs (`capacity`: the search, `capacity_grid`: where
it probes next, `slo_watch`: ending a probe once its SLO is provably lost).

Nothing is imported here: `from kvsched.analysis.capacity import run_capacity`, say."""
