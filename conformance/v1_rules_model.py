"""conformance/RULES.md as code: a small, stdlib-only model of vLLM 0.33.0's V1
scheduler on the harness's step clock (sync or async scheduling, prefix caching off or on,
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
                 "finish_step", "tokens", "answer", "hashes", "num_cached", "hits",
                 "placeholders", "in_flight", "stale")

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
        self.placeholders = 0  # A4: tokens sampled in steps whose output is not back yet
        self.in_flight = 0  # tokens scheduled in steps whose output is not back yet
        self.stale = 0  # A5: of those, the ones scheduled before its last preemption

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

    def remove(self, r: _Req) -> None:  # A5: a victim its stale token finished
        if self.priority:
            self.heap = [item for item in self.heap if item[1] is not r]
            heapq.heapify(self.heap)
        else:
            self.dq.remove(r)


class _Engine:
    """One workload on the step clock: arrivals (R9, R11, R13), `schedule()` (R3-R12, P2-P5,
    and A4's placeholders) and `deliver()` (R2, R11, P1, P7, A5, A6): the model step's
    outputs, at once (sync) or one decision later (async, A1)."""

    def __init__(self, config: dict[str, Any], workload: dict[str, Any]) -> None:
        cfg = {**DEFAULTS, **config}
        self.bs = int(cfg["block_size"])
        self.mml = int(cfg["max_model_len"])
        self.budget_max = int(cfg["max_num_batched_tokens"])
        self.max_seqs = int(cfg["max_num_seqs"])
        self.chunked = bool(cfg["enable_chunked_prefill"])
        self.threshold_cfg = int(cfg["long_prefill_token_threshold"])
        self.prio = cfg["policy"] == "priority"
        self.full_isl = bool(cfg["scheduler_reserve_full_isl"])
        self.caching = bool(cfg["enable_prefix_caching"])
        self.async_ = bool(cfg.get("async_scheduling", False))
        self.num_blocks = int(cfg["num_blocks"])
        self.pool = _Pool(self.num_blocks - 1)  # R1: block 0 is the null block
        self.watermark_blocks = int(float(cfg["watermark"]) * self.num_blocks)

        # R13: a conversation's later turn (`after`) arrives `think_steps` steps after the step
        # in which the earlier request finished or was rejected; the others at `arrival_step`.
        self.specs = specs = workload["requests"]
        self.dependents: dict[str, list[int]] = {}
        for i, spec in enumerate(specs):
            if spec.get("after") is not None:
                self.dependents.setdefault(str(spec["after"]), []).append(i)
        order = sorted((i for i, s in enumerate(specs) if s.get("after") is None),
                       key=lambda i: (int(specs[i]["arrival_step"]), i))
        self.by_step: dict[int, list[int]] = {}
        for i in order:
            self.by_step.setdefault(int(specs[i]["arrival_step"]), []).append(i)
        self.arrival_step: dict[int, int] = {i: int(specs[i]["arrival_step"]) for i in order}
        self.reqs: dict[str, _Req] = {}
        self.rejected_at: dict[str, int] = {}
        self.waiting = _Waiting(self.prio)
        self.running: list[_Req] = []
        self.open_ids: set[str] = set()
        self.finished_unseen = False  # vLLM's finished_req_ids: has_requests() until a schedule

    def ended(self, rid: str, at: int) -> None:
        specs = self.specs
        for j in self.dependents.get(rid, ()):
            self.arrival_step[j] = at + 1 + int(specs[j].get("think_steps", 0))
            self.by_step.setdefault(self.arrival_step[j], []).append(j)
            self.by_step[self.arrival_step[j]].sort()

    def arrive(self, step: int) -> list[str]:
        """The arrivals of `step`; the ids rejected (R11)."""
        rejected: list[str] = []
        for i in self.by_step.pop(step, []):
            spec = self.specs[i]
            rid = str(spec["id"])
            if int(spec["prompt_len"]) >= self.mml:  # R11: input processor rejects
                rejected.append(rid)
                self.rejected_at[rid] = step
                self.ended(rid, step)
                continue
            t = float(spec.get("arrival_time", self.arrival_step[i] + i * 1e-6))
            r = self.reqs[rid] = _Req(spec, t)
            if self.caching:  # P1: the same token ids the driver gives vLLM
                prompt, r.answer = prefix_tokens.request_tokens(spec)
                r.tokens = prompt
                r.extend_hashes(self.bs)
            self.waiting.add(r)
            self.open_ids.add(rid)
        return rejected

    def schedule(self) -> tuple[dict[str, int], list[str], list[list[Any]], list[str]]:
        """One `schedule()`: the tokens per request, the victims, the admissions' hits and the
        requests that sample a token in the step (no prefill chunk)."""
        pool, bs, mml, running, waiting = self.pool, self.bs, self.mml, self.running, self.waiting
        prio, caching = self.prio, self.caching
        # R5: the threshold counts running + waiting at the start of the step.
        threshold = self.threshold_cfg if len(running) + len(waiting) > 1 else 0
        budget = self.budget_max
        scheduled: dict[str, int] = {}
        preempted: list[str] = []
        hits: list[list[Any]] = []
        pool.evicted = 0

        # R3: the running loop, in running-list order.
        idx = 0
        while idx < len(running) and budget > 0:
            r = running[idx]
            # A4: the last token is in flight: no step more (async only: placeholders > 0)
            if r.placeholders and r.computed + 2 - r.placeholders >= r.prompt + r.max_tokens:
                idx += 1
                continue
            n = r.num_tokens + r.placeholders - r.computed
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
                    # P4 (A6: num_tokens lags the tokens in flight)
                    pool.cache(r, min(r.computed + n, r.num_tokens), bs)
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
                # R7, P7: what preemption does to the victim (its cached blocks stay cached);
                # A5: what it has in flight becomes stale.
                pool.release(victim.blist)
                victim.blist = []
                victim.num_cached = 0
                victim.computed = 0
                victim.stale = victim.in_flight
                victim.placeholders = 0
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
                if len(running) >= self.max_seqs:  # R10
                    break
                r = waiting.peek()
                # P2: the longest run of cached full blocks, at most num_tokens - 1 tokens.
                hit_blocks = pool.lookup(r.hashes, (r.num_tokens - 1) // bs) if caching else []
                hit = len(hit_blocks) * bs
                n = r.num_tokens - hit
                if 0 < threshold < n:
                    n = threshold
                if not self.chunked and n > budget:  # R12
                    break
                n = min(n, budget)
                wm = self.watermark_blocks if running else 0
                # P3: hit blocks nobody holds are taken from the free queue too.
                evictable = sum(b.ref == 0 for b in hit_blocks)
                if self.full_isl and (max(_cdiv(min(r.num_tokens, mml), bs) - len(hit_blocks), 0)
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

        # R2: the tokens count as computed once scheduled; a request whose tokens (and those in
        # flight) are all computed samples one (A4: it gets a placeholder until it arrives).
        sampling: list[str] = []
        for rid, n in scheduled.items():
            r = self.reqs[rid]
            r.computed += n
            r.in_flight += n
            if r.computed >= r.num_tokens + r.placeholders:
                sampling.append(rid)
                if self.async_:
                    r.placeholders += 1
        self.finished_unseen = False
        return scheduled, preempted, hits, sampling

    def deliver(self, scheduled: dict[str, int], sampling: list[str], step: int) -> list[str]:
        """`update_from_output()` of the step `scheduled` (decided as step `step`): one token for
        each of `sampling`; the ids finished."""
        pool, bs, mml = self.pool, self.bs, self.mml
        finished: list[str] = []
        for rid, n in scheduled.items():
            r = self.reqs[rid]
            r.in_flight -= n
            stale = r.stale > 0  # A5: output of a step decided before its preemption
            if stale:
                r.stale -= n
            if r.status == "finished" or rid not in sampling:
                continue
            had_placeholders = r.placeholders > 0
            if self.caching:  # P1: the sampled token extends the hashes
                r.tokens.append(prefix_tokens.output_token(r.id, r.answer, r.outputs))
                r.extend_hashes(bs)
            r.outputs += 1
            if not stale and r.placeholders:
                r.placeholders -= 1
            if r.first_token_step is None:
                r.first_token_step = step
            was_running = r.status == "running"
            if not stale and was_running and had_placeholders:  # A6
                pool.cache(r, r.computed - r.in_flight, bs)
            if r.num_tokens >= mml or r.outputs >= r.max_tokens:  # R11
                r.status = "finished"
                r.finish_step = step
                if was_running:
                    pool.release(r.blist)
                    r.blist = []
                else:  # A5: a victim stopped by its stale token, in the queue
                    self.waiting.remove(r)
                finished.append(rid)
                self.open_ids.discard(rid)
                self.ended(rid, step)
        if finished:
            self.running = [q for q in self.running if q.status != "finished"]
            self.finished_unseen = True
        return finished

    def has_requests(self) -> bool:
        return bool(self.running or len(self.waiting) or self.finished_unseen)

    def answer(self, steps: list[dict[str, Any]], stalled: bool) -> dict[str, Any]:
        caching, pool = self.caching, self.pool
        if not self.open_ids and not self.by_step:  # every block came back, cached or not
            assert pool.free == self.num_blocks - 1 and not any(
                b.ref for v in pool.by_hash.values() for b in v), "blocks leaked"
        out_reqs: dict[str, dict[str, Any]] = {}
        for spec in self.specs:
            rid = str(spec["id"])
            if rid in self.rejected_at:
                out_reqs[rid] = {"first_token_step": None, "finish_step": self.rejected_at[rid],
                                 "num_preemptions": 0, "status": "rejected"}
                if caching:
                    out_reqs[rid].update(prefix_hit_tokens=None, cached_tokens=0, hits=[])
                continue
            if rid not in self.reqs:  # a later turn of a conversation that never ended
                out_reqs[rid] = {"first_token_step": None, "finish_step": None,
                                 "num_preemptions": 0,
                                 "status": "stalled" if stalled else "unfinished"}
                if caching:
                    out_reqs[rid].update(prefix_hit_tokens=None, cached_tokens=0, hits=[])
                continue
            r = self.reqs[rid]
            status = r.status if r.status == "finished" else (
                "stalled" if stalled else "unfinished")
            out_reqs[rid] = {"first_token_step": r.first_token_step,
                             "finish_step": r.finish_step,
                             "num_preemptions": r.preemptions, "status": status}
            if caching:  # P8
                out_reqs[rid].update(prefix_hit_tokens=r.hits[0] if r.hits else None,
                                     cached_tokens=sum(r.hits), hits=list(r.hits))
        return {"steps": steps, "requests": out_reqs}


def _entry(step: int, scheduled: dict[str, int], preempted: list[str], finished: list[str],
           rejected: list[str], hits: list[list[Any]], engine: _Engine) -> dict[str, Any]:
    entry: dict[str, Any] = {"step": step, "scheduled": [[k, v] for k, v in scheduled.items()]}
    if preempted:
        entry["preempted"] = preempted
    if finished:
        entry["finished"] = finished
    if rejected:
        entry["rejected"] = rejected
    if engine.caching:
        if hits:
            entry["hits"] = hits
        entry["cached_blocks"] = engine.pool.cached
        if engine.pool.evicted:
            entry["evicted_blocks"] = engine.pool.evicted
    return entry


def decisions(config: dict[str, Any], workload: dict[str, Any],
              max_steps: int = 5000) -> dict[str, Any]:
    """The rules' decisions for a harness `(config, workload)`; with `async_scheduling` in the
    config, as the engine core's batch queue runs `AsyncScheduler` (A1-A6)."""
    engine = _Engine(config, workload)
    if engine.async_:
        return _async_decisions(engine, max_steps)
    steps: list[dict[str, Any]] = []
    stalled = False
    step = 0
    while step < max_steps:
        rejected = engine.arrive(step)
        scheduled, preempted, hits, sampling = engine.schedule()
        finished = engine.deliver(scheduled, sampling, step)  # R2: the model step
        steps.append(_entry(step, scheduled, preempted, finished, rejected, hits, engine))
        step += 1
        if not engine.open_ids and not engine.by_step:
            break
        if not scheduled and engine.open_ids and not engine.by_step:
            stalled = True
            break
    return engine.answer(steps, stalled)


def _async_decisions(engine: _Engine, max_steps: int) -> dict[str, Any]:
    """A1-A3: the engine core's batch queue of two on the harness's clock (a step that
    schedules or preempts takes one unit on the model, back to back; the loop's time is the
    end of the step it last waited for, or the next arrival when idle); a decision with
    nothing in it takes no time and is no step. The cache is observed as the next decision
    finds it."""
    entries: dict[int, dict[str, Any]] = {}
    queue: deque[tuple[dict[str, int], list[str], int, int]] = deque()
    now = model_free = 0
    idle = 0  # decisions in a row that did nothing
    stalled = False
    last: int | None = None  # the step decided last, its cache not yet observed

    def entry(step: int) -> dict[str, Any]:
        return entries.setdefault(step, {"step": step, "scheduled": []})

    def observe() -> None:
        nonlocal last
        if engine.caching and last is not None:
            entry(last)["cached_blocks"] = engine.pool.cached
        last = None

    def finish(step: int, finished: list[str]) -> None:
        if finished:
            entry(step).setdefault("finished", []).extend(finished)

    while True:
        for k in sorted(k for k in engine.by_step if k <= now):
            rejected = engine.arrive(k)
            if rejected:
                entry(k).setdefault("rejected", []).extend(rejected)
            idle = 0
        if not engine.has_requests() and not queue:
            if not engine.by_step:
                break
            now = min(engine.by_step)
            continue
        if engine.has_requests():
            if max(now, model_free) >= max_steps:  # stop deciding; what runs finishes
                while queue:
                    scheduled, sampling, at, _end = queue.pop()
                    finish(at, engine.deliver(scheduled, sampling, at))
                break
            observe()
            scheduled, preempted, hits, sampling = engine.schedule()
            start = max(now, model_free)
            if scheduled or preempted:
                model_free = start + 1
                e = entry(start)
                e["scheduled"] += [[k, v] for k, v in scheduled.items()]
                if preempted:
                    e.setdefault("preempted", []).extend(preempted)
                if hits:
                    e.setdefault("hits", []).extend(hits)
                if engine.pool.evicted:
                    e["evicted_blocks"] = e.get("evicted_blocks", 0) + engine.pool.evicted
                idle = 0
                last = start
            else:
                idle += 1
            queue.appendleft((scheduled, sampling, start,
                              model_free if scheduled or preempted else now))
            if len(queue) < 2 and (scheduled or engine.has_requests()):
                continue
        scheduled, sampling, at, end = queue.pop()
        now = max(now, end)
        finished = engine.deliver(scheduled, sampling, at)
        finish(at, finished)
        if finished:
            idle = 0
        if idle >= 2 and not any(item[3] > now for item in queue):
            if engine.by_step:
                now = min(engine.by_step)
                idle = 0
                continue
            stalled = bool(engine.open_ids)
            break
    observe()
    steps: list[dict[str, Any]] = []
    for k in range(max(entries, default=-1) + 1):
        e = entries.get(k, {"step": k, "scheduled": []})
        if engine.caching and "cached_blocks" not in e:
            e["cached_blocks"] = steps[-1]["cached_blocks"] if steps else 0
        steps.append(e)
    return engine.answer(steps, stalled)
