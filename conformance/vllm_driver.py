"""Drive the real vLLM V1 scheduler on the CPU and record its per-step decisions.

Runs inside `.venv-conformance` (vllm==0.33.0). Builds
`vllm.v1.core.sched.scheduler.Scheduler` the way vLLM's own scheduler tests do
(`tests/v1/core/utils.py::create_scheduler`): a local directory holding a tiny
model `config.json`, `skip_tokenizer_init=True`, `DeviceConfig(device="cpu")`,
a `KVCacheConfig` with the chosen block count, and model-runner outputs made by
hand (one sampled token for each request whose prompt is fully computed).

The step clock: requests arriving at step k are added before `schedule()` of step
k; then the hand-made model output of step k is fed to `update_from_output()`.
Everything a step decided is recorded in the step k entry.

Usage:
    python conformance/vllm_driver.py --workload W.json --config C.json --out OUT.json
    python conformance/vllm_driver.py --random 200 --seed 1 --out-dir DIR
    python conformance/vllm_driver.py --random-prefix 300 --random-sessions 100 --out-dir DIR
    python conformance/vllm_driver.py --cases --out-dir DIR     # vLLM's own test cases
    python conformance/vllm_driver.py --scenario S.json --out OUT.json  # {config, workload}

The output format is documented in conformance/README.md and read by
conformance/compare.py (which needs no vLLM).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from conformance import prefix_tokens  # noqa: E402  (stdlib only, shared with the rules model)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")

FORMAT = "kvsched-vllm-v1-record/1"

# Defaults: vLLM 0.33.0's own (vllm/config/scheduler.py), except prefix caching, which is
# off unless the config turns it on (the prefix generators do; see RULES.md P1-P9).
DEFAULT_CONFIG: dict[str, Any] = {
    "num_blocks": 10000,  # as vLLM logs it: block 0 is the null block
    "block_size": 16,
    "max_num_batched_tokens": 2048,
    "max_num_seqs": 128,
    "enable_chunked_prefill": True,
    "long_prefill_token_threshold": 0,
    "policy": "fcfs",
    "max_model_len": 8192,
    "enable_prefix_caching": False,
    "scheduler_reserve_full_isl": True,
    "watermark": 0.0,
}

# A token id that is no stop token of the tiny model (its eos id is 2).
SAMPLED_TOKEN_ID = 7
VOCAB_SIZE = 32000

TINY_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
    "vocab_size": VOCAB_SIZE,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
    "tie_word_embeddings": False,
}


def rejection_reason(prompt_len: int, max_model_len: int) -> str | None:
    """The input processor's check, done before a request reaches the scheduler.

    Mirrors vllm/v1/engine/input_processor.py::_validate_model_input_length for a
    text-only decoder prompt of a generate model (messages verbatim).
    """
    suggestion = "Make sure that `max_model_len` is no smaller than the number of text tokens."
    if prompt_len > max_model_len:
        return (
            f"The decoder prompt (length {prompt_len}) is longer than the maximum model "
            f"length of {max_model_len}. {suggestion}"
        )
    if prompt_len == max_model_len:
        suggestion = (
            "Make sure that `max_model_len` is no smaller than the number of text tokens "
            "(prompt + requested output tokens)."
        )
        return (
            f"The decoder prompt (length {prompt_len}) plus the number of requested output "
            f"tokens (at least 1) is longer than the maximum model length of "
            f"{max_model_len}. {suggestion}"
        )
    return None


# --------------------------------------------------------------------------- building


class Harness:
    """One Scheduler for one (config, workload) pair."""

    def __init__(self, config: dict[str, Any], model_dir: str) -> None:
        import torch
        from vllm.config import (
            CacheConfig,
            DeviceConfig,
            ModelConfig,
            SchedulerConfig,
            VllmConfig,
        )
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
        )
        from vllm.v1.structured_output import StructuredOutputManager

        self.config = cfg = {**DEFAULT_CONFIG, **config}
        block_size = int(cfg["block_size"])
        num_blocks = int(cfg["num_blocks"])
        scheduler_config = SchedulerConfig(
            max_num_seqs=int(cfg["max_num_seqs"]),
            max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
            max_model_len=int(cfg["max_model_len"]),
            long_prefill_token_threshold=int(cfg["long_prefill_token_threshold"]),
            enable_chunked_prefill=bool(cfg["enable_chunked_prefill"]),
            policy=cfg["policy"],
            scheduler_reserve_full_isl=bool(cfg["scheduler_reserve_full_isl"]),
            watermark=float(cfg["watermark"]),
            async_scheduling=bool(cfg.get("async_scheduling", False)),
            is_encoder_decoder=False,
        )
        model_config = ModelConfig(
            model=model_dir,
            tokenizer=model_dir,
            trust_remote_code=False,
            dtype="float32",
            seed=42,
            skip_tokenizer_init=True,
            max_model_len=int(cfg["max_model_len"]),
        )
        cache_config = CacheConfig(
            block_size=block_size,
            gpu_memory_utilization=0.9,
            cache_dtype="auto",
            enable_prefix_caching=bool(cfg["enable_prefix_caching"]),
        )
        vllm_config = VllmConfig(
            scheduler_config=scheduler_config,
            model_config=model_config,
            cache_config=cache_config,
            device_config=DeviceConfig(device="cpu"),
        )
        kv_cache_config = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["layer"],
                    FullAttentionSpec(
                        block_size=block_size, num_kv_heads=1, head_size=1, dtype=torch.float32
                    ),
                )
            ],
        )
        cache_config.num_gpu_blocks = num_blocks
        self.vllm_config = vllm_config
        self.caching = bool(cfg["enable_prefix_caching"])
        self.block_hasher = None
        if self.caching:
            # As EngineCore does (v1/engine/core.py): sha256 with its fixed NONE_HASH seed, so
            # block hashes are deterministic across runs.
            from vllm.utils.hashing import get_hash_fn_by_name
            from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

            hash_fn = get_hash_fn_by_name(cache_config.prefix_caching_hash_algo)
            init_none_hash(hash_fn)
            self.block_hasher = get_request_block_hasher(block_size, hash_fn)
        # The class EngineCore takes: SchedulerConfig.get_scheduler_cls (config/scheduler.py)
        scheduler_cls = AsyncScheduler if cfg.get("async_scheduling") else Scheduler
        self.scheduler = scheduler_cls(
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            block_size=block_size,
            log_stats=True,
            structured_output_manager=StructuredOutputManager(vllm_config),
        )
        # Effective values after vLLM's own config post-processing.
        sc = self.scheduler.scheduler_config
        self.effective = {
            "max_num_batched_tokens": sc.max_num_batched_tokens,
            "max_num_scheduled_tokens": self.scheduler.max_num_scheduled_tokens,
            "max_num_seqs": sc.max_num_seqs,
            "max_num_active_seqs": self.scheduler.max_num_active_reqs,
            "enable_chunked_prefill": sc.enable_chunked_prefill,
            "long_prefill_token_threshold": sc.long_prefill_token_threshold,
            "policy": str(self.scheduler.policy.value),
            "max_model_len": self.scheduler.max_model_len,
            "scheduler_reserve_full_isl": self.scheduler.scheduler_reserve_full_isl,
            "watermark_blocks": self.scheduler.kv_cache_manager.watermark_blocks,
            "enable_prefix_caching": self.scheduler.cache_config.enable_prefix_caching,
            "free_blocks_at_start":
                self.scheduler.kv_cache_manager.block_pool.get_num_free_blocks(),
        }
        # Record preemption victims in the order vLLM picks them (the output only
        # carries a set). Wraps the instance's bound method, changes nothing.
        self.preempted_this_step: list[str] = []
        original = self.scheduler._preempt_request

        def recording_preempt(request: Any, *args: Any, **kwargs: Any) -> Any:
            self.preempted_this_step.append(request.request_id)
            return original(request, *args, **kwargs)

        self.scheduler._preempt_request = recording_preempt
        self.answers: dict[str, list[int] | None] = {}

        # Count evictions from the prefix cache (a cached block popped for reuse).
        self.evicted_this_step = 0
        pool = self.scheduler.kv_cache_manager.block_pool
        original_evict = pool._maybe_evict_cached_block

        def counting_evict(block: Any) -> bool:
            evicted = bool(original_evict(block))
            self.evicted_this_step += evicted
            return evicted

        pool._maybe_evict_cached_block = counting_evict

    def cached_blocks(self) -> int:
        """Blocks that carry a hash (in use or free), i.e. the size of the prefix cache."""
        from vllm.v1.core.kv_cache_utils import KVCacheBlock

        cache = self.scheduler.kv_cache_manager.block_pool.cached_block_hash_to_block._cache
        return sum(1 if isinstance(v, KVCacheBlock) else len(v) for v in cache.values())

    def make_request(self, spec: dict[str, Any], arrival_time: float, rng: random.Random):
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        sampling_params = SamplingParams(
            ignore_eos=True, max_tokens=int(spec["output_len"]), temperature=0.0
        )
        if self.caching or spec.get("prefix"):
            # Token ids from the workload's segments (conformance/prefix_tokens.py).
            prompt, answer = prefix_tokens.request_tokens(spec)
        else:
            # Random distinct token ids per request: nothing is shared between requests.
            prompt = [rng.randrange(100, VOCAB_SIZE) for _ in range(int(spec["prompt_len"]))]
            answer = None
        self.answers[str(spec["id"])] = answer
        return Request(
            request_id=str(spec["id"]),
            prompt_token_ids=prompt,
            sampling_params=sampling_params,
            pooling_params=None,
            arrival_time=arrival_time,
            priority=int(spec.get("priority", 0)),
            block_hasher=self.block_hasher,
        )


# --------------------------------------------------------------------------- running


class _Drive:
    """One workload's arrivals on the step clock and each request's record, around one
    `Harness` (shared by the sync loop, `run`, and the batch queue's, `run_async`)."""

    def __init__(self, h: Harness, workload: dict[str, Any], token_seed: int) -> None:
        self.h = h
        self.sched = h.scheduler
        self.cfg = h.config
        self.caching = caching = h.caching
        self.rng = random.Random(token_seed)
        self.workload = workload
        self.reqs = reqs = workload["requests"]
        # A conversation's next turn (`after`: an earlier request's id) arrives `think_steps`
        # steps after the step in which that request finished (or was rejected); the record's
        # workload gets the arrival step it was given.
        self.dependents: dict[str, list[int]] = {}
        for i, r in enumerate(reqs):
            if r.get("after") is not None:
                self.dependents.setdefault(str(r["after"]), []).append(i)
        # Workload order breaks ties within a step: arrival_time = step + index * 1e-6
        # (unless the workload gives arrival_time), so vLLM's priority heap order
        # (priority, arrival_time, request_id) equals (priority, arrival_step, index).
        order = sorted((i for i, r in enumerate(reqs) if r.get("after") is None),
                       key=lambda i: (int(reqs[i]["arrival_step"]), i))
        self.by_step: dict[int, list[tuple[int, dict[str, Any]]]] = {}
        for i in order:
            self.by_step.setdefault(int(reqs[i]["arrival_step"]), []).append((i, reqs[i]))
        self.resolved: dict[int, int] = {}
        self.per_req: dict[str, dict[str, Any]] = {}
        for i, r in enumerate(reqs):
            self.per_req[str(r["id"])] = {
                "arrival_step": None if r.get("after") is not None else int(r["arrival_step"]),
                "arrival_time": None if r.get("after") is not None else
                float(r.get("arrival_time", int(r["arrival_step"]) + i * 1e-6)),
                "first_token_step": None,
                "finish_step": None,
                "num_preemptions": 0,
                "num_output_tokens": 0,
                "status": "pending",
                "finish_reason": None,
                "reason": None,
            }
            if caching:
                self.per_req[str(r["id"])].update(prefix_hit_tokens=None, cached_tokens=0,
                                                  hits=[])
        self.open_ids: set[str] = set()

    def ended(self, rid: str, at: int) -> None:
        for j in self.dependents.get(rid, ()):
            spec = self.reqs[j]
            step_j = at + 1 + int(spec.get("think_steps", 0))
            self.resolved[j] = step_j
            self.per_req[str(spec["id"])].update(arrival_step=step_j,
                                                 arrival_time=step_j + j * 1e-6)
            self.by_step.setdefault(step_j, []).append((j, spec))
            self.by_step[step_j].sort(key=lambda e: e[0])

    def future(self, step: int) -> bool:
        """Whether a request is still to arrive at `step` or later."""
        return any(k >= step for k in self.by_step)

    def arrive(self, step: int) -> tuple[list[str], list[str]]:
        """Add the arrivals of `step` (R9, R11): the ids added and those rejected."""
        arrived: list[str] = []
        rejected: list[str] = []
        per_req = self.per_req
        for _i, spec in self.by_step.pop(step, []):
            rid = str(spec["id"])
            reason = rejection_reason(int(spec["prompt_len"]), int(self.cfg["max_model_len"]))
            if reason is not None:
                rejected.append(rid)
                per_req[rid].update(status="rejected", reason=reason, finish_step=step)
                self.ended(rid, step)
                continue
            self.sched.add_request(self.h.make_request(spec, per_req[rid]["arrival_time"],
                                                       self.rng))
            per_req[rid]["status"] = "waiting"
            arrived.append(rid)
            self.open_ids.add(rid)
        return arrived, rejected

    def schedule(self) -> tuple[Any, list[list[Any]], list[str], list[list[Any]]]:
        """`schedule()`: its output, the scheduled [id, tokens], the victims in the order
        vLLM chose them and, with caching, each admission's hit."""
        h, sched = self.h, self.sched
        h.preempted_this_step = []
        h.evicted_this_step = 0
        running_before = {r.request_id for r in sched.running}
        out = sched.schedule()
        scheduled = [[rid, int(n)] for rid, n in out.num_scheduled_tokens.items()]
        preempted = list(h.preempted_this_step)
        # The hit of each admission: after schedule() num_computed_tokens = hit + scheduled.
        hits = [[rid, sched.requests[rid].num_computed_tokens - n] for rid, n in scheduled
                if rid not in running_before] if self.caching else []
        for rid, hit in hits:  # RULES.md P8: vLLM's own per-request figure is the first hit
            r = sched.requests[rid]
            if r.num_preemptions == 0 and r.prefill_stats is not None:
                assert r.prefill_stats.num_local_cached_tokens == hit, (rid, hit)
        for rid in preempted:
            self.per_req[rid]["num_preemptions"] += 1
        for rid, hit in hits:
            pr = self.per_req[rid]
            if pr["prefix_hit_tokens"] is None:
                pr["prefix_hit_tokens"] = hit
            pr["cached_tokens"] += hit
            pr["hits"].append(hit)
        return out, scheduled, preempted, hits

    def sampling(self, out: Any) -> list[str]:
        """The requests the step `out` samples a token for: after schedule(),
        num_computed_tokens already includes the step's tokens, so the prompt (plus
        recomputed outputs, plus the placeholders of tokens still in flight) is complete
        exactly when the request is no prefill chunk (R2)."""
        sched = self.sched
        return [rid for rid in out.num_scheduled_tokens
                if not sched.requests[rid].is_prefill_chunk]

    def update(self, out: Any, sampling: list[str], step: int) -> list[str]:
        """The model runner's output of step `out` (one token for each of `sampling`, the
        one the request's answer names at its next output position) to
        `update_from_output()`; the finished ids. Tokens and finishes count at `step`."""
        from vllm.v1.outputs import ModelRunnerOutput

        sched, h = self.sched, self.h
        req_ids = list(out.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in req_ids:
            if rid in sampling:
                r = sched.requests.get(rid)
                index = r.num_output_tokens if r is not None else 0
                token = (prefix_tokens.output_token(rid, h.answers[rid], index)
                         if self.caching or h.answers.get(rid) is not None else SAMPLED_TOKEN_ID)
                sampled.append([token])
            else:
                sampled.append([])
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={rid: k for k, rid in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )
        engine_outputs = sched.update_from_output(out, mro)
        finished: list[str] = []
        for eco in engine_outputs.values():
            for o in eco.outputs:
                pr = self.per_req[o.request_id]
                if o.new_token_ids:
                    pr["num_output_tokens"] += len(o.new_token_ids)
                    if pr["first_token_step"] is None:
                        pr["first_token_step"] = step
                if o.finish_reason is not None:
                    finished.append(o.request_id)
                    pr["finish_reason"] = str(o.finish_reason)
        for rid in finished:
            self.per_req[rid].update(status="finished", finish_step=step)
            self.open_ids.discard(rid)
            self.ended(rid, step)
        for rid in self.open_ids:
            r = sched.requests.get(rid)
            if r is not None:
                self.per_req[rid]["status"] = "running" if r in sched.running else "waiting"
        return finished

    def observe(self, entry: dict[str, Any]) -> None:
        """The queues and the pool now, for debugging (not compared)."""
        sched = self.sched
        entry["running"] = len(sched.running)
        entry["waiting"] = len(sched.waiting) + len(sched.kv_holding_waiting)
        entry["free_blocks"] = sched.kv_cache_manager.block_pool.get_num_free_blocks()

    def record(self, steps: list[dict[str, Any]], stalled: bool, hit_max_steps: bool,
               max_steps: int, scheduler: str) -> dict[str, Any]:
        import vllm

        per_req, reqs, cfg, caching = self.per_req, self.reqs, self.cfg, self.caching
        never_arrived = {rid for rid, p in per_req.items() if p["status"] == "pending"}
        left = set(self.open_ids) | never_arrived
        for rid in left:
            per_req[rid]["status"] = "stalled" if stalled else "unfinished"
        for rid, r in self.sched.requests.items():
            if rid in per_req:
                assert r.num_preemptions == per_req[rid]["num_preemptions"], rid
        workload = self.workload
        if self.resolved:  # the arrival steps the driver gave to later turns
            workload = {**workload, "requests": [
                {**r, "arrival_step": self.resolved[i]} if i in self.resolved else r
                for i, r in enumerate(reqs)]}
        summary: dict[str, Any] = {
            "num_steps": len(steps),
            "stalled": stalled,
            "hit_max_steps": hit_max_steps,
            "num_preemptions": sum(p["num_preemptions"] for p in per_req.values()),
            "num_finished": sum(p["status"] == "finished" for p in per_req.values()),
            "num_rejected": sum(p["status"] == "rejected" for p in per_req.values()),
        }
        if hit_max_steps:  # a livelock: kvsched must stop at the same step
            cfg = {**cfg, "max_steps": max_steps}
        if caching:
            prompt_tokens = sum(int(reqs[i]["prompt_len"]) for i, r in enumerate(reqs)
                                if per_req[str(r["id"])]["prefix_hit_tokens"] is not None)
            first_hits = sum(p["prefix_hit_tokens"] or 0 for p in per_req.values())
            summary.update(
                prefix_hit_tokens=first_hits,
                cached_tokens=sum(p["cached_tokens"] for p in per_req.values()),
                prefix_hit_rate=round(first_hits / prompt_tokens, 6) if prompt_tokens else 0.0,
                evicted_blocks=sum(s.get("evicted_blocks", 0) for s in steps),
            )
        return {
            "format": FORMAT,
            "engine": {"name": "vllm", "version": vllm.__version__, "scheduler": scheduler},
            "config": cfg,
            "effective_config": self.h.effective,
            "workload": workload,
            "steps": steps,
            "requests": per_req,
            "summary": summary,
        }


def _entry(step: int, scheduled: list[list[Any]], preempted: list[str], finished: list[str],
           arrived: list[str], rejected: list[str], hits: list[list[Any]],
           drive: _Drive) -> dict[str, Any]:
    """A step's record: empty lists are left out (RULES.md R13)."""
    entry: dict[str, Any] = {"step": step, "scheduled": scheduled}
    if preempted:
        entry["preempted"] = preempted
    if finished:
        entry["finished"] = finished
    if arrived:
        entry["arrived"] = arrived
    if rejected:
        entry["rejected"] = rejected
    if drive.caching:
        if hits:
            entry["hits"] = hits
        entry["cached_blocks"] = drive.h.cached_blocks()
        if drive.h.evicted_this_step:
            entry["evicted_blocks"] = drive.h.evicted_this_step
    drive.observe(entry)
    return entry


def run(config: dict[str, Any], workload: dict[str, Any], model_dir: str,
        max_steps: int = 5000, token_seed: int = 0,
        async_scheduling: bool = False) -> dict[str, Any]:
    """Drive one workload; return the record (see conformance/README.md). With
    `async_scheduling`, vLLM's `AsyncScheduler` behind the engine core's batch queue
    (`run_async`)."""
    if async_scheduling:
        return run_async(config, workload, model_dir, max_steps, token_seed)
    drive = _Drive(Harness(config, model_dir), workload, token_seed)
    steps: list[dict[str, Any]] = []
    stalled = False
    step = 0
    while step < max_steps:
        arrived, rejected = drive.arrive(step)
        out, scheduled, preempted, hits = drive.schedule()
        finished = drive.update(out, drive.sampling(out), step)
        steps.append(_entry(step, scheduled, preempted, finished, arrived, rejected, hits,
                            drive))
        step += 1
        future = drive.future(step)
        if not drive.open_ids and not future:
            break
        if not scheduled and drive.open_ids and not future:
            # Nothing can ever run again: no arrival left and this step was empty.
            stalled = True
            break
    return drive.record(steps, stalled, step >= max_steps and bool(drive.open_ids), max_steps,
                        "vllm.v1.core.sched.scheduler.Scheduler")


@dataclass
class _Batch:
    """A step in the engine core's batch queue: its scheduler output, the requests it samples
    a token for, its step (the time it starts on the model) and when it ends."""

    out: Any
    sampling: list[str]
    step: int
    end: int


def run_async(config: dict[str, Any], workload: dict[str, Any], model_dir: str,
              max_steps: int = 5000, token_seed: int = 0) -> dict[str, Any]:
    """Drive one workload through vLLM's `AsyncScheduler` as `EngineCore.step_with_batch_queue`
    drives it (v1/engine/core.py:708-822, batch queue of 2: `VllmConfig.max_concurrent_batches`,
    config/vllm.py:588): schedule step N+1 while step N runs, then wait for step N's output
    and update the scheduler from it. The model runner's stand-in returns step N's tokens
    when step N is popped from the queue, one schedule later.

    The clock (RULES.md A1): a step that schedules tokens or preempts takes one time unit
    on the model, the steps one after the other; the scheduler runs in the engine core's
    loop, whose time is the end of the step it last waited for (or an arrival when idle).
    Requests arriving at step k are added when that loop's time reaches k. A step is
    recorded at the time it starts on the model, which is when its tokens are computed: a
    request's `first_token_step` and `finish_step` are the step that sampled the token, as
    in the sync records; `finished` lists a request at that step too. A schedule that
    neither schedules nor preempts takes no time and is not a step (vLLM's empty batch).
    """
    drive = _Drive(Harness({**config, "async_scheduling": True}, model_dir), workload,
                   token_seed)
    sched = drive.sched
    entries: dict[int, dict[str, Any]] = {}
    queue: deque[_Batch] = deque()
    batch_queue_size = 2
    now = 0  # the engine core loop's time
    model_free = 0  # when the model has run every step handed to it
    stalled = False
    idle_schedules = 0  # schedules in a row that did nothing

    def entry(step: int) -> dict[str, Any]:
        return entries.setdefault(step, {"step": step, "scheduled": []})

    last_step: int | None = None  # the step scheduled last, its cache not yet observed

    def observe() -> None:
        # The cache as the next schedule finds it is the cache "after" a step.
        nonlocal last_step
        if drive.caching and last_step is not None:
            entry(last_step)["cached_blocks"] = drive.h.cached_blocks()
        last_step = None

    hit_max_steps = False
    while True:
        for k in sorted(k for k in drive.by_step if k <= now):
            arrived, rejected = drive.arrive(k)
            e = entry(k)
            e.setdefault("arrived", []).extend(arrived)
            e.setdefault("rejected", []).extend(rejected)
            idle_schedules = 0
        if not sched.has_requests() and not queue:
            # The busy loop blocks on its input queue: the next arrival, if any.
            future = [k for k in drive.by_step if k > now]
            if not future:
                break
            now = min(future)
            continue
        if sched.has_requests() and max(now, model_free) >= max_steps:
            # A livelock: stop deciding at max_steps, let the steps under way finish.
            hit_max_steps = True
            while queue:
                batch = queue.pop()
                finished = drive.update(batch.out, batch.sampling, batch.step)
                if finished:
                    entry(batch.step).setdefault("finished", []).extend(finished)
            break
        if sched.has_requests():
            observe()
            out, scheduled, preempted, hits = drive.schedule()
            runs = out.total_num_scheduled_tokens > 0
            start = max(now, model_free)
            if runs or preempted:  # a step: one unit on the model
                model_free = start + 1
                e = entry(start)
                e["scheduled"] += scheduled
                if preempted:
                    e.setdefault("preempted", []).extend(preempted)
                if hits:
                    e.setdefault("hits", []).extend(hits)
                if drive.h.evicted_this_step:
                    e["evicted_blocks"] = e.get("evicted_blocks", 0) + drive.h.evicted_this_step
                idle_schedules = 0
                last_step = start
            else:
                idle_schedules += 1
            queue.appendleft(_Batch(out, drive.sampling(out), start,
                                    model_free if runs or preempted else now))
            if len(queue) < batch_queue_size and (runs or sched.has_requests()):
                continue  # the queue is not full: schedule the next step at once
        batch = queue.pop()
        now = max(now, batch.end)  # block until its output is there
        finished = drive.update(batch.out, batch.sampling, batch.step)
        if finished:
            entry(batch.step).setdefault("finished", []).extend(finished)
            idle_schedules = 0
        if idle_schedules >= 2 and not any(b.end > now for b in queue):
            # Schedules do nothing and nothing runs: only an arrival can change that.
            future = [k for k in drive.by_step if k > now]
            if future:
                now = min(future)
                idle_schedules = 0
                continue
            if drive.open_ids:
                stalled = True
            break
    observe()
    hit_max_steps = hit_max_steps and bool(drive.open_ids)
    last = max(entries, default=-1)
    steps: list[dict[str, Any]] = []
    for k in range(last + 1):
        e = entries.get(k, {"step": k, "scheduled": []})
        ordered: dict[str, Any] = {"step": k, "scheduled": e["scheduled"]}
        for key in ("preempted", "finished", "arrived", "rejected", "hits"):
            if e.get(key):
                ordered[key] = e[key]
        if drive.caching:
            ordered["cached_blocks"] = e.get("cached_blocks", steps[-1]["cached_blocks"]
                                             if steps else 0)
            if e.get("evicted_blocks"):
                ordered["evicted_blocks"] = e["evicted_blocks"]
        steps.append(ordered)
    return drive.record(steps, stalled, hit_max_steps, max_steps,
                        "vllm.v1.core.sched.async_scheduler.AsyncScheduler")


# --------------------------------------------------------------------------- random


def _usable_blocks(rng: random.Random, requests: list[dict[str, Any]],
                   counted: list[dict[str, Any]], max_model_len: int, block_size: int) -> int:
    """A random pool size: one request of the largest possible length always fits (else it
    preempts itself forever); 'tight' pools hold only a few requests at once, 'roomy' ones
    all of `counted` (the random cases count every request, the prefix cases only those
    under max_model_len: both as their fixtures were drawn)."""
    lengths = [min(r["prompt_len"] + r["output_len"], max_model_len)
               for r in requests if r["prompt_len"] < max_model_len]
    need_one = -(-max(lengths, default=1) // block_size)
    total = sum(-(-min(r["prompt_len"] + r["output_len"], max_model_len) // block_size)
                for r in counted)
    tightness = rng.choice(["one", "tight", "tight", "medium", "roomy"])
    if tightness == "one":
        usable = need_one
    elif tightness == "tight":
        usable = need_one + rng.randint(0, max(1, need_one))
    elif tightness == "medium":
        usable = max(need_one, total // rng.randint(2, 4))
    else:
        usable = max(need_one, total + rng.randint(0, 10))
    return usable


def random_case(rng: random.Random, name: str, watermark_prob: float = 0.0,
                extra: random.Random | None = None,
                ties: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """One random (config, workload), drawn to cover the V1 scheduler's rules.

    `watermark_prob` draws a non-default watermark from a separate stream (`extra`),
    so the default draws (and the committed fixtures) stay reproducible. `ties`: the
    requests of a step share one arrival_time (the step, as a trace with whole-second
    stamps gives them), come in an order unlike their ids' (`q7` before `q12` before `q3`),
    and mostly under `priority` with two levels: vLLM's heap then breaks ties by request
    id, its FCFS queue by input order, and preempted requests re-enter among equal keys.
    """
    block_size = rng.choice([4, 8, 16])
    chunked = rng.random() < 0.7
    policy = rng.choice(["fcfs", "priority"])
    if ties and rng.random() < 0.5:
        policy = "priority"  # (ties: three quarters under priority)
    max_num_seqs = rng.choice([2, 3, 4, 8, 16, 128])
    budget = rng.choice([16, 24, 32, 64, 128, 256])
    # vLLM refuses chunking off with max_num_batched_tokens < max_model_len.
    max_model_len = budget if not chunked else rng.choice([budget, 2 * budget, 256, 512, 2048])
    # vLLM refuses max_num_batched_tokens < max_num_seqs.
    max_num_seqs = min(max_num_seqs, budget)
    threshold = 0
    if rng.random() < 0.35:
        threshold = min(rng.choice([4, 8, 12, 16, 32]), max_model_len)

    n = rng.randint(3, 30)
    burst = rng.random() < 0.4
    horizon = rng.choice([1, 5, 20, 60])
    long_prompts = rng.random() < 0.5
    max_prompt = min(max_model_len - 1, rng.choice([budget // 2, budget, 2 * budget, 4 * budget])
                     if long_prompts else max(4, budget // 2))
    max_prompt = max(1, max_prompt)
    max_output = rng.choice([1, 4, 16, 48])
    requests: list[dict[str, Any]] = []
    for i in range(n):
        prompt_len = rng.randint(1, max_prompt)
        if rng.random() < 0.03:
            prompt_len = max_model_len + rng.choice([0, 1, 5])  # rejected at arrival
        output_len = rng.randint(1, max_output)
        if max_model_len <= 256 and rng.random() < 0.05:
            output_len = max_model_len  # capped by max_model_len (FINISHED_LENGTH_CAPPED)
        arrival = 0 if burst else rng.randint(0, horizon)
        priority = rng.randint(0, 3) if policy == "priority" else 0
        requests.append({"id": f"r{i:03d}", "prompt_len": prompt_len, "output_len": output_len,
                         "arrival_step": arrival, "priority": priority})
    requests.sort(key=lambda r: (r["arrival_step"], r["id"]))
    if ties:
        requests = tied_requests(rng, requests)

    usable = _usable_blocks(rng, requests, requests, max_model_len, block_size)
    config = {
        "num_blocks": usable + 1,  # vLLM's count includes the null block
        "block_size": block_size,
        "max_num_batched_tokens": budget,
        "max_num_seqs": max_num_seqs,
        "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": threshold,
        "policy": policy,
        "max_model_len": max_model_len,
        "enable_prefix_caching": False,
        "scheduler_reserve_full_isl": rng.random() < 0.85,
        "watermark": 0.0,
    }
    if extra is not None and extra.random() < watermark_prob:
        config["watermark"] = extra.choice([0.01, 0.05, 0.1, 0.2])
    workload = {"name": name, "requests": requests}
    return config, workload


def tied_requests(rng: random.Random, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`requests` with one arrival_time per step, unpadded ids in a shuffled order within
    each step, and priorities 0 or 1 where they had any (shared with vllm_v0_driver.py)."""
    steps = sorted({int(r["arrival_step"]) for r in requests})
    out = []
    for step in steps:
        group = [dict(r) for r in requests if int(r["arrival_step"]) == step]
        rng.shuffle(group)
        for r in group:
            r["arrival_time"] = float(step)
            if r["priority"]:
                r["priority"] = r["priority"] % 2
        out += group
    for i, r in enumerate(out):
        r["id"] = f"q{i}"
    order = list(range(len(out)))
    rng.shuffle(order)
    for r, k in zip(out, order, strict=True):  # ids unlike the input order
        r["id"] = f"q{k}"
    return out


def random_prefix_case(rng: random.Random, name: str,
                       sessions: bool | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One random (config, workload) whose prompts share prefixes, with caching on.

    Shared system prompts of a few groups (lengths on, just off and across block
    boundaries), partial overlaps (a shorter run of a group's segment), identical prompts,
    private tails or none; with `sessions` (40% of draws by default) also conversations:
    a turn's prompt is the previous turn's prompt + its answer + new tokens, and it arrives
    after the previous turn finished. Pools run from one longest request to roomy, so
    requests preempt, resume onto their own cached blocks, and evict each other's.
    """
    block_size = rng.choice([4, 8, 16])
    chunked = rng.random() < 0.7
    policy = rng.choice(["fcfs", "priority"])
    budget = rng.choice([16, 32, 64, 128, 256])
    max_model_len = budget if not chunked else rng.choice([budget, 2 * budget, 512, 2048])
    max_num_seqs = min(rng.choice([2, 3, 4, 8, 16, 128]), budget)
    threshold = 0
    if rng.random() < 0.3:
        threshold = min(rng.choice([4, 8, 12, 16, 32]), max_model_len)
    if sessions is None:
        sessions = rng.random() < 0.4
    cap = max_model_len - 1  # longest admissible prompt
    max_output = rng.choice([1, 4, 12, 24])

    def length_near_blocks(hi: int) -> int:
        """A length on, one off, or anywhere around block boundaries (>= 1, <= hi)."""
        hi = max(1, hi)
        k = rng.randint(1, max(1, hi // block_size))
        n = rng.choice([k * block_size, k * block_size - 1, k * block_size + 1,
                        rng.randint(1, hi)])
        return max(1, min(n, hi))

    n_groups = rng.randint(1, 4)
    group_len = {g: length_near_blocks(min(cap, rng.choice([budget // 2, budget, 2 * budget])))
                 for g in range(1, n_groups + 1)}
    next_seg = [1000]

    def fresh(length: int) -> list[int]:
        next_seg[0] += 1
        return [next_seg[0], length]

    requests: list[dict[str, Any]] = []
    horizon = rng.choice([1, 5, 20, 40])
    burst = rng.random() < 0.4
    n = rng.randint(4, 24)
    i = 0
    while len(requests) < n:
        rid = f"r{i:03d}"
        i += 1
        arrival = 0 if burst else rng.randint(0, horizon)
        priority = rng.randint(0, 3) if policy == "priority" else 0
        output_len = rng.randint(1, max_output)
        if sessions and rng.random() < 0.5:
            # A conversation of 2-4 turns; each turn's prefix names its answer too.
            g = rng.randint(1, n_groups)
            segs: list[list[int]] = [[g, group_len[g]]] if rng.random() < 0.7 else []
            prev: str | None = None
            for _turn in range(rng.randint(2, 4)):
                user = fresh(rng.randint(1, max(1, budget // 2)))
                prompt_len = sum(s[1] for s in segs) + user[1]
                out = rng.randint(1, max_output)
                if prompt_len >= cap or len(requests) >= n + 6:
                    break
                turn_segs = segs + [user, fresh(out)]
                spec: dict[str, Any] = {"id": f"r{i:03d}" if prev else rid,
                                        "prompt_len": prompt_len, "output_len": out,
                                        "priority": priority, "prefix": turn_segs}
                if prev is None:
                    spec["arrival_step"] = arrival
                else:
                    spec["after"] = prev
                    spec["think_steps"] = rng.choice([0, 0, 1, 3, 8])
                    i += 1
                requests.append(spec)
                prev = spec["id"]
                segs = turn_segs
            continue
        kind = rng.random()
        if kind < 0.15 and requests:
            # An identical prompt: another request's segments and length.
            src = rng.choice([r for r in requests if r.get("after") is None])
            prefix = [list(s) for s in src["prefix"]][: len(src["prefix"])]
            prompt_len = min(src["prompt_len"], sum(s[1] for s in prefix))
            prefix = _cut(prefix, prompt_len)
        elif kind < 0.85:
            g = rng.randint(1, n_groups)
            shared = group_len[g]
            if rng.random() < 0.25:  # a partial overlap: a shorter run of the same segment
                shared = length_near_blocks(shared)
            tail = rng.choice([0, rng.randint(1, max(1, budget)), rng.randint(1, block_size)])
            prompt_len = min(shared + tail, cap)
            prefix = _cut([[g, shared]], prompt_len)
            if tail and rng.random() < 0.5 and prompt_len > shared:
                prefix.append(fresh(prompt_len - shared))  # tail as a segment, else private
        else:
            prompt_len = rng.randint(1, max(1, min(cap, 2 * budget)))
            prefix = []
        if rng.random() < 0.03:
            prompt_len = max_model_len + rng.choice([0, 1])  # rejected at arrival
            prefix = _cut(prefix, prompt_len)
        requests.append({"id": rid, "prompt_len": max(1, prompt_len), "output_len": output_len,
                         "arrival_step": arrival, "priority": priority, "prefix": prefix})
    requests.sort(key=lambda r: (r.get("arrival_step", 10**9), r["id"]))
    for r in requests:
        if not r["prefix"]:
            del r["prefix"]

    admissible = [r for r in requests if r["prompt_len"] < max_model_len]
    usable = _usable_blocks(rng, requests, admissible, max_model_len, block_size)
    config = {
        "num_blocks": usable + 1,
        "block_size": block_size,
        "max_num_batched_tokens": budget,
        "max_num_seqs": max_num_seqs,
        "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": threshold,
        "policy": policy,
        "max_model_len": max_model_len,
        "enable_prefix_caching": True,
        "scheduler_reserve_full_isl": rng.random() < 0.85,
        "watermark": rng.choice([0.0, 0.0, 0.0, 0.05]),
    }
    return config, {"name": name, "requests": requests}


def _cut(prefix: list[list[int]], length: int) -> list[list[int]]:
    """The segments covering at most the first `length` tokens."""
    out: list[list[int]] = []
    left = length
    for seg_id, n in prefix:
        if left <= 0:
            break
        out.append([seg_id, min(n, left)])
        left -= n
    return out


# --------------------------------------------------------------------------- vLLM's cases


def vllm_test_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """vLLM's own V1 scheduler tests (tests/v1/core/test_scheduler.py), as workloads.

    Each keeps the vLLM test's name, its scheduler arguments (create_scheduler's
    defaults: max_num_seqs 16, max_num_batched_tokens 8192, max_model_len = the
    budget, block_size 16, num_blocks 10000), its requests (create_requests: 10
    prompt tokens, max_tokens 16) and its arrival times. The vLLM test asserts on a
    step or two; here the same situation runs to completion on the step clock.
    """
    base = {"max_num_seqs": 16, "max_num_batched_tokens": 8192, "max_model_len": 8192,
            "block_size": 16, "num_blocks": 10000}

    def reqs(n: int, prompt: int = 10, out: int = 16, prio=None, arrival_times=None,
             ids=None, step: int = 0):
        return [{"id": ids[i] if ids else f"{i}", "prompt_len": prompt, "output_len": out,
                 "arrival_step": step, "priority": prio[i] if prio else 0,
                 **({"arrival_time": arrival_times[i]} if arrival_times else {})}
                for i in range(n)]

    def case(name, cfg, requests):
        return (name, {**base, **cfg}, {"requests": requests})

    return [
        case("test_schedule", {}, reqs(10)),
        case("test_schedule_concurrent_partial_requests",
             {"max_num_batched_tokens": 1024, "max_model_len": 1024,
              "long_prefill_token_threshold": 400},
             reqs(3, prompt=800)),
        case("test_priority_scheduling_basic_ordering", {"policy": "priority"},
             reqs(3, prio=[2, 0, 1], arrival_times=[1.0, 2.0, 3.0])),
        case("test_priority_scheduling_mixed_priority_and_arrival", {"policy": "priority"},
             reqs(4, prio=[2, 1, 1, 0], arrival_times=[1.0, 3.0, 2.0, 4.0])),
        # lo1 (priority 5, 32 tokens) runs; hi1 (priority 0, 32 tokens) arrives next
        # step; 5 usable blocks of 16, so block pressure preempts the low one.
        case("test_priority_scheduling_preemption",
             {"policy": "priority", "max_num_seqs": 3, "max_num_batched_tokens": 200,
              "max_model_len": 200, "num_blocks": 6},
             reqs(1, prompt=32, out=40, prio=[5], arrival_times=[1.0], ids=["lo1"])
             + reqs(1, prompt=32, out=40, prio=[0], arrival_times=[2.0], ids=["hi1"],
                    step=1)),
        case("test_priority_scheduling_no_preemption_when_space_available",
             {"policy": "priority", "max_num_seqs": 3, "max_num_batched_tokens": 200,
              "max_model_len": 200},
             reqs(2, prompt=30, prio=[5, 5], arrival_times=[1.0, 2.0], ids=["lo1", "lo2"])
             + reqs(1, prompt=30, prio=[0], arrival_times=[3.0], ids=["hi1"], step=1)),
        case("test_priority_scheduling_preemption_victim_selection",
             {"policy": "priority", "max_num_seqs": 1},
             reqs(3, prio=[3, 2, 0], arrival_times=[1.0, 2.0, 3.0])),
        case("test_priority_scheduling_equal_priority_preemption",
             {"policy": "priority", "max_num_seqs": 1},
             reqs(3, prio=[2, 2, 2], arrival_times=[3.0, 1.0, 2.0])),
        case("test_priority_scheduling_waiting_queue_order",
             {"policy": "priority", "max_num_seqs": 1},
             reqs(4, prio=[3, 1, 2, 0], arrival_times=[1.0, 2.0, 3.0, 4.0])),
        case("test_priority_scheduling_fcfs_fallback", {"policy": "priority"},
             reqs(4, prio=[1, 1, 1, 1], arrival_times=[4.0, 1.0, 3.0, 2.0])),
        case("test_priority_scheduling_with_limited_slots",
             {"policy": "priority", "max_num_seqs": 2, "max_num_batched_tokens": 1000,
              "max_model_len": 1000},
             reqs(4, prio=[3, 1, 2, 0], arrival_times=[1.0, 2.0, 3.0, 4.0])),
        # The vLLM test needs a KV connector only to be able to run at all in that
        # parametrization; the block math (5 blocks = 4 usable) is the same without.
        # There request_high is finished by hand after its 2nd token: max_tokens=2.
        case("test_priority_scheduling_preemption_and_resumption_when_out_of_kv",
             {"policy": "priority", "max_num_seqs": 2, "max_num_batched_tokens": 200,
              "max_model_len": 200, "num_blocks": 5},
             reqs(1, prompt=30, prio=[1], arrival_times=[0.0], ids=["0"])
             + reqs(1, prompt=32, out=2, prio=[0], arrival_times=[1.0], ids=["1"], step=1)),
        # Chunked prefill off must not let the short requests pass the long ones.
        case("test_schedule_order[chunked]",
             {"max_num_batched_tokens": 1024, "max_model_len": 1024, "max_num_seqs": 3},
             reqs(2, prompt=800, ids=["1", "2"]) + reqs(2, prompt=10, ids=["3", "4"])),
        case("test_schedule_order[not_chunked]",
             {"max_num_batched_tokens": 1024, "max_model_len": 1024, "max_num_seqs": 3,
              "enable_chunked_prefill": False},
             reqs(2, prompt=800, ids=["1", "2"]) + reqs(2, prompt=10, ids=["3", "4"])),
        case("test_priority_scheduling_heap_property",
             {"policy": "priority", "max_num_seqs": 1},
             reqs(8, out=1, prio=[5, 1, 8, 3, 2, 7, 4, 6],
                  arrival_times=[float(i) for i in range(8)])),
    ]


# --------------------------------------------------------------------------- I/O


def dump(record: dict[str, Any], path: Path) -> None:
    """JSON with one step, one workload request and one request summary per line,
    so fixtures stay small and diffable."""
    def c(v: Any) -> str:
        return json.dumps(v, separators=(",", ":"))

    def items(pairs: list[str], indent: str) -> str:
        return ",\n".join(indent + p for p in pairs)

    out = ["{"]
    fields = []
    for key, value in record.items():
        if key == "steps":
            body = items([c(s) for s in value], "  ")
            fields.append(f' "steps": [\n{body}\n ]')
        elif key == "requests":
            body = items([f"{json.dumps(k)}: {c(v)}" for k, v in value.items()], "  ")
            fields.append(f' "requests": {{\n{body}\n }}')
        elif key == "workload":
            rest = {k: v for k, v in value.items() if k != "requests"}
            head = "".join(f"{json.dumps(k)}: {c(v)}, " for k, v in rest.items())
            body = items([c(r) for r in value["requests"]], "   ")
            fields.append(f' "workload": {{{head}"requests": [\n{body}\n ]}}')
        else:
            fields.append(f" {json.dumps(key)}: {c(value)}")
    out.append(",\n".join(fields))
    out.append("}")
    text = "\n".join(out) + "\n"
    assert json.loads(text) == json.loads(json.dumps(record))  # must stay valid JSON
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--workload", type=Path)
    ap.add_argument("--config", type=Path)
    ap.add_argument("--scenario", type=Path, help="one JSON holding {config, workload}")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--random", type=int, default=0, metavar="N")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--watermark-prob", type=float, default=0.0,
                    help="with --random: share of workloads with a non-default watermark")
    ap.add_argument("--cases", action="store_true", help="record vLLM's own test cases")
    ap.add_argument("--ties", action="store_true",
                    help="with --random: a step's arrivals share one arrival_time, ids out of "
                         "input order, mostly priority scheduling (no 1e-6 spacing)")
    ap.add_argument("--random-prefix", type=int, default=0, metavar="N",
                    help="N random workloads sharing prefixes (groups, overlaps, some sessions), "
                         "prefix caching on")
    ap.add_argument("--random-sessions", type=int, default=0, metavar="N",
                    help="N random workloads of multi-turn sessions, prefix caching on")
    ap.add_argument("--async", dest="async_scheduling", action="store_true",
                    help="vLLM's AsyncScheduler behind the engine core's batch queue (as "
                         "vllm serve runs it): config async_scheduling true, names async-*")
    ap.add_argument("--out-dir", type=Path)
    ap.add_argument("--max-steps", type=int, default=5000)
    ap.add_argument("--max-steps-keep", type=int, default=0,
                    help="with --random: keep only records of at most this many steps")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="kvsched-tiny-model-") as model_dir:
        Path(model_dir, "config.json").write_text(json.dumps(TINY_MODEL_CONFIG))
        jobs: list[tuple[str, dict[str, Any], dict[str, Any], int]] = []
        if args.random:
            for i in range(args.random):
                rng = random.Random(f"{args.seed}:{i}")
                name = f"{'ties' if args.ties else 'random'}-s{args.seed}-{i:04d}"
                extra = random.Random(f"{args.seed}:{i}:extra")
                cfg, wl = random_case(rng, name, args.watermark_prob, extra, args.ties)
                jobs.append((name, cfg, wl, i))
        for kind, count in (("prefix", args.random_prefix), ("sessions", args.random_sessions)):
            for i in range(count):
                rng = random.Random(f"{kind}:{args.seed}:{i}")
                name = f"{kind}-s{args.seed}-{i:04d}"
                cfg, wl = random_prefix_case(rng, name, True if kind == "sessions" else None)
                jobs.append((name, cfg, wl, i))
        if args.cases:
            for name, cfg, wl in vllm_test_cases():
                wl = {"name": name, **wl}
                jobs.append((name, cfg, wl, 0))
        if args.scenario or args.workload:
            if args.scenario:
                sc = json.loads(args.scenario.read_text())
                cfg, wl = sc["config"], sc["workload"]
            else:
                wl = json.loads(args.workload.read_text())
                cfg = json.loads(args.config.read_text()) if args.config else {}
            if args.async_scheduling:
                cfg = {**cfg, "async_scheduling": True}
            rec = run(cfg, wl, model_dir, args.max_steps,
                      async_scheduling=bool(cfg.get("async_scheduling")))
            out = args.out or Path("vllm_record.json")
            dump(rec, out)
            print(f"{out}: {rec['summary']}")
        if jobs:
            if args.out_dir is None:
                ap.error("--random/--random-prefix/--random-sessions/--cases need --out-dir")
            args.out_dir.mkdir(parents=True, exist_ok=True)
            kept = 0
            for name, cfg, wl, seed in jobs:
                if args.async_scheduling:  # the same workloads, the async engine
                    name = f"async-{name}"
                    cfg = {**cfg, "async_scheduling": True}
                    wl = {**wl, "name": name}
                rec = run(cfg, wl, model_dir, args.max_steps, token_seed=seed,
                          async_scheduling=args.async_scheduling)
                if args.max_steps_keep and rec["summary"]["num_steps"] > args.max_steps_keep:
                    continue
                dump(rec, args.out_dir / f"{name}.json")
                kept += 1
                s = rec["summary"]
                cache = (f" hit={s['prefix_hit_tokens']} evicted={s['evicted_blocks']}"
                         if "evicted_blocks" in s else "")
                print(f"{name}: steps={s['num_steps']} preemptions={s['num_preemptions']} "
                      f"finished={s['num_finished']} rejected={s['num_rejected']}"
                      f"{cache}"
                      f"{' STALLED' if s['stalled'] else ''}"
                      f"{' MAX_STEPS' if s['hit_max_steps'] else ''}", flush=True)
            print(f"recorded {kept} workload(s) in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
