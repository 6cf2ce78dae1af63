"""Token ids for workloads that carry prefix identity (stdlib only).

Shared by the driver (which feeds these ids to vLLM) and the rules model (which hashes the
same ids), so both see the same token sequences. A request's `prefix` is a list of
`[segment_id, length]` covering its first tokens, as `kvsched.prefix.Prefix` means it: the
tokens of a segment are a fixed stream per segment id (two runs of one id share their first
min(lengths) tokens); whatever the segments leave of the prompt is the request's own. A prefix
that covers `prompt_len + output_len` tokens also names the answer: the driver then samples
exactly those tokens, so a later turn that repeats the answer hits its decode blocks; an
answer the workload does not name is the request's own too.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

VOCAB_LOW, VOCAB_HIGH = 100, 32000  # ids below 100 hold the tiny model's special tokens


@lru_cache(maxsize=4096)
def _stream(key: str, length: int) -> tuple[int, ...]:
    rng = random.Random(key)
    return tuple(rng.randrange(VOCAB_LOW, VOCAB_HIGH) for _ in range(length))


def segment_tokens(segment_id: int, length: int) -> list[int]:
    """The first `length` tokens of a segment (a prefix of one stream per id)."""
    # Streams are drawn in whole chunks of 256 so that a shorter run is a prefix of a longer one.
    size = -(-length // 256) * 256
    return list(_stream(f"segment:{segment_id}", size)[:length])


def private_tokens(request_id: str, length: int) -> list[int]:
    return list(_stream(f"private:{request_id}", length)) if length > 0 else []


def covered(spec: dict[str, Any]) -> int:
    return sum(int(n) for _, n in spec.get("prefix") or ())


def request_tokens(spec: dict[str, Any]) -> tuple[list[int], list[int] | None]:
    """(prompt token ids, the answer's token ids or None when the workload names none)."""
    seq: list[int] = []
    for seg_id, n in spec.get("prefix") or ():
        seq.extend(segment_tokens(int(seg_id), int(n)))
    prompt_len, output_len = int(spec["prompt_len"]), int(spec["output_len"])
    if len(seq) > prompt_len:
        if len(seq) != prompt_len + output_len:
            raise ValueError(f"request {spec['id']}: prefix covers {len(seq)} tokens; expected "
                             f"at most prompt_len ({prompt_len}) or prompt_len + output_len")
        return seq[:prompt_len], seq[prompt_len:]
    return seq + private_tokens(str(spec["id"]), prompt_len - len(seq)), None


def output_token(request_id: str, answer: list[int] | None, index: int) -> int:
    """The token the driver samples as output number `index` (0-based): the named answer's,
    else one of the request's own, so that, as in kvsched, only named tokens are shared
    (two identical prompts do not share their decode blocks)."""
    if answer is not None:
        return answer[index]
    return _stream(f"output:{request_id}", -(-(index + 1) // 256) * 256)[index]
