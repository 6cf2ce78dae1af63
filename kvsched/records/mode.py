"""How much of the per-step record a run writes: its own module, so that the command line
names the choices without importing the engine (`kvsched --help` stays fast)."""

from __future__ import annotations

from enum import StrEnum


class RecordMode(StrEnum):
    """How much of the per-step record a run writes."""

    FULL = "full"  # steps.csv: one row per step
    COMPACT = "compact"  # steps.csv: one row per step or per decode stretch
    SUMMARY = "summary"  # no steps.csv: requests, events and the summary only
