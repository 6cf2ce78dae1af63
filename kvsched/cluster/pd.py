"""Disaggregated prefill and decode (P/D) on the cluster loop: which requests split, the two
pools and their routers, the link between them, and what each split request did where.

A split request runs as vLLM's P/D proxy (`toy_proxy_server.py`) runs it: first on a prefill
instance as the same prompt with `max_tokens: 1` (its prefill, and a first token the proxy
throws away), then its KV crosses the link (`kvsched.cluster.transfer.Link`), then a decode instance
takes the original request with that KV already there (`Seq.remote_tokens`: the engine
admits it as vLLM's connector admits external tokens, recomputing only the last prompt
token, for its logits) and streams every token the client sees. So the client's TTFT runs
from its arrival to the decode instance's first token, and TPOT and ITL are the decode
instance's. A request the decider keeps whole runs on the decode pool alone, as a
colocated instance would run it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvsched.cluster.transfer import Link
from kvsched.floatsum import fold
from kvsched.quantile import percentiles
from kvsched.request import Request
from kvsched.routers import Router
from kvsched.sequence import Seq, SeqState


@dataclass(frozen=True, slots=True)
class PdDecider:
    """Which requests split: every one (`prompt_over` 0), or those whose prompt is longer
    than `prompt_over` tokens (llm-d's P/D decider threshold); `never` builds no P/D at all."""

    prompt_over: int = 0

    def splits(self, prompt_len: int) -> bool:
        return prompt_len > self.prompt_over


@dataclass(slots=True)
class Phases:
    """Where a split request's phases ran (replica indices of the whole cluster) and its
    transfer: asked for at `transfer_start` (the prefill's end), delivered `transfer_time`
    later, `transfer_bytes` moved."""

    prefill: Seq | None = None
    decode: Seq | None = None
    prefill_replica: int | None = None
    decode_replica: int | None = None
    transfer_start: float | None = None
    transfer_time: float | None = None
    transfer_bytes: float | None = None


class Disaggregation:
    """The P/D part of a cluster: replicas `prefill` (indices) behind `prefill_router`,
    `decode` behind `decode_router`, the link, and each arrival's `Phases` (by arrival index)."""

    def __init__(self, prefill: Sequence[int], decode: Sequence[int], prefill_router: Router,
                 decode_router: Router, link: Link, kv_bytes_per_token: float,
                 decider: PdDecider) -> None:
        self.prefill = list(prefill)
        self.decode = list(decode)
        self.prefill_router = prefill_router
        self.decode_router = decode_router
        self.link = link
        self.kv_bytes_per_token = kv_bytes_per_token
        self.decider = decider
        self.phases: dict[int, Phases] = {}  # arrival index -> its phases (split ones only)
        self.ended: Callable[[Seq], None] | None = None  # a request ended (its next turn)

    def prefill_request(self, request: Request) -> Request:
        """What the proxy sends the prefill instance: the same prompt, one token."""
        return dataclasses.replace(request, output_len=1, after=None, think_time=0.0)

    def prefilled(self, seq: Seq) -> None:
        """A prefill instance's `on_done`: a finished prefill starts its transfer at its end;
        a rejected one ends the request there."""
        if seq.state is SeqState.FINISHED:
            assert seq.finish_time is not None
            num_bytes = self.kv_bytes_per_token * seq.prompt_len
            phases = self.phases[seq.index]
            phases.transfer_start = seq.finish_time
            phases.transfer_bytes = num_bytes
            self.link.begin(seq.index, seq.finish_time, num_bytes)
        elif self.ended is not None:
            self.ended(seq)

    def decode_seq(self, k: int, request: Request, now: float, block_size: int) -> Seq:
        """Arrival `k`'s request for the decode instance, its prompt's KV delivered at `now`."""
        seq = Seq.of(dataclasses.replace(request, arrival_time=now, after=None,
                                         think_time=0.0), k, block_size)
        seq.remote_tokens = request.prompt_len
        phases = self.phases[k]
        assert phases.transfer_start is not None
        phases.transfer_time = now - phases.transfer_start
        phases.decode = seq
        return seq

    def bound(self, replicas: Sequence) -> float:
        """No decode instance may see a delivery before this time: the link's next event,
        or the next step of a prefill instance (whose finishes start new transfers)."""
        t = self.link.next_time()
        for index in self.prefill:
            r = replicas[index]
            if not r.idle and not r.stopped and r.now < t:
                t = r.now
        return t

    def client_seq(self, k: int, original: Request) -> Seq | None:
        """What the client saw of split arrival `k`, as one run state for its record: the
        decode instance's tokens (TTFT from the client's arrival, its first token there),
        the prefill instance's admission, hits, preemptions and recomputes added in."""
        phases = self.phases.get(k)
        if phases is None:
            return None
        prefill, decode = phases.prefill, phases.decode
        assert prefill is not None
        if decode is None:  # it never got past its prefill
            seq = prefill
            seq.request = original
            seq.output_len = original.output_len
            seq.first_token_time = seq.first_token_step = seq.finish_time = None
            seq.max_token_gap = None
            return seq
        seq = decode
        seq.request = original
        seq.first_scheduled_time = prefill.first_scheduled_time
        seq.first_token_step = None  # steps of two instances: no one count
        seq.num_preemptions += prefill.num_preemptions
        seq.num_recomputed_tokens += prefill.num_recomputed_tokens
        seq.num_swapped_blocks += prefill.num_swapped_blocks
        seq.prefix_hit_tokens = prefill.prefix_hit_tokens
        seq.cached_tokens += prefill.cached_tokens
        return seq


def pd_summary(summary: dict[str, Any], pd: Disaggregation,
               phases: Sequence[Phases | None]) -> dict[str, Any]:
    """`summary` with PD_KEYS inserted before its `replicas` list."""
    times = np.array([p.transfer_time for p in phases
                      if p is not None and p.transfer_time is not None], dtype=float)
    moved = 0.0
    for p in phases:  # (added in input order: the same float every run)
        if p is not None and p.transfer_time is not None:
            moved += p.transfer_bytes or 0.0
    p50, p99 = percentiles(times, (50, 99)) if len(times) else (None, None)
    replicas = summary.pop("replicas")
    summary |= {
        "num_prefill_replicas": len(pd.prefill),
        "num_decode_replicas": len(pd.decode),
        "num_split": sum(p is not None for p in phases),
        "num_transferred": len(times),
        "transfer_bytes": moved,
        "transfer_time_mean": fold(times.tolist()) / len(times) if len(times) else None,
        "transfer_time_p50": p50,
        "transfer_time_p99": p99,
        "transfer_time_max": float(times.max()) if len(times) else None,
    }
    summary["replicas"] = replicas
    return summary
