"""Service-level objectives: the targets a run is measured against (goodput), as the summary
(`kvsched.records.metrics`) and the diagnosis read them."""

from __future__ import annotations

from dataclasses import dataclass

from kvsched.records.rows import RequestRecord


@dataclass(frozen=True, slots=True)
class Slo:
    """Targets in the run's time unit; a request meets its SLO when it finishes within every
    one given, as vLLM's benchmark counts goodput: TTFT, TPOT (a one-token request's TPOT
    counts as 0, so it meets any) and e2e latency, each `<=` its target."""

    ttft: float | None = None
    e2e: float | None = None
    tpot: float | None = None

    def __post_init__(self) -> None:
        for name in ("ttft", "e2e", "tpot"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"slo {name} must be > 0, got {value}")

    @property
    def is_set(self) -> bool:
        return self.ttft is not None or self.e2e is not None or self.tpot is not None

    def met(self, record: RequestRecord) -> bool:
        """Whether a request finished within every target."""
        return (record.status == "finished"
                and (self.ttft is None or record.ttft is not None and record.ttft <= self.ttft)
                and (self.e2e is None
                     or record.e2e_latency is not None and record.e2e_latency <= self.e2e)
                and (self.tpot is None or record.tpot is None or record.tpot <= self.tpot))
