"""Workloads: the list of requests a run replays, from an inline list, a seeded generator or a
trace file. The same spec and seed always give the same requests.

Requests may carry prefix identity (`Request.prefix`, segments of `kvsched.prefix`) and
conversation order (`Request.after`). Segment ids live in one id space, tagged by where
they come from so that two sources never collide: `segment_id(tag, local)` is
`tag << 56 | local`, with the tags below; ids under 2**56 (tag 0) and tags from 8 up are
left to other users (a cache naming a request's private tokens).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kvsched.errors import ScenarioError, excerpt
from kvsched.plugins import load
from kvsched.prefix import Blocks, Prefix, Segment
from kvsched.request import Request
from kvsched.request_columns import RequestColumns
from kvsched.schema import (
    MAX_PRIORITY,
    MAX_SYNTHETIC_REQUESTS,
    MAX_TIME,
    MAX_TOKENS,
    MAX_TURNS,
    AllAtOnce,
    ArrivalSpec,
    ConstantLen,
    EmpiricalLen,
    ExponentialTime,
    Fixed,
    Gamma,
    InlineWorkload,
    LengthSpec,
    LognormalLen,
    Poisson,
    SyntheticWorkload,
    TraceWorkload,
    UniformLen,
    WorkloadSpec,
)
from kvsched.trace_formats import FORMATS, UNIT_SECONDS, TraceLayout
from kvsched.workload.trace_csv import read_clean_columns
from kvsched.workload.trace_jsonl import read_clean_lines

if TYPE_CHECKING:  # pandas is imported only where a file needs it (a quarter second)
    import pandas as pd

Locate = Callable[[tuple, str], ScenarioError]
"""Builds the error for a field of the workload spec, e.g. (("workload", "path"), "...")."""

TAG_SHIFT = 56
TRACE_BLOCK = 1  # a trace's block hash id (Mooncake `hash_ids`): one id, one block of tokens
PREFIX_GROUP = 2  # a shared prefix: a trace's or inline `prefix_group`, a system prompt
TURN = 3  # a conversation's own tokens: one turn's new user tokens, or its answer
MAX_LOCAL_ID = (1 << TAG_SHIFT) - 1


def segment_id(tag: int, local: int) -> int:
    """The id of segment `local` (0 <= local < 2**56) of source `tag`."""
    return tag << TAG_SHIFT | local


def _default_locate(field: tuple, message: str) -> ScenarioError:
    return ScenarioError("workload", message, ".".join(map(str, field)))


def build_requests(spec: WorkloadSpec, seed: int = 0, base_dir: Path = Path("."),
                   locate: Locate = _default_locate) -> Sequence[Request]:
    """The requests of a workload spec; paths resolve against `base_dir` (plain ones as
    columns: `RequestColumns`)."""
    requests: Sequence[Request]
    if isinstance(spec, InlineWorkload):
        requests = _inline(spec, locate)
    elif isinstance(spec, SyntheticWorkload):
        requests = _synthetic(spec, np.random.default_rng(seed), base_dir, locate)
    else:
        requests = _trace(spec, base_dir, locate, seed)
    if not requests:
        raise locate(("workload",), "the workload has no requests")
    return requests


def count_requests(spec: WorkloadSpec, base_dir: Path = Path("."),
                   locate: Locate = _default_locate) -> tuple[int, bool]:
    """How many requests the workload holds, and whether exactly, checked without generating
    it: trace and empirical-length files are read and checked, synthetic requests counted."""
    if not isinstance(spec, SyntheticWorkload) or spec.sessions is not None:
        return len(build_requests(spec, 0, base_dir, locate)), not isinstance(
            spec, SyntheticWorkload)  # conversations' turns are drawn: a count for seed 0
    lengths: list[tuple[LengthSpec | None, tuple]] = [
        (spec.prompt_len, ("workload", "prompt_len")),
        (spec.output_len, ("workload", "output_len"))]
    for k, cls in enumerate(spec.mix or ()):
        lengths += [(cls.prompt_len, ("workload", "mix", k, "prompt_len")),
                    (cls.output_len, ("workload", "mix", k, "output_len"))]
    for length, where in lengths:
        if isinstance(length, EmpiricalLen):
            _empirical_column(length, base_dir, where, locate)
    if spec.num_requests is not None:
        return spec.num_requests, True
    return int(round(_expected_count(spec, locate))), False


def _expected_count(spec: SyntheticWorkload, locate: Locate) -> float:
    """Requests expected over `duration`, refused above the cap before any is drawn."""
    process = spec.arrival
    assert spec.duration is not None and not isinstance(process, AllAtOnce)
    rate = 1 / process.interval if isinstance(process, Fixed) else process.rate
    expected = rate * spec.duration
    if expected > MAX_SYNTHETIC_REQUESTS:
        raise locate(("workload", "duration"),
                     f"about {expected:,.0f} requests; at most {MAX_SYNTHETIC_REQUESTS:,} allowed")
    return expected


# -- inline -----------------------------------------------------------------------------


def _inline(spec: InlineWorkload, locate: Locate) -> list[Request]:
    requests = []
    seen: set[str] = set()
    groups = _Groups()
    blocks = _blocks(spec.hash_block_tokens)
    for i, item in enumerate(spec.requests):
        where = ("workload", "requests", i)
        request_id = f"r{i}" if item.id is None else str(item.id)
        if request_id in seen:
            raise locate((*where, "id"), f"duplicate request id '{request_id}'")
        after = None if item.after is None else str(item.after)
        if after is not None and after not in seen:
            known = any(str(r.id) == after or (r.id is None and f"r{k}" == after)
                        for k, r in enumerate(spec.requests))
            raise locate((*where, "after"),
                         f"'{after}' is {'a later request' if known else 'no request id'} "
                         f"of the workload; expected the id of an earlier request")
        seen.add(request_id)
        prefix = None
        if (name := item.group()) is not None:
            assert item.prefix_len is not None
            problem = groups.check(name, item.prefix_len, f"request {i}")
            if problem:
                raise locate((*where, "prefix_len"), problem)
            prefix = groups.prefix(name, item.prefix_len)
        elif item.hash_ids is not None:
            problem = _too_many_ids(len(item.hash_ids), item.prompt_len,
                                    spec.hash_block_tokens)
            if problem:
                raise locate((*where, "hash_ids"), problem)
            prefix = blocks.prefix(item.hash_ids, item.prompt_len)
        requests.append(Request(request_id, item.arrival, item.prompt_len, item.output_len,
                                item.priority, item.class_,
                                None if item.session is None else str(item.session),
                                prefix, after, item.think_time))
    return requests


class _Groups:
    """Prefix groups by name: one segment id each (in order of first use), one length."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.lengths: dict[str, tuple[int, str]] = {}  # name -> (prefix_len, where first seen)

    def check(self, name: str, length: int, where: str) -> str | None:
        """Why `length` cannot be group `name`'s prefix length (None when it can)."""
        first = self.lengths.setdefault(name, (length, where))
        if first[0] != length:
            return (f"prefix_group '{excerpt(name)}' has prefix_len {length} here but "
                    f"{first[0]} at {first[1]}; a group shares one prefix length")
        return None

    def prefix(self, name: str, length: int) -> Prefix:
        local = self.ids.setdefault(name, len(self.ids))
        return Prefix(((segment_id(PREFIX_GROUP, local), length),))


def _blocks(block_tokens: int) -> Blocks:
    """Block ids (`hash_ids`) as segments of `block_tokens` tokens (`kvsched.prefix.Blocks`)."""
    return Blocks(block_tokens, segment_id(TRACE_BLOCK, 0), MAX_LOCAL_ID)


def _too_many_ids(count: int, prompt: int, block_tokens: int) -> str | None:
    """Why `count` block ids cannot start a `prompt`-token prompt (None when they can)."""
    need = -(-prompt // block_tokens)
    if count <= need:
        return None
    return (f"{count} block ids are more than a {prompt}-token prompt holds: at most "
            f"ceil({prompt} / {block_tokens}) = {need} (hash_block_tokens {block_tokens})")


# -- synthetic --------------------------------------------------------------------------


def _synthetic(spec: SyntheticWorkload, rng: np.random.Generator, base_dir: Path,
               locate: Locate) -> Sequence[Request]:
    arrivals = _arrival_times(spec, rng, locate)
    n = len(arrivals)
    priorities = np.full(n, spec.priority)
    if spec.mix is None:
        assert spec.prompt_len is not None and spec.output_len is not None
        prompts = _lengths(spec.prompt_len, n, rng, base_dir, ("workload", "prompt_len"), locate)
        outputs = _lengths(spec.output_len, n, rng, base_dir, ("workload", "output_len"), locate)
    else:
        weights = np.array([c.weight for c in spec.mix])
        chosen = rng.choice(len(spec.mix), size=n, p=weights / weights.sum())
        prompts = np.empty(n, dtype=np.int64)
        outputs = np.empty(n, dtype=np.int64)
        for k, cls in enumerate(spec.mix):
            members = np.flatnonzero(chosen == k)
            where = ("workload", "mix", k)
            prompts[members] = _lengths(cls.prompt_len, len(members), rng, base_dir,
                                        (*where, "prompt_len"), locate)
            outputs[members] = _lengths(cls.output_len, len(members), rng, base_dir,
                                        (*where, "output_len"), locate)
            priorities[members] = cls.priority
    if spec.system_prompts is None and spec.sessions is None:
        if spec.mix is None:
            return RequestColumns(arrivals, prompts, outputs, priorities)
        return RequestColumns(arrivals, prompts, outputs, priorities, chosen,
                              [c.name for c in spec.mix])
    labels: list[str | None] = [None] * n if spec.mix is None else \
        [spec.mix[k].name for k in chosen.tolist()]
    system: list[Segment | None] = [None] * n if spec.system_prompts is None else \
        _system_prompts(spec, n, rng, base_dir, locate, labels)
    if spec.sessions is None:
        # the system prompt goes before the drawn prompt; a group's requests share one
        # (immutable) Prefix: one each took 1.4 s and about 200 MB at 1M requests
        shared = {segment: Prefix((segment,)) for segment in set(system) if segment is not None}
        return [Request(f"r{k}", arrival, prompt if segment is None else prompt + segment[1],
                        output, priority, label,
                        prefix=None if segment is None else shared[segment])
                for k, (arrival, prompt, output, priority, label, segment) in enumerate(
                    zip(arrivals.tolist(), prompts.tolist(), outputs.tolist(),
                        priorities.tolist(), labels, system, strict=True))]
    return _sessions(spec, arrivals, prompts, outputs, priorities, labels, system, rng,
                     base_dir, locate)


def _system_prompts(spec: SyntheticWorkload, n: int, rng: np.random.Generator,
                    base_dir: Path, locate: Locate,
                    labels: Sequence[str | None]) -> list[Segment | None]:
    """Each request's system prompt as a segment (None for those without one)."""
    prompts = spec.system_prompts
    assert prompts is not None
    where = ("workload", "system_prompts")
    lengths = _lengths(prompts.prefix_len, prompts.groups, rng, base_dir, (*where, "prefix_len"),
                       locate)
    uses = rng.random(n) < prompts.share
    group = rng.integers(0, prompts.groups, size=n)
    if prompts.classes is not None:  # drawn as before, then kept for those classes only
        allowed = set(prompts.classes)
        uses &= np.array([label in allowed for label in labels], dtype=bool)
    return [(segment_id(PREFIX_GROUP, int(group[i])), int(lengths[group[i]])) if uses[i]
            else None for i in range(n)]


def _sessions(spec: SyntheticWorkload, arrivals: np.ndarray, prompts: np.ndarray,
              outputs: np.ndarray, priorities: np.ndarray, labels: list[str | None],
              system: Sequence[Segment | None], rng: np.random.Generator, base_dir: Path,
              locate: Locate) -> list[Request]:
    """Conversation j starts as request j of the draw and goes on for its turns; each turn's
    prefix is its whole prompt and answer, so that the next turn repeats it."""
    sessions = spec.sessions
    assert sessions is not None
    where = ("workload", "sessions")
    n = len(arrivals)
    turns = _lengths(sessions.turns, n, rng, base_dir, (*where, "turns"), locate)
    if turns.max() > MAX_TURNS:
        raise locate((*where, "turns"), f"a conversation of {int(turns.max()):,} turns; at "
                                        f"most {MAX_TURNS:,} allowed")
    total = int(turns.sum())
    if total > MAX_SYNTHETIC_REQUESTS:
        raise locate((*where, "turns"), f"{total:,} requests in all; at most "
                                        f"{MAX_SYNTHETIC_REQUESTS:,} allowed")
    later = turns - 1
    num_later = int(later.sum())
    users = _lengths(sessions.user_len, num_later, rng, base_dir, (*where, "user_len"), locate)
    answers = np.empty(num_later, dtype=np.int64)
    owner = np.repeat(np.arange(n), later)  # the conversation of each later turn
    if spec.mix is None:
        assert spec.output_len is not None
        answers[:] = _lengths(spec.output_len, num_later, rng, base_dir,
                              ("workload", "output_len"), locate)
    else:
        for k, cls in enumerate(spec.mix):
            members = np.flatnonzero([labels[j] == cls.name for j in owner]) \
                if num_later else np.empty(0, dtype=np.int64)
            answers[members] = _lengths(cls.output_len, len(members), rng, base_dir,
                                        ("workload", "mix", k, "output_len"), locate)
    think = sessions.think_time
    if isinstance(think, ExponentialTime):
        thinks = rng.exponential(think.mean, num_later) if think.mean else np.zeros(num_later)
    else:
        thinks = np.full(num_later, think)
    requests: list[Request] = []
    next_segment = 0
    drawn = 0  # later turns consumed so far
    for j in range(n):
        segments: tuple[Segment, ...] = () if system[j] is None else (system[j],)  # type: ignore[assignment]
        prompt = int(prompts[j]) + sum(length for _, length in segments)
        user, answer = int(prompts[j]), int(outputs[j])
        previous = None
        for t in range(int(turns[j])):
            if t:
                user, answer = int(users[drawn]), int(answers[drawn])
                prompt += user
            segments += ((segment_id(TURN, next_segment), user),
                         (segment_id(TURN, next_segment + 1), answer))
            next_segment += 2
            request_id = f"r{len(requests)}"
            if prompt > MAX_TOKENS:
                raise locate(where, f"conversation s{j} reaches a prompt of {prompt:,} tokens "
                                    f"at turn {t + 1}; at most {MAX_TOKENS:,} allowed")
            requests.append(Request(
                request_id, float(arrivals[j]), prompt, answer, int(priorities[j]),
                labels[j], f"s{j}", Prefix(segments), previous,
                float(thinks[drawn]) if t else 0.0))
            if t:
                drawn += 1
            previous = request_id
            prompt += answer
    return requests


def _arrival_times(spec: SyntheticWorkload, rng: np.random.Generator,
                   locate: Locate) -> np.ndarray:
    """Arrival times; the first request arrives at 0 (or at `at` for all_at_once)."""
    process = spec.arrival
    if spec.num_requests is not None:
        return _process_times(process, spec.num_requests, rng)
    assert spec.duration is not None and not isinstance(process, AllAtOnce)
    expected = _expected_count(spec, locate)
    times = np.array([0.0])
    while times[-1] < spec.duration:
        more = times[-1] + np.cumsum(_gaps(process, int(expected * 0.2) + 16, rng))
        times = np.concatenate((times, more))
    return times[times < spec.duration]


def _process_times(process: ArrivalSpec, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` arrival times from a process; the first at 0 (or at `at` for all_at_once)."""
    if isinstance(process, AllAtOnce):
        return np.full(n, process.at)
    return np.concatenate(([0.0], np.cumsum(_gaps(process, n - 1, rng))))


def _gaps(process: Poisson | Gamma | Fixed, size: int, rng: np.random.Generator) -> np.ndarray:
    if isinstance(process, Poisson):
        return rng.exponential(1 / process.rate, size)
    if isinstance(process, Gamma):
        shape = 1 / process.cv ** 2
        return rng.gamma(shape, 1 / (process.rate * shape), size)
    return np.full(size, process.interval)


def _lengths(spec: LengthSpec, n: int, rng: np.random.Generator, base_dir: Path,
             where: tuple, locate: Locate) -> np.ndarray:
    """`n` token lengths, all >= 1."""
    if isinstance(spec, ConstantLen):
        return np.full(n, spec.value, dtype=np.int64)
    if isinstance(spec, UniformLen):
        return rng.integers(spec.low, spec.high + 1, size=n)
    if isinstance(spec, LognormalLen):
        values = np.rint(np.exp(rng.normal(np.log(spec.median), spec.sigma, n)))
        return np.clip(values, spec.min, spec.max or MAX_TOKENS).astype(np.int64)
    assert isinstance(spec, EmpiricalLen)
    column = _empirical_column(spec, base_dir, where, locate)
    return rng.choice(column, size=n)


def _empirical_column(spec: EmpiricalLen, base_dir: Path, where: tuple,
                      locate: Locate) -> np.ndarray:
    path = _resolve(base_dir, spec.path)
    table = _read_table(path, (*where, "path"), locate)
    if spec.column not in table.columns:
        raise locate((*where, "column"), _missing_column(spec.column, path, table))
    values = _numbers(table[spec.column], TraceFile.of(path, table), spec.column,
                      (*where, "path"), locate,
                      minimum=1, whole=True, maximum=MAX_TOKENS)
    if not len(values):
        raise locate((*where, "path"), f"{path}: column '{spec.column}' is empty")
    return values.astype(np.int64)


# -- traces -----------------------------------------------------------------------------


def trace_layout(spec: TraceWorkload) -> TraceLayout:
    """Where the trace's format (or its `columns`) keeps each field."""
    if spec.format is not None:
        return FORMATS[spec.format]
    columns = spec.columns
    assert columns is not None
    return TraceLayout(columns.arrival_time, columns.prompt_len, columns.output_len,
                       columns.priority, columns.class_, columns.request_id,
                       columns.arrival_unit, session=columns.session,
                       prefix_group=columns.prefix_group, prefix_len=columns.prefix_len,
                       hash_ids=columns.hash_ids, after=columns.after,
                       think_time=columns.think_time)


def _trace(spec: TraceWorkload, base_dir: Path, locate: Locate,
           seed: int) -> Sequence[Request]:
    """(`seed` makes a generator only for a trace whose arrivals come from a process:
    numpy.random's import is a tenth of a trace replay's start.)"""
    where = ("workload", "path")
    path = _resolve(base_dir, spec.path)
    _check_regular(path, where, locate)  # before any reader opens it: a FIFO would block
    layout = trace_layout(spec)
    clean = None if layout.reader is not None else _clean_trace(path, layout, seed, spec)
    if clean is not None:
        return _replay(spec, *clean)
    # pandas (a quarter second to import): only when a trace file is read
    import pandas as pd

    table = _read_table(path, where, locate, layout.reader)
    source = TraceFile.of(path, table)
    for column in (layout.arrival_time, layout.prompt_len, layout.output_len):
        if column is not None and column not in table.columns:
            raise locate(where, _missing_column(column, path, table))
    if spec.columns is not None:  # a mapping names columns that must be there
        for extra in (layout.prefix_group, layout.prefix_len, layout.hash_ids, layout.after,
                      layout.think_time):
            if extra is not None and extra not in table.columns:
                raise locate(where, _missing_column(extra, path, table))
    if not layout.optional_extras:
        for extra in (layout.priority, layout.class_name, layout.request_id):
            if extra is not None and extra not in table.columns:
                raise locate(where, _missing_column(extra, path, table))

    if layout.arrival_time is None:
        assert spec.arrival is not None
        arrivals = _process_times(spec.arrival, len(table), np.random.default_rng(seed))
    else:
        arrivals = _arrival_seconds(table[layout.arrival_time], layout.arrival_unit, source,
                                    where, locate)
    prompts = _numbers(table[layout.prompt_len], source, layout.prompt_len, where, locate,
                       minimum=1, whole=True, maximum=MAX_TOKENS)
    outputs = _numbers(table[layout.output_len], source, layout.output_len, where, locate,
                       minimum=1, whole=True, maximum=MAX_TOKENS)
    n = len(table)
    priorities = np.zeros(n, dtype=np.int64)
    if layout.priority is not None and layout.priority in table.columns:
        priorities = _numbers(table[layout.priority], source, layout.priority, where, locate,
                              minimum=-MAX_PRIORITY, whole=True,
                              maximum=MAX_PRIORITY).astype(np.int64)
    labels: list[str | None] = [None] * n
    if layout.class_name is not None and layout.class_name in table.columns:
        labels = [None if pd.isna(v) else str(v) for v in table[layout.class_name]]
    if layout.request_id is not None and layout.request_id in table.columns:
        ids = [str(v) for v in table[layout.request_id]]
    else:
        ids = [f"r{i}" for i in range(n)]
    sessions: list[str | None] = [None] * n
    if layout.session is not None and layout.session in table.columns:
        sessions = [None if pd.isna(v) else str(v) for v in table[layout.session]]
    prefixes: list[Prefix | None] = [None] * n
    if layout.hash_ids is not None and layout.hash_ids in table.columns:
        prefixes = _hash_prefixes(table[layout.hash_ids].tolist(), layout.hash_ids, prompts,
                                  spec.hash_block_tokens, source, where, locate,
                                  exact=spec.format == "mooncake")
    if layout.prefix_group is not None or layout.prefix_len is not None:
        # (a row may have block ids or a group, not both: `_group_prefixes` checks)
        grouped = _group_prefixes(table, layout, prompts, source, where, locate, prefixes)
        prefixes = [a if b is None else b for a, b in zip(prefixes, grouped, strict=True)]
    afters: list[str | None] = [None] * n
    if layout.after is not None and layout.after in table.columns:
        afters = [None if pd.isna(v) else str(v) for v in table[layout.after]]
    thinks = np.zeros(n)  # in the unit of the arrival column (seconds for timestamps)
    think_unit = UNIT_SECONDS.get(layout.arrival_unit, 1.0)
    if layout.think_time is not None and layout.think_time in table.columns:
        thinks = _numbers(table[layout.think_time].fillna(0), source, layout.think_time, where,
                          locate, minimum=0, whole=False, maximum=MAX_TIME)
        alone = np.flatnonzero((thinks > 0) & np.array([a is None for a in afters]))
        if len(alone):
            raise locate(where, f"{source} {source.line(alone[0])}: column '{layout.think_time}' "
                                f"is set but '{layout.after}' is empty; a think time follows "
                                f"a previous turn")

    rows = _replayed_rows(spec, arrivals)
    seen: set[str] = set()
    requests = []
    for i in rows:
        if ids[i] in seen:
            raise locate(where, f"{source} {source.line(i)}: duplicate request id '{ids[i]}'")
        if afters[i] is not None and afters[i] not in seen:
            raise locate(where, f"{source} {source.line(i)}: column '{layout.after}': "
                                f"'{excerpt(afters[i])}' is no earlier request of the "
                                f"replayed rows; expected the id of an earlier one")
        seen.add(ids[i])
        requests.append(Request(ids[i], float((arrivals[i] - spec.start) * spec.time_scale),
                                int(prompts[i]), int(outputs[i]), int(priorities[i]),
                                labels[i], sessions[i], prefixes[i], afters[i],
                                float(thinks[i]) * think_unit * spec.time_scale))
    return requests


def _replayed_rows(spec: TraceWorkload, arrivals: np.ndarray) -> np.ndarray:
    """The rows `start`, `duration` and `limit` keep, in file order."""
    keep = arrivals >= spec.start
    if spec.duration is not None:
        keep &= arrivals < spec.start + spec.duration
    rows = np.flatnonzero(keep)
    return rows[:spec.limit] if spec.limit is not None else rows


def _clean_trace(path: Path, layout: TraceLayout, seed: int, spec: TraceWorkload) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, list[Prefix | None] | None] | None:
    """Arrival seconds, prompt and output lengths (and for JSON lines, the block-id prefixes)
    of a clean trace read without pandas (`kvsched.workload.trace_csv`,
    `kvsched.workload.trace_jsonl`), or None: then pandas reads it and names what is wrong."""
    json_lines = path.suffix.lower() in JSON_SUFFIXES
    needed = {layout.prompt_len: "number", layout.output_len: "number"}
    limits = {layout.prompt_len: (1.0, float(MAX_TOKENS)),
              layout.output_len: (1.0, float(MAX_TOKENS))}
    if layout.arrival_time is not None:
        if layout.arrival_unit == "datetime":
            needed[layout.arrival_time] = "datetime"
        else:
            needed[layout.arrival_time] = "number"
            limits[layout.arrival_time] = (0.0, MAX_TIME / UNIT_SECONDS[layout.arrival_unit])
    if len(needed) < 2 + (layout.arrival_time is not None):
        return None  # one column named twice: pandas' reading decides
    # (JSON lines: the block ids are read too; a CSV cell of them needs pandas' reading)
    cells = [layout.hash_ids] if json_lines and layout.hash_ids is not None else []
    absent = [name for name in (layout.priority, layout.class_name, layout.request_id,
                                layout.session, layout.prefix_group, layout.prefix_len,
                                layout.hash_ids, layout.after, layout.think_time)
              if name is not None and name not in cells]
    if absent and not layout.optional_extras:
        return None  # the mapped extra columns must be there: pandas' reading checks them
    if not json_lines:
        columns = read_clean_columns(path, needed, absent, limits)
        blocks: dict[str, list] = {}
    elif spec.format is None or "datetime" in needed.values():
        # (pandas' reading turns column names that all read as numbers or dates into them:
        # the formats' own names are checked not to, a mapping's could)
        return None
    else:
        read = read_clean_lines(path, limits, cells, absent)
        if read is None:
            return None
        columns, blocks = read
    if columns is None:
        return None
    prompts, outputs = columns[layout.prompt_len], columns[layout.output_len]
    if layout.arrival_time is None:
        assert spec.arrival is not None
        arrivals = _process_times(spec.arrival, len(prompts), np.random.default_rng(seed))
    elif layout.arrival_unit == "datetime":
        arrivals = columns[layout.arrival_time]
    else:
        arrivals = columns[layout.arrival_time] * UNIT_SECONDS[layout.arrival_unit]
    prefixes = None
    for name, ids in blocks.items():
        try:
            prefixes = _hash_prefixes(ids, name, prompts, spec.hash_block_tokens,
                                      TraceFile(path), ("workload", "path"), _default_locate,
                                      exact=spec.format == "mooncake")
        except ScenarioError:
            return None  # pandas' reading names the problem
    return arrivals, prompts, outputs, prefixes


def _replay(spec: TraceWorkload, arrivals: np.ndarray, prompts: np.ndarray,
            outputs: np.ndarray, prefixes: list[Prefix | None] | None) -> Sequence[Request]:
    """The requests of a clean trace's rows (ids r0, r1, ... by file row; no extra but the
    block ids' prefixes), as columns when they have no prefix."""
    rows = _replayed_rows(spec, arrivals)
    times = (arrivals[rows] - spec.start) * spec.time_scale
    if prefixes is None:
        return RequestColumns(times, prompts[rows], outputs[rows], id_numbers=rows)
    return [Request(f"r{row}", time, prompt, output, prefix=prefixes[row])
            for row, time, prompt, output in zip(
                rows.tolist(), times.tolist(), prompts[rows].astype(np.int64).tolist(),
                outputs[rows].astype(np.int64).tolist(), strict=True)]


def _hash_prefixes(cells: list, name: str, prompts: np.ndarray, block_tokens: int,
                   path: TraceFile, where: tuple, locate: Locate,
                   exact: bool) -> list[Prefix | None]:
    """Each row's block ids as segments of `block_tokens` tokens (the last one cut to the
    prompt where the ids reach its end). `exact` (Mooncake): a row needs exactly
    ceil(prompt / block_tokens) ids; else at most that many, and an empty cell or list is
    no shared prefix. A CSV cell holds the ids as text: `[1, 2, 3]`, `1 2 3` or `1;2;3`."""
    text = path.path.suffix.lower() not in JSON_SUFFIXES
    blocks = _blocks(block_tokens)
    prefixes: list[Prefix | None] = []
    for row, (cell, prompt) in enumerate(zip(cells, prompts.astype(np.int64).tolist(),
                                             strict=True)):
        ids = _block_ids(cell, text)
        if ids is None or (not exact and not ids):
            if exact or not _is_empty(cell):
                raise locate(where, f"{path} {path.line(row)}: column '{name}': expected a "
                                    f"list of block ids, got '{excerpt(cell)}'")
            prefixes.append(None)
            continue
        need = -(-prompt // block_tokens)
        if len(ids) != need if exact else len(ids) > need:
            raise locate(where, _bad_count(len(ids), prompt, block_tokens, need, path, row,
                                           name, exact))
        try:
            prefixes.append(blocks.prefix(ids, prompt))
        except ValueError as bad:
            raise locate(where, f"{path} {path.line(row)}: column '{name}': expected whole "
                                f"block ids 0..{MAX_LOCAL_ID:,}, got "
                                f"'{excerpt(bad.args[0])}'") from None
    return prefixes


_ID_SEPARATORS = re.compile(r"[\s,;]+")


def _block_ids(cell: object, text: bool) -> list | None:
    """A cell's block ids: a list as read (JSON), or in a CSV the ids written out (`[1, 2]`,
    `1 2`, `1;2`, one number); [] for an empty cell, None for what holds no ids."""
    if type(cell) is list:
        return cell
    if not text:
        return None
    if isinstance(cell, (int, np.integer)) and not isinstance(cell, (bool, np.bool_)):
        return [int(cell)]
    if isinstance(cell, float):
        if cell != cell:  # NaN: an empty cell
            return []
        return [int(cell)] if cell.is_integer() else [cell]
    if not isinstance(cell, str):
        return None
    body = cell.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1].strip()
    if not body:
        return []
    ids: list = []
    for word in _ID_SEPARATORS.split(body.strip(" ,;")):
        ids.append(int(word) if word.isdigit() and word.isascii() else word)
    return ids


def _is_empty(cell: object) -> bool:
    """A cell that holds nothing: NaN (an empty CSV cell), None, '', '[]' or []."""
    if cell is None or (isinstance(cell, float) and cell != cell):
        return True
    if isinstance(cell, list):
        return not cell
    return isinstance(cell, str) and cell.strip() in ("", "[]")


def _bad_count(count: int, prompt: int, block_tokens: int, need: int, path: TraceFile,
               row: int, name: str, exact: bool) -> str:
    where = f"{path} {path.line(row)}: column '{name}'"
    if exact and count != need:
        return (f"{where}: expected ceil({prompt} / {block_tokens}) = {need} block ids "
                f"(hash_block_tokens {block_tokens}), got {count}")
    return f"{where}: {_too_many_ids(count, prompt, block_tokens)}"


def _group_prefixes(table: pd.DataFrame, layout: TraceLayout, prompts: np.ndarray,
                    path: TraceFile, where: tuple, locate: Locate,
                    blocks: Sequence[Prefix | None]) -> list[Prefix | None]:
    """Rows of a `prefix_group` share their first `prefix_len` tokens; a `prefix_len` of 0
    without a group is no shared prefix (what a dataframe writes). A row with block ids
    (`blocks`, from `hash_ids`) may not have a group too."""
    # pandas (a quarter second to import): only when a trace file is read
    import pandas as pd

    group_column, len_column = layout.prefix_group, layout.prefix_len
    assert group_column is not None and len_column is not None
    n = len(table)
    names = table[group_column] if group_column in table.columns else pd.Series([None] * n)
    lengths = table[len_column] if len_column in table.columns else pd.Series([None] * n)
    if group_column not in table.columns and len_column not in table.columns:
        return [None] * n
    values = pd.to_numeric(lengths, errors="coerce").to_numpy(dtype=float)
    groups = _Groups()
    prefixes: list[Prefix | None] = []
    for row in range(n):
        name, given = names.iloc[row], lengths.iloc[row]
        line = f"{path} {path.line(row)}"
        if pd.isna(name):
            if not pd.isna(given) and values[row] != 0:
                raise locate(where, f"{line}: column '{len_column}' is "
                                    f"'{excerpt(given)}' but '{group_column}' is empty; a "
                                    f"prefix_len needs a prefix_group")
            prefixes.append(None)
            continue
        if blocks[row] is not None:
            raise locate(where, f"{line}: columns '{layout.hash_ids}' and '{group_column}' "
                                f"are both set; a request's shared prefix is its block ids "
                                f"or its group, not both")
        length = values[row]
        if pd.isna(given):
            raise locate(where, f"{line}: column '{group_column}' is '{excerpt(name)}' but "
                                f"'{len_column}' is empty; a prefix_group needs a prefix_len")
        if not (np.isfinite(length) and length % 1 == 0 and 1 <= length <= MAX_TOKENS):
            raise locate(where, f"{line}: column '{len_column}': expected a whole number "
                                f"1..{MAX_TOKENS:,}, got '{excerpt(given)}'")
        if length > prompts[row]:
            raise locate(where, f"{line}: column '{len_column}': {int(length)} is more than "
                                f"the prompt ({int(prompts[row])} tokens)")
        problem = groups.check(str(name), int(length), path.line(row))
        if problem:
            raise locate(where, f"{line}: {problem}")
        prefixes.append(groups.prefix(str(name), int(length)))
    return prefixes


def _arrival_seconds(column: pd.Series, unit: str, path: TraceFile, where: tuple,
                     locate: Locate) -> np.ndarray:
    # pandas (a quarter second to import): only when a trace file is read
    import pandas as pd

    if unit == "datetime":
        stamps = pd.to_datetime(column, errors="coerce", format="ISO8601")
        bad = np.flatnonzero(stamps.isna().to_numpy())
        if len(bad):
            raise locate(where, f"{path} {path.line(bad[0])}: column '{column.name}': "
                                f"expected a timestamp, got '{excerpt(column.iloc[bad[0]])}'")
        seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy()
        return np.asarray(seconds, dtype=float)
    values = _numbers(column, path, str(column.name), where, locate, minimum=0, whole=False,
                      maximum=MAX_TIME / UNIT_SECONDS[unit])
    return values * UNIT_SECONDS[unit]


def _numbers(column: pd.Series, path: TraceFile, name: str, where: tuple, locate: Locate, *,
             minimum: float | None, whole: bool, maximum: float | None = None) -> np.ndarray:
    """The column as numbers, or an error naming the first bad row."""
    # pandas (a quarter second to import): only when a trace file is read
    import pandas as pd

    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore"):
        checks = [(np.isnan(values), "expected a number"),
                  (np.isinf(values), "expected a finite number")]
        if whole:
            checks.append((finite & (np.where(finite, values, 0) % 1 != 0),
                           "expected a whole number"))
        if minimum is not None:
            checks.append((finite & (values < minimum), f"expected a number >= {minimum:g}"))
        if maximum is not None:
            checks.append((finite & (values > maximum),
                           f"expected a number <= {_bound(maximum)}"))
    first = [(int(rows[0]), message) for bad, message in checks
             if len(rows := np.flatnonzero(bad))]
    if first:
        row, message = min(first)
        raise locate(where, f"{path} {path.line(row)}: column '{name}': {message}, "
                            f"got '{excerpt(column.iloc[row])}'")
    return values


def _bound(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() and value < 1e15 else f"{value:g}"


def _check_regular(path: Path, where: tuple, locate: Locate) -> None:
    if not path.is_file():
        if path.exists():
            raise locate(where, f"'{path}' is not a regular file (a folder, a FIFO...)")
        raise locate(where, f"no such file '{path}'")


def _read_table(path: Path, where: tuple, locate: Locate,
                reader: str | None = None) -> pd.DataFrame:
    """The trace file as a table: by pandas, or by a format's own reader (`reader`,
    "module:function", `TraceLayout.reader`); a file either cannot parse is one line."""
    # only when the reading fails
    import zlib

    # pandas (a quarter second to import): only when a trace file is read
    import pandas as pd

    _check_regular(path, where, locate)
    lines = reader is None and path.suffix.lower() in JSON_SUFFIXES
    try:
        if reader is not None:  # (its module loaded only when a file of that format is read)
            return load(reader)(path)
        if lines:
            # (dtype=False: no guessing of types or dates; pandas' guess turned a column
            # named like `timestamp` into datetimes when all its numbers passed a year in
            # seconds, so a late-starting Mooncake trace's milliseconds read as epoch
            # times. Each column is read by its format's unit and checks instead.)
            return pd.read_json(path, lines=True, dtype=False)
        return pd.read_csv(path)
    # EOFError: a truncated .gz (click would turn it into "Aborted!"); TypeError: pandas
    # on a JSON line that is a list or a number.
    except (ValueError, TypeError, EOFError, zlib.error, pd.errors.ParserError, OSError,
            UnicodeDecodeError) as exc:
        if lines and (bad := _first_bad_json_line(path)) is not None:
            raise locate(where, f"{path} {bad}") from None
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, (EOFError, zlib.error)):
            first = f"{first or 'the file ends early'} (a truncated or corrupt compressed file?)"
        raise locate(where, f"cannot parse '{path}': {excerpt(first, 120)}") from None


def _first_bad_json_line(path: Path) -> str | None:
    """Where a JSON-lines file stops being one object per line (read only once pandas
    has failed: the good path pays nothing)."""
    # only when the reading fails
    import json

    # pandas (a quarter second to import): only when a trace file is read
    from pandas.io.common import get_handle

    try:
        with get_handle(path, "r", compression="infer", encoding="utf-8") as handle:
            for number, text in enumerate(handle.handle, start=1):
                if not text.strip():
                    continue
                try:
                    value = json.loads(text)
                except ValueError:
                    return f"line {number}: expected a JSON object, got '{excerpt(text.strip())}'"
                if type(value) is not dict:
                    return (f"line {number}: expected a JSON object ({{...}}), got "
                            f"{type(value).__name__} '{excerpt(text.strip())}'")
    except (OSError, EOFError, UnicodeDecodeError, ValueError):
        return None
    return None


JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
"""JSON-lines files: no header line."""


@dataclass(frozen=True, eq=False)  # (an array: == and hash would fail)
class TraceFile:
    """A file of rows as its errors name them: its path, and, when a format's reader kept only
    some rows (`TraceLayout.reader`), the file's data row of each table row."""

    path: Path
    kept: np.ndarray | None = None

    @classmethod
    def of(cls, path: Path, table: pd.DataFrame) -> TraceFile:
        """`table`'s index says which data rows a reader kept, unless it is 0, 1, 2..."""
        index = table.index.to_numpy()
        whole = len(index) == 0 or (index.dtype.kind in "iu" and index[0] == 0
                                    and bool((np.diff(index) == 1).all()))
        return cls(path, None if whole else index)

    def __str__(self) -> str:
        return str(self.path)

    def line(self, row: int | np.integer) -> str:
        """The file line of table row `row` (CSV files have a header line)."""
        data_row = int(row) if self.kept is None else int(self.kept[int(row)])
        return f"line {data_row + 1 + (self.path.suffix.lower() not in JSON_SUFFIXES)}"


def _missing_column(column: str, path: Path, table: pd.DataFrame) -> str:
    # Column names only, each cut short: a file that is not a table (/proc/self/environ)
    # would otherwise have its contents echoed.
    names = ", ".join(f"'{excerpt(name, 24)}'" for name in map(str, table.columns[:10]))
    more = f" (+{len(table.columns) - 10} more)" if len(table.columns) > 10 else ""
    return f"{path} has no column '{column}'; it has: {names or 'no columns'}{more}"


def _resolve(base_dir: Path, path: str) -> Path:
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else base_dir / candidate
