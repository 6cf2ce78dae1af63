"""The decode clock's stretches: the pure-decode steps that repeat the step just run, in one move.

Why a step costs O(changes), not O(running): a request that decodes in every decode pass has
`generated == base + tick`, where `tick` counts this run's decode passes. The pass at which
it next crosses a block boundary, and the pass at which it finishes, are known in advance
and kept in two buckets keyed by tick (`Scheduler._block_due`, `_finish_due`). A stretch
visits only the passes where something is due; entries made stale by a preemption, a finish
or a skipped decode are recognised by the request's `epoch`.
"""

from __future__ import annotations

import heapq
import math
from array import array
from typing import TYPE_CHECKING

from kvsched.engine.head_of_line import hol_floor
from kvsched.records.steplog import Stretch
from kvsched.timing import Pricer
from kvsched.turns import ARRIVAL_SLACK

if TYPE_CHECKING:
    from kvsched.engine.mechanism import Scheduler

MAX_STRETCH = 1 << 14  # steps one stretch may cover (bounds its lists; the next continues)


def decode_stretch(sched: Scheduler, step: int, now: float, step_time: float | None,
                   pricer: Pricer, next_arrival: float, max_steps: int) -> Stretch | None:
    """Run, in one move, the pure-decode steps that repeat the step just run.

    Call only right after a step whose plan `is_pure_decode`, with no arrival since:
    then the next steps decode the same requests and, whatever the rules, admit nothing
    (the same head fails for the same reason: the budget left and the running count are
    unchanged and free blocks only shrink). The stretch ends before a step with an
    arrival, with a block shortage, or with a change of head-of-line state, and at the
    first finish (included) or `max_steps`. `step_time`: every step's length when the
    time model makes them all alike, else `pricer` prices the steps (`stretch_pricer`). The
    caller owns the thrash monitor and the admission gate: see `kvsched.engine`.
    """
    running = sched.running
    n = len(running)
    if (not n or n > sched._budget or sched.record_batches or sched.departing
            or (sched._v0_round and n > sched._budget - sched.decode_need() + 1)):
        return None  # (departing: async, what finished leaves after the next decision)
    if sched.waiting.size and sched._waiting_may_admit():
        return None
    prefix = sched.prefix
    if prefix is not None and prefix.decode_evicts(n):
        return None  # SGLang's next pass evicts for a page per request: a step of its own
    reservation = sched.reservation
    finish = sched.next_finish_tick()
    limit = min(max_steps, MAX_STRETCH)
    if finish is not None:
        limit = min(limit, finish - sched.tick)
    kv = sched.kv_tokens
    if step_time is not None:  # every step alike: no model to ask
        if next_arrival != math.inf:
            limit = min(limit, int((next_arrival - now) / step_time) + 2)
        durations = [step_time] * limit
    else:
        durations = pricer(n, kv + n, 1)
        if next_arrival != math.inf and durations[0] > 0:  # steps never get shorter
            limit = min(limit, int((next_arrival - now) / durations[0]) + 2)
        if limit > 1:
            durations = pricer(n, kv + n, limit)
    ends = running_ends(now, durations)
    if next_arrival != math.inf:
        # The first step with an arrival by its start ends the stretch before it (the
        # test only turns true as the steps go on).
        if step_time is not None:
            # The limit above is at most two steps past the arrival, or before it: look
            # down from it (what the bisection below finds, without a call per probe).
            while limit > 1:
                at = ends[limit - 1]
                if next_arrival > at + ARRIVAL_SLACK * (1.0 + at):
                    break
                limit -= 1
        else:
            limit = first_due(ends, 1, limit, next_arrival)
    pool = sched.pool
    spare = pool.free - sched._append_floor  # blocks it may take
    if sched._hol_head is not None:
        spare -= hol_floor(sched)
    if spare < 0:  # prefill-first steps look at the pool before they decode: it shrank
        return None
    block_due = sched._block_due
    block_size = sched._block_size
    tick, num_blocks = sched.tick, pool.num_blocks
    blocks_used = num_blocks - pool.free
    horizon = tick + limit
    evicted_at: dict[int, int] = {}  # pass -> cached blocks its growth evicted
    cached_at: dict[int, int] = {}  # pass -> cached blocks after it, where it changed
    bound = n * ((limit - 1) // block_size + 1)  # the most boundaries it can cross
    if spare >= bound and (prefix is None or prefix.passes_fit(n, bound)):
        # No shortage can end it: every boundary due is crossed, bucket by bucket in
        # any order (only vLLM's hashed cache reads the order of a bucket's requests);
        # SGLang's radix tree takes the pages of passes that evict nothing in one move.
        crossed: list[tuple[int, int]] | None = None if prefix is None else []
        used = cross_all(sched, tick, limit, blocks_used, crossed)
        if prefix is not None:
            assert crossed is not None
            prefix.grow_passes(crossed)
        blocks_used = used[-1]
        due_ticks, filled, last = [], 0, horizon
    else:
        used, last = [], tick
        # Only passes at which someone crosses a block boundary need work: visit those
        # in order (a boundary crossed moves that request's next one a block later).
        # vLLM hashes a block as a decode fills it: the pass before the request's next
        # one crosses into a new block (`filled`: a bucket is also visited for that).
        # Async scheduling (`lagged`) hashes it when the next block is taken: nothing to
        # visit for it then.
        filled = 1 if prefix is not None and prefix.eager and not prefix.lagged else 0
        due_ticks = sorted([t for t in block_due if t <= horizon + filled])
    cached_start = prefix.blocks_cached() if prefix is not None else 0
    while due_ticks:
        t = heapq.heappop(due_ticks)
        due = block_due[t]
        growing = [entry for entry in due if entry[0].epoch == entry[1]]
        if filled and growing and t - 1 > tick:
            assert prefix is not None
            prefix.filled_each([seq for seq, _epoch in growing])
            cached_at[t - 1] = prefix.blocks_cached()
        if t > horizon or len(growing) > spare:
            horizon = min(horizon, t - 1)  # the stretch ends before this pass
            break
        del block_due[t]
        used.extend([blocks_used] * (t - last - 1))
        if growing:
            spare -= len(growing)
            blocks_used += len(growing)
            for seq, _epoch in growing:
                seq.blocks += 1
            if prefix is not None:
                prefix.grow_each([seq for seq, _epoch in growing])
                prefix.decode_pass(n)
                evicted_at[t] = prefix.take_evicted()
                cached_at[t] = prefix.blocks_cached()  # (a radix leaf may be < a block)
                if prefix.decode_evicts(n):  # SGLang's next pass evicts: the stretch ends
                    horizon = min(horizon, t)
            later = block_due.get(t + block_size)
            if later is None:
                block_due[t + block_size] = growing
                if t + block_size <= horizon + filled:
                    heapq.heappush(due_ticks, t + block_size)
            else:
                later.extend(growing)
        used.append(blocks_used)
        last = t
    used.extend([blocks_used] * (horizon - last))
    tick = horizon
    k = len(used)
    if not k:
        return None
    if prefix is None:
        pool.allocate(blocks_used - (num_blocks - pool.free))
    first = sched.tick + 1
    sched.tick = tick
    sched.kv_tokens = kv + n * k
    if sched.config.delay_factor:  # what each step's _passed_delay would have left
        if sched._prev_prompt:
            sched._last_prompt_latency = ends[0] - sched._prev_time
        sched._prev_time, sched._prev_prompt = ends[k - 1], False
        sched._delay_passed = True  # nothing waits during a stretch
    del durations[k:]
    starts = ends[:k]
    sched.gaps.complete_many(first, ends, k, n)
    if reservation is not None:
        reservation.after_passes(k)
    stretch = Stretch(step, k, n, n + len(sched.prefilling), sched.waiting.size, starts,
                      durations, used, kv + n)
    if prefix is not None:  # evictions and filled blocks change the cache
        stretch.evicted_blocks = evicted_list = [0] * k
        for t, evicted in evicted_at.items():
            evicted_list[t - first] = evicted
        cached_list: list[int] = []
        cached, done = cached_start, 0
        for t in sorted(cached_at):
            cached_list.extend([cached] * (t - first - done))
            cached, done = cached_at[t], t - first
        cached_list.extend([cached] * (k - done))
        stretch.cached_blocks = cached_list
    if tick == finish:
        last, end = step + k - 1, ends[k]
        for seq, epoch in sched._finish_due.pop(tick):
            if seq.epoch == epoch:
                sched._close_run(seq, tick)
                sched._finish(seq, last, end)
                stretch.num_finished += 1
        if prefix is not None:
            sched._release_finished()
            assert stretch.cached_blocks is not None
            stretch.cached_blocks[-1] = prefix.blocks_cached()  # the finished cached theirs
        if stretch.num_finished and reservation is not None:
            reservation.left_batch()
    return stretch

def running_ends(now: float, durations: list[float]) -> list[float]:
    """`now` and the end of each step: sequential sums, as step by step (what
    `itertools.accumulate(durations, initial=now)` makes, on C doubles when compiled)."""
    size = len(durations)
    ends = [now] * (size + 1)
    total = now
    for j in range(size):
        step = durations[j]
        total += step
        ends[j + 1] = total
    return ends


def first_due(ends: list[float], lo: int, hi: int, arrival: float) -> int:
    """The first index in [lo, hi) whose time has `arrival` due by it (with the loop's hair
    of slack), or hi: a bisection (the test only turns true as the times go on)."""
    slack = ARRIVAL_SLACK  # (a C double in the compiled build)
    while lo < hi:
        mid = (lo + hi) // 2
        at = ends[mid]
        if arrival <= at + slack * (1.0 + at):
            hi = mid
        else:
            lo = mid + 1
    return lo


def cross_all(sched: Scheduler, tick: int, limit: int, blocks_used: int,
              crossed: list[tuple[int, int]] | None = None) -> list[int]:
    """Passes `tick + 1` .. `tick + limit` of a stretch with blocks to spare: every
    request takes the blocks whose boundaries it crosses (each bucket's requests cross
    every `block_size` passes from its tick on). Returns the blocks in use at each;
    `crossed` gets each request's (index, blocks taken)."""
    block_due, block_size = sched._block_due, sched._block_size
    horizon = tick + limit
    # Blocks taken at each pass: C integers (a typed view compiled), not a Python int per
    # pass and per bucket (a stretch is often hundreds of passes over ~a bucket a request).
    grown = array("q", bytes(8 * limit))
    counts = grown
    for t in [t for t in block_due if t <= horizon]:
        # (No comprehension per bucket: each is a function call in Python 3.11, and a
        # bucket nearly always holds one request, still live.)
        growing = bucket = block_due.pop(t)
        for seq, epoch in bucket:
            if seq.epoch != epoch:
                growing = [entry for entry in bucket if entry[0].epoch == entry[1]]
                break
        if not growing:
            continue
        assert t > tick, "a block boundary left behind"
        crossings = (horizon - t) // block_size + 1
        count = len(growing)
        j = t - tick - 1  # (a while loop: a range with a step not known compiled is Python's)
        while j < limit:
            counts[j] += count
            j += block_size
        for seq, _epoch in growing:
            seq.blocks += crossings
            if crossed is not None:
                crossed.append((seq.index, crossings))
        after = t + crossings * block_size  # beyond the horizon: no bucket visited
        later = block_due.get(after)
        if later is None:
            block_due[after] = growing
        else:
            later.extend(growing)
    total = blocks_used  # (in use after each pass: the running sum, in place)
    for j in range(limit):
        total += counts[j]
        counts[j] = total
    return grown.tolist()
