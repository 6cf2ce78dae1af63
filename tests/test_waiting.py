"""The waiting queue's own count (`size`, `len`, truth) against what it holds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsched import Request, make_policy
from kvsched.sequence import Seq, SeqState
from kvsched.waiting import WaitingQueue

OPERATIONS = st.lists(st.sampled_from(["push", "front", "swapped", "pop", "aside", "restore",
                                       "sort"]), max_size=40)


@settings(max_examples=200, deadline=None)
@given(OPERATIONS, st.sampled_from(["fcfs", "spf", "lpm"]))
def test_size_follows_every_way_in_and_out(operations, policy):
    """After any mix of pushes, pops, heads set aside and restored, and V0's sort, the kept
    count is the number of requests the queue yields."""
    queue = WaitingQueue(make_policy(policy))
    aside: list[tuple] = []
    made = 0
    for operation in operations:
        if operation in ("push", "front", "swapped"):
            seq = Seq.of(Request(f"r{made}", float(made), 4 + made % 5, 3), made, 16)
            made += 1
            if operation == "push":
                queue.push(seq, seq.request.arrival_time)
            elif operation == "front":
                seq.state = SeqState.PREEMPTED
                queue.push_front(seq)
            else:
                seq.state = SeqState.SWAPPED
                queue.push_swapped(seq)
        elif operation == "pop" and queue.peek() is not None:
            queue.pop()
        elif operation == "aside" and queue.peek() is not None:
            aside.append(queue.set_aside())
        elif operation == "restore":
            queue.restore(aside)
            aside = []
        elif operation == "sort" and not queue.dynamic:
            queue.sort_unswapped(lambda s: s.prompt_len)
        held = list(queue)
        assert queue.size == len(queue) == len(held)
        assert bool(queue) is bool(held)
        assert (queue.peek() is None) is (not held)
