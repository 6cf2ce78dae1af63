"""kvsched's decisions as the conformance harness asks for them, on its step clock: the
`vllm_v1`, `vllm_v0` and `sglang` presets answering the questions that the drivers of the real
engines (top-level `conformance/`) recorded, for `conformance/compare.py` and
`conformance/sglang_compare.py` to hold side by side. (It was `kvsched.conformance`, a second
meaning of the harness's name; that path still imports: `kvsched/_moved.py`.)

`vllm_v1_decisions(config, workload)` answers what `conformance/compare.py` asks (see
conformance/README.md): per step, who ran with how many tokens, who was preempted, who
finished or was rejected; per request its first-token step, finish step, preemptions and
status. It runs the public API only: `simulate` with the `vllm_v1` preset on the step
clock, and reads the step numbers back from the batches and events.

The step clock: harness step k is kvsched step k + 1 (arrivals of step k arrive just before
time k + 1, in the order of vLLM's `(arrival_time, index)`: distinct arrival times stay
distinct, equal ones stay equal, so kvsched's tie rules decide where vLLM's did).

Prefix caching (`enable_prefix_caching` in the record's config): each request's `prefix`
segments become `Request.prefix`, `engine.enable_prefix_caching` is set, and the answer
carries each request's `prefix_hit_tokens` and `cached_tokens`. A conversation's later turn
(`after`) arrives at the `arrival_step` the driver recorded for it, so kvsched is asked the
same question vLLM was, whatever its own think-time rule.
"""

from __future__ import annotations

from typing import Any

from kvsched.config import EngineConfig
from kvsched.kinds import EventKind
from kvsched.kvcache.radix import RadixCache
from kvsched.policies import make_policy
from kvsched.prefix import Prefix
from kvsched.preset_engine import engine_config
from kvsched.request import Request, Status
from kvsched.reservation import NewTokenRatio, make_reservation
from kvsched.schema import EngineSpec
from kvsched.sequence import Seq
from kvsched.simulator import simulate
from kvsched.timing import StepClock

# The harness's defaults (vLLM 0.33.0's, as conformance/vllm_driver.py fills them in).
HARNESS_DEFAULTS: dict[str, Any] = {
    "num_blocks": 10000, "block_size": 16, "max_num_batched_tokens": 2048,
    "max_num_seqs": 128, "enable_chunked_prefill": True, "long_prefill_token_threshold": 0,
    "policy": "fcfs", "max_model_len": 8192, "scheduler_reserve_full_isl": True,
    "watermark": 0.0,
}
_ENGINE_KEYS = ("num_blocks", "block_size", "max_num_batched_tokens", "max_num_seqs",
                "enable_chunked_prefill", "long_prefill_token_threshold", "max_model_len",
                "scheduler_reserve_full_isl", "watermark")
_SPACING = 1e-6  # between arrivals of one step, in steps


def vllm_v1_decisions(config: dict[str, Any], workload: dict[str, Any],
                      max_steps: int = 100_000) -> dict[str, Any]:
    """kvsched's decisions for a harness `(config, workload)`, in the record's structure
    (up to the record's `max_steps` when vLLM was stopped there: a livelock)."""
    cfg = {**HARNESS_DEFAULTS, **config}
    caching = bool(cfg.get("enable_prefix_caching", False))
    until = config.get("max_steps")
    engine = EngineSpec.model_validate(
        {"preset": "vllm_v1", "max_steps": max_steps if until is None else int(until),
         "enable_prefix_caching": caching,
         "async_scheduling": bool(cfg.get("async_scheduling", False)),
         **{key: cfg[key] for key in _ENGINE_KEYS}}).to_config()
    out = _decisions(engine, cfg["policy"], workload, caching)
    return out if until is None else _cut(out, int(until))


# The V0 harness's defaults (vLLM 0.8.5's, as conformance/vllm_v0_driver.py fills them in).
V0_HARNESS_DEFAULTS: dict[str, Any] = {
    "num_blocks": 10000, "block_size": 16, "max_num_batched_tokens": None,
    "max_num_seqs": 128, "max_model_len": 8192, "enable_chunked_prefill": False,
    "policy": "fcfs", "preemption_mode": None, "max_num_partial_prefills": 1,
    "max_long_partial_prefills": 1, "long_prefill_token_threshold": 0,
    "enable_prefix_caching": False,
}


def vllm_v0_engine(config: dict[str, Any], max_steps: int = 100_000) -> EngineConfig:
    """The `vllm_v0` preset for a V0 harness config (`num_blocks` is vLLM's num_gpu_blocks;
    the watermark is the block manager's fixed 1%, the preset's own)."""
    cfg = {**V0_HARNESS_DEFAULTS, **config}
    chunked = bool(cfg["enable_chunked_prefill"])
    budget = cfg["max_num_batched_tokens"]
    if budget is None:  # SchedulerConfig.__post_init__
        budget = 2048 if chunked else max(int(cfg["max_model_len"]), 2048)
    keys: dict[str, Any] = {
        "preset": "vllm_v0", "max_steps": max_steps,
        "num_blocks": int(cfg["num_blocks"]), "block_size": int(cfg["block_size"]),
        "max_num_batched_tokens": int(budget), "max_num_seqs": int(cfg["max_num_seqs"]),
        "max_model_len": int(cfg["max_model_len"]), "enable_chunked_prefill": chunked,
        "max_num_partial_prefills": int(cfg["max_num_partial_prefills"]),
        "max_long_partial_prefills": int(cfg["max_long_partial_prefills"]),
        "long_prefill_token_threshold": int(cfg["long_prefill_token_threshold"]),
        "enable_prefix_caching": bool(cfg["enable_prefix_caching"]),
    }
    if cfg["preemption_mode"] is not None:  # None: recompute for a one-sequence request
        keys["preemption_mode"] = cfg["preemption_mode"]
    return EngineSpec.model_validate(keys).to_config()


def vllm_v0_decisions(config: dict[str, Any], workload: dict[str, Any],
                      max_steps: int = 100_000) -> dict[str, Any]:
    """kvsched's `vllm_v0` decisions for a V0 harness `(config, workload)`; the steps also
    carry `swapped_out` and `swapped_in` (and, with prefix caching, each admission's hit)."""
    policy = config.get("policy", V0_HARNESS_DEFAULTS["policy"])
    until = config.get("max_steps")  # the record stopped there (a V0 livelock)
    caching = bool(config.get("enable_prefix_caching", False))
    out = _decisions(vllm_v0_engine(config, max_steps if until is None else int(until)),
                     policy, workload, caching, swaps=True)
    return out if until is None else _cut(out, int(until))


def _cut(decisions: dict[str, Any], until: int) -> dict[str, Any]:
    """The decisions of steps before `until` only (kvsched's max_steps counts the steps it
    ran, not the idle ones the harness's clock counts too)."""
    steps = [s for s in decisions["steps"] if s["step"] < until]
    preemptions: dict[str, int] = {}
    for s in steps:
        for rid in s["preempted"]:
            preemptions[rid] = preemptions.get(rid, 0) + 1
    requests = {}
    for rid, r in decisions["requests"].items():
        r = dict(r, num_preemptions=preemptions.get(rid, 0))
        if r["first_token_step"] is not None and r["first_token_step"] >= until:
            r["first_token_step"] = None
        if r["finish_step"] is not None and r["finish_step"] >= until:
            r.update(finish_step=None, status="unfinished")
        requests[rid] = r
    return {"steps": steps, "requests": requests}


def _decisions(engine: EngineConfig, policy: str, workload: dict[str, Any], caching: bool,
               swaps: bool = False) -> dict[str, Any]:
    """Run `workload` through `simulate` on the step clock; read the decisions back."""
    specs = workload["requests"]

    def vllm_time(i: int) -> float:
        spec = specs[i]
        return float(spec.get("arrival_time", int(spec["arrival_step"]) + i * 1e-6))

    order = sorted(range(len(specs)), key=lambda i: (int(specs[i]["arrival_step"]),
                                                     vllm_time(i), i))
    # requests vLLM saw at one arrival_time get one time here too, so that kvsched's own
    # tie rules decide between them (input order in a queue, request id in V1's heap)
    times = sorted({(int(specs[i]["arrival_step"]), vllm_time(i)) for i in order})
    rank_of = {key: rank for rank, key in enumerate(times)}
    requests = []
    for i in order:
        spec = specs[i]
        rank = rank_of[(int(spec["arrival_step"]), vllm_time(i))]
        arrival = int(spec["arrival_step"]) + 1 - (len(times) - rank) * _SPACING
        segments = tuple((int(s), int(n)) for s, n in spec.get("prefix") or ())
        requests.append(Request(str(spec["id"]), arrival, int(spec["prompt_len"]),
                                int(spec["output_len"]), int(spec.get("priority", 0)),
                                prefix=Prefix(segments) if segments else None))
    result = simulate(requests, engine, make_policy(policy), StepClock(),
                      record_batches=True)

    steps: dict[int, dict[str, Any]] = {}

    def at(step: int) -> dict[str, Any]:
        return steps.setdefault(step - 1, {"scheduled": [], "preempted": [], "finished": [],
                                           "rejected": []})

    for step, _time, rid, _kind, tokens in result.batches or ():
        at(step)["scheduled"].append([rid, int(tokens)])
    finish_step: dict[str, int] = {}
    for step, _time, rid, event, _detail in result.events:
        if event == EventKind.PREEMPT:
            at(step)["preempted"].append(rid)
        elif event == EventKind.FINISH:
            at(step)["finished"].append(rid)
            finish_step[rid] = step - 1
        elif swaps and event in (EventKind.SWAP_OUT, EventKind.SWAP_IN):
            at(step).setdefault("swapped_out" if event == EventKind.SWAP_OUT else "swapped_in",
                                []).append(rid)
        elif event == EventKind.REJECT:
            at(step)["rejected"].append(rid)
            finish_step[rid] = step - 1
    stalled = any(r.status == Status.STARVED for r in result.requests)
    out_requests: dict[str, dict[str, Any]] = {}
    for record in result.requests:
        first = record.first_token_time
        status = {Status.FINISHED: "finished", Status.REJECTED: "rejected",
                  Status.STARVED: "stalled"}.get(Status(record.status), "unfinished")
        if stalled and status == "unfinished":
            status = "stalled"
        out_requests[record.request_id] = {
            # a step k (kvsched k + 1) ends at time k + 2
            "first_token_step": None if first is None else round(first) - 2,
            "finish_step": finish_step.get(record.request_id),
            "num_preemptions": record.num_preemptions,
            "status": status,
        }
        if caching:
            hit = getattr(record, "prefix_hit_tokens", None)
            out_requests[record.request_id].update(
                prefix_hit_tokens=None if status == "rejected" else hit,
                cached_tokens=int(getattr(record, "cached_tokens", 0) or 0))
    if caching:  # the cache's step fields: hits per admission, cached and evicted blocks
        hits: dict[int, list[list[Any]]] = {}
        for step, _time, rid, event, detail in result.events:
            if event == EventKind.ADMIT:
                cached = detail.split(", ")[1] if ", " in detail else ""
                hit = int(cached.split()[0]) if cached.endswith(" cached") else 0
                hits.setdefault(step - 1, []).append([rid, hit])
        rows = {row[0] - 1: row for row in result.steps}
        cached_blocks = 0
        for k in range(max(rows, default=-1) + 1):
            entry = at(k + 1)
            if k in rows:
                cached_blocks = rows[k][21]
                entry["evicted_blocks"] = rows[k][22]
            entry["cached_blocks"] = cached_blocks  # an idle step changes nothing
            entry["hits"] = hits.get(k, [])
    return {"steps": [{"step": k, **v} for k, v in sorted(steps.items())],
            "requests": out_requests}


# --- SGLang: one prefill round at a time (conformance/sglang_driver.py) ---------------------

_SGLANG_NO_CHUNK_BUDGET = 10**9  # chunking off: SGLang has no per-step token budget


def sglang_engine(config: dict[str, Any]) -> Any:
    """The `sglang` preset's `EngineConfig` for a round record's `config`
    (`page_size`, `chunked_prefill_size` or None, `max_prefill_tokens`)."""
    chunk = config.get("chunked_prefill_size")
    return engine_config("sglang", block_size=int(config["page_size"]),
                         max_prefill_tokens=int(config["max_prefill_tokens"]),
                         chunked_prefill=chunk is not None,
                         max_num_batched_tokens=int(chunk) if chunk is not None
                         else _SGLANG_NO_CHUNK_BUDGET)


def sglang_round_decisions(config: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """kvsched's answer to one SGLang prefill round: who is admitted with how many tokens,
    which request is left chunked, and whether the batch-full latch is set.

    It runs the `sglang` preset's admission rule (`kvsched.reservation`) the way the
    scheduler's prefill-first step calls it: the unfinished chunk continues first
    (`_continue_prefills`), then `_admit` walks the waiting queue, `check` before and
    `admitted` after each admission, free tokens falling by each chunk's pages as kvsched
    allocates them."""
    engine = sglang_engine(config)
    reservation = make_reservation(engine)
    assert reservation is not None
    reservation.ratio.current = float(state["new_token_ratio"])
    page = engine.block_size
    budget = engine.max_num_batched_tokens
    cap = engine.max_num_batched_tokens  # the scheduler's chunk cap under the sglang preset
    free = int(state["free_tokens"])

    def seq(spec: dict[str, Any], index: int) -> Seq:
        request = Request(str(spec["id"]), 0.0, int(spec["prompt_len"]),
                          int(spec["max_new_tokens"]))
        return Seq.of(request, index, page)

    running = [_decoding(r, i, page) for i, r in enumerate(state["running"])]
    admitted: list[list[Any]] = []
    continued = []
    chunked_next = None
    spec = state.get("chunked")
    if spec is not None:
        current = seq(spec, 0)
        current.prefill_left = int(spec["prompt_len"]) - int(spec["done"])
        chunk = min(current.prefill_left, budget, cap)
        limit = reservation.continue_limit(running, 0, free)
        if limit is not None:
            chunk = min(chunk, limit)
        budget -= chunk
        current.prefill_left -= chunk
        free -= -(-chunk // page) * page
        continued.append((current, chunk))
        admitted.append([current.request.request_id, chunk])
        if current.prefill_left:
            chunked_next = current.request.request_id
    waiting = [seq(w, i + 1) for i, w in enumerate(state["waiting"])]
    if reservation.open_round(running, 0, continued, len(waiting)):
        for head in waiting:
            if not reservation.may_try(free):
                break
            todo = head.prompt_len
            allowed = reservation.check(head, todo, free)
            if allowed is None:
                break
            if engine.chunked_prefill:
                chunk = min(todo, budget, cap, allowed)
            elif todo > budget:
                break
            else:
                chunk = todo
            budget -= chunk
            free -= -(-chunk // page) * page
            admitted.append([head.request.request_id, chunk])
            if chunk < todo:
                chunked_next = head.request.request_id
            if not reservation.admitted(head, todo, chunk, free):
                break
    return {"admitted": admitted, "chunked_next": chunked_next,
            "batch_is_full": reservation.batch_is_full}


def _decoding(spec: dict[str, Any], index: int, page: int) -> Seq:
    """A decoding request of a round record: `generated` tokens so far (its `base`, the
    reservation reading it at tick 0)."""
    request = Request(str(spec["id"]), 0.0, int(spec["prompt_len"]),
                      int(spec["max_new_tokens"]))
    seq = Seq.of(request, index, page)
    seq.base = int(spec["generated"])
    return seq


# The loop harness's defaults (conformance/sglang_loop_driver.py DEFAULTS).
SGLANG_LOOP_DEFAULTS: dict[str, Any] = {
    "page_size": 1, "num_tokens": 4096, "chunked_prefill_size": 512,
    "max_prefill_tokens": 16384, "max_running_requests": 32,
    "schedule_conservativeness": 1.0, "enable_prefix_caching": False,
}


def sglang_loop_engine(config: dict[str, Any], max_steps: int = 100_000) -> EngineConfig:
    """The `sglang` preset for a loop record's `config`: `page_size` is the block size,
    `num_tokens` the pool (whole pages), `max_running_requests` the request slots."""
    cfg = {**SGLANG_LOOP_DEFAULTS, **config}
    page = int(cfg["page_size"])
    chunk = cfg["chunked_prefill_size"]
    return EngineSpec.model_validate({
        "preset": "sglang", "max_steps": max_steps, "block_size": page,
        "num_blocks": int(cfg["num_tokens"]) // page,
        "max_num_seqs": int(cfg["max_running_requests"]),
        "max_prefill_tokens": int(cfg["max_prefill_tokens"]),
        "chunked_prefill": chunk is not None,
        "max_num_batched_tokens": int(chunk) if chunk is not None else _SGLANG_NO_CHUNK_BUDGET,
        "schedule_conservativeness": float(cfg["schedule_conservativeness"]),
        "enable_prefix_caching": bool(cfg["enable_prefix_caching"]),
    }).to_config()


def sglang_decisions(config: dict[str, Any], workload: dict[str, Any],
                     max_steps: int = 100_000) -> dict[str, Any]:
    """kvsched's `sglang` decisions for a loop record (conformance/sglang_loop_driver.py), in
    the vLLM records' structure: per step who prefilled how many tokens or decoded, who was
    retracted, who finished."""
    caching = bool(config.get("enable_prefix_caching", False))
    return _decisions(sglang_loop_engine(config, max_steps), "fcfs", workload, caching)


def sglang_ratio_values(conservativeness: float, events: list[str]) -> list[float]:
    """kvsched's `new_token_ratio` after each event of a driver ratio trace."""
    ratio = NewTokenRatio(conservativeness)
    out = [ratio.current]
    for event in events:
        if event == "decay":
            ratio.decay_steps(1)
        elif event == "reset":
            ratio.current = ratio.init
        else:
            pairs = [p.split("/") for p in event.split(":", 1)[1].split(",")]
            ratio.after_retract((int(g), int(o)) for g, o in pairs)
        out.append(ratio.current)
    return out


def sglang_priority_round_decisions(config: dict[str, Any],
                                    state: dict[str, Any]) -> dict[str, Any]:
    """kvsched's answer to one priority-preemption round (page size 1, chunking on): who is
    admitted, who is preempted, the latch. As `Scheduler._admit` with
    `enable_priority_scheduling`: a head that finds the request slots full (or follows a
    preemption in this round) asks `priority_victims`; the victims leave the running batch,
    their KV back in the pool (prompt + generated - 1 tokens, as kvsched counts a decoding
    request's cache)."""
    engine = engine_config("sglang", block_size=1, chunked_prefill=True,
                           max_num_batched_tokens=int(config["chunked_prefill_size"]),
                           max_prefill_tokens=int(config["max_prefill_tokens"]),
                           enable_priority_scheduling=True,
                           priority_scheduling_preemption_threshold=int(config["threshold"]))
    reservation = make_reservation(engine)
    assert reservation is not None and reservation.preemption_threshold is not None
    reservation.ratio.current = float(state["new_token_ratio"])
    slots = int(config["max_running_requests"])
    budget = cap = engine.max_num_batched_tokens
    free = int(state["free_tokens"])

    def seq(spec: dict[str, Any], index: int) -> Seq:
        request = Request(str(spec["id"]), float(spec["arrival"]), int(spec["prompt_len"]),
                          int(spec["max_new_tokens"]), int(spec["priority"]))
        return Seq.of(request, index, 1)

    running = [(seq(r, i), int(r["generated"])) for i, r in enumerate(state["running"])]
    waiting = [seq(w, len(running) + i) for i, w in enumerate(state["waiting"])]
    for spec, head in zip(state["waiting"], waiting, strict=True):
        if spec.get("tried"):
            reservation.prepared(head)
    for s, g in running:
        s.base = g  # (the reservation reads it at tick 0)
    reservation.open_round([s for s, _ in running], 0, [], len(waiting))
    admitted: list[list[Any]] = []
    preempted: list[str] = []
    for head in waiting:
        if not reservation.may_try(free):
            break
        if len(running) + len(admitted) >= slots:
            reservation.batch_is_full = True
        if reservation.batch_is_full:
            chosen = reservation.priority_victims(head, running, free)
            if chosen is None:
                break
            for victim in chosen:
                done = next(g for s, g in running if s is victim)
                free += victim.prompt_len + done - 1
                preempted.append(victim.request.request_id)
            running = [(s, g) for s, g in running if s not in chosen]
        todo = head.prompt_len
        allowed = reservation.check(head, todo, free)
        if allowed is None:
            break
        chunk = min(todo, budget, cap, allowed)
        budget -= chunk
        free -= chunk
        admitted.append([head.request.request_id, chunk])
        if not reservation.admitted(head, todo, chunk, free):
            break
    return {"admitted": admitted, "preempted": sorted(preempted),
            "batch_is_full": reservation.batch_is_full}


# --- SGLang's radix cache, operation by operation (conformance/sglang_radix_driver.py) -----

def sglang_radix_outcomes(case: dict[str, Any]) -> list[dict[str, Any]]:
    """kvsched's `RadixCache` driven by a radix case's operations, as SGLang's tree is: an
    insert (`_insert`, the tokens already in the tree), a match (`_walk`, splitting where it
    ends), the lock of that match's node and its release (`_lock`), an eviction (`_evict`:
    the tokens and the nodes, in order). After each: evictable and locked tokens."""
    page = int(case["config"]["page_size"])
    cache = RadixCache(1 << 30, page)
    log: list[tuple[int, int, tuple[int, int]]] = []
    cache.evicted_log = log
    prefixes = {sid: Prefix(tuple((int(s), int(n)) for s, n in segs))
                for sid, segs in case["sequences"].items()}
    matched: list[Any] = []
    locks: list[Any] = []
    out: list[dict[str, Any]] = []
    for op in case["ops"]:
        kind = op[0]
        res: dict[str, Any] = {}
        if kind == "insert":
            res["prefix_len"] = cache._insert(prefixes[op[1]], int(op[2]) // page * page)
        elif kind == "match":
            node, tokens = cache._walk(prefixes[op[1]], int(op[2]) // page * page, True)
            matched.append(node)
            res["matched"] = tokens
        elif kind == "lock":
            node = matched[int(op[1])]
            cache._lock(node, 1)
            locks.append(node)
        elif kind == "unlock":
            cache._lock(locks[int(op[1])], -1)
        elif kind == "evict":
            before = cache.evicted
            log.clear()
            cache._evict(int(op[1]))
            res["evicted"] = cache.evicted - before
            res["nodes"] = [[start, length, key[0], key[1]] for start, length, key in log]
        res["evictable"] = cache.evictable_tokens()
        res["protected"] = cache.tree_tokens - cache.evictable_tokens()
        out.append(res)
    return out
