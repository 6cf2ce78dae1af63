"""Drive the real vLLM 0.8.5 V0 scheduler on the CPU and record its per-step decisions.

Runs inside `.venv-conformance-v0` (vllm==0.8.5 installed without its CUDA pins, on the
CPU torch wheel; see `make conformance-v0-install`). Builds `vllm.core.scheduler.Scheduler`
the way vLLM's own V0 tests do (`tests/core/test_scheduler.py`,
`tests/core/test_chunked_prefill_scheduler.py`): a `SchedulerConfig`, a `CacheConfig` whose
`num_gpu_blocks` / `num_cpu_blocks` are set by hand, no LoRA config. Each step calls
`schedule()`, then does what the engine's output processing does for a one-sequence
request: `update_num_computed_tokens(token_chunk_size)` for every scheduled group, one
appended token for each group whose metadata says `do_sample`, the stop checker's two
length rules (`max_tokens` reached, or the sequence longer than `max_model_len`) with
`free_seq` on the finished sequence, then `free_finished_seq_groups()`.

No model, tokenizer, GPU or network is touched: the scheduler, the block manager and the
sequence classes are plain Python over torch's CPU wheel.

The step clock: requests arriving at step k are added (`add_seq_group`, in workload
order) before `schedule()` of step k; what step k decided is recorded in its entry.

Usage:
    python conformance/vllm_v0_driver.py --random 200 --seed 1 --out-dir DIR
    python conformance/vllm_v0_driver.py --cases --out-dir DIR     # vLLM's own V0 test cases
    python conformance/vllm_v0_driver.py --random-prefix 200 --seed 1 --out-dir DIR  # caching on
    python conformance/vllm_v0_driver.py --scenario S.json --out OUT.json  # {config, workload}

The record format is conformance/README.md's, with `format: kvsched-vllm-v0-record/1` and
two more step fields, `swapped_out` and `swapped_in`; `conformance/compare.py` reads it.

With `enable_prefix_caching` (the --random-prefix family) the prompts are the token ids of
their `prefix` segments (conformance/prefix_tokens.py, as the V1 driver feeds them), the block
manager caches, and the record carries what the V1 records carry of the cache: each
admission's hit in the step's `hits` and the requests' `prefix_hit_tokens` / `cached_tokens`.
A step's `scheduled` counts the tokens computed, as in V1's records: V0's `token_chunk_size`
less the cached tokens it skips (`_get_num_new_uncached_and_cached_tokens`, the value the
scheduler itself computed for that group in that `schedule()`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from conformance import prefix_tokens  # noqa: E402  (stdlib only, shared with the V1 driver)
from conformance.vllm_driver import (  # noqa: E402  (stdlib only at import)
    dump,
    random_prefix_case,
    tied_requests,
)

FORMAT = "kvsched-vllm-v0-record/1"

# vLLM 0.8.5's SchedulerConfig defaults where the harness leaves a key out (max_model_len and
# max_num_seqs are the values its __post_init__ falls back to; the budget is then
# max(max_model_len, 2048) without chunking, 2048 with it). The watermark is not a
# setting: the V0 block manager is always built with its default of 0.01.
DEFAULT_CONFIG: dict[str, Any] = {
    "num_blocks": 10000,  # num_gpu_blocks (V0 has no null block)
    "num_cpu_blocks": 10000,
    "block_size": 16,
    "max_num_batched_tokens": None,
    "max_num_seqs": 128,
    "max_model_len": 8192,
    "enable_chunked_prefill": False,
    "policy": "fcfs",
    "preemption_mode": None,  # None: recompute for one-sequence requests
    "max_num_partial_prefills": 1,
    "max_long_partial_prefills": 1,
    "long_prefill_token_threshold": 0,
    "enable_prefix_caching": False,
}

SAMPLED_TOKEN_ID = 7
VOCAB_SIZE = 32000


def rejection_reason(prompt_len: int, max_model_len: int) -> str | None:
    """LLMEngine._validate_model_input (0.8.5): a prompt longer than max_model_len is refused
    when it is added (a prompt of exactly max_model_len is accepted). Message verbatim."""
    if prompt_len > max_model_len:
        return (f"The decoder prompt (length {prompt_len}) is longer than the maximum model "
                f"length of {max_model_len}. Make sure that `max_model_len` is no smaller "
                "than the number of text tokens.")
    return None


class Harness:
    """One V0 Scheduler for one (config, workload) pair, with recording hooks."""

    def __init__(self, config: dict[str, Any]) -> None:
        from vllm.config import CacheConfig, SchedulerConfig
        from vllm.core.scheduler import Scheduler

        self.config = cfg = {**DEFAULT_CONFIG, **config}
        kwargs: dict[str, Any] = dict(
            runner_type="generate",
            max_num_seqs=int(cfg["max_num_seqs"]),
            max_model_len=int(cfg["max_model_len"]),
            enable_chunked_prefill=bool(cfg["enable_chunked_prefill"]),
            policy=cfg["policy"],
            preemption_mode=cfg["preemption_mode"],
            max_num_partial_prefills=int(cfg["max_num_partial_prefills"]),
            max_long_partial_prefills=int(cfg["max_long_partial_prefills"]),
            long_prefill_token_threshold=int(cfg["long_prefill_token_threshold"]),
        )
        if cfg["max_num_batched_tokens"] is not None:
            kwargs["max_num_batched_tokens"] = int(cfg["max_num_batched_tokens"])
        scheduler_config = SchedulerConfig(**kwargs)
        self.caching = bool(cfg["enable_prefix_caching"])
        cache_config = CacheConfig(int(cfg["block_size"]), 1.0, 1, "auto",
                                   enable_prefix_caching=self.caching)
        cache_config.num_gpu_blocks = int(cfg["num_blocks"])
        cache_config.num_cpu_blocks = int(cfg["num_cpu_blocks"])
        self.scheduler = sched = Scheduler(scheduler_config, cache_config, None)
        sc = sched.scheduler_config
        self.effective = {
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_num_seqs": sc.max_num_seqs,
            "max_model_len": sc.max_model_len,
            "enable_chunked_prefill": sc.chunked_prefill_enabled,
            "long_prefill_token_threshold": sc.long_prefill_token_threshold,
            "max_num_partial_prefills": sc.max_num_partial_prefills,
            "max_long_partial_prefills": sc.max_long_partial_prefills,
            "policy": sc.policy,
            "preemption_mode": sc.preemption_mode,
            "watermark_blocks": sched.block_manager.watermark_blocks,
            "free_blocks_at_start": sched.block_manager.get_num_free_gpu_blocks(),
            "enable_prefix_caching": sched.cache_config.enable_prefix_caching,
        }
        # Record victims (and their mode) in the order vLLM picks them, and swap-ins: the
        # outputs carry only block mappings and counts. The wrappers change nothing.
        self.preempted: list[tuple[str, str]] = []
        self.swapped_in: list[str] = []
        preempt, swap_in = sched._preempt, sched._swap_in

        def recording_preempt(seq_group: Any, *args: Any, **kwargs: Any) -> Any:
            mode = preempt(seq_group, *args, **kwargs)
            self.preempted.append((seq_group.request_id, mode.name.lower()))
            return mode

        def recording_swap_in(seq_group: Any, *args: Any, **kwargs: Any) -> Any:
            self.swapped_in.append(seq_group.request_id)
            return swap_in(seq_group, *args, **kwargs)

        sched._preempt = recording_preempt
        sched._swap_in = recording_swap_in

        # The cached tokens the scheduler counted for each group it looked at in this
        # schedule() (the last look is the one that sized what it scheduled).
        self.cached: dict[str, int] = {}
        count_tokens = sched._get_num_new_uncached_and_cached_tokens

        def recording_count(seq_group: Any, *args: Any, **kwargs: Any) -> Any:
            uncached, cached = count_tokens(seq_group, *args, **kwargs)
            self.cached[seq_group.request_id] = cached
            return uncached, cached

        sched._get_num_new_uncached_and_cached_tokens = recording_count
        self.answers: dict[str, list[int] | None] = {}

    def make_group(self, spec: dict[str, Any], index: int, arrival_time: float,
                   rng: random.Random) -> Any:
        """A one-sequence group as tests/core/utils.py::create_dummy_prompt builds it."""
        from vllm.inputs import token_inputs
        from vllm.sampling_params import SamplingParams
        from vllm.sequence import Sequence, SequenceGroup

        if self.caching or spec.get("prefix"):
            prompt, answer = prefix_tokens.request_tokens(spec)
            self.answers[str(spec["id"])] = answer
        else:
            prompt = [rng.randrange(100, VOCAB_SIZE) for _ in range(int(spec["prompt_len"]))]
        seq = Sequence(index, inputs=token_inputs(prompt),
                       block_size=int(self.config["block_size"]))
        return SequenceGroup(
            request_id=str(spec["id"]),
            seqs=[seq],
            arrival_time=arrival_time,
            sampling_params=SamplingParams(max_tokens=int(spec["output_len"]), ignore_eos=True,
                                           temperature=0.0),
            priority=int(spec.get("priority", 0)),
        )


def run(config: dict[str, Any], workload: dict[str, Any], max_steps: int = 5000,
        token_seed: int = 0) -> dict[str, Any]:
    """Drive one workload; return the record."""
    from vllm.sequence import Logprob, SequenceStatus

    h = Harness(config)
    sched = h.scheduler
    cfg = h.config
    max_model_len = int(cfg["max_model_len"])
    rng = random.Random(token_seed)
    reqs = workload["requests"]
    order = sorted(range(len(reqs)), key=lambda i: (int(reqs[i]["arrival_step"]), i))
    by_step: dict[int, list[int]] = {}
    for i in order:
        by_step.setdefault(int(reqs[i]["arrival_step"]), []).append(i)

    per_req: dict[str, dict[str, Any]] = {}
    for i, r in enumerate(reqs):
        per_req[str(r["id"])] = {
            "arrival_step": int(r["arrival_step"]),
            "arrival_time": float(r.get("arrival_time", int(r["arrival_step"]) + i * 1e-6)),
            "first_token_step": None, "finish_step": None, "num_preemptions": 0,
            "num_swaps": 0, "num_output_tokens": 0, "status": "pending",
            "finish_reason": None, "reason": None,
        }
        if h.caching:
            per_req[str(r["id"])].update(prefix_hit_tokens=None, cached_tokens=0)
    groups: dict[str, Any] = {}
    open_ids: set[str] = set()
    steps: list[dict[str, Any]] = []
    stalled = False
    step = 0
    while step < max_steps:
        arrived: list[str] = []
        rejected: list[str] = []
        for i in by_step.pop(step, []):
            spec = reqs[i]
            rid = str(spec["id"])
            reason = rejection_reason(int(spec["prompt_len"]), max_model_len)
            if reason is not None:
                rejected.append(rid)
                per_req[rid].update(status="rejected", reason=reason, finish_step=step)
                continue
            group = h.make_group(spec, i, per_req[rid]["arrival_time"], rng)
            groups[rid] = group
            sched.add_seq_group(group)
            per_req[rid]["status"] = "waiting"
            arrived.append(rid)
            open_ids.add(rid)

        h.preempted, h.swapped_in, h.cached = [], [], {}
        metas, out, _ = sched.schedule()
        scheduled: list[list[Any]] = []
        produced: list[str] = []
        finished: list[str] = []
        hits: list[list[Any]] = []
        for s, meta in zip(out.scheduled_seq_groups, metas, strict=True):
            group = s.seq_group
            rid = group.request_id
            skipped = h.cached.get(rid, 0) if h.caching else 0
            if h.caching and group.first_seq.data.get_num_computed_tokens() == 0:
                hits.append([rid, skipped])  # an admission (first or after a preemption)
                pr = per_req[rid]
                if pr["prefix_hit_tokens"] is None:
                    pr["prefix_hit_tokens"] = skipped
                pr["cached_tokens"] += skipped
            scheduled.append([rid, int(s.token_chunk_size) - skipped])
            group.update_num_computed_tokens(s.token_chunk_size)
            if not meta.do_sample:
                continue  # a chunk that does not finish the prompt samples nothing
            seq = group.first_seq
            token = SAMPLED_TOKEN_ID
            if h.caching:  # the answer the workload names, else the request's own tokens
                token = prefix_tokens.output_token(rid, h.answers.get(rid),
                                                   seq.get_output_len())
            seq.append_token_id(token, {token: Logprob(0.0)})
            produced.append(rid)
            # The stop checker's length rules (engine/output_processor/stop_checker.py).
            if (seq.get_len() > max_model_len
                    or seq.get_output_len() == group.sampling_params.max_tokens):
                seq.status = SequenceStatus.FINISHED_LENGTH_CAPPED
            if seq.is_finished():
                sched.free_seq(seq)
                finished.append(rid)
        sched.free_finished_seq_groups()
        ignored = [g.request_id for g in out.ignored_seq_groups]

        for rid in produced:
            pr = per_req[rid]
            pr["num_output_tokens"] += 1
            if pr["first_token_step"] is None:
                pr["first_token_step"] = step
        for rid, mode in h.preempted:
            per_req[rid]["num_preemptions"] += 1
            per_req[rid]["num_swaps"] += mode == "swap"
        for rid in finished:
            per_req[rid].update(status="finished", finish_step=step,
                                finish_reason="length")
            open_ids.discard(rid)
        for rid in ignored:  # FINISHED_IGNORED by the scheduler: never runs
            per_req[rid].update(status="rejected", finish_step=step, reason="ignored")
            open_ids.discard(rid)
            rejected.append(rid)

        entry: dict[str, Any] = {"step": step, "scheduled": scheduled}
        victims = [rid for rid, _mode in h.preempted]
        if victims:
            entry["preempted"] = victims
        swapped_out = [rid for rid, mode in h.preempted if mode == "swap"]
        if swapped_out:
            entry["swapped_out"] = swapped_out
        if h.swapped_in:
            entry["swapped_in"] = list(h.swapped_in)
        if finished:
            entry["finished"] = finished
        if arrived:
            entry["arrived"] = arrived
        if rejected:
            entry["rejected"] = rejected
        entry["running"] = len(sched.running)
        entry["waiting"] = len(sched.waiting)
        entry["swapped"] = len(sched.swapped)
        entry["free_blocks"] = sched.block_manager.get_num_free_gpu_blocks()
        if h.caching:
            entry["hits"] = hits
        steps.append(entry)
        step += 1
        future = any(k >= step for k in by_step)
        if not open_ids and not future:
            break
        if not scheduled and not victims and open_ids and not future:
            stalled = True  # nothing ran, nothing can change
            break

    for p in per_req.values():
        if p["status"] in ("pending", "waiting"):
            p["status"] = "stalled" if stalled else "unfinished"
    for rid, group in groups.items():
        if per_req[rid]["status"] == "finished":
            assert group.first_seq.get_output_len() == per_req[rid]["num_output_tokens"], rid

    import vllm

    summary = {
        "num_steps": len(steps),
        "stalled": stalled,
        "hit_max_steps": step >= max_steps and bool(open_ids),
        "num_preemptions": sum(p["num_preemptions"] for p in per_req.values()),
        "num_swaps": sum(p["num_swaps"] for p in per_req.values()),
        "num_finished": sum(p["status"] == "finished" for p in per_req.values()),
        "num_rejected": sum(p["status"] == "rejected" for p in per_req.values()),
    }
    if h.caching:
        summary["prefix_hit_tokens"] = sum(p["prefix_hit_tokens"] or 0 for p in per_req.values())
    if summary["hit_max_steps"]:  # kvsched must stop at the same step to be compared
        cfg = {**cfg, "max_steps": max_steps}
    return {
        "format": FORMAT,
        "engine": {"name": "vllm", "version": vllm.__version__,
                   "scheduler": "vllm.core.scheduler.Scheduler"},
        "config": cfg,
        "effective_config": h.effective,
        "workload": workload,
        "steps": steps,
        "requests": per_req,
        "summary": summary,
    }


# --------------------------------------------------------------------------- random


def random_case(rng: random.Random, name: str,
                ties: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """One random (config, workload), drawn to cover the V0 scheduler's rules: chunking on
    and off, recompute and swap, fcfs and priority, partial prefills, max_num_seqs limits,
    pools from one longest request to roomy (some over 100 blocks: a watermark). `ties`:
    a step's requests share one arrival_time, ids out of input order (as in vllm_driver),
    and two draws in three under `priority`: V0 never compares request ids, its priority
    sorts are stable, so equal keys keep their place in the deque (input order, a victim
    at the front)."""
    block_size = rng.choice([4, 8, 16])
    chunked = rng.random() < 0.5
    policy = rng.choice(["fcfs", "fcfs", "priority"])
    if ties and rng.random() < 0.5:
        policy = "priority"  # (ties: two thirds under priority, where V0 sorts its queues)
    mode = rng.choice([None, "recompute", "swap", "swap"])
    if policy == "priority" and not chunked and mode == "swap":
        # vLLM 0.8.5 bug: _schedule_priority_preemption pushes a swapped-out victim onto
        # `waiting`, and the next _schedule_prefills fails its one-WAITING-sequence assert.
        mode = "recompute"
    budget = rng.choice([16, 32, 64, 128, 256])
    if chunked:
        max_model_len = rng.choice([budget, 2 * budget, 4 * budget, 512])
    else:  # V0 refuses max_num_batched_tokens < max_model_len without chunking
        max_model_len = rng.choice([budget, budget, budget // 2])
    max_num_seqs = min(rng.choice([2, 3, 4, 8, 16, 128]), budget)
    partial, long_partial, threshold = 1, 1, 0
    if chunked and rng.random() < 0.4:
        partial = rng.choice([2, 3, 4])
        long_partial = rng.randint(1, partial)
        threshold = rng.choice([0, 0, 4, 8, 16, 32])  # 0: 4% of max_model_len
        threshold = min(threshold, max_model_len)

    n = rng.randint(3, 30)
    burst = rng.random() < 0.4
    horizon = rng.choice([1, 5, 20, 60])
    max_prompt = max(1, min(max_model_len, rng.choice([budget // 4, budget // 2, budget,
                                                        2 * budget])))
    max_output = rng.choice([1, 4, 16, 48])
    requests: list[dict[str, Any]] = []
    for i in range(n):
        prompt_len = rng.randint(1, max_prompt)
        if rng.random() < 0.03:
            prompt_len = max_model_len + rng.choice([0, 1, 5])  # over: rejected at arrival
        output_len = rng.randint(1, max_output)
        if rng.random() < 0.05:
            output_len = max_model_len  # capped: V0 stops once the sequence exceeds it
        requests.append({"id": f"r{i:03d}", "prompt_len": prompt_len, "output_len": output_len,
                         "arrival_step": 0 if burst else rng.randint(0, horizon),
                         "priority": rng.randint(0, 3) if policy == "priority" else 0})
    requests.sort(key=lambda r: (r["arrival_step"], r["id"]))
    if ties:
        requests = tied_requests(rng, requests)

    def kv_len(r: dict[str, Any]) -> int:  # tokens in the KV cache at its last decode
        out = min(r["output_len"], max_model_len - r["prompt_len"] + 1)
        return r["prompt_len"] + out - 1

    admitted = [r for r in requests if r["prompt_len"] <= max_model_len]
    need_one = max((-(-kv_len(r) // block_size) for r in admitted), default=1)
    total = sum(-(-kv_len(r) // block_size) for r in admitted)
    tightness = rng.choice(["one", "tight", "tight", "medium", "roomy", "big"])
    if tightness == "one":
        blocks = need_one
    elif tightness == "tight":
        blocks = need_one + rng.randint(0, max(1, need_one))
    elif tightness == "medium":
        blocks = max(need_one, total // rng.randint(2, 4))
    elif tightness == "roomy":
        blocks = max(need_one, total + rng.randint(0, 10))
    else:  # over 100 blocks: the 1% watermark counts
        blocks = max(need_one + 2, rng.randint(100, 400))
    while blocks - need_one < int(0.01 * blocks):  # the longest must fit above the watermark
        blocks += 1
    config = {
        "num_blocks": blocks,
        "num_cpu_blocks": total + 16,  # swap space never runs out
        "block_size": block_size,
        "max_num_batched_tokens": budget,
        "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len,
        "enable_chunked_prefill": chunked,
        "policy": policy,
        "preemption_mode": mode,
        "max_num_partial_prefills": partial,
        "max_long_partial_prefills": long_partial,
        "long_prefill_token_threshold": threshold,
    }
    return config, {"name": name, "requests": requests}


def random_prefix_v0_case(rng: random.Random, name: str) -> tuple[dict[str, Any],
                                                                    dict[str, Any]]:
    """One random (config, workload) whose prompts share prefixes, with caching on: the V1
    driver's prefix draws (groups on, just off and across block boundaries, partial overlaps,
    identical prompts, private tails; no conversations: this driver has no `after`), with
    V0's own settings drawn after them (preemption mode, partial prefills; no null block, the
    longest request above the 1% watermark)."""
    v1, workload = random_prefix_case(rng, name, sessions=False)
    chunked = bool(v1["enable_chunked_prefill"])
    policy = v1["policy"]
    mode = rng.choice([None, "recompute", "swap"])
    if mode == "swap" and (chunked or policy == "priority"):
        # vLLM 0.8.5 fails its own assert when a prompt swapped out between chunks is looked
        # at again (_get_num_new_uncached_and_cached_tokens: its cached count is below its
        # computed tokens and it is not RUNNING); and the swapped priority victim (random_case)
        mode = "recompute"
    partial, long_partial, threshold = 1, 1, int(v1["long_prefill_token_threshold"])
    if chunked and rng.random() < 0.3:
        partial = rng.choice([2, 3])
        long_partial = rng.randint(1, partial)
    block_size = int(v1["block_size"])
    max_model_len = int(v1["max_model_len"])
    need_one = max((-(-min(r["prompt_len"] + r["output_len"], max_model_len) // block_size)
                    for r in workload["requests"] if r["prompt_len"] <= max_model_len),
                   default=1)
    blocks = max(int(v1["num_blocks"]) - 1, need_one)
    while blocks - need_one < int(0.01 * blocks):
        blocks += 1
    total = sum(-(-(r["prompt_len"] + r["output_len"]) // block_size)
                for r in workload["requests"])
    config = {
        "num_blocks": blocks,
        "num_cpu_blocks": total + 16,
        "block_size": block_size,
        "max_num_batched_tokens": int(v1["max_num_batched_tokens"]),
        "max_num_seqs": int(v1["max_num_seqs"]),
        "max_model_len": max_model_len,
        "enable_chunked_prefill": chunked,
        "policy": policy,
        "preemption_mode": mode,
        "max_num_partial_prefills": partial,
        "max_long_partial_prefills": long_partial,
        "long_prefill_token_threshold": threshold,
        "enable_prefix_caching": True,
    }
    for r in workload["requests"]:  # V0 never compares request ids; priorities as drawn
        r.setdefault("priority", 0)
    return config, workload


# --------------------------------------------------------------------------- vLLM's cases


def vllm_test_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Situations of vLLM 0.8.5's V0 scheduler tests, run to completion on the step clock.

    Each keeps the test's name, its SchedulerConfig / CacheConfig arguments and its
    requests (create_dummy_prompt: prompt_length tokens, one sequence)."""

    def reqs(n: int, prompt: int, out: int = 16, ids: list[str] | None = None,
             step: int = 0, prio: list[int] | None = None) -> list[dict[str, Any]]:
        return [{"id": ids[i] if ids else str(i), "prompt_len": prompt, "output_len": out,
                 "arrival_step": step, "priority": prio[i] if prio else 0}
                for i in range(n)]

    def case(name: str, cfg: dict[str, Any], requests: list[dict[str, Any]]):
        return (name, cfg, {"requests": requests})

    return [
        # tests/core/test_scheduler.py
        case("test_scheduler_schedule_simple",
             {"max_num_batched_tokens": 64, "max_num_seqs": 4, "max_model_len": 16,
              "block_size": 4, "num_blocks": 8, "num_cpu_blocks": 8},
             reqs(4, prompt=4)),
        case("test_scheduler_prefill_prioritized",
             {"max_num_batched_tokens": 64, "max_num_seqs": 2, "max_model_len": 30,
              "block_size": 4, "num_blocks": 16, "num_cpu_blocks": 16},
             reqs(1, prompt=1, ids=["A"]) + reqs(1, prompt=30, ids=["B"], step=1)),
        case("test_scheduler_schedule_preempt_abort",
             {"max_num_batched_tokens": 64, "max_num_seqs": 2, "max_model_len": 16,
              "block_size": 4, "num_blocks": 2, "num_cpu_blocks": 2},
             reqs(2, prompt=4, out=4, ids=["1", "2"])),
        case("test_scheduler_max_seqs",
             {"max_num_batched_tokens": 64, "max_num_seqs": 2, "max_model_len": 16,
              "block_size": 4, "num_blocks": 8, "num_cpu_blocks": 8},
             reqs(1, prompt=4, ids=["0"]) + reqs(2, prompt=4, ids=["1", "2"], step=2)),
        case("test_swapped_out_prioritized",
             {"max_num_batched_tokens": 64, "max_num_seqs": 8, "max_model_len": 64,
              "block_size": 4, "num_blocks": 6, "num_cpu_blocks": 32,
              "preemption_mode": "swap"},
             reqs(3, prompt=4, out=12) + reqs(1, prompt=4, ids=["3"], step=2)),
        case("test_prefill_schedule_max_prompt_len",
             {"max_num_batched_tokens": 30, "max_num_seqs": 16, "max_model_len": 30,
              "block_size": 4, "num_blocks": 64, "num_cpu_blocks": 64},
             reqs(1, prompt=30, ids=["0"]) + reqs(1, prompt=8, ids=["1"])),
        case("test_prefill_schedule_token_budget",
             {"max_num_batched_tokens": 60, "max_num_seqs": 16, "max_model_len": 60,
              "block_size": 4, "num_blocks": 64, "num_cpu_blocks": 64},
             reqs(3, prompt=60)),
        case("test_prefill_schedule_max_seqs",
             {"max_num_batched_tokens": 256, "max_num_seqs": 2, "max_model_len": 60,
              "block_size": 4, "num_blocks": 64, "num_cpu_blocks": 64},
             reqs(3, prompt=60)),
        case("priority_preemption",
             {"max_num_batched_tokens": 64, "max_num_seqs": 4, "max_model_len": 64,
              "block_size": 4, "num_blocks": 10, "num_cpu_blocks": 16, "policy": "priority"},
             reqs(3, prompt=8, out=16, prio=[1, 2, 3]) + reqs(1, prompt=8, ids=["3"],
                                                            step=3, prio=[0])),
        case("test_schedule_swapped_max_seqs",
             {"max_num_batched_tokens": 64, "max_num_seqs": 2, "max_model_len": 64,
              "block_size": 4, "num_blocks": 5, "num_cpu_blocks": 32,
              "preemption_mode": "swap"},
             reqs(4, prompt=4, out=8)),
        # tests/core/test_chunked_prefill_scheduler.py
        case("test_simple",
             {"max_num_batched_tokens": 64, "max_num_seqs": 4, "max_model_len": 16,
              "block_size": 4, "num_blocks": 8, "num_cpu_blocks": 8,
              "enable_chunked_prefill": True},
             reqs(4, prompt=4)),
        case("test_chunk",
             {"max_num_batched_tokens": 64, "max_num_seqs": 60, "max_model_len": 80,
              "block_size": 4, "num_blocks": 32, "num_cpu_blocks": 32,
              "enable_chunked_prefill": True},
             reqs(2, prompt=60)),
        case("test_complex",
             {"max_num_batched_tokens": 64, "max_num_seqs": 60, "max_model_len": 80,
              "block_size": 4, "num_blocks": 64, "num_cpu_blocks": 64,
              "enable_chunked_prefill": True},
             reqs(2, prompt=60) + reqs(2, prompt=60, ids=["2", "3"], step=2)),
        case("test_short_prompts_jump_long_prompts_in_queue",
             {"max_num_batched_tokens": 64, "max_num_seqs": 60, "max_model_len": 2048,
              "block_size": 4, "num_blocks": 512, "num_cpu_blocks": 512,
              "enable_chunked_prefill": True, "max_num_partial_prefills": 2,
              "max_long_partial_prefills": 1},
             reqs(2, prompt=200) + reqs(1, prompt=80, ids=["2"])
             + reqs(1, prompt=40, ids=["3"])),
        case("test_maximal_decoding",
             {"max_num_batched_tokens": 2, "max_num_seqs": 2, "max_model_len": 80,
              "block_size": 4, "num_blocks": 16, "num_cpu_blocks": 16,
              "enable_chunked_prefill": True},
             reqs(2, prompt=1) + reqs(1, prompt=8, ids=["2"], step=2)),
        case("test_running_prefill_prioritized_over_swap",
             {"max_num_batched_tokens": 30, "max_num_seqs": 2, "max_model_len": 60,
              "block_size": 4, "num_blocks": 16, "num_cpu_blocks": 16,
              "enable_chunked_prefill": True, "preemption_mode": "swap"},
             reqs(2, prompt=30, out=8)),
        case("test_chunked_prefill_preempt",
             {"max_num_batched_tokens": 30, "max_num_seqs": 2, "max_model_len": 60,
              "block_size": 4, "num_blocks": 16, "num_cpu_blocks": 16,
              "enable_chunked_prefill": True},
             reqs(2, prompt=60, out=8)),
    ]


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--random", type=int, default=0, metavar="N")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cases", action="store_true", help="situations of vLLM's V0 tests")
    ap.add_argument("--random-prefix", type=int, default=0, metavar="N",
                    help="N random workloads sharing prefixes, prefix caching on")
    ap.add_argument("--ties", action="store_true",
                    help="with --random: a step's arrivals share one arrival_time, ids out of "
                         "input order (no 1e-6 spacing)")
    ap.add_argument("--scenario", type=Path, help="one JSON holding {config, workload}")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--out-dir", type=Path)
    ap.add_argument("--max-steps", type=int, default=5000)
    ap.add_argument("--max-steps-keep", type=int, default=0,
                    help="keep only records of at most this many steps")
    args = ap.parse_args(argv)

    jobs: list[tuple[str, dict[str, Any], dict[str, Any], int]] = []
    for i in range(args.random):
        name = f"v0-{'ties' if args.ties else 'random'}-s{args.seed}-{i:04d}"
        cfg, wl = random_case(random.Random(f"v0:{args.seed}:{i}"), name, args.ties)
        jobs.append((name, cfg, wl, i))
    for i in range(args.random_prefix):
        name = f"v0-prefix-s{args.seed}-{i:04d}"
        cfg, wl = random_prefix_v0_case(random.Random(f"v0-prefix:{args.seed}:{i}"), name)
        jobs.append((name, cfg, wl, i))
    if args.cases:
        for name, cfg, wl in vllm_test_cases():
            jobs.append((name, cfg, {"name": name, **wl}, 0))
    if args.scenario:
        sc = json.loads(args.scenario.read_text())
        rec = run(sc["config"], sc["workload"], args.max_steps)
        out = args.out or Path("vllm_v0_record.json")
        dump(rec, out)
        print(f"{out}: {rec['summary']}")
    if jobs:
        if args.out_dir is None:
            ap.error("--random/--cases need --out-dir")
        args.out_dir.mkdir(parents=True, exist_ok=True)
        kept = 0
        for name, cfg, wl, seed in jobs:
            rec = run(cfg, wl, args.max_steps, token_seed=seed)
            s = rec["summary"]
            if args.max_steps_keep and s["num_steps"] > args.max_steps_keep:
                continue
            dump(rec, args.out_dir / f"{name}.json")
            kept += 1
            print(f"{name}: steps={s['num_steps']} preemptions={s['num_preemptions']} "
                  f"swaps={s['num_swaps']} finished={s['num_finished']} "
                  f"rejected={s['num_rejected']}"
                  f"{' hit=' + str(s['prefix_hit_tokens']) if 'prefix_hit_tokens' in s else ''}"
                  f"{' STALLED' if s['stalled'] else ''}"
                  f"{' MAX_STEPS' if s['hit_max_steps'] else ''}", flush=True)
        print(f"recorded {kept} workload(s) in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
