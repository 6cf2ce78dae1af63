"""The trace formats a `workload: {kind: trace}` reads: where each keeps a request's fields,
one `FORMATS` entry per format. A new format whose columns carry what kvsched reads is one
entry here: `TraceWorkload.format` takes its choices from `FORMATS`; one whose file needs
parsing of its own (rows to drop, nested records) is also one module with its `reader`
(`kvsched.workload.burstgpt`). Data only, importing nothing of kvsched: the schema reads it
while it is itself being imported, and the workload's builder reads the schema, so it lives
below both (it was `kvsched.workload.formats`, which still imports it)."""

from __future__ import annotations

from typing import NamedTuple


class TraceLayout(NamedTuple):
    """Where a trace format keeps each field, and the unit of its arrival column."""

    arrival_time: str | None  # None: lengths only, times from the workload's arrival process
    prompt_len: str
    output_len: str
    priority: str | None = None
    class_name: str | None = None
    request_id: str | None = None
    arrival_unit: str = "s"  # s, ms, us or datetime (seconds since the first row)
    optional_extras: bool = False  # extra columns used only when present
    session: str | None = None  # a conversation id (optional in every format)
    # Prefix identity, each optional in every format: a shared prefix named by a group and
    # its length, or one block id per `hash_block_tokens` tokens of the prompt.
    prefix_group: str | None = None
    prefix_len: str | None = None
    hash_ids: str | None = None
    # A conversation's next turn: the id of its previous turn, and the pause after it.
    after: str | None = None
    think_time: str | None = None
    # "module:function" reading a file of this format into a pandas DataFrame with the
    # columns above (a ValueError names what is wrong); None: pandas reads CSV or JSON lines
    reader: str | None = None


FORMATS = {
    "kvsched": TraceLayout("arrival_time", "prompt_len", "output_len", "priority", "class",
                           "request_id", optional_extras=True, session="session",
                           prefix_group="prefix_group", prefix_len="prefix_len",
                           hash_ids="hash_ids", after="after", think_time="think_time"),
    "azure": TraceLayout("TIMESTAMP", "ContextTokens", "GeneratedTokens",
                         arrival_unit="datetime"),
    "mooncake": TraceLayout("timestamp", "input_length", "output_length", arrival_unit="ms",
                            hash_ids="hash_ids"),
    "vidur": TraceLayout("arrived_at", "num_prefill_tokens", "num_decode_tokens"),
    "burstgpt": TraceLayout("Timestamp", "Request tokens", "Response tokens",
                            session="Session ID", reader="kvsched.workload.burstgpt:read"),
    # Length-only files as Sarathi-Serve and Vidur ship them (ShareGPT, arXiv summaries...).
    "lengths": TraceLayout(None, "num_prefill_tokens", "num_decode_tokens"),
}

UNIT_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
"""Seconds per unit of a numeric arrival column (`arrival_unit`; `datetime` is read apart)."""
