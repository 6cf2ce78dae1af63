"""How an `engine:` mapping may spell its keys (vLLM's and SGLang's names for kvsched's), and
which keys a mapping as written sets. Free of kvsched imports: the schema
(`kvsched.schema`) and the GPU defaults (`kvsched.timing.serve_defaults`) both read it."""

from __future__ import annotations

from typing import Any

ENGINE_ALIASES = {"enable_chunked_prefill": "chunked_prefill",
                  "preemption_mode": "preemption",
                  "max_running_requests": "max_num_seqs"}  # SGLang's name
"""The other engines' names for kvsched's engine keys (`chunked_prefill_size`, SGLang's
chunk size, is read apart: it sets two keys)."""


def written_engine_keys(raw: Any) -> dict[str, str]:
    """The `EngineSpec` keys an `engine:` mapping as written sets, each with the spelling
    used there (`enable_chunked_prefill` for `chunked_prefill`...); not the preset's."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, str] = {}
    for key in map(str, raw):
        if key == "chunked_prefill_size":
            out.setdefault("chunked_prefill", key)
            if raw[key] != -1:
                out.setdefault("max_num_batched_tokens", key)
        else:
            out.setdefault(ENGINE_ALIASES.get(key, key), key)
    return out
