"""The records' vocabularies are enums whose values are the words the files always held, and
the diagnosis groups by a reason's kind, never by its text."""

from __future__ import annotations

import pickle

from kvsched import EngineConfig, Request, simulate
from kvsched.events import DIAGNOSIS_EVENTS
from kvsched.kinds import EventKind, IncidentKind, Reason, Why, why_of
from kvsched.records.diagnosis import KINDS, Thresholds, starvation


def test_event_kinds_are_the_words_events_csv_holds():
    assert [kind.value for kind in EventKind] == [
        "arrive", "admit", "preempt", "warning", "swap_out", "swap_in", "finish", "reject",
        "starve", "hol_block", "hol_release", "backpressure"]
    assert set(EventKind) >= DIAGNOSIS_EVENTS
    assert "hol_block" in DIAGNOSIS_EVENTS  # the C loop's plain strings compare equal


def test_incident_kinds_keep_their_order_and_words():
    assert [k.value for k in KINDS] == ["starvation", "head_of_line", "thrashing",
                                        "tail_blowup", "slo_violation", "overload",
                                        "all_rejected", "none_finished"]
    assert IncidentKind.IMBALANCE not in KINDS


def test_a_reason_is_its_text_and_keeps_its_kind_through_pickle():
    reason = Reason("needs 9 KV blocks", Why.BEHIND_HEAD)
    assert reason == "needs 9 KV blocks" and f"{reason}" == "needs 9 KV blocks"
    again = pickle.loads(pickle.dumps(reason))
    assert again == reason and again.why is Why.BEHIND_HEAD
    assert why_of(again) is Why.BEHIND_HEAD
    assert why_of("needs 9 KV blocks") is Why.NEVER_ADMITTED  # a bare text carries no kind
    assert why_of(None) is Why.NEVER_ADMITTED


def _starved_run():
    """A prompt over the budget at the head of the queue, two requests stuck behind it."""
    requests = [Request("big", 0, 300, 4), Request("a", 0, 10, 4), Request("b", 0, 10, 4)]
    return simulate(requests, EngineConfig(max_num_batched_tokens=100, max_num_seqs=1,
                                           num_blocks=100))


def test_starvation_groups_by_the_reasons_kind_not_its_words():
    result = _starved_run()
    incident = starvation(result, Thresholds())
    assert incident is not None
    groups = incident.evidence["reasons"]
    assert groups == {Why.PROMPT_OVER_BUDGET: 1, Why.BEHIND_HEAD: 2}
    # The same kinds in other words: the same groups.
    reasons = result.requests.reasons
    for i, reason in list(reasons.items()):
        reasons[i] = Reason("some other words", reason.why)
    assert starvation(result, Thresholds()).evidence["reasons"] == groups
