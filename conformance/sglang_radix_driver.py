"""Drive SGLang 0.5.23's radix caches on the CPU with random operations; record what they do.

Runs in `.venv-conformance-sglang` (see conformance/README.md). Each case is a page size, a set
of token sequences built from segments (shared system prompts, some cut short, private tails,
conversations that extend an earlier sequence) and a random list of operations, applied to
each cache SGLang 0.5.23 has for a full-attention model:

* `rust`: `UnifiedRadixCache` with its default TreeCore, the bundled Rust one (what
  `--radix-cache` builds: `mem_cache/registry.py` `create_unified_radix_cache`);
* `python`: the same with the Python TreeCore (`tree_core_backend="python"`);
* `legacy`: the older `mem_cache/radix_cache.py` `RadixCache` (its clock, `time.monotonic`,
  replaced by a counter so that runs repeat).

Operations (SGLang's calls): `insert` (`insert(InsertParams(key, value))`), `match`
(`match_prefix`, which splits a node where the match ends), `lock` (`lock` of the node the
match before it returned: `inc_lock_ref`), `unlock` (`unlock`: `dec_lock_ref`), `evict`
(`evict(EvictParams(num_tokens))`). Recorded after each: the insert's `prefix_len`, the
match's `device_prefix_len`, the tokens evicted and which nodes (read from the KV indices the
tree frees, in that order), and `evictable_size()` / `protected_size()`. The token-to-KV
allocator is a stand-in that records what it is given back.

    .venv-conformance-sglang/bin/python conformance/sglang_radix_driver.py --random 300 --out R.json
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
FORMAT = "kvsched-sglang-radix/1"
CACHES = ("rust", "python", "legacy")
_POSITION_BITS = 20  # a KV index: operation number << 20 | position in its key


def segment_token(segment: int, offset: int) -> int:
    """The token at `offset` of segment `segment`: distinct for every (segment, offset)."""
    return ((segment + 1) << 18) + offset


def segment_of(token: int) -> tuple[int, int]:
    return (token >> 18) - 1, token & ((1 << 18) - 1)


def tokens(segments: list[list[int]]) -> list[int]:
    out: list[int] = []
    for segment, length in segments:
        out.extend(segment_token(segment, k) for k in range(length))
    return out


def _import() -> SimpleNamespace:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers.image_utils  # noqa: F401  (caches "torchvision absent" before the stub)

    sys.path.insert(0, str(HERE / "sglang_stubs"))
    import sglang
    import torch
    from sglang.srt.mem_cache import radix_cache
    from sglang.srt.mem_cache.base_prefix_cache import (
        EvictParams,
        InsertParams,
        MatchPrefixParams,
    )
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs

    get_context().set_server_args(ServerArgs(model_path="dummy", device="cpu"))
    return SimpleNamespace(sglang=sglang, torch=torch, radix_cache=radix_cache,
                           EvictParams=EvictParams, InsertParams=InsertParams,
                           MatchPrefixParams=MatchPrefixParams, CacheInitParams=CacheInitParams,
                           ComponentType=ComponentType, UnifiedRadixCache=UnifiedRadixCache)


class _Allocator:
    """The token-to-KV allocator as the tree uses it: KV indices given back, in order."""

    device = "cpu"
    free_group = None

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.freed: list[list[int]] = []

    def available_size(self) -> int:
        return 1 << 40

    def free(self, indices: Any) -> None:
        if indices.numel():
            self.freed.append([int(i) for i in indices.tolist()])

    def free_full(self, indices: Any) -> None:
        self.free(indices)

    def free_segment(self, indices: Any, *, start_pos: int = 0) -> None:
        self.free(indices)

    def free_segments(self, segments: list[tuple[Any, int]]) -> None:
        for indices, start in segments:
            self.free_segment(indices, start_pos=start)

    def mamba_full_cache_donor(self) -> None:
        return None


def _cache(sg: SimpleNamespace, kind: str, page: int) -> tuple[Any, _Allocator]:
    allocator = _Allocator(page)
    if kind == "legacy":
        counter = itertools.count(1)
        # the legacy tree reads time.monotonic for its LRU clock: a counter repeats
        sg.radix_cache.time = SimpleNamespace(monotonic=lambda: float(next(counter)),
                                              perf_counter=lambda: 0.0)
        params = sg.CacheInitParams(disable=False, req_to_token_pool=None,
                                    token_to_kv_pool_allocator=allocator, page_size=page)
        return sg.radix_cache.RadixCache(params), allocator
    params = sg.CacheInitParams(disable=False, req_to_token_pool=None,
                                token_to_kv_pool_allocator=allocator, page_size=page,
                                tree_components=(sg.ComponentType.FULL,), tree_core_backend=kind)
    return sg.UnifiedRadixCache(params), allocator


def run_case(sg: SimpleNamespace, kind: str, case: dict[str, Any]) -> list[dict[str, Any]]:
    """The outcome of each operation of `case` on the cache `kind`."""
    torch = sg.torch
    page = int(case["config"]["page_size"])
    tree, allocator = _cache(sg, kind, page)
    seqs = {sid: tokens(segs) for sid, segs in case["sequences"].items()}
    matched_nodes: list[Any] = []
    locks: list[Any] = []
    inserted: dict[int, list[int]] = {}  # operation number -> its key's tokens
    out: list[dict[str, Any]] = []
    for k, op in enumerate(case["ops"]):
        kind_ = op[0]
        res: dict[str, Any] = {}
        if kind_ == "insert":
            key = seqs[op[1]][:int(op[2])]
            inserted[k] = key
            values = torch.tensor([(k << _POSITION_BITS) | p for p in range(len(key))],
                                  dtype=torch.int64)
            res["prefix_len"] = int(tree.insert(sg.InsertParams(
                key=sg.radix_cache.RadixKey(array("q", key)), value=values)).prefix_len)
        elif kind_ == "match":
            key = seqs[op[1]][:int(op[2])]
            result = tree.match_prefix(sg.MatchPrefixParams(
                key=sg.radix_cache.RadixKey(array("q", key))))
            matched_nodes.append(result.last_device_node)
            res["matched"] = int(result.device_prefix_len)
        elif kind_ == "lock":
            locks.append(tree.lock(matched_nodes[int(op[1])]))
        elif kind_ == "unlock":
            tree.unlock(locks[int(op[1])])
        elif kind_ == "evict":
            allocator.freed.clear()
            res["evicted"] = int(tree.evict(sg.EvictParams(num_tokens=int(op[1])))
                                 .num_tokens_evicted)
            nodes = []
            for chunk in allocator.freed:  # a node's value: one key's positions, in a run
                first = chunk[0]
                depth = first & ((1 << _POSITION_BITS) - 1)
                segment, offset = segment_of(inserted[first >> _POSITION_BITS][depth])
                nodes.append([depth, len(chunk), segment, offset])
            res["nodes"] = nodes
        res["evictable"] = int(tree.evictable_size())
        res["protected"] = int(tree.protected_size())
        out.append(res)
    return out


def random_case(rng: random.Random, name: str) -> dict[str, Any]:
    """Page sizes 1/2/4/16; 1-4 shared segments of 1-60 tokens; 4-12 sequences: a shared
    segment whole or cut short, sometimes a second one, a private tail of 0-80 tokens, or an
    earlier sequence extended (a conversation); 20-200 operations."""
    page = rng.choice([1, 1, 2, 4, 4, 16])
    shared = [rng.randint(1, 60) for _ in range(rng.randint(1, 4))]
    sequences: dict[str, list[list[int]]] = {}
    for i in range(rng.randint(4, 12)):
        segs: list[list[int]] = []
        if sequences and rng.random() < 0.25:
            segs = [list(s) for s in sequences[rng.choice(sorted(sequences))]]
        else:
            if rng.random() < 0.85:
                j = rng.randrange(len(shared))
                segs.append([j, rng.choice([shared[j], rng.randint(1, shared[j])])])
                if rng.random() < 0.3:
                    j2 = rng.randrange(len(shared))
                    if j2 != j:
                        segs.append([j2, rng.randint(1, shared[j2])])
        tail = rng.choice([0, rng.randint(1, 20), rng.randint(1, 80)])
        if tail or not segs:
            segs.append([1000 + i, max(tail, 1)])
        sequences[f"s{i}"] = segs
    lengths = {sid: sum(n for _, n in segs) for sid, segs in sequences.items()}
    ops: list[list[Any]] = []
    matches = 0
    held: list[int] = []
    locks = 0
    for _ in range(rng.randint(20, 200)):
        roll = rng.random()
        sid = rng.choice(sorted(sequences))
        n = rng.choice([lengths[sid], rng.randint(1, lengths[sid])])
        if roll < 0.35:
            ops.append(["insert", sid, n])
        elif roll < 0.7:
            ops.append(["match", sid, n])
            if rng.random() < 0.5 and len(held) < 4:
                ops.append(["lock", matches])
                held.append(locks)
                locks += 1
            matches += 1
        elif roll < 0.82 and held:
            ops.append(["unlock", held.pop(rng.randrange(len(held)))])
        else:
            ops.append(["evict", rng.choice([1, page, rng.randint(1, 40), rng.randint(1, 400)])])
    return {"name": name, "config": {"page_size": page}, "sequences": sequences, "ops": ops}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--random", type=int, default=100, metavar="N")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--caches", default=",".join(CACHES),
                        help=f"which of {', '.join(CACHES)} (comma-separated)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    sg = _import()
    kinds = [k for k in args.caches.split(",") if k]
    rng = random.Random(args.seed)
    cases = []
    for k in range(args.random):
        case = random_case(rng, f"radix-s{args.seed}-{k:04d}")
        case["sglang"] = {kind: run_case(sg, kind, case) for kind in kinds}
        cases.append(case)
    record = {"format": FORMAT, "seed": args.seed,
              "engine": {"name": "sglang", "version": sg.sglang.__version__,
                         "driven": "UnifiedRadixCache (Rust and Python TreeCore), "
                                   "RadixCache: insert, match_prefix, lock/unlock, evict"},
              "cases": cases}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, sort_keys=True) + "\n")
    print(f"{len(cases)} cases, {sum(len(c['ops']) for c in cases)} operations on "
          f"{', '.join(kinds)} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
