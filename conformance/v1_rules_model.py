"""conformance/RULES.md as code: a small, stdlib-only model of vLLM 0.33.0's V1
scheduler on the harness's step clock (sync scheduling, prefix caching off or on,
no spec decode, one sampled token per step).

It is NOT kvsched's vllm_v1 preset. It exists to prove that RULES.md is complete:
`python -m conformance.compare DIR --kvsched conformance.v1_rules_model:decisions`
must agree 100% with every recorded vLLM run. The preset's author can read it next
to RULES.md; each rule carries the number of its RULES.md section.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

try:
    from conformance import prefix_tokens
except ImportError:  # run as a script from conformance/
    import prefix_tokens  # type: ignore[no-redef]

DEFAULTS: dict[str, Any] = {
    "num_blocks": 10000, "block_size": 16, "max_num_batched_tokens": 2048,
    "max_num_seqs": 128, "enable_chunked_prefill": True, "long_prefill_token_threshold": 0,
    "policy": "fcfs", "max_model_len": 8192, "scheduler_reserve_full_isl": True,
    "watermark": 0.0, "enable_prefix_caching": False,
}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Block:
    """A KV block: its reference count and, once cached, its hash (P1)."""

    __slots__ = ("ref", "hash")

    def __init__(self) -> None:
        self.ref = 1
        self.hash: int | None = None


class _Pool:
    """The block pool (R1, P3-P6). The free queue is always [uncached free blocks][cached
    free blocks in LRU order], so it is a count and an ordered set. With caching off no
    block ever gets a hash and this is R1's counter."""

    def __init__(self, usable: int) -> None:
        self.uncached_free = usable
        self.lru: dict[_Block, None] = {}  # cached blocks with ref 0, least recently freed first
        self.by_hash: dict[int, list[_Block]] = {}  # P4: no de-duplication, first inserted wins
        self.evicted = 0

    @property
    def free(self) -> int:
        return self.uncached_free + len(self.lru)

    @property
    def cached(self) -> int:
        return sum(len(v) for v in self.by_hash.values())

    def lookup(self, hashes: list[int], max_blocks: int) -> list[_Block]:  # P2
        hit: list[_Block] = []
        for h in hashes[:max_blocks]:
            found = self.by_hash.get(h)
            if not found:
                break
            hit.append(found[0])
        return hit

    def touch(self, blocks: list[_Block]) -> None:  # P5
        for b in blocks:
            if b.ref == 0:
                del self.lru[b]
            b.ref += 1

    def take(self, k: int) -> list[_Block]:  # P6: uncached first, then evict LRU
        out = []
        for _ in range(k):
            if self.uncached_free:
                self.uncached_free -= 1
                out.append(_Block())
                continue
            b = next(iter(self.lru))
            del self.lru[b]
            assert b.hash is not None
            same = self.by_hash[b.hash]
            same.remove(b)
            if not same:
                del self.by_hash[b.hash]
            b.hash = None
            b.ref = 1
            self.evicted += 1
            out.append(b)
        return out

    def release(self, blocks: list[_Block]) -> None:  # P6: tail first
        for b in reversed(blocks):
            b.ref -= 1
            if b.ref == 0:
                if b.hash is None:
                    self.uncached_free += 1
                else:
                    self.lru[b] = None

    def cache(self, r: _Req, upto: int, bs: int) -> None:  # P4
        full = min(upto, len(r.hashes) * bs) // bs
        for k in range(r.num_cached, full):
            b = r.blist[k]
            b.hash = r.hashes[k]
            self.by_hash.setdefault(b.hash, []).append(b)
        r.num_cached = max(r.num_cached, full)


class _Req:
    __slots__ = ("id", "prompt", "max_tokens", "arrival_time", "priority", "computed",
                 "outputs", "blist", "status", "preemptions", "first_token_step",
                 "finish_step", "tokens", "answer", "hashes", "num_cached", "hits")

    def __init__(self, spec: dict[str, Any], arrival_time: float) -> None:
        self.id = str(spec["id"])
        self.prompt = int(spec["prompt_len"])
        self.max_tokens = int(spec["output_len"])
        self.arrival_time = arrival_time
        self.priority = int(spec.get("priority", 0))
        self.computed = 0
        self.outputs = 0
        self.status = "waiting"
        self.preemptions = 0
        self.first_token_step: int | None = None
        self.finish_step: int | None = None
        self.blist: list[_Block] = []
        self.tokens: list[int] = []
        self.answer: list[int] | None = None
        self.hashes: list[int] = []  # P1: one per full block of prompt + outputs
        self.num_cached = 0  # blocks of blist already hashed
        self.hits: list[int] = []

    @property
    def blocks(self) -> int:
        return len(self.blist)

    def extend_hashes(self, bs: int) -> None:  # P1
        while (len(self.hashes) + 1) * bs <= len(self.tokens):
            k = len(self.hashes)
            parent = self.hashes[-1] if self.hashes else 0
            self.hashes.append(hash((parent, tuple(self.tokens[k * bs:(k + 1) * bs]))))

    @property
    def num_tokens(self) -> int:  # prompt + generated so far (R2)
        return self.prompt + self.outputs

    def heap_key(self) -> tuple[int, float, str]:  # R9: Request.__lt__
        return (self.priority, self.arrival_time, self.id)


class _Waiting:
    """R9: FCFS deque (preempted -> head) or priority heap (preempted -> pushed)."""

    def __init__(self, priority: bool) -> None:
        self.priority = priority
        self.dq: deque[_Req] = deque()
        self.heap: list[tuple[tuple[int, float, str], _Req]] = []

    def __len__(self) -> int:
        return len(self.heap) if self.priority else len(self.dq)

    def add(self, r: _Req) -> None:
        if self.priority:
            heapq.heappush(self.heap, (r.heap_key(), r))
        else:
            self.dq.append(r)

    def prepend(self, r: _Req) -> None:
        if self.priority:
            heapq.heappush(self.heap, (r.heap_key(), r))
        else:
            self.dq.appendleft(r)

    def peek(self) -> _Req:
        return self.heap[0][1] if self.priority else self.dq[0]

    def pop(self) -> _Req:
        return heapq.heappop(self.heap)[1] if self.priority else self.dq.popleft()


def decisions(config: dict[str, Any], workload: dict[str, Any],
              max_steps: int = 5000) -> dict[str, Any]:
    cfg = {**DEFAULTS, **config}
    bs = int(cfg["block_size"])
    mml = int(cfg["max_model_len"])
    budget_max = int(cfg["max_num_batched_tokens"])
    max_seqs = int(cfg["max_num_seqs"])
    chunked = bool(cfg["enable_chunked_prefill"])
    threshold_cfg = int(cfg["long_prefill_token_threshold"])
    prio = cfg["policy"] == "priority"
    full_isl = bool(cfg["scheduler_reserve_full_isl"])
    caching = bool(cfg["enable_prefix_caching"])
    pool = _Pool(int(cfg["num_blocks"]) - 1)  # R1: block 0 is the null block
    watermark_blocks = int(float(cfg["watermark"]) * int(cfg["num_blocks"]))

    # R13: a conversation's later turn (`after`) arrives `think_steps` steps after the step
    # in which the earlier request finished or was rejected; the others at `arrival_step`.
    specs = workload["requests"]
    dependents: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        if spec.get("after") is not None:
            dependents.setdefault(str(spec["after"]), []).append(i)
    order = sorted((i for i, s in enumerate(specs) if s.get("after") is None),
                   key=lambda i: (int(specs[i]["arrival_step"]), i))
    by_step: dict[int, list[int]] = {}
    for i in order:
        by_step.setdefault(int(specs[i]["arrival_step"]), []).append(i)
    arrival_step: dict[int, int] = {i: int(specs[i]["arrival_step"]) for i in order}

    def ended(rid: str, at: int) -> None:
        for j in dependents.get(rid, ()):
            arrival_step[j] = at + 1 + int(specs[j].get("think_steps", 0))
            by_step.setdefault(arrival_step[j], []).append(j)
            by_step[arrival_step[j]].sort()

    reqs: dict[str, _Req] = {}
    rejected_at: dict[str, int] = {}
    waiting = _Waiting(prio)
    running: list[_Req] = []
    open_ids: set[str] = set()
    steps: list[dict[str, Any]] = []
    stalled = False
    step = 0
    while step < max_steps:
        rejected: list[str] = []
        for i in by_step.pop(step, []):
            spec = specs[i]
            rid = str(spec["id"])
            if int(spec["prompt_len"]) >= mml:  # R11: input processor rejects
                rejected.append(rid)
                rejected_at[rid] = step
                ended(rid, step)
                continue
            t = float(spec.get("arrival_time", arrival_step[i] + i * 1e-6))
            r = reqs[rid] = _Req(spec, t)
            if caching:  # P1: the same token ids the driver gives vLLM
                prompt, r.answer = prefix_tokens.request_tokens(spec)
                r.tokens = prompt
                r.extend_hashes(bs)
            waiting.add(r)
            open_ids.add(rid)

        # R5: the threshold counts running + waiting at the start of the step.
        threshold = threshold_cfg if len(running) + len(waiting) > 1 else 0
        budget = budget_max
        scheduled: dict[str, int] = {}
        preempted: list[str] = []
        hits: list[list[Any]] = []
        pool.evicted = 0

        # R3: the running loop, in running-list order.
        idx = 0
        while idx < len(running) and budget > 0:
            r = running[idx]
            n = r.num_tokens - r.computed
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget, mml - r.computed - 1)
            if n <= 0:
                idx += 1
                continue
            ok = False
            while True:
                need = max(_cdiv(min(r.computed + n, mml), bs) - r.blocks, 0)
                if need <= pool.free:  # R4: no watermark for running requests
                    r.blist += pool.take(need)
                    pool.cache(r, min(r.computed + n, r.num_tokens), bs)  # P4
                    ok = True
                    break
                # R6: victim
                if prio:
                    victim = max(running, key=lambda q: (q.priority, q.arrival_time))
                    vi = running.index(victim)
                    del running[vi]
                    if vi < idx:
                        idx -= 1
                    if victim.id in scheduled:
                        budget += scheduled.pop(victim.id)
                else:
                    victim = running.pop()
                # R7, P7: what preemption does to the victim (its cached blocks stay cached).
                pool.release(victim.blist)
                victim.blist = []
                victim.num_cached = 0
                victim.computed = 0
                victim.status = "preempted"
                victim.preemptions += 1
                waiting.prepend(victim)
                preempted.append(victim.id)
                if victim is r:
                    break
            if not ok:
                if prio and r.status == "preempted":
                    continue  # R6: priority moves on to the next request
                break  # R6: FCFS ends the running loop
            scheduled[r.id] = n
            budget -= n
            idx += 1

        # R8: admission only in a step that preempted nothing.
        if not preempted:
            while budget > 0 and len(waiting):
                if len(running) >= max_seqs:  # R10
                    break
                r = waiting.peek()
                # P2: the longest run of cached full blocks, at most num_tokens - 1 tokens.
                hit_blocks = pool.lookup(r.hashes, (r.num_tokens - 1) // bs) if caching else []
                hit = len(hit_blocks) * bs
                n = r.num_tokens - hit
                if 0 < threshold < n:
                    n = threshold
                if not chunked and n > budget:  # R12
                    break
                n = min(n, budget)
                wm = watermark_blocks if running else 0
                # P3: hit blocks nobody holds are taken from the free queue too.
                evictable = sum(b.ref == 0 for b in hit_blocks)
                if full_isl and (max(_cdiv(min(r.num_tokens, mml), bs) - len(hit_blocks), 0)
                                 + evictable + wm > pool.free):  # R4
                    break
                new = max(_cdiv(min(hit + n, mml), bs) - len(hit_blocks), 0)
                if new + evictable + wm > pool.free:
                    break
                waiting.pop()
                pool.touch(hit_blocks)  # P5
                r.blist = hit_blocks + pool.take(new)
                r.num_cached = len(hit_blocks)
                pool.cache(r, min(hit + n, r.num_tokens), bs)  # P4
                r.computed = hit
                r.status = "running"
                running.append(r)
                scheduled[r.id] = n
                budget -= n
                if caching:
                    hits.append([r.id, hit])
                    r.hits.append(hit)

        # R2: the model step; one token for each request whose prompt is computed.
        finished: list[str] = []
        for rid, n in scheduled.items():
            r = reqs[rid]
            r.computed += n
            if r.computed >= r.num_tokens:
                if caching:  # P1: the sampled token extends the hashes
                    r.tokens.append(prefix_tokens.output_token(r.id, r.answer, r.outputs))
                    r.extend_hashes(bs)
                r.outputs += 1
                if r.first_token_step is None:
                    r.first_token_step = step
                if r.num_tokens >= mml or r.outputs >= r.max_tokens:  # R11
                    r.status = "finished"
                    r.finish_step = step
                    pool.release(r.blist)
                    r.blist = []
                    finished.append(rid)
                    open_ids.discard(rid)
                    ended(rid, step)
        if finished:
            running = [q for q in running if q.status != "finished"]

        entry: dict[str, Any] = {"step": step, "scheduled": [[k, v] for k, v in scheduled.items()]}
        if preempted:
            entry["preempted"] = preempted
        if finished:
            entry["finished"] = finished
        if rejected:
            entry["rejected"] = rejected
        if caching:
            if hits:
                entry["hits"] = hits
            entry["cached_blocks"] = pool.cached
            if pool.evicted:
                entry["evicted_blocks"] = pool.evicted
        steps.append(entry)
        step += 1
        if not open_ids and not by_step:
            break
        if not scheduled and open_ids and not by_step:
            stalled = True
            break

    if not open_ids and not by_step:  # every block came back: held by nobody, cached or not
        assert pool.free == int(cfg["num_blocks"]) - 1 and not any(
            b.ref for v in pool.by_hash.values() for b in v), "blocks leaked"
    out_reqs: dict[str, dict[str, Any]] = {}
    for spec in specs:
        rid = str(spec["id"])
        if rid in rejected_at:
            out_reqs[rid] = {"first_token_step": None, "finish_step": rejected_at[rid],
                             "num_preemptions": 0, "status": "rejected"}
            if caching:
                out_reqs[rid].update(prefix_hit_tokens=None, cached_tokens=0, hits=[])
            continue
        if rid not in reqs:  # a later turn of a conversation that never ended
            out_reqs[rid] = {"first_token_step": None, "finish_step": None, "num_preemptions": 0,
                             "status": "stalled" if stalled else "unfinished"}
            if caching:
                out_reqs[rid].update(prefix_hit_tokens=None, cached_tokens=0, hits=[])
            continue
        r = reqs[rid]
        status = r.status if r.status == "finished" else ("stalled" if stalled else "unfinished")
        out_reqs[rid] = {"first_token_step": r.first_token_step, "finish_step": r.finish_step,
                         "num_preemptions": r.preemptions, "status": status}
        if caching:  # P8
            out_reqs[rid].update(prefix_hit_tokens=r.hits[0] if r.hits else None,
                                 cached_tokens=sum(r.hits), hits=list(r.hits))
    return {"steps": steps, "requests": out_reqs}
