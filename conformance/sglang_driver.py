"""Drive SGLang 0.5.23's real admission code on the CPU, one prefill round at a time.

Runs in `.venv-conformance-sglang` (sglang==0.5.23 with --no-deps, torch 2.13.0 CPU; see
conformance/README.md). SGLang's `Scheduler` needs a GPU model runner, so this driver does not
run its event loop. It drives, with SGLang's own objects, the part of a step kvsched models as
`kvsched/reservation.py`:

* one prefill round of `Scheduler._get_new_batch_prefill_raw` (managers/scheduler.py line 4079
  in the 0.5.23 wheel): a real `PrefillAdder` (its real `PrefillBudget`), the unfinished chunked
  request continued first through `add_chunked_req` (line 4184), then the waiting queue in
  order, `budget_state()` before each request (line 4207) and `add_one_req`, stopping at the
  first result that is not CONTINUE, with `batch_is_full` set as line 4282 sets it.
  Requests are real `Req` objects (`SamplingParams(max_new_tokens, ignore_eos=False)`);
  running requests carry real `output_ids`.
* `NewTokenRatioTracker` (from_config, decay_step, reset, estimate after retraction) and
  `ScheduleBatch._get_decode_retraction_order`, both real.

Stand-ins (documented in conformance/sglang_stubs/README.md): the token-to-KV allocator is a
counter with `available_size()` (SGLang's allocator only answers that and `page_size` here),
and the prefix cache is caching off (nothing evictable, no hits). ServerArgs are published with
`device="cpu"` so SGLang's config lookups resolve.

    .venv-conformance-sglang/bin/python conformance/sglang_driver.py --rounds 400 --out R.json

The record: {"format": "kvsched-sglang-rounds/1", "engine": {...}, "rounds": [...],
"ratios": [...], "retractions": [...]}; see conformance/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
FORMAT = "kvsched-sglang-rounds/1"


def _import_sglang() -> SimpleNamespace:
    """Import SGLang's scheduling classes; torchvision is stubbed (see sglang_stubs/README.md)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers.image_utils  # noqa: F401  (caches "torchvision absent" before the stub)

    sys.path.insert(0, str(HERE / "sglang_stubs"))
    import sglang
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
    from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
        NewTokenRatioTracker,
    )
    from sglang.srt.mem_cache.prefill_budget import PrefillBudget
    from sglang.srt.runtime_context import get_context
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import ServerArgs

    return SimpleNamespace(version=sglang.__version__, Req=Req, ScheduleBatch=ScheduleBatch,
                           AddReqResult=AddReqResult, PrefillAdder=PrefillAdder,
                           NewTokenRatioTracker=NewTokenRatioTracker,
                           PrefillBudget=PrefillBudget, get_context=get_context,
                           SamplingParams=SamplingParams, ServerArgs=ServerArgs)


class _Allocator:
    """SGLang's token-to-KV allocator as the adder sees it: free tokens and the page size."""

    def __init__(self, sg: SimpleNamespace, page_size: int, free: int) -> None:
        self._sg = sg
        self.page_size = page_size
        self._free = free

    def available_size(self) -> int:
        return self._free

    def create_prefill_budget(self, tree_cache: Any, num_mixed_decode_tokens: int = 0) -> Any:
        # BaseTokenToKVPoolAllocator.create_prefill_budget for a plain pool
        return self._sg.PrefillBudget(self, tree_cache,
                                      num_mixed_decode_tokens=num_mixed_decode_tokens)

    def request_slot_reserve(self, has_req_pool_slot: bool, prefill_tokens: int) -> int:
        return 0  # a plain pool reserves nothing per request slot


class _NoCache:
    """`--disable-radix-cache`: nothing cached, nothing evictable."""

    disable = True
    buffer_pipeline = None

    def evictable_size(self) -> int:
        return 0

    def supports_mamba(self) -> bool:
        return False

    def supports_prefix_sharing(self) -> bool:
        return False

    def lock(self, node: Any) -> None:
        return None

    def unlock(self, lock: Any) -> None:
        return None

    def finish_storage_prefetch_admission(self, *args: Any, **kwargs: Any) -> None:
        return None

    def discard_storage_prefetch_accounting(self, *args: Any, **kwargs: Any) -> None:
        return None


def _req(sg: SimpleNamespace, rid: str, prompt_len: int, max_new: int, generated: int = 0) -> Any:
    req = sg.Req(rid, "", array("q", range(prompt_len)),
                 sg.SamplingParams(max_new_tokens=max_new, ignore_eos=False))
    req.output_ids.extend(range(generated))
    return req


def run_round(sg: SimpleNamespace, config: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """One prefill round, as `_get_new_batch_prefill_raw` runs it (no priority preemption)."""
    page = config["page_size"]
    chunk = config["chunked_prefill_size"]
    running = [_req(sg, r["id"], r["prompt_len"], r["max_new_tokens"], r["generated"])
               for r in state["running"]]
    batch = SimpleNamespace(reqs=running, batch_size=lambda: len(running))
    adder = sg.PrefillAdder(page, _NoCache(), _Allocator(sg, page, state["free_tokens"]), batch,
                            state["new_token_ratio"], config["max_prefill_tokens"], chunk, 0,
                            waiting_queue_len=len(state["waiting"]))
    admitted: list[list[Any]] = []
    chunked = None
    spec = state.get("chunked")
    if spec is not None:  # scheduler.py: self.chunked_req.init_next_round_input(); add_chunked_req
        chunked = _req(sg, spec["id"], spec["prompt_len"], spec["max_new_tokens"])
        chunked.init_next_round_input()
        chunked.prefix_len = spec["done"]
        chunked = adder.add_chunked_req(chunked)
        if adder.can_run_list:
            admitted.append([spec["id"], adder.can_run_list[0].extend_len])
    result = None
    batch_is_full = False
    waiting = [_req(sg, w["id"], w["prompt_len"], w["max_new_tokens"]) for w in state["waiting"]]
    for req in waiting:
        if adder.budget_state() == sg.AddReqResult.OTHER:
            result = "OTHER"
            break
        req.init_next_round_input(None)
        res = adder.add_one_req(req, has_chunked_req=chunked is not None,
                                truncation_align_size=None)
        if adder.can_run_list and adder.can_run_list[-1] is req:
            admitted.append([req.rid, req.extend_len])
        if res != sg.AddReqResult.CONTINUE:
            result = res.name
            if res == sg.AddReqResult.NO_TOKEN:
                batch_is_full = len(adder.can_run_list) > 0 or bool(running)
            break
    new_chunked = adder.new_chunked_req.rid if adder.new_chunked_req is not None else None
    return {"admitted": admitted, "result": result, "batch_is_full": batch_is_full,
            "chunked_next": new_chunked if new_chunked is not None
            else (spec["id"] if spec is not None and chunked is not None else None)}


class _RunningBatch:
    """The running batch as the adder's priority preemption uses it: `release_req` frees a
    victim's KV (prompt + generated - 1 tokens: its last token is not in the cache yet) to the
    allocator, `filter_batch` keeps the rest (ScheduleBatch.release_req / filter_batch)."""

    def __init__(self, reqs: list[Any], allocator: _Allocator) -> None:
        self.reqs = reqs
        self._allocator = allocator

    def batch_size(self) -> int:
        return len(self.reqs)

    def release_req(self, idx: int, remaining: int, offload_kv: bool = True) -> bool:
        req = self.reqs[idx]
        self._allocator._free += len(req.origin_input_ids) + len(req.output_ids) - 1
        return True

    def filter_batch(self, keep_indices: list[int] | None = None, **kwargs: Any) -> None:
        if keep_indices is not None:
            self.reqs = [self.reqs[i] for i in keep_indices]


def run_priority_round(sg: SimpleNamespace, config: dict[str, Any],
                       state: dict[str, Any]) -> dict[str, Any]:
    """One round with `--enable-priority-scheduling --schedule-low-priority-values-first`
    (kvsched's direction), page size 1, chunking on: scheduler.py line 4090 clears the latch,
    the slot check (line 4225) sets it, `preempt_to_schedule` (line 4235) runs for a head that
    finds it set, victims are re-queued after the round (line 4300)."""
    sg.get_context().set_server_args(sg.ServerArgs(
        model_path="dummy", device="cpu", enable_priority_scheduling=True,
        schedule_low_priority_values_first=True,
        priority_scheduling_preemption_threshold=config["threshold"]))
    allocator = _Allocator(sg, 1, state["free_tokens"])
    running = []
    for r in state["running"]:
        req = _req(sg, r["id"], r["prompt_len"], r["max_new_tokens"], r["generated"])
        req.priority = r["priority"]
        req.time_stats.wait_queue_entry_time = float(r["arrival"])
        running.append(req)
    batch = _RunningBatch(running, allocator)
    adder = sg.PrefillAdder(1, _NoCache(), allocator, batch, state["new_token_ratio"],
                            config["max_prefill_tokens"], config["chunked_prefill_size"], 0,
                            config["threshold"], waiting_queue_len=len(state["waiting"]))
    batch_is_full = False  # line 4090
    admitted: list[list[Any]] = []
    result = None
    for w in state["waiting"]:
        req = _req(sg, w["id"], w["prompt_len"], w["max_new_tokens"])
        req.priority = w["priority"]
        req.time_stats.wait_queue_entry_time = float(w["arrival"])
        if w["tried"]:  # an earlier round reached line 4260 for it and did not admit it
            req.init_next_round_input(None)
        if adder.budget_state() == sg.AddReqResult.OTHER:
            result = "OTHER"
            break
        if len(adder.can_run_list) >= config["max_running_requests"] - len(batch.reqs):
            batch_is_full = True
        if batch_is_full and not adder.preempt_to_schedule(req):
            result = "FULL"
            break
        req.init_next_round_input(None)
        res = adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None)
        if adder.can_run_list and adder.can_run_list[-1] is req:
            admitted.append([req.rid, req.extend_len])
        if res != sg.AddReqResult.CONTINUE:
            result = res.name
            if res == sg.AddReqResult.NO_TOKEN:
                batch_is_full = len(adder.can_run_list) > 0 or bool(batch.reqs)
            break
    return {"admitted": admitted, "preempted": sorted(r.rid for r in adder.preempt_list),
            "result": result, "batch_is_full": batch_is_full}


def random_priority_round(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """Priorities 0-30 against thresholds 0-10, slots from full to free, tight pools; `tried`:
    the request went through an earlier round (its fill ids are set)."""
    config = {"page_size": 1, "chunked_prefill_size": rng.choice([64, 256, 1024]),
              "max_prefill_tokens": 16384, "threshold": rng.choice([0, 1, 5, 10]),
              "max_running_requests": rng.randint(1, 8)}
    running = []
    for i in range(rng.randint(1, config["max_running_requests"])):
        max_new = rng.randint(2, 400)
        running.append({"id": f"r{i}", "prompt_len": rng.randint(1, 200),
                        "generated": rng.randint(1, max_new - 1), "max_new_tokens": max_new,
                        "priority": rng.randint(0, 30), "arrival": i})
    waiting = [{"id": f"w{i}", "prompt_len": rng.randint(1, 300),
                "max_new_tokens": rng.randint(1, 300), "priority": rng.randint(0, 30),
                "arrival": len(running) + i, "tried": rng.random() < 0.4}
               for i in range(rng.randint(1, 4))]
    free = rng.randint(0, 1500)
    state = {"free_tokens": free, "new_token_ratio": round(rng.uniform(0.098, 0.7), 4),
             "running": running, "chunked": None, "waiting": waiting}
    return config, state


def random_priority_tie_round(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """A priority round where ties decide: the running requests share few priorities (2-3)
    and entry times (0-1), so that several tie on both, the waiting ones one priority (0-1)
    and one entry time; ids are a permutation unlike the batch order; slots mostly full."""
    config = {"page_size": 1, "chunked_prefill_size": rng.choice([64, 256, 1024]),
              "max_prefill_tokens": 16384, "threshold": rng.choice([0, 0, 1]),
              "max_running_requests": 0}
    n = rng.randint(2, 8)
    ids = list(range(n))
    rng.shuffle(ids)
    running = []
    for i in range(n):
        max_new = rng.randint(2, 400)
        running.append({"id": f"r{ids[i]}", "prompt_len": rng.randint(1, 200),
                        "generated": rng.randint(1, max_new - 1), "max_new_tokens": max_new,
                        "priority": rng.choice([2, 3]), "arrival": rng.choice([0, 1])})
    config["max_running_requests"] = n if rng.random() < 0.75 else rng.randint(n, n + 2)
    m = rng.randint(1, 4)
    wids = list(range(m))
    rng.shuffle(wids)
    priority = rng.choice([0, 1])
    waiting = [{"id": f"w{wids[i]}", "prompt_len": rng.randint(1, 300),
                "max_new_tokens": rng.randint(1, 300), "priority": priority, "arrival": 2,
                "tried": rng.random() < 0.4} for i in range(m)]
    free = rng.randint(0, 800)
    state = {"free_tokens": free, "new_token_ratio": round(rng.uniform(0.098, 0.7), 4),
             "running": running, "chunked": None, "waiting": waiting}
    return config, state


def random_round(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """A random round: pools from nearly full to roomy, chunked or not, a chunk under way."""
    page = rng.choice([1, 1, 4, 16])
    chunk = rng.choice([None, 32, 64, 128, 256, 512])
    max_prefill = rng.choice([16384, 16384, 256, 512, 1024])
    config = {"page_size": page, "chunked_prefill_size": chunk, "max_prefill_tokens": max_prefill}
    running = []
    for i in range(rng.randint(0, 6)):
        max_new = rng.randint(1, 600)
        running.append({"id": f"r{i}", "prompt_len": rng.randint(1, 400),
                        "generated": rng.randint(0, max_new - 1), "max_new_tokens": max_new})
    chunked = None
    if chunk is not None and rng.random() < 0.35:
        prompt = rng.randint(chunk + 1, 4 * chunk)
        done = rng.randint(1, (prompt - 1) // max(page, 1)) * page if prompt > page else 0
        done = min(done, prompt - 1) // page * page
        chunked = {"id": "c", "prompt_len": prompt, "done": done,
                   "max_new_tokens": rng.randint(1, 600)}
    waiting = [{"id": f"w{i}", "prompt_len": rng.randint(1, 700),
                "max_new_tokens": rng.randint(1, 600)} for i in range(rng.randint(1, 6))]
    ratio = round(rng.uniform(0.098, 0.7), 4)
    free = rng.choice([rng.randint(0, 300), rng.randint(0, 2000), rng.randint(0, 8000)])
    state = {"free_tokens": free, "new_token_ratio": ratio, "running": running,
             "chunked": chunked, "waiting": waiting}
    return config, state


def ratio_trace(sg: SimpleNamespace, conservativeness: float, events: list[str]) -> list[float]:
    """The real tracker's value after each event: decay, reset, or retract:<pairs>."""
    sg.get_context().set_server_args(sg.ServerArgs(
        model_path="dummy", device="cpu", schedule_conservativeness=conservativeness))
    tracker = sg.NewTokenRatioTracker.from_config()
    out = [tracker.current]
    for event in events:
        if event == "decay":
            tracker.decay_step()
        elif event == "reset":
            tracker.reset()
        else:  # retract:g1/o1,g2/o2 (generated/max_new of the requests left)
            pairs = [p.split("/") for p in event.split(":", 1)[1].split(",")]
            reqs = [_req(sg, f"x{i}", 4, int(o), int(g)) for i, (g, o) in enumerate(pairs)]
            tracker.current = sg.NewTokenRatioTracker.estimate_new_token_ratio_after_retract(reqs)
        out.append(tracker.current)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tie-rounds", type=int, default=0, metavar="N",
                        help="N more priority rounds whose running requests tie on priority "
                             "and entry time, ids out of batch order (own random stream)")
    args = parser.parse_args(argv)
    sg = _import_sglang()
    rng = random.Random(args.seed)
    sg.get_context().set_server_args(sg.ServerArgs(model_path="dummy", device="cpu"))
    rounds: list[dict[str, Any]] = []
    for k in range(args.rounds):
        config, state = random_round(rng)
        rounds.append({"name": f"round-s{args.seed}-{k:04d}", "config": config, "state": state,
                       "sglang": run_round(sg, config, state)})
    retractions = []
    for _ in range(max(args.rounds // 10, 1)):
        reqs: list[dict[str, Any]] = [{"id": f"q{i}", "prompt_len": rng.randint(1, 50),
                 "generated": rng.randint(0, 6)} for i in range(rng.randint(1, 8))]
        order = sg.ScheduleBatch._get_decode_retraction_order(
            [_req(sg, r["id"], r["prompt_len"], 100, r["generated"]) for r in reqs])
        retractions.append({"requests": reqs, "keep_order": [reqs[i]["id"] for i in order]})
    ratios: list[dict[str, Any]] = []
    for conservativeness in (1.0, 0.3, 2.0):
        events = []
        for _ in range(rng.randint(50, 900)):
            roll = rng.random()
            if roll < 0.01:
                events.append("reset")
            elif roll < 0.02:
                pairs = [f"{rng.randint(0, 50)}/{rng.randint(51, 600)}"
                         for _ in range(rng.randint(1, 5))]
                events.append("retract:" + ",".join(pairs))
            else:
                events.append("decay")
        ratios.append({"schedule_conservativeness": conservativeness, "events": events,
                       "values": ratio_trace(sg, conservativeness, events)})
    prng = random.Random(args.seed + 1000)  # its own stream: the rounds above stay as they were
    priority_rounds = []
    for k in range(args.rounds // 2):
        config, state = random_priority_round(prng)
        priority_rounds.append({"name": f"priority-s{args.seed}-{k:04d}", "config": config,
                                "state": state, "sglang": run_priority_round(sg, config, state)})
    trng = random.Random(args.seed + 2000)  # its own stream, as the priority rounds'
    tie_rounds = []
    for k in range(args.tie_rounds):
        config, state = random_priority_tie_round(trng)
        tie_rounds.append({"name": f"priority-ties-s{args.seed}-{k:04d}", "config": config,
                           "state": state, "sglang": run_priority_round(sg, config, state)})
    record = {"format": FORMAT,
              "engine": {"name": "sglang", "version": sg.version,
                         "driven": "PrefillAdder, PrefillBudget, Req, NewTokenRatioTracker, "
                                   "ScheduleBatch._get_decode_retraction_order"},
              "seed": args.seed, "rounds": rounds, "retractions": retractions, "ratios": ratios,
              "priority_rounds": priority_rounds}
    if tie_rounds:  # (absent otherwise: a record without them stays byte for byte)
        record["priority_tie_rounds"] = tie_rounds
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=None, sort_keys=True) + "\n")
    print(f"{len(rounds)} rounds, {len(priority_rounds)} priority rounds, "
          f"{len(tie_rounds)} priority tie rounds, "
          f"{len(retractions)} retraction orders, "
          f"{sum(len(r['events']) for r in ratios)} ratio events -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
