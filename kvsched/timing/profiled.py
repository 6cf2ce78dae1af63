"""The profiled time model: replay operator profiles measured on your own GPU, in Vidur's CSV
format, interpolated.

A profile folder holds `mlp.csv` (dense operators per token count), `attention.csv` (prefill
per chunk and cached context, decode per batch and context) and, for tp > 1, `all_reduce.csv`.
Both Vidur's raw files (`time_stats.<op>.median` columns, every TP degree in one file) and the
compact extract kvsched's calibration reads (one column per operator, or `kind` + `median_ms`)
are accepted; times are milliseconds per layer. A step is composed as Vidur composes it: per
layer the dense operators at the step's token count, attention prefill and decode, two
all-reduces when tp > 1, times the layers. Dense times are interpolated on the token count,
prefill attention on its query-key pairs (chunk x (cached + chunk)), decode attention on the
KV tokens read, all-reduce on the log of the message size; past the last row, time grows in
proportion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from kvsched.errors import KvschedError, excerpt
from kvsched.timing.hardware import Model, load_model
from kvsched.timing.roofline import BatchShape

DENSE_OPS = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
TP_COLUMN = "num_tensor_parallel_workers"


class ProfileError(KvschedError, ValueError):
    """A profile folder that cannot be read: one line naming the file."""


def _median(frame: pd.DataFrame, op: str, path: Path, *, blanks: bool = False) -> np.ndarray:
    """The operator's median times (ms), checked (`blanks`: empty cells count as 0)."""
    for column in (f"time_stats.{op}.median", op):
        if column in frame:
            return _numbers(frame, column, path, blanks=blanks)
    raise ProfileError(f"{path}: no column for {op} (time_stats.{op}.median or {op})")


def _numbers(frame: pd.DataFrame, column: str, path: Path, *,
             blanks: bool = False) -> np.ndarray:
    """A column as finite numbers >= 0 (times, sizes, counts), or an error naming the
    first bad row: a negative time would give negative TTFTs, text an AttributeError."""
    if column not in frame:
        raise ProfileError(f"{path}: no column '{column}'")
    raw = frame[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
    empty = raw.isna().to_numpy()
    bad = ~np.isfinite(values) & ~(empty & blanks) | (values < 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        got = "an empty cell" if empty[row] else f"'{excerpt(raw.iloc[row])}'"
        raise ProfileError(f"{path} line {row + 2}: column '{column}': expected a finite "
                           f"number >= 0, got {got}")
    return np.where(empty, 0.0, values) if blanks else values


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        if path.exists():
            raise ProfileError(f"{path}: not a regular file (a folder, a FIFO...)")
        raise ProfileError(f"{path}: no such profile file")
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError, EOFError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProfileError(f"{path}: cannot read: {excerpt(first, 120)}") from None
    if frame.empty:
        raise ProfileError(f"{path}: no rows")
    return frame


def _of_tp(frame: pd.DataFrame, tp: int, path: Path) -> pd.DataFrame:
    if TP_COLUMN not in frame:
        return frame
    degrees_column = _numbers(frame, TP_COLUMN, path)
    chosen = frame[degrees_column == tp]
    if chosen.empty:
        degrees = sorted({int(v) for v in degrees_column})
        raise ProfileError(f"{path}: no rows for tp {tp} (profiled: {degrees})")
    return chosen


def _curve(x: np.ndarray, y: np.ndarray, path: Path, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, duplicate-free points (duplicates averaged), times in seconds."""
    frame = pd.DataFrame({"x": x.astype(float), "y": y.astype(float) * 1e-3}).dropna()
    mean = frame.groupby("x").y.mean()
    if mean.empty:
        raise ProfileError(f"{path}: no {what} rows")
    return mean.index.to_numpy(dtype=float), mean.to_numpy(dtype=float)


def _at(x: float, xs: np.ndarray, ys: np.ndarray) -> float:
    if x <= xs[-1]:
        return float(np.interp(x, xs, ys))
    return float(ys[-1] * x / xs[-1])


@dataclass(frozen=True)
class ProfiledStep:
    """Step durations replayed from the profiles in `folder` for `model` at `tp`."""

    folder: Path
    model: Model | str
    tp: int = 1
    unit: str = "s"
    whole_steps: bool = False
    _dense: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False, compare=False)
    _prefill: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False, compare=False)
    _decode: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False, compare=False)
    _allreduce: tuple[np.ndarray, np.ndarray] | None = field(init=False, repr=False,
                                                             compare=False)
    _dense_cache: dict[int, float] = field(default_factory=dict, init=False, repr=False,
                                           compare=False)

    def __post_init__(self) -> None:
        folder = Path(self.folder)
        model = load_model(self.model)
        set_ = object.__setattr__
        set_(self, "folder", folder)
        set_(self, "model", model)
        path = folder / "mlp.csv"
        mlp = _of_tp(_read(path), self.tp, path)
        total = sum(_median(mlp, op, path, blanks=True) for op in DENSE_OPS)
        set_(self, "_dense", _curve(_numbers(mlp, "num_tokens", path), np.asarray(total), path,
                                    "dense"))
        path = folder / "attention.csv"
        attention = _of_tp(_read(path), self.tp, path)
        if "is_prefill" in attention:
            is_prefill = (attention.is_prefill.astype(str).str.lower() == "true").to_numpy()
            prefill_time = _median(attention, "attn_prefill", path, blanks=True)
            decode_time = _median(attention, "attn_decode", path, blanks=True)
        elif "kind" in attention:
            is_prefill = (attention.kind == "prefill").to_numpy()
            prefill_time = decode_time = _numbers(attention, "median_ms", path)
        else:
            raise ProfileError(f"{path}: no is_prefill or kind column")
        batch, chunk, kv = (_numbers(attention, c, path) for c in
                            ("batch_size", "prefill_chunk_size", "kv_cache_size"))
        pairs = batch * chunk * (kv + chunk)
        set_(self, "_prefill", _curve(pairs[is_prefill], prefill_time[is_prefill], path,
                                      "prefill"))
        set_(self, "_decode", _curve((batch * kv)[~is_prefill], decode_time[~is_prefill],
                                     path, "decode"))
        set_(self, "_allreduce", None)
        if self.tp > 1:
            path = folder / "all_reduce.csv"
            ar = _read(path)
            workers = _numbers(ar, "num_workers", path)
            keep = workers == self.tp
            if "devices_per_node" in ar:
                keep &= _numbers(ar, "devices_per_node", path) == workers
            ar = ar[keep]
            times = (_numbers(ar, "median_ms", path) if "median_ms" in ar
                     else _median(ar, "all_reduce", path))
            sizes = _numbers(ar, "size", path)
            if (sizes <= 0).any():
                raise ProfileError(f"{path}: column 'size': expected message sizes > 0")
            set_(self, "_allreduce", _curve(np.log(sizes), times, path,
                                            f"all-reduce rows for {self.tp} workers"))

    def layer_time(self, tokens: int) -> float:
        """One layer's dense operators and all-reduces at `tokens` tokens."""
        cached = self._dense_cache.get(tokens)
        if cached is None:
            cached = 0.0
            if tokens:
                cached = _at(tokens, *self._dense)
                if self._allreduce is not None:
                    size = np.log(tokens * self.model.hidden * 2.0)  # type: ignore[union-attr]
                    cached += 2 * float(np.interp(size, *self._allreduce))
            if len(self._dense_cache) < 65536:
                self._dense_cache[tokens] = cached
        return cached

    def _base(self, tokens: int, chunks: tuple[tuple[int, int], ...]) -> float:
        pairs = sum(c * (k + c) for c, k in chunks)
        prefill = _at(pairs, *self._prefill) if pairs else 0.0
        return self.model.layers * (self.layer_time(tokens) + prefill)  # type: ignore[union-attr]

    def _decode_time(self, kv_tokens: int) -> float:
        return _at(kv_tokens, *self._decode)

    def duration_shape(self, shape: BatchShape) -> float:
        base = self._base(shape.num_tokens, shape.prefill_chunks)
        if not shape.num_decodes:
            return base
        layers = self.model.layers  # type: ignore[union-attr]
        return base + layers * self._decode_time(shape.decode_kv_tokens)

    def duration(self, prefill_tokens: int, num_decodes: int, kv_read_tokens: int,
                 swapped_blocks: int) -> float:
        """`TimeModel.duration`: the prefill as one chunk without cached context; swaps are
        not in Vidur's profiles and cost nothing here."""
        chunks = ((prefill_tokens, 0),) if prefill_tokens else ()
        return self.duration_shape(BatchShape(chunks, num_decodes, kv_read_tokens))

    def stretch_durations(self, num_decodes: int, kv_tokens_start: int,
                          num_steps: int) -> list[float]:
        """Element k equals `duration(0, n, kv_start + k * n, 0)` exactly."""
        base = self._base(num_decodes, ())
        if not num_decodes:
            return [base] * num_steps
        xs, ys = self._decode
        kv = kv_tokens_start + np.arange(num_steps, dtype=np.int64) * num_decodes
        inside = np.interp(kv, xs, ys)
        beyond = ys[-1] * kv / xs[-1]
        decode = np.where(kv <= xs[-1], inside, beyond)
        out: list[float] = (base + self.model.layers * decode).tolist()  # type: ignore[union-attr]
        return out
