"""The closed vocabularies a run's records carry, each written once: the kinds of engine
event, why a request never ran or was turned away, and the kinds of incident the diagnosis
names. Each is a `StrEnum` whose values are the words the CSV and JSON files have always
held, so the files read the same; the code compares members, never text."""

from __future__ import annotations

from enum import StrEnum


class EventKind(StrEnum):
    """An engine event's `event` column (events.csv)."""

    ARRIVE = "arrive"
    ADMIT = "admit"
    PREEMPT = "preempt"
    WARNING = "warning"  # vLLM V0's preemption warning, verbatim
    SWAP_OUT = "swap_out"
    SWAP_IN = "swap_in"
    FINISH = "finish"
    REJECT = "reject"
    STARVE = "starve"
    HOL_BLOCK = "hol_block"
    HOL_RELEASE = "hol_release"
    BACKPRESSURE = "backpressure"


class Why(StrEnum):
    """Why a request never ran or was turned away, as the diagnosis groups it (the value is
    the group's name in its evidence)."""

    PROMPT_OVER_BUDGET = "prompt over the budget"
    PROMPT_OVER_MODEL_LEN = "prompt over max_model_len"
    NEVER_FITS = "never fits the pool"
    RECOMPUTE_OVER_BUDGET = "recompute over the budget"
    BEHIND_HEAD = "behind a head that never runs"
    PREVIOUS_TURN = "its previous turn did not end"
    TTFT_OVER_TARGET = "estimated TTFT over the target"
    QUEUE_FULL = "the queue was full"
    NEVER_ADMITTED = "never admitted"


class Reason(str):
    """A request's `reason` (requests.csv, the events' detail): the text, which the records
    hold as it is, and its kind (`why`), which the diagnosis reads. (A `str` subclass has no
    room for slots: each carries a small dict, and only starved and rejected requests have
    one.)"""

    why: Why

    def __new__(cls, text: str, why: Why) -> Reason:
        out = super().__new__(cls, text)
        out.why = why
        return out

    def __getnewargs__(self) -> tuple[str, Why]:  # type: ignore[override]
        return str(self), self.why


def why_of(reason: str | None) -> Why:
    """The kind of a request's reason; a text that carries none (a caller's own) was never
    admitted."""
    return reason.why if isinstance(reason, Reason) else Why.NEVER_ADMITTED


class IncidentKind(StrEnum):
    """An incident's kind (summary.json's `incidents`, the `incident_<kind>` flags)."""

    STARVATION = "starvation"
    HEAD_OF_LINE = "head_of_line"
    THRASHING = "thrashing"
    TAIL_BLOWUP = "tail_blowup"
    SLO_VIOLATION = "slo_violation"
    OVERLOAD = "overload"
    ALL_REJECTED = "all_rejected"
    NONE_FINISHED = "none_finished"
    IMBALANCE = "imbalance"  # a cluster's only


def unended_turn(after: str | None) -> Reason:
    """Why a conversation's turn never arrived: the turn before it (`after`) did not end."""
    return Reason(f"its previous turn {after} did not end", Why.PREVIOUS_TURN)
