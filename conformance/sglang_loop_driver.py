r"""Drive SGLang 0.5.23's own scheduling loop on the CPU, step by step, and record what it runs.

Runs in `.venv-conformance-sglang` (see conformance/README.md). SGLang's `Scheduler.__init__`
builds a model runner, so the scheduler is made without it (`Scheduler.__new__`) and given,
attribute by attribute, the state its scheduling methods read: SGLang's own
`SchedulePolicy`, `NewTokenRatioTracker`, `BeamCoordinator` (no beams), a real
`ReqToTokenPool`, a real token-to-KV allocator (`TokenToKVPoolAllocator` for page size 1,
`PagedTokenToKVPoolAllocator` above) and SGLang's default tree cache for a full-attention
model, `UnifiedRadixCache` with its default TreeCore (caching off: `disable=True`, what
`--disable-radix-cache` builds; on with `enable_prefix_caching`, as `--random-prefix` draws).
Every other feature is off (`None` / `False`, the values
`Scheduler.__init__` gives them without their flags). Each step is one iteration of
`Scheduler.event_loop_normal` (managers/scheduler.py line 2026; `--disable-overlap-schedule`):

* the step's arrivals go through `init_req_max_new_tokens` and `_add_request_to_queue`;
* `get_next_batch_to_run` (line 3894): merge the last prefill into the running batch, filter
  finished requests, `_get_new_batch_prefill_raw` (a real `PrefillAdder`, `prepare_for_extend`
  allocating from the real pool), else `update_running_batch` (`check_decode_mem`,
  `retract_decode`, the ratio's decay, `prepare_for_decode`);
* the forward is the stand-in: each request in the batch gets one next token;
* `SchedulerBatchResultProcessor.process_batch_result_prefill` / `_decode` (real): output
  ids, finish by length, `checkpoint_kv_cache` / `release_kv_cache`;
* a step without a batch runs `on_idle`'s ratio reset when the scheduler is fully idle
  (`is_fully_idle`, real).

Output streaming, metrics and logging are no-ops. What it records per step: the batch (prefill
chunks with their extend lengths, or the decode pass), the requests retracted (in the order
`retract_decode` chose them) and finished; see conformance/README.md, the loop record.

    .venv-conformance-sglang/bin/python conformance/sglang_loop_driver.py --random 100 --out-dir DIR
    .venv-conformance-sglang/bin/python conformance/sglang_loop_driver.py --random-prefix 100 \
        --out-dir DIR
    .venv-conformance-sglang/bin/python conformance/sglang_loop_driver.py --scenario S.json --out R
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
FORMAT = "kvsched-sglang-record/1"

# The harness's defaults; a record's config holds them all.
DEFAULTS: dict[str, Any] = {
    "page_size": 1, "num_tokens": 4096, "chunked_prefill_size": 512,
    "max_prefill_tokens": 16384, "max_running_requests": 32, "context_len": 1 << 20,
    "schedule_conservativeness": 1.0, "enable_prefix_caching": False,
}


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


class _Missing(AttributeError):
    pass


def _import() -> SimpleNamespace:
    import logging

    logging.disable(logging.WARNING)  # retraction warnings: the record says it
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers.image_utils  # noqa: F401  (caches "torchvision absent" before the stub)

    sys.path.insert(0, str(HERE / "sglang_stubs"))
    import sglang
    import torch
    from sglang.srt.beam_search.coordinator import BeamCoordinator
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.scheduler_components.batch_result_processor import (
        SchedulerBatchResultProcessor,
    )
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.runtime_context import get_context
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import ServerArgs
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    class Driven(Scheduler):
        """A Scheduler whose missing state is an error naming it (never a silent default)."""

        def __getattr__(self, name: str) -> Any:
            raise _Missing(f"the driver gives the scheduler no {name!r}")

    # retract_decode's choices, in its order (an observation: the method runs unchanged)
    retracted: list[Any] = []
    original = ScheduleBatch.retract_decode

    def observed(self: Any) -> Any:
        out = original(self)
        retracted.extend(out[0])
        retracted.extend(("abort", r) for r in out[2])
        return out

    ScheduleBatch.retract_decode = observed

    # tokens the tree evicts, whoever asks (an observation: _evict runs unchanged)
    evicted = [0]
    original_evict = UnifiedRadixCache._evict

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_evict(self, *args, **kwargs)
        evicted[0] += int(result.num_tokens_evicted)
        return result

    UnifiedRadixCache._evict = counted
    return SimpleNamespace(
        sglang=sglang, torch=torch, BeamCoordinator=BeamCoordinator,
        DisaggregationMode=DisaggregationMode, Req=Req, ScheduleBatch=ScheduleBatch,
        Driven=Driven, SchedulerBatchResultProcessor=SchedulerBatchResultProcessor,
        GenerationBatchResult=GenerationBatchResult,
        PagedTokenToKVPoolAllocator=PagedTokenToKVPoolAllocator,
        TokenToKVPoolAllocator=TokenToKVPoolAllocator, CacheInitParams=CacheInitParams,
        ReqToTokenPool=ReqToTokenPool, ComponentType=ComponentType,
        UnifiedRadixCache=UnifiedRadixCache, get_context=get_context,
        SamplingParams=SamplingParams, ServerArgs=ServerArgs,
        SpeculativeAlgorithm=SpeculativeAlgorithm, retracted=retracted, evicted=evicted)


class Loop:
    """One SGLang scheduler on the CPU, as `event_loop_normal` runs it."""

    def __init__(self, sg: SimpleNamespace, config: dict[str, Any]) -> None:
        self.sg = sg
        torch = sg.torch
        cfg = {**DEFAULTS, **config}
        self.cfg = cfg
        page = int(cfg["page_size"])
        chunk = cfg["chunked_prefill_size"]
        max_running = int(cfg["max_running_requests"])
        server_args = sg.ServerArgs(
            model_path="dummy", device="cpu", page_size=page,
            chunked_prefill_size=-1 if chunk is None else int(chunk),
            max_prefill_tokens=int(cfg["max_prefill_tokens"]),
            max_running_requests=max_running, pp_max_micro_batch_size=max_running,
            schedule_conservativeness=float(cfg["schedule_conservativeness"]),
            disable_overlap_schedule=True, schedule_policy="fcfs",
            disable_radix_cache=not cfg["enable_prefix_caching"])
        sg.get_context().set_server_args(server_args)
        size = int(cfg["num_tokens"])
        self.req_to_token_pool = sg.ReqToTokenPool(
            size=max_running, max_context_len=int(cfg["context_len"]) + 8, device="cpu",
            enable_memory_saver=False)
        if page == 1:
            self.allocator = sg.TokenToKVPoolAllocator(size, torch.float16, "cpu", None, False)
        else:
            self.allocator = sg.PagedTokenToKVPoolAllocator(size, page, torch.float16, "cpu",
                                                            None, False)
        params = sg.CacheInitParams(disable=not cfg["enable_prefix_caching"],
                                    req_to_token_pool=self.req_to_token_pool,
                                    token_to_kv_pool_allocator=self.allocator, page_size=page,
                                    tree_components=(sg.ComponentType.FULL,))
        self.tree_cache = sg.UnifiedRadixCache(params)
        self.scheduler = self._scheduler(server_args, page, chunk, max_running, size)
        s = self.scheduler
        self.processor = sg.SchedulerBatchResultProcessor(
            is_generation=True, disaggregation_mode=sg.DisaggregationMode.NULL,
            enable_overlap=False, enable_overlap_mlx=False, model_config=s.model_config,
            token_to_kv_pool_allocator=self.allocator, tree_cache=self.tree_cache,
            hisparse_coordinator=None, req_to_token_pool=self.req_to_token_pool,
            decode_offload_manager=None, metrics_collector=None,
            metrics_reporter=s.metrics_reporter, draft_worker=None, model_worker=None,
            logprob_result_processor=None, output_streamer=s.output_streamer,
            beam_coordinator=s.beam_coordinator, abort_request=_noop)

    def _scheduler(self, server_args: Any, page: int, chunk: int | None, max_running: int,
                   size: int) -> Any:
        sg = self.sg
        s = sg.Driven.__new__(sg.Driven)
        s.server_args = server_args
        # what Scheduler.__init__ reads from the flags (their defaults, scheduling on)
        s.schedule_policy = "fcfs"
        s.enable_priority_scheduling = False
        s.abort_on_priority_when_disabled = False
        s.schedule_low_priority_values_first = False
        s.priority_scheduling_preemption_threshold = 10
        s.enable_hierarchical_cache = False
        s.enable_lmcache = False
        s.enable_hicache_storage = False
        s.enable_unified_cache_external_linker = False
        s.enable_hisparse = False
        s.enable_lora = False
        s.enable_overlap = False
        s.enable_skip_finishing_decode = False
        s.page_size = page
        s.spec_algorithm = sg.SpeculativeAlgorithm.from_string(None)
        s.max_new_tokens_limit = None
        # the model worker's info (get_worker_info): the pool and the request limits
        s.max_total_num_tokens = size
        s.max_prefill_tokens = server_args.max_prefill_tokens
        s.max_running_requests = max_running
        s.max_queued_requests = None
        # TpModelWorker.get_worker_info (tp_worker.py line 568)
        s.max_req_len = min(int(self.cfg["context_len"]) - 1, size - 1)
        s.max_req_input_len = s.max_req_len - 5
        s.kv_shard_widening = 1
        s.chunked_prefill_size = chunk
        s.is_mixed_chunk = False
        s.truncation_align_size = None
        s.dynamic_chunk_sizer = None
        s.min_free_slots_delayer = None
        s.max_prefill_bs = 0
        s.processed_tokens_counter = 0
        s.require_mlp_sync = False
        s.prefill_decode_interval = 0
        s._prefill_decode_interval_remaining = 0
        s.disaggregation_mode = sg.DisaggregationMode.NULL
        s.dllm_config = None
        s.is_hybrid_swa = False
        s.sliding_window_size = None
        s.hisparse_coordinator = None
        s.decode_offload_manager = None
        s._pending_chunked_abort_req = None
        s.scheduler_stage_metrics = None
        s.forward_ct = 0
        # pools and cache
        s.req_to_token_pool = self.req_to_token_pool
        s.token_to_kv_pool_allocator = self.allocator
        s.tree_cache = self.tree_cache
        s.model_config = SimpleNamespace(
            vocab_size=1 << 31, is_encoder_decoder=False, hf_text_config=SimpleNamespace(),
            context_len=int(self.cfg["context_len"]), is_multimodal=False,
            self_opened_think_start_ids=None, think_end_ids=None)
        s.tp_worker = SimpleNamespace(model_runner=SimpleNamespace(
            attn_backend=SimpleNamespace(), prefill_aware_swa=False))
        s.beam_coordinator = sg.BeamCoordinator(
            model_config=s.model_config, spec_algorithm=s.spec_algorithm, dllm_enabled=False,
            max_req_len=s.max_req_len, req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator, tree_cache=self.tree_cache,
            future_map=None)
        # queues (Scheduler.init_running_status) and policy (init_schedule_policy, real)
        s.waiting_queue = []
        s.running_batch = sg.ScheduleBatch(reqs=[], batch_is_full=False)
        s.chunked_req = None
        s.last_batch = None
        s.init_schedule_policy()
        # no-op stand-ins: streaming, metrics, data-parallel sync, grammar, n-gram embeddings
        s.grammar_manager = SimpleNamespace(has_waiting_grammars=lambda: False,
                                            grammar_queue=[])
        s.load_inquirer = SimpleNamespace(_get_num_pending_tokens=lambda chunk_deduct=0: 0)
        s.dp_attn_adapter = SimpleNamespace(
            maybe_prepare_mlp_sync_batch=lambda batch, need_sync=False: batch,
            maybe_convert_decode_to_extend=lambda batch: batch)
        s.ngram_embedding_manager = SimpleNamespace(
            prepare_for_forward=lambda batch, chunked_req=None: batch)
        s.metrics_reporter = SimpleNamespace(
            num_generated_tokens=0, forward_ct_decode=0, enable_metrics=False,
            num_retracted_reqs=0, report_prefill_stats=_noop, report_decode_stats=_noop)
        s.output_streamer = SimpleNamespace(stream_output=_noop)
        s.dllm_manager = SimpleNamespace(any_staging_reqs=lambda: False)
        s._pp_microbatches_drained = lambda: True
        return s

    # -- one request ----------------------------------------------------------------------

    def make_req(self, rid: str, tokens: list[int], max_new_tokens: int) -> Any:
        sg = self.sg
        params = sg.SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=False)
        params.normalize(None)  # what the tokenizer manager does before it sends a request
        req = sg.Req(rid, "", array("q", tokens), params)
        return req

    def arrive(self, req: Any) -> None:
        """`handle_generate_request`'s path for a valid request (line 3120 on)."""
        s = self.scheduler
        s.init_req_max_new_tokens(req)
        s._add_request_to_queue(req)

    # -- one step -------------------------------------------------------------------------

    def step(self, next_token: Any) -> dict[str, Any]:
        """One iteration of `event_loop_normal`; `next_token(req)` is the forward's token."""
        sg = self.sg
        s = self.scheduler
        sg.retracted.clear()
        waiting = set(s.waiting_queue)
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        batch = plan.batch_to_run
        out: dict[str, Any] = {"retracted": [r for r in sg.retracted if not isinstance(r, tuple)],
                               "aborted": [r[1] for r in sg.retracted if isinstance(r, tuple)]}
        if batch is None:
            if s.is_fully_idle():  # on_idle: the ratio goes back to its initial value
                s.new_token_ratio_tracker.reset()
            out["batch"] = None
        else:
            mode = batch.forward_mode
            extend = mode.is_extend()
            out["batch"] = [(r, r.extend_len if extend else 1) for r in batch.reqs]
            # an admission (not the chunked request going on): its match, locked
            out["hits"] = [(r, r.prefix_len) for r in batch.reqs if extend and r in waiting]
            out["decode"] = mode.is_decode()
            ids = sg.torch.tensor([next_token(r) for r in batch.reqs], dtype=sg.torch.int64)
            result = sg.GenerationBatchResult(next_token_ids=ids)
            if mode.is_decode():
                self.processor.process_batch_result_decode(batch, result)
            else:
                self.processor.process_batch_result_prefill(batch, result)
        s.last_batch = batch
        return out


# -- token ids ----------------------------------------------------------------------------
# Distinct for every (segment, offset), for every request's own prompt tokens and for every
# output token, below 2**31 (SGLang builds int32 index tensors from some of them): two
# sequences share a token exactly where kvsched's Prefix says they do.

def segment_token(segment: int, offset: int) -> int:
    return ((segment + 1) << 18) + offset


def own_token(index: int, offset: int) -> int:
    return (1 << 30) + (index << 14) + offset


def output_token(index: int, offset: int) -> int:
    return (1 << 30) + (1 << 29) + (index << 14) + offset


def request_tokens(spec: dict[str, Any], index: int) -> tuple[list[int], list[int] | None]:
    """(prompt token ids, the answer's or None): a `prefix` covering prompt + output names
    the answer too (a conversation's next turn repeats it); else the rest of the prompt and
    the answer are the request's own."""
    named: list[int] = []
    for segment, length in spec.get("prefix") or ():
        named.extend(segment_token(int(segment), k) for k in range(int(length)))
    prompt_len = int(spec["prompt_len"])
    if len(named) > prompt_len:
        return named[:prompt_len], named[prompt_len:]
    return named + [own_token(index, k) for k in range(len(named), prompt_len)], None


# -- a whole workload ---------------------------------------------------------------------

def run(sg: SimpleNamespace, config: dict[str, Any], workload: dict[str, Any],
        max_steps: int = 20000) -> dict[str, Any]:
    """Run `workload` to the end; the record (format `kvsched-sglang-record/1`)."""
    loop = Loop(sg, config)
    s = loop.scheduler
    specs = workload["requests"]
    index = {str(spec["id"]): i for i, spec in enumerate(specs)}
    # a conversation's next turn (`after`) arrives `think_steps` steps after the step in which
    # the turn before it finished; the record's workload gets that step
    by_step: dict[int, list[int]] = {}
    dependents: dict[str, list[int]] = {}
    for i, spec in enumerate(specs):
        if spec.get("after") is not None:
            dependents.setdefault(str(spec["after"]), []).append(i)
        else:
            by_step.setdefault(int(spec["arrival_step"]), []).append(i)
    resolved: dict[int, int] = {}
    reqs: dict[str, Any] = {}
    answers: dict[str, list[int] | None] = {}
    info: dict[str, dict[str, Any]] = {
        str(spec["id"]): {"arrival_step": spec.get("arrival_step"), "first_token_step": None,
                          "finish_step": None, "num_preemptions": 0, "status": "unfinished",
                          "num_output_tokens": 0} for spec in specs}

    def next_token(req: Any) -> int:
        answer = answers[req.rid]
        if answer is not None:
            return answer[len(req.output_ids)]
        return output_token(index[req.rid], len(req.output_ids))

    def ended(rid: str, at: int) -> None:
        for j in dependents.get(rid, ()):
            arrives = at + 1 + int(specs[j].get("think_steps", 0))
            resolved[j] = arrives
            info[str(specs[j]["id"])]["arrival_step"] = arrives
            by_step.setdefault(arrives, []).append(j)
            by_step[arrives].sort()

    caching = bool(loop.cfg["enable_prefix_caching"])
    page = int(loop.cfg["page_size"])
    hits: dict[str, list[int]] = {str(spec["id"]): [] for spec in specs}
    steps: list[dict[str, Any]] = []
    step = 0
    while step < max_steps:
        entry: dict[str, Any] = {"step": step}
        arrived = []
        for i in by_step.get(step, ()):
            spec = specs[i]
            rid = str(spec["id"])
            prompt, answers[rid] = request_tokens(spec, i)
            req = loop.make_req(rid, prompt, int(spec["output_len"]))
            reqs[rid] = req
            loop.arrive(req)
            arrived.append(rid)
        before = {rid: len(r.output_ids) for rid, r in reqs.items()}
        evicted_before = sg.evicted[0]
        out = loop.step(next_token)
        if arrived:
            entry["arrived"] = arrived
        if out["batch"] is not None:
            entry["scheduled"] = [[r.rid, int(n)] for r, n in out["batch"]]
            entry["mode"] = "decode" if out["decode"] else "prefill"
            if caching:
                entry["hits"] = [[r.rid, int(n)] for r, n in out["hits"]]
                for r, n in out["hits"]:
                    hits[r.rid].append(int(n))
        if out["retracted"]:
            entry["preempted"] = [r.rid for r in out["retracted"]]
            for r in out["retracted"]:
                info[r.rid]["num_preemptions"] += 1
        if out["aborted"]:
            entry["aborted"] = [r.rid for r in out["aborted"]]
            for r in out["aborted"]:
                info[r.rid].update(status="aborted", finish_step=step)
                ended(r.rid, step)
        finished = []
        for rid, req in reqs.items():
            made = len(req.output_ids) - before[rid]
            if made > 0 and info[rid]["first_token_step"] is None:
                info[rid]["first_token_step"] = step
            if made > 0 and req.finished() and info[rid]["finish_step"] is None:
                info[rid].update(finish_step=step, status="finished")
                finished.append(rid)
                ended(rid, step)
        if finished:
            entry["finished"] = finished
        entry["running"] = len(s.running_batch.reqs)
        entry["waiting"] = len(s.waiting_queue)
        entry["free_tokens"] = int(loop.allocator.available_size())
        if caching:
            entry["evictable_tokens"] = int(loop.tree_cache.evictable_size())
        if caching:
            cached = loop.tree_cache.evictable_size() + loop.tree_cache.protected_size()
            entry["cached_blocks"] = int(cached) // page
            if sg.evicted[0] > evicted_before:
                entry["evicted_blocks"] = (sg.evicted[0] - evicted_before) // page
        steps.append(entry)
        step += 1
        done = all(v["status"] != "unfinished" for v in info.values())
        if done and step > max(by_step, default=0):
            break
    for rid, req in reqs.items():
        info[rid]["num_output_tokens"] = len(req.output_ids)
    if caching:
        for rid, got in hits.items():
            info[rid].update(hits=got, prefix_hit_tokens=got[0] if got else None,
                             cached_tokens=sum(got))
    effective = {"new_token_ratio_init": s.new_token_ratio_tracker.init,
                 "max_new_tokens": {rid: int(r.sampling_params.max_new_tokens)
                                    for rid, r in reqs.items()}}
    summary = {"num_steps": len(steps), "hit_max_steps": step >= max_steps,
               "num_preemptions": sum(v["num_preemptions"] for v in info.values()),
               "num_finished": sum(v["status"] == "finished" for v in info.values())}
    return {"format": FORMAT,
            "engine": {"name": "sglang", "version": sg.sglang.__version__,
                       "scheduler": "Scheduler.get_next_batch_to_run (event_loop_normal)",
                       "tree_cache": type(loop.tree_cache).__name__,
                       "tree_core": type(loop.tree_cache.tree_core).__name__},
            "config": {**DEFAULTS, **config}, "effective_config": effective,
            "workload": {**workload, "requests": [
                {**spec, "arrival_step": resolved[i]} if i in resolved else spec
                for i, spec in enumerate(specs)]},
            "steps": [_compact(e) for e in steps],
            "requests": info, "summary": summary}


def _compact(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if v != [] and v is not None}


# -- random workloads ---------------------------------------------------------------------

def random_case(rng: random.Random, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A random config and workload (caching off): page sizes 1/4/16, chunking off or
    16-512 tokens, small `max_prefill_tokens` at times, 2-32 request slots, conservativeness
    1.0/0.3/0.1/2.0 (low ones admit more than the pool carries: retractions), 3-30 requests
    in bursts or spread, pools from one longest request to roomy.
    Every request fits an empty pool with a page to spare (no max_new_tokens clipping)."""
    page = rng.choice([1, 1, 4, 16])
    chunk = rng.choice([None, 16, 32, 64, 128, 256, 512])
    max_prefill = rng.choice([16384, 16384, 16384, 64, 128, 512, 2048])
    config: dict[str, Any] = {
        "page_size": page, "chunked_prefill_size": chunk, "max_prefill_tokens": max_prefill,
        "max_running_requests": rng.choice([2, 3, 4, 8, 16, 32]),
        "schedule_conservativeness": rng.choice([1.0, 1.0, 0.3, 0.1, 2.0]),
        "enable_prefix_caching": False}
    n = rng.randint(3, 30)
    spread = rng.choice([0, 0, 5, 20, 60])
    longest_prompt = rng.choice([40, 120, 400, 1000])
    requests: list[dict[str, Any]] = []
    for i in range(n):
        prompt = rng.randint(1, longest_prompt)
        output = rng.randint(1, rng.choice([8, 40, 200, 400]))
        requests.append({"id": f"r{i}", "prompt_len": prompt, "output_len": output,
                         "arrival_step": rng.randint(0, spread)})
    requests.sort(key=lambda r: r["arrival_step"])
    need = max(-(-r["prompt_len"] // page) * page + r["output_len"] + page + 1
               for r in requests)
    slack = rng.choice([0, page, 4 * page, 0.5, 1.0, 3.0, 10.0])
    size = need + (int(slack) if isinstance(slack, int) else int(need * slack))
    config["num_tokens"] = -(-size // page) * page
    return config, {"name": name, "requests": requests}


def random_prefix_case(rng: random.Random, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """`random_case` with the radix cache on: 1-4 shared prompts (lengths on, off and across
    page boundaries), each request using one (whole or a shorter run of it) with or without
    a private tail, some sharing nothing; in 40% of the draws also conversations of 2-4 turns
    (a turn's prompt is the previous prompt + its answer + new tokens, arriving 0-8 steps
    after the previous turn finished); pools from one longest request to roomy, so that
    cached prefixes are hit, evicted and hit again."""
    config, workload = random_case(rng, name)
    config["enable_prefix_caching"] = True
    page = int(config["page_size"])
    shared = [rng.choice([rng.randint(1, 64), rng.randint(1, 8) * page,
                          rng.randint(1, 8) * page + rng.randint(1, max(page - 1, 1)),
                          rng.randint(50, 400)]) for _ in range(rng.randint(1, 4))]
    requests: list[dict[str, Any]] = []
    fresh = itertools.count(1000)  # segment ids of conversation turns and answers
    sessions = rng.random() < 0.4
    for spec in workload["requests"]:
        if sessions and rng.random() < 0.4:
            segs: list[list[int]] = []
            if rng.random() < 0.7:
                group = rng.randrange(len(shared))
                segs.append([group, shared[group]])
            prev: str | None = None
            for turn in range(rng.randint(2, 4)):
                user = [next(fresh), rng.randint(1, 120)]
                out = rng.randint(1, rng.choice([8, 40, 200]))
                turn_segs = segs + [user, [next(fresh), out]]
                turn_spec: dict[str, Any] = {
                    "id": f"{spec['id']}t{turn}", "prompt_len": sum(n for _, n in segs)
                    + user[1], "output_len": out, "prefix": turn_segs}
                if prev is None:
                    turn_spec["arrival_step"] = spec["arrival_step"]
                else:
                    turn_spec["after"] = prev
                    turn_spec["think_steps"] = rng.choice([0, 0, 1, 3, 8])
                requests.append(turn_spec)
                prev = turn_spec["id"]
                segs = turn_segs
            continue
        if rng.random() < 0.8:
            group = rng.randrange(len(shared))
            run = shared[group] if rng.random() < 0.7 else rng.randint(1, shared[group])
            tail = rng.choice([0, 0, rng.randint(1, 16), rng.randint(1, 200)])
            spec["prompt_len"] = run + tail
            spec["prefix"] = [[group, run]]
        requests.append(spec)
    workload["requests"] = requests
    need = max(-(-int(r["prompt_len"]) // page) * page + int(r["output_len"]) + page + 1
               for r in requests)
    config["num_tokens"] = max(int(config["num_tokens"]), -(-need // page) * page)
    return config, workload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--random", type=int, metavar="N", help="N random workloads")
    parser.add_argument("--random-prefix", type=int, metavar="N",
                        help="N random workloads with the radix cache on")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out-dir")
    parser.add_argument("--scenario", help="a {config, workload} JSON file")
    parser.add_argument("--out", help="the record of --scenario")
    args = parser.parse_args(argv)
    sg = _import()
    if args.scenario:
        spec = json.loads(Path(args.scenario).read_text())
        record = run(sg, spec["config"], spec["workload"])
        Path(args.out).write_text(json.dumps(record, sort_keys=True) + "\n")
        return 0
    rng = random.Random(args.seed)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    steps = 0
    jobs = [(f"loop-s{args.seed}-{k:04d}", random_case) for k in range(args.random or 0)]
    if args.random_prefix:
        prng = random.Random(args.seed + 1000)  # its own stream: --random stays as it was
        jobs += [(f"prefix-s{args.seed}-{k:04d}", random_prefix_case)
                 for k in range(args.random_prefix)]
    for name, draw in jobs:
        config, workload = draw(prng if draw is random_prefix_case else rng, name)
        record = run(sg, config, workload)
        steps += record["summary"]["num_steps"]
        (out / f"{name}.json").write_text(json.dumps(record, sort_keys=True) + "\n")
    print(f"{len(jobs)} workloads, {steps} steps -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
