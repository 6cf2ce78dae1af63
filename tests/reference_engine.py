# ruff: noqa: B023  (the step closures are rebuilt each step on purpose: plain, not fast)
"""A deliberately naive engine, written from the rules in the engine issue, for differential tests.

Every step touches every request; nothing is lazy, nothing is clever. `kvsched.simulate`
must produce exactly the same request records and step rows.
"""

from __future__ import annotations

import math
from dataclasses import replace

from kvsched.config import EngineConfig, PreemptionMode, Requeue, Unschedulable, Victim
from kvsched.request import Request


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class R:
    def __init__(self, req: Request, idx: int) -> None:
        self.req = req
        self.idx = idx
        self.P = req.prompt_len
        self.O = req.output_len
        self.state = "arriving"
        self.gen = 0
        self.blocks = 0
        self.host = 0
        self.prefill_left = 0
        self.recompute_upto = 0
        self.grew_at = -1
        self.admit_seq = 0
        self.join_step = 0
        self.first_sched = None
        self.first_tok_time = None
        self.first_tok_step = None
        self.finish_time = None
        self.preempts = 0
        self.recomputed = 0
        self.swapped = 0
        self.max_gap = None
        self.gaps: list[float] = []  # every inter-token gap, one per token after the first
        self.last_tok = None
        self.unsched = None
        self.enq_time = 0.0
        self.enq_seq = 0


def reference_simulate(requests, cfg: EngineConfig, policy, clock):
    order = sorted((i for i in range(len(requests)) if requests[i].after is None),
                   key=lambda i: requests[i].arrival_time)
    rs = [R(requests[i], k) for k, i in enumerate(order)]
    # Next turns: held until the request they name ends, then due think_time later.
    nexts: dict[str, list[int]] = {}
    for j, q in enumerate(requests):
        if q.after is not None:
            nexts.setdefault(q.after, []).append(j)
    released: list[tuple[float, int, R]] = []  # kept sorted by (time, input index)
    everyone = list(rs)

    def release(r, t):
        for j in nexts.pop(r.req.request_id, ()):
            at = t + requests[j].think_time
            turn = R(replace(requests[j], arrival_time=at), 0)
            released.append((at, j, turn))
            released.sort(key=lambda e: (e[0], e[1]))
            everyone.append(turn)

    def next_arrival():  # (time, 0 timed / 1 released): a turn after the timed at its time
        due = [(rs[i].req.arrival_time, 0)] if i < len(rs) else []
        if released:
            due.append((released[0][0], 1))
        return min(due) if due else None
    bs = cfg.block_size
    B = cfg.max_num_batched_tokens
    wm = cfg.watermark_blocks
    cap = cfg.long_prefill_token_threshold or B
    stack: list[R] = []
    fresh: list[R] = []
    running: list[R] = []  # decoding, in order of joining
    prefilling: list[R] = []
    free = cfg.num_blocks
    counter = {"enq": 0, "admit": 0}
    steps = []

    def push(r, t):
        counter["enq"] += 1
        r.enq_time = t
        r.enq_seq = counter["enq"]
        fresh.append(r)

    def key(r):
        return (*policy.key(r.req, r.enq_time), r.enq_seq)

    def head():
        if stack:
            return stack[-1]
        if fresh:
            return min(fresh, key=key)
        return None

    def pop(r):
        if stack and stack[-1] is r:
            stack.pop()
        else:
            fresh.remove(r)

    def unsched(r):
        if not cfg.chunked_prefill and r.P > B:
            return "budget"
        if cdiv(r.P + r.O - 1, bs) > cfg.num_blocks - wm:
            return "pool"
        return None

    i = 0
    step = 0
    now = 0.0
    limit = False
    while True:
        # Everything due arrives, then the turns released by rejections among it.
        while (due := next_arrival()) is not None and due[0] <= now + 1e-9 * (1.0 + now):
            batch: list[R] = []
            while (due := next_arrival()) is not None and due[0] <= now + 1e-9 * (1.0 + now):
                if due[1]:
                    batch.append(released.pop(0)[2])
                else:
                    batch.append(rs[i])
                    i += 1
            for r in batch:
                now = max(now, r.req.arrival_time)
                r.join_step = step
                r.unsched = unsched(r)
                if r.unsched and cfg.on_unschedulable is Unschedulable.REJECT:
                    r.state = "rejected"
                    release(r, r.req.arrival_time)
                    continue
                r.state = "waiting"
                push(r, r.req.arrival_time)

        budget = B
        decoded: list[R] = []
        prefills: list[tuple[R, int, bool]] = []
        swapins: list[R] = []
        produced: list[R] = []
        preempted: list[R] = []
        acc = {"prefill": 0, "recomp": 0, "kv": 0, "so": 0, "si": 0, "admitted": 0,
               "tick": False}

        def pick():
            cands = running + prefilling
            if cfg.victim is Victim.LAST_ADMITTED:
                return max(cands, key=lambda r: r.admit_seq)
            if cfg.victim is Victim.LOWEST_PRIORITY:
                return max(cands, key=lambda r: (r.req.priority, r.req.arrival_time, -r.admit_seq))
            return min(cands, key=lambda r: (r.gen, -r.P, -r.admit_seq))

        def preempt(v):
            nonlocal free
            was_decoding = v in running
            if was_decoding:
                running.remove(v)
                if v in decoded and v.grew_at == step:  # its fresh block holds nothing yet
                    v.blocks -= 1
                    free += 1
                v.recompute_upto = v.P + v.gen
            else:
                prefilling.remove(v)
                v.recompute_upto = max(v.recompute_upto, v.P + v.gen - v.prefill_left)
                v.prefill_left = 0
            free += v.blocks
            v.preempts += 1
            preempted.append(v)
            if cfg.preemption is PreemptionMode.SWAP and was_decoding:
                v.state = "swapped"
                v.host = v.blocks
                v.swapped += v.blocks
                acc["so"] += v.blocks
            else:
                v.state = "preempted"
            v.blocks = 0
            if cfg.requeue is Requeue.FRONT:
                stack.append(v)
            else:
                push(v, now)

        def decode_phase():
            nonlocal budget, free
            if not running:
                return
            acc["tick"] = True
            for r in list(running):
                if r not in running:
                    continue
                if budget < 1:
                    break
                cache = r.P + r.gen - 1
                if cdiv(cache + 1, bs) > r.blocks:
                    if free == 0:
                        v = pick()
                        preempt(v)
                        if v is r:
                            continue
                        if v in decoded:
                            decoded.remove(v)
                            budget += 1
                    free -= 1
                    r.blocks += 1
                    r.grew_at = step
                decoded.append(r)
                budget -= 1

        def chunk_of(r, n):
            start = r.P + r.gen - r.prefill_left
            r.prefill_left -= n
            prefills.append((r, n))
            again = min(n, max(0, r.recompute_upto - start))
            acc["recomp"] += again
            r.recomputed += again
            acc["prefill"] += n - again
            if r.prefill_left:
                r.state = "prefilling"
                if r not in prefilling:
                    prefilling.append(r)
            else:
                if r in prefilling:
                    prefilling.remove(r)
                r.state = "running"
                running.append(r)  # decodes stay in admission order
                running.sort(key=lambda q: q.admit_seq)
                produced.append(r)

        def continue_prefills():
            nonlocal budget
            for r in list(prefilling):
                if budget < 1:
                    break
                n = min(r.prefill_left, budget, cap)
                budget -= n
                chunk_of(r, n)

        def admit(allow_prefill, allow_swap):
            nonlocal budget, free
            while budget > 0 and len(running) + len(prefilling) < cfg.max_num_seqs:
                r = head()
                if r is None or r.unsched:
                    break
                if r.state == "swapped":
                    if not allow_swap:
                        break
                    need = cdiv(r.P + r.gen, bs)
                    if free - need < wm:
                        break
                    pop(r)
                    free -= need
                    r.blocks = need
                    acc["si"] += r.host
                    r.swapped += r.host
                    r.host = 0
                    r.state = "running"
                    running.append(r)
                    acc["kv"] += r.P + r.gen
                    swapins.append(r)
                    produced.append(r)
                    budget -= 1
                else:
                    if not allow_prefill:
                        break
                    tokens = r.P + r.gen
                    if cfg.chunked_prefill:
                        n = min(tokens, budget, cap)
                    elif tokens > budget:
                        break
                    else:
                        n = tokens
                    need = cdiv(tokens, bs)
                    if free - need < wm:
                        break
                    pop(r)
                    free -= need
                    r.blocks = need
                    r.prefill_left = tokens
                    if r.first_sched is None:
                        r.first_sched = now
                    budget -= n
                    counter["admit"] += 1
                    r.admit_seq = counter["admit"]
                    chunk_of(r, n)
                    acc["admitted"] += 1
                    continue
                counter["admit"] += 1
                r.admit_seq = counter["admit"]
                acc["admitted"] += 1

        if cfg.mix_prefill_decode:
            decode_phase()
            continue_prefills()
            if not preempted or cfg.admit_after_preempt:
                admit(True, True)
        else:
            continue_prefills()
            admit(True, False)
            if not prefills:
                decode_phase()
                if not preempted or cfg.admit_after_preempt:
                    admit(False, True)

        idle = not (acc["tick"] or prefills or swapins or preempted)
        if idle:
            due = next_arrival()
            if due is None:
                held = len(nexts)
                for r in everyone:  # what is left starves: its next turns come now
                    if r.state not in ("finished", "rejected", "arriving"):
                        release(r, now)
                if len(nexts) < held:
                    continue
                break
            nxt = due[0]
            if clock.whole_steps:
                step = math.ceil(nxt)
                now = float(step)
            else:
                now = nxt
            continue

        for r in decoded:
            acc["kv"] += r.P + r.gen
        n_dec = len(decoded) + len(swapins)
        computed = acc["prefill"] + acc["recomp"]
        dur = clock.duration(computed, n_dec, acc["kv"], acc["so"] + acc["si"])
        end = now + dur
        n_running = len(running) + len(prefilling)
        n_waiting = len(stack) + len(fresh)
        blocks_free = free
        finished = 0
        for r in decoded + produced:
            r.gen += 1
            if r.last_tok is None:
                r.first_tok_time = end
                r.first_tok_step = step
            else:
                gap = end - r.last_tok
                r.gaps.append(gap)
                if r.max_gap is None or gap > r.max_gap:
                    r.max_gap = gap
            r.last_tok = end
            if r.gen >= r.O:
                r.state = "finished"
                r.finish_time = end
                free += r.blocks
                r.blocks = 0
                running.remove(r)
                finished += 1
                release(r, end)
        steps.append((step, now, dur, n_running, n_waiting, len(prefills), acc["prefill"], n_dec,
                      acc["recomp"], computed + n_dec, cfg.num_blocks - blocks_free, blocks_free,
                      len(preempted), acc["admitted"], finished, acc["so"], acc["si"]))
        step += 1
        now = end
        if len(steps) >= cfg.max_steps:
            limit = True
            break

    out = {}
    for js in nexts.values():  # turns whose previous turn never ended
        for j in js:
            out[requests[j].request_id] = dict(
                status="unfinished", first_scheduled_time=None, first_token_time=None,
                finish_time=None, ttft=None, ttft_steps=None, num_preemptions=0,
                num_recomputed_tokens=0, num_swapped_blocks=0, max_token_gap=None,
                generated_tokens=0, gaps=[], arrival_time=requests[j].arrival_time)
    for r in everyone:
        if r.state == "finished":
            status = "finished"
        elif r.state == "rejected":
            status = "rejected"
        else:
            status = "unfinished" if limit else "starved"
        a = r.req.arrival_time
        out[r.req.request_id] = dict(
            status=status,
            first_scheduled_time=r.first_sched,
            first_token_time=r.first_tok_time,
            finish_time=r.finish_time,
            ttft=None if r.first_tok_time is None else r.first_tok_time - a,
            ttft_steps=None if r.first_tok_step is None else r.first_tok_step - r.join_step + 1,
            num_preemptions=r.preempts,
            num_recomputed_tokens=r.recomputed,
            num_swapped_blocks=r.swapped,
            max_token_gap=r.max_gap,
            generated_tokens=r.gen,
            gaps=r.gaps,
            arrival_time=a,
        )
    return out, steps
