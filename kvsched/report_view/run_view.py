"""The records of a run folder as columns, per variant and per replica.

A run folder is `results/<scenario>/`: `summary.csv` lists its variants in order, and each
`<variant>/` holds `run.json`, `summary.json`, `requests.csv`, `events.csv`, `steps.csv`
(absent under `--records summary`; a row per step, or per decode stretch under `--records
compact`) and optionally `batches.csv`. A cluster run adds a `replica` column. Anything
missing or malformed is one line naming the file and the field (`KvschedError`).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvsched.errors import KvschedError, excerpt
from kvsched.paths import read_json

STEP_NEEDED = ("step", "time", "duration", "num_running", "num_waiting", "prefill_tokens",
               "decode_tokens", "recomputed_tokens", "budget_used", "blocks_used",
               "blocks_free", "num_preempted")
REQUEST_NEEDED = ("request_id", "arrival_time", "prompt_len", "output_len", "status",
                  "first_scheduled_time", "first_token_time", "finish_time", "ttft",
                  "e2e_latency", "num_preemptions")
EVENT_NEEDED = ("step", "time", "request_id", "event", "detail")
BATCH_NEEDED = ("step", "time", "request_id", "phase", "num_tokens")
TEXT_COLUMNS = frozenset({"request_id", "status", "class", "reason", "event", "detail",
                          "phase"})


Columns = dict[str, Any]
"""A CSV file as columns: numpy float64 arrays (NaN where empty) or lists of strings."""


@dataclass(frozen=True, slots=True)
class VariantView:
    """One variant's records. `steps` is None under `--records summary`; `replicas` lists
    the replica numbers (`[0]` for a single engine) and `pools` each one's KV blocks."""

    name: str
    folder: Path
    time_unit: str  # "s" or "steps"
    records: str  # "full", "compact" or "summary"
    max_num_batched_tokens: int
    replicas: tuple[int, ...]
    pools: dict[int, int]
    summary: dict[str, Any]
    run: dict[str, Any]
    requests: Columns
    events: Columns
    steps: Columns | None
    batches: Columns | None

    @property
    def clustered(self) -> bool:
        return "replica" in self.requests

    @property
    def end_time(self) -> float:
        """The end of the run: its last step's end (summary `duration`) or its last event
        (a starved request's), whichever is later."""
        duration = self.summary.get("duration")
        times = self.events["time"]
        last = float(np.nanmax(times)) if len(times) else 0.0
        if isinstance(duration, int | float) and duration == duration:
            return max(float(duration), last)
        return last


@dataclass(frozen=True, slots=True)
class RunView:
    """A run folder: its scenario's name and description, and its variants in order."""

    folder: Path
    scenario: str
    description: str
    variants: tuple[VariantView, ...]

    def variant(self, name: str) -> VariantView:
        for view in self.variants:
            if view.name == name:
                return view
        raise KvschedError(f"{self.folder}: no variant '{excerpt(name)}'")


def read_columns(path: Path, needed: tuple[str, ...]) -> Columns:
    """A record CSV as columns: text columns as lists of strings ('' where empty), every
    other column as float64 (NaN where empty). A missing file or column, or a value that is
    not a number where one is expected, is one line naming the file and the column."""
    # pyarrow: only when a steps.csv is read (a report of summaries needs none)
    import pyarrow as pa
    import pyarrow.csv as pacsv

    if not path.is_file():
        raise KvschedError(f"{path}: missing")
    try:
        header = path.open(encoding="utf-8").readline().rstrip("\r\n").split(",")
        types = {name: pa.string() for name in header if name in TEXT_COLUMNS}
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False))
    except (pa.ArrowInvalid, UnicodeDecodeError, OSError) as exc:
        raise KvschedError(f"{path}: not a readable CSV ({excerpt(str(exc).splitlines()[0])})"
                           ) from None
    missing = [name for name in needed if name not in table.column_names]
    if missing:
        raise KvschedError(f"{path}: missing column(s) {', '.join(missing)}")
    columns: Columns = {}
    for name in table.column_names:
        column = table.column(name)
        if name in TEXT_COLUMNS:
            columns[name] = [value or "" for value in column.to_pylist()]
        elif pa.types.is_integer(column.type) or pa.types.is_floating(column.type) \
                or pa.types.is_null(column.type) or pa.types.is_boolean(column.type):
            columns[name] = column.cast(pa.float64()).to_numpy(zero_copy_only=False)
        else:
            bad = next((v for v in column.to_pylist() if not _number(v)), "")
            raise KvschedError(f"{path}: column {name}: expected numbers, got "
                               f"'{excerpt(bad)}'")
    return columns


def _number(value: Any) -> bool:
    if value is None or value == "":
        return True
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _field(run: dict[str, Any], path: Path, *keys: str) -> Any:
    value: Any = run
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            raise KvschedError(f"{path}: missing field {'.'.join(keys)}")
        value = value[key]
    return value


def read_variant(folder: Path) -> VariantView:
    """One variant folder's records."""
    run_path = folder / "run.json"
    run = read_json(run_path)
    time_unit = str(_field(run, run_path, "time_unit"))
    records = str(run.get("records", "full"))
    try:
        budget = int(_field(run, run_path, "resolved", "engine", "max_num_batched_tokens"))
        num_blocks = _field(run, run_path, "resolved", "engine", "num_blocks")
    except (TypeError, ValueError):
        raise KvschedError(f"{run_path}: resolved.engine.max_num_batched_tokens: expected a "
                           "number") from None
    summary = read_json(folder / "summary.json")
    requests = read_columns(folder / "requests.csv", REQUEST_NEEDED)
    events = read_columns(folder / "events.csv", EVENT_NEEDED)
    steps = None if records == "summary" else read_columns(folder / "steps.csv", STEP_NEEDED)
    batches = (read_columns(folder / "batches.csv", BATCH_NEEDED)
               if (folder / "batches.csv").is_file() else None)
    pools: dict[int, int] = {}
    for entry in summary.get("replicas") or ():
        if isinstance(entry, dict) and "replica" in entry and "num_blocks" in entry:
            pools[int(entry["replica"])] = int(entry["num_blocks"])
    if not pools:
        if not isinstance(num_blocks, int):  # "auto": the pool is in the steps
            num_blocks = _pool_from_steps(steps)
        pools = {0: int(num_blocks)}
    return VariantView(folder.name, folder, time_unit, records, budget,
                       tuple(sorted(pools)), pools, summary, run, requests, events, steps,
                       batches)


def _pool_from_steps(steps: Columns | None) -> int:
    if steps is None or not len(steps["blocks_used"]):
        return 0
    return int(np.nanmax(steps["blocks_used"] + steps["blocks_free"]))


def read_run(folder: Path) -> RunView:
    """A run folder's variants, in the order of its summary.csv."""
    if not folder.is_dir():
        raise KvschedError(f"{folder}: no such folder")
    for marker, what in (("sweep.json", "a sweep's"), ("capacity.json", "a capacity search's")):
        if (folder / marker).is_file():
            raise KvschedError(f"{folder}: {what} folder, not a run's (a run folder is "
                               "results/<scenario>/; kvsched plot draws this one)")
    summary_path = folder / "summary.csv"
    if not summary_path.is_file():
        raise KvschedError(f"{folder}: not a run folder (no summary.csv; a run folder is "
                           "results/<scenario>/)")
    names = _variant_names(summary_path)
    if not names:
        raise KvschedError(f"{summary_path}: no variants")
    variants = []
    for name in names:
        if not name or name.startswith(".") or "/" in name or name in ("..",):
            raise KvschedError(f"{summary_path}: variant: '{excerpt(name)}' is not a folder "
                               "name")
        variants.append(read_variant(folder / name))
    first = variants[0].run
    found = first.get("resolved")
    resolved: dict[str, Any] = found if isinstance(found, dict) else {}
    return RunView(folder, str(first.get("scenario", folder.name)),
                   str(resolved.get("description") or "").strip(), tuple(variants))


def _variant_names(path: Path) -> list[str]:
    """summary.csv's `variant` column (its other columns are the summary's, read from each
    variant's summary.json instead)."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise KvschedError(f"{path}: not a readable CSV ({excerpt(exc)})") from None
    if not rows or "variant" not in rows[0]:
        raise KvschedError(f"{path}: missing column(s) variant")
    at = rows[0].index("variant")
    return [row[at] if at < len(row) else "" for row in rows[1:]]


def replica_rows(columns: Columns, replica: int, clustered: bool) -> np.ndarray | slice:
    """The rows of `columns` that belong to `replica` (all of them for a single engine)."""
    if not clustered or "replica" not in columns:
        return slice(None)
    return np.flatnonzero(columns["replica"] == replica)


def take(columns: Columns, rows: np.ndarray | slice) -> Columns:
    """`columns` restricted to `rows`."""
    if isinstance(rows, slice):
        return columns
    return {name: (values[rows] if isinstance(values, np.ndarray)
                   else [values[i] for i in rows.tolist()])
            for name, values in columns.items()}
