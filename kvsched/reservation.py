"""SGLang's admission rule: admit a prompt only if the pool can also carry the decode tokens
the running requests are still expected to write (SGLang 0.5.23 `PrefillAdder`,
`PrefillBudget`, `NewTokenRatioTracker`, `ScheduleBatch.retract_decode`).

Each round (one prefill attempt) starts from the free KV tokens less what the running
requests reserve: `min(output_len - generated, CLIP_MAX_NEW_TOKENS) x ratio` each. A waiting
request is admitted only if `extend + min(output_len - generated, CLIP) + page` is below
what is left; it then reserves one page and its whole clipped output (its prompt is
allocated at once, so the pool already counts it). `max_prefill_tokens` and the chunk size
are compute budgets charged in page-rounded tokens. When the pool check fails, or the
request slots are full, the batch is "full": no admission is tried again until a request
leaves the running batch (a finish or a retraction), seen at the next decode pass.

`ratio` starts at `min(0.7 x schedule_conservativeness, 1)`, falls by
`(init - min) / 600` after every decode pass that retracted nothing (down to `init x 0.14`),
is set to `min(1, (sum generated + 20 x n) / (sum output_len + 1))` over the requests left
after a retraction, and goes back to `init` when a step finds nothing running.

kvsched's `block_size` plays SGLang's `page_size`. A request's `output_len` is its
`max_new_tokens`, as when a benchmark fixes the output length.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvsched.config import AdmissionRule, EngineConfig
from kvsched.sequence import Seq

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
WAITING_PREFIX_REFRESH_INTERVAL = 32  # schedule_policy.py WAITING_PREFIX_REFRESH_INTERVAL


class NewTokenRatio:
    """How much of its remaining output a running request is expected to still write."""

    __slots__ = ("init", "min", "decay", "current")

    def __init__(self, schedule_conservativeness: float) -> None:
        self.init = min(INIT_NEW_TOKEN_RATIO * schedule_conservativeness, 1.0)
        self.min = min(self.init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.decay = (self.init - self.min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.current = self.init

    def decay_steps(self, k: int) -> None:
        """`k` decode passes without retraction, one subtraction each (as SGLang rounds).
        Each is `max(current - decay, min)`, so a ratio re-estimated below the floor by a
        retraction comes back up to the floor at the next pass (NewTokenRatioTracker)."""
        current, decay, floor = self.current, self.decay, self.min
        for _ in range(k):
            current = max(current - decay, floor)
            if current == floor:
                break
        self.current = current

    def after_retract(self, left: Iterable[tuple[int, int]]) -> None:
        """Re-estimate from the (generated, output_len) of the requests still running."""
        pairs = list(left)
        decoded = sum(g for g, _ in pairs)
        max_new = sum(o for _, o in pairs)
        self.current = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(pairs)) / (max_new + 1))


def reserved(running: list[Seq], tick: int, ratio: float) -> float:
    """What the decoding requests `running` reserve: `min(output_len - generated, CLIP) x
    ratio` each, summed in the batch's order (SGLang's float sum). A running request's
    generated count is `base + tick` (`kvsched.sequence.Seq`: the scheduler's decode clock)."""
    clip = CLIP_MAX_NEW_TOKENS  # (compiled: a C integer, the sum is C arithmetic)
    total = 0.0
    for seq in running:
        total += min(seq.output_len - (seq.base + tick), clip) * ratio
    return total


class FutureTokenReservation:
    """One engine's SGLang admission state: the ratio, the batch-full latch, and the
    budgets of the round in progress. The scheduler calls it at fixed points only:
    `open_round` / `check` / `admitted` / `close_round` around its admission loop,
    `after_decode` after a decode pass, `left_batch` when requests finish, `idle` in a
    step that runs nothing with nothing waiting.

    The latch lives on SGLang's running batch (`ScheduleBatch.batch_is_full`), so it is
    cleared wherever that batch shrinks or is replaced (scheduler.py, 0.5.23): a request
    finished in the last step (`filter_batch` at the top of `get_next_batch_to_run`, line
    3965), the last step ran a middle chunk (the chunked request leaves the merged prefill
    batch, line 3946), the batch was empty when it was set (the next prefill batch becomes
    the running batch, a new object, line 3956), it is empty now (line 4093), or a decode
    pass retracted (`update_running_batch`, line 4544)."""

    __slots__ = ("ratio", "page", "max_prefill_tokens", "chunk_size", "preemption_threshold",
                 "batch_is_full", "_held", "_decoding", "_offset", "_charged", "_pages",
                 "_rem_input",
                 "_rem_chunk", "_admitted", "_in_batch", "_prepared", "_refresh_calls")

    def __init__(self, schedule_conservativeness: float, page: int,
                 max_prefill_tokens: int, chunk_size: int | None,
                 preemption_threshold: int | None = None) -> None:
        self.ratio = NewTokenRatio(schedule_conservativeness)
        # enable_priority_scheduling: preempt running requests worse by more than this
        self.preemption_threshold = preemption_threshold
        self.page = page
        self.max_prefill_tokens = max_prefill_tokens
        self.chunk_size = chunk_size  # None: chunked prefill off
        self.batch_is_full = False
        self._held = False  # the latch was set with decoding requests in the batch
        self._decoding = 0  # decoding requests in the round in progress
        # SGLang's PrefillBudget.total_offset, built with its float operations in its order
        # (running reservations in batch order, then one int per admission: pages charged +
        # page + max_new), so remaining_total rounds as SGLang's does where a head fits exactly
        self._offset = 0.0
        self._charged = 0  # pages charged in the round: kvsched's free pool already lacks them
        self._pages = 0
        self._rem_input = 0
        self._rem_chunk: int | None = None
        self._admitted = 0
        self._in_batch = 0  # requests in the round's batch before admissions: running, continued
        # indices of the requests SGLang has prepared for a round (init_next_round_input):
        # before that a request's fill ids are empty, which priority preemption reads
        self._prepared: set[int] = set()
        self._refresh_calls = 0  # SchedulePolicy._waiting_prefix_refresh_calls

    def refresh_due(self) -> bool:
        """A round reached SGLang's `calc_priority` with requests waiting: whether it
        touches their prefixes (the first such round, then every 32nd)."""
        due = self._refresh_calls % WAITING_PREFIX_REFRESH_INTERVAL == 0
        self._refresh_calls += 1
        return due

    def _ceil(self, tokens: int) -> int:
        return -(-tokens // self.page) * self.page

    @property
    def reopened(self) -> bool:
        """The latch is clear: a waiting request may be admitted at the next round."""
        return not self.batch_is_full

    def idle(self) -> None:
        """A step that runs nothing with nothing waiting: SGLang's `on_idle` resets the
        ratio when the scheduler is fully idle (scheduler.py line 5318)."""
        self.ratio.current = self.ratio.init
        self.batch_is_full = False

    def _latch(self, full: bool) -> None:
        self.batch_is_full = full
        self._held = full and self._decoding > 0

    def open_round(self, running: list[Seq], tick: int,
                   continued: Iterable[tuple[Seq, int]], waiting: int) -> bool:
        """Start a prefill round; False when the batch is full or nobody waits.

        `running`: the decoding requests, `tick` their decode clock (`reserved`);
        `continued`: the chunks of unfinished prefills already scheduled in this step."""
        continued = list(continued)
        self._decoding = len(running)
        if self.preemption_threshold is not None or continued or not running or not self._held:
            # scheduler.py line 4090: with priority preemption every round starts with the
            # latch clear; only a full set of request slots sets it (and lets a head preempt).
            # A middle chunk in the last step, an empty running batch now or when the latch
            # was set: the batch holding it was filtered or replaced (see the class).
            self.batch_is_full = False
        self._rem_input = self.max_prefill_tokens
        self._rem_chunk = self.chunk_size
        self._admitted = 0
        self._pages = 0
        offset = reserved(running, tick, self.ratio.current)
        page = self.page
        self._charged = 0
        for seq, chunk in continued:
            charged = self._ceil(chunk)
            self._rem_input -= charged
            if self._rem_chunk is not None:
                self._rem_chunk -= charged
            # its last chunk: it reserves its output too
            max_new = 0 if seq.prefill_left else min(seq.output_len, CLIP_MAX_NEW_TOKENS)
            offset += charged + page + max_new
            self._charged += charged
            self._pages += page
        self._offset = offset
        self._in_batch = len(running) + (self._pages // page)
        return bool(waiting) and (not self.batch_is_full or self.preemption_threshold is not None)

    def continue_limit(self, running: list[Seq], tick: int, free_tokens: int) -> int | None:
        """The most tokens the unfinished chunked request may compute now, None for no limit
        beyond the chunk size: SGLang's `add_chunked_req` takes `min(chunk,
        int(free - running reservations))` when that is positive (`available_chunk_tokens`),
        not rounded to pages. `running`, `tick`: as `open_round`'s."""
        if self.chunk_size is None:
            return None
        left = int(free_tokens - reserved(running, tick, self.ratio.current))
        return left if left > 0 else None

    def prepared(self, seq: Seq) -> None:
        """SGLang has prepared `seq` for a round (`init_next_round_input`): its fill ids now
        hold its tokens, which a later priority preemption for it counts."""
        self._prepared.add(seq.index)

    def check(self, seq: Seq, tokens: int, free_tokens: int) -> int | None:
        """The most of its (re)prefill of `tokens` the head `seq` may compute now, or None
        to end the round (setting the batch-full latch when the pool is the reason).
        `free_tokens`: free KV tokens, a prefill under way holding only its chunks done."""
        self.prepared(seq)  # scheduler.py line 4260, just before add_one_req
        max_new = min(max(seq.output_len - seq.generated, 0), CLIP_MAX_NEW_TOKENS)
        if not tokens + max_new + self.page < (free_tokens + self._charged) - self._offset:
            # NO_TOKEN: the latch is set, or cleared, by whether the batch holds a request to
            # wait for (scheduler.py line 4282, `len(adder.can_run_list) > 0 or running`)
            self._latch(self._in_batch > 0 or self._admitted > 0)
            return None
        paged = self._ceil(tokens)  # SGLang checks the pool first, then the budgets
        rem_chunk = self._rem_chunk
        if rem_chunk is None:
            if self._admitted and paged >= self._rem_input:
                return None  # the first request alone may exceed max_prefill_tokens
            return tokens
        if paged > rem_chunk:  # chunked: a whole number of pages, at least one
            chunk = rem_chunk // self.page * self.page
            return min(chunk, tokens) if chunk > 0 else None
        return tokens

    def admitted(self, seq: Seq, tokens: int, chunk: int, free_tokens: int) -> bool:
        """Charge an admission of `chunk` tokens; False when the round must end."""
        page = self.page
        charged = self._ceil(chunk)
        # not chunked: it reserves its clipped max_new_tokens, whole (PrefillBudget.reserve)
        max_new = min(seq.output_len, CLIP_MAX_NEW_TOKENS) if chunk >= tokens else 0
        self._offset += charged + page + max_new
        self._charged += charged
        self._pages += page
        self._rem_input -= charged
        if self._rem_chunk is not None:
            self._rem_chunk -= charged
        self._admitted += 1
        # add_one_req answers budget_state() for the next candidate (schedule_policy.py line
        # 1590): a pool left without room (the charge rounds the extend up to pages, past
        # what the check counted) is NO_TOKEN, which ends the round and sets the latch
        if not self._capacity(free_tokens):
            self._latch(True)
            return False
        return self.may_try(free_tokens)

    def may_try(self, free_tokens: int) -> bool:
        """Whether the round goes on to the next waiting request: SGLang's `budget_state`
        before each one. A pool without room goes on (the head's check then fails, setting
        the latch); a spent `max_prefill_tokens` or chunk budget ends the round, latch
        untouched. With nobody left waiting the round ends without either."""
        if not self._capacity(free_tokens):
            return True
        return not (self._rem_input <= 0
                    or (self._rem_chunk is not None and self._rem_chunk <= 0))

    def _remaining_total(self, free_tokens: int) -> float:
        """SGLang's `remaining_total`: its pool, which does not lose a round's admissions
        until the batch is built, less `total_offset`."""
        return (free_tokens + self._charged) - self._offset

    def _capacity(self, free_tokens: int) -> bool:
        # remaining_total > 0 and remaining_current > 0; the prompts admitted are in the pool
        # (SGLang's remaining_total, `_remaining_total` inlined: it runs before every head)
        return ((free_tokens + self._charged) - self._offset > 0
                and free_tokens - self._pages > 0)

    def priority_victims(self, seq: Seq, running: Iterable[tuple[Seq, int]],
                         free_tokens: int) -> list[Seq] | None:
        """SGLang's `preempt_to_schedule` for the head `seq` of a full batch: the running
        requests (with their generated counts, in the batch's order) worse than it by more
        than the threshold, worst priority then latest arrival first, ties in batch order,
        as many as free the tokens it needs
        (its prompt and clipped max_new_tokens beyond what is left); None if they cannot.
        kvsched's priorities are SGLang's with `--schedule-low-priority-values-first`."""
        assert self.preemption_threshold is not None
        ratio = self.ratio.current
        # SGLang counts the head's fill ids, empty until a round has prepared it: a request
        # never tried yet lacks only its clipped output (schedule_policy.py line 1736)
        held = seq.prompt_len + seq.generated if seq.index in self._prepared else 0
        deficit = (held + min(seq.output_len, CLIP_MAX_NEW_TOKENS)
                   - self._remaining_total(free_tokens))
        running = list(running)
        # schedule_policy.py line 1728: sorted() is stable, so requests tied on both keys go
        # in the running batch's order, the first first (`running` comes in that order)
        order = sorted(running, key=lambda item: (-item[0].request.priority,
                                                  -item[0].request.arrival_time))
        victims: list[Seq] = []
        priority = seq.request.priority
        for victim, done in order:
            if victim.request.priority - priority <= self.preemption_threshold:
                break
            victims.append(victim)
            deficit -= min(victim.output_len - done, CLIP_MAX_NEW_TOKENS) * ratio
            if deficit <= 0:
                break
        if not victims or deficit > 0:
            return None
        taken = set(victims)
        for victim, done in running:  # their reservations leave, in the batch's order
            if victim in taken:
                self._offset -= min(victim.output_len - done, CLIP_MAX_NEW_TOKENS) * ratio
        self._in_batch -= len(victims)
        return victims

    def close_round(self, slots_full: bool, waiting: int) -> None:
        """The round ended; a request left waiting behind full request slots sets the latch."""
        if slots_full and waiting:
            self._latch(True)

    def left_batch(self) -> None:
        """Requests finished in this step: the next step's `filter_batch` shrinks the
        running batch, which clears the latch before its round (scheduler.py line 3968)."""
        self.batch_is_full = False

    def after_passes(self, k: int) -> None:
        """`k` decode passes without retraction in one move (a decode stretch)."""
        self.ratio.decay_steps(k)

    def after_decode(self, retracted: bool, left: Iterable[tuple[int, int]]) -> None:
        """After a decode pass: re-estimate after a retraction, else decay; a batch that
        shrank is no longer full (`update_running_batch`, scheduler.py line 4544)."""
        if retracted:
            self.ratio.after_retract(left)
            self.batch_is_full = False
        else:
            self.ratio.decay_steps(1)


def make_reservation(config: EngineConfig) -> FutureTokenReservation | None:
    """The admission rule's state for one engine: None for kvsched's block check."""
    if config.admission_rule is AdmissionRule.BLOCKS:
        return None
    return FutureTokenReservation(
        config.schedule_conservativeness, config.block_size, config.max_prefill_tokens,
        config.max_num_batched_tokens if config.chunked_prefill else None,
        config.priority_scheduling_preemption_threshold
        if config.enable_priority_scheduling else None)
