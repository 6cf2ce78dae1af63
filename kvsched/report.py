"""Results as DataFrames, CSV files and printed tables (pure functions; nothing printed here)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from kvsched.records import (
    BATCH_COLUMNS,
    EVENT_COLUMNS,
    REQUEST_COLUMNS,
    STEP_COLUMNS,
    RunResult,
)
from kvsched.records.floatfmt import FORMAT
from kvsched.records.metric_names import read, resolve
from kvsched.records.metrics import LATE_KEYS
from kvsched.records.table import rows_of

if TYPE_CHECKING:
    import pandas as pd



def requests_frame(result: RunResult) -> pd.DataFrame:
    # pandas (a quarter second to import): only when a frame is made
    import pandas as pd

    return pd.DataFrame(list(rows_of(result.requests)), columns=list(REQUEST_COLUMNS))


def steps_frame(result: RunResult) -> pd.DataFrame:
    # pandas (a quarter second to import): only when a frame is made
    import pandas as pd

    return pd.DataFrame(result.steps, columns=list(STEP_COLUMNS))


def events_frame(result: RunResult) -> pd.DataFrame:
    # pandas (a quarter second to import): only when a frame is made
    import pandas as pd

    return pd.DataFrame(result.events, columns=list(EVENT_COLUMNS))


def batches_frame(result: RunResult) -> pd.DataFrame:
    # pandas (a quarter second to import): only when a frame is made
    import pandas as pd

    return pd.DataFrame(result.batches or [], columns=list(BATCH_COLUMNS))


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    frame.to_csv(path, index=False, float_format=FORMAT, lineterminator="\n")


def write_json(data: Any, path: Path) -> None:
    path.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n", encoding="utf-8")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


# -- human-readable figures ---------------------------------------------------------------


def fmt(value: Any) -> str:
    """A figure for a table: thousands grouped, 3-4 significant digits, '-' for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


Column = tuple[str, Callable[[dict[str, Any]], Any]]


def _units(time_unit: str) -> tuple[str, str]:
    """A header's time suffix and the "per" of a rate: steps, s, or "" when rows differ."""
    if time_unit in ("steps", "s"):
        return f" ({time_unit})", "step" if time_unit == "steps" else "s"
    return "", "time unit"


def comparison_columns(time_unit: str, summaries: Sequence[dict[str, Any]] = (),
                       admission: bool = False) -> list[Column]:
    """The default columns: vLLM's benchmark view first (what `vllm bench serve` prints, so
    an operator reads a run as a benchmark), then the scheduler's own figures. Every time
    carries its unit; `rejected` with `admission` or when some row rejected requests,
    `goodput` when some row has an SLO."""
    unit, per = _units(time_unit)
    rejected: list[Column] = [("rejected", lambda s: s.get("num_rejected"))] if admission or any(
        s.get("num_rejected") for s in summaries) else []
    goodput: list[Column] = [(f"goodput (req/{per})", lambda s: s.get("goodput"))] if any(
        s.get("goodput") is not None for s in summaries) else []
    return [
        ("completed", lambda s: f"{s['num_finished']}/{s['num_requests']}"),
        ("starved", lambda s: s["num_starved"]),
        *rejected,
        (f"TTFT p50{unit}", lambda s: s["ttft_p50"]),
        (f"TTFT p99{unit}", lambda s: s["ttft_p99"]),
        (f"TPOT p99{unit}", lambda s: s.get("tpot_p99")),
        (f"ITL p99{unit}", lambda s: s.get("itl_p99")),
        (f"output tok/{per}", lambda s: s.get("output_throughput")),
        *goodput,
        ("preemptions", lambda s: s["num_preemptions"]),
        (f"TTFT mean{unit}", lambda s: s["ttft_mean"]),
        (f"TTFT p95{unit}", lambda s: s["ttft_p95"]),
        (f"e2e p99{unit}", lambda s: s["e2e_p99"]),
        ("recomputed (tokens)", lambda s: s["recomputed_tokens"]),
        ("recompute ratio", lambda s: s["recompute_ratio"]),
        ("tokens/step", lambda s: s["tokens_per_step"]),
        ("peak blocks", lambda s: s["peak_blocks_used"]),
    ]


HIDE_FIRST = ("peak blocks", "TTFT mean", "TTFT p95", "recomputed", "e2e p99", "recompute ratio",
              "tokens/step", "ITL p99", "TPOT p99", "starved", "output tok", "preemptions",
              "goodput", "rejected")
"""Columns a narrow terminal loses first (by the start of their title): the scheduler's own
figures, then vLLM's view from its end; completed, TTFT and incidents stay."""

_TIME_KEYS = ("duration", "ttft_", "e2e_", "queue_time_", "token_gap_", "tpot_", "itl_")
_TOKEN_RATES = ("throughput", "output_throughput", "total_token_throughput")
_REQUEST_RATES = ("requests_per_time", "request_throughput", "goodput", "request_goodput")


def picked_title(name: str, time_unit: str) -> str:
    """A `--columns` header: the name as given, with the unit of a time or a rate (a
    millisecond name carries its unit already)."""
    key, factor = resolve(name)
    unit, per = _units(time_unit)
    if factor != 1:
        return name
    if key.startswith("ttft_steps_"):
        return f"{name} (steps)"
    if key.startswith(_TIME_KEYS):
        return name + unit
    if key in _TOKEN_RATES or key in _REQUEST_RATES:
        return f"{name} ({'tok' if key in _TOKEN_RATES else 'req'}/{per})"
    return name


def picked_columns(names: Sequence[str], time_unit: str) -> list[Column]:
    """The columns `--columns` names (summary keys or vLLM's names, `metric_names`), in
    order; a row's own `time_unit` (a sweep's) overrides the table's."""

    def column(name: str) -> Column:
        def get(s: dict[str, Any]) -> Any:
            value = read(s, name, s.get("time_unit") or time_unit)
            return incident_kinds({"incidents": value}) if isinstance(value, list) else value
        return picked_title(name, time_unit), get

    return [column(name) for name in names]


def fitted_table(header_row: Sequence[str], rows: Sequence[Sequence[Any]],
                 width: int | None) -> str:
    """A table no wider than `width` characters (None: no limit), dropping the columns in
    `HIDE_FIRST` order; a last line names what was hidden."""
    headers, body = list(header_row), [list(row) for row in rows]
    hidden: list[str] = []

    def render() -> str:
        return tabulate(body, headers=headers, tablefmt="simple", disable_numparse=True)

    text = render()
    for prefix in HIDE_FIRST:
        if width is None or max(map(len, text.splitlines()), default=0) <= width:
            break
        for i in [i for i, h in enumerate(headers) if h.startswith(prefix)][::-1]:
            hidden.append(headers.pop(i))
            for row in body:
                row.pop(i)
        text = render()
    if hidden and width is not None:
        note = f"({len(hidden)} columns hidden, --wide shows them: {', '.join(hidden)})"
        text += "\n" + (note if len(note) <= width else note[:width - 4] + "...)")
    return text


def comparison_table(rows: Sequence[tuple[str, dict[str, Any]]], time_unit: str,
                     extra: Sequence[Column] = (), width: int | None = None,
                     admission: bool = False, picked: Sequence[str] = ()) -> str:
    """One row per variant: (name, summary) pairs; no wider than `width` if given. `picked`
    (`--columns`) replaces the default columns and `extra`, and is never cut to fit: the
    user named every one."""
    if picked:
        columns, width = picked_columns(picked, time_unit), None
    else:
        columns = comparison_columns(time_unit, [summary for _, summary in rows],
                                     admission) + list(extra)
    body = [[name] + [fmt(get(summary)) for _, get in columns] for name, summary in rows]
    return fitted_table(["variant"] + [title for title, _ in columns], body, width)


def _cell(value: Any) -> Any:
    """A summary value as one CSV cell: incident lists become their kinds."""
    if isinstance(value, list):
        return "; ".join(item["kind"] if isinstance(item, dict) else str(item) for item in value)
    return value


def incident_kinds(summary: dict[str, Any]) -> str:
    """The kinds of a summary's incidents: a run's list, or a sweep row's joined text."""
    incidents = summary.get("incidents") or ()
    if isinstance(incidents, str):
        return incidents
    return ", ".join(item["kind"] for item in incidents) or "-"


def summary_rows(rows: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[list]]:
    """summary.csv: one row per variant, every summary key a column (keys in order of first
    appearance, so per-class keys come after the others, then `metrics.LATE_KEYS`), as a
    header and rows of cells."""
    rows = [(name, _flat_replicas(summary)) for name, summary in rows]
    header = ["variant"]
    seen = {*header, *LATE_KEYS}
    for _, summary in rows:
        for key in summary:
            if key not in seen:
                seen.add(key)
                header.append(key)
    header += [key for key in LATE_KEYS if any(key in summary for _, summary in rows)]
    body = [[name] + [_cell(summary.get(key)) for key in header[1:]] for name, summary in rows]
    return header, body


def _flat_replicas(summary: dict[str, Any]) -> dict[str, Any]:
    """A cluster run's `replicas` list as `r<i>_<key>` columns (other summaries unchanged)."""
    replicas = summary.get("replicas")
    if not isinstance(replicas, list):
        return summary
    flat = {key: value for key, value in summary.items() if key != "replicas"}
    for entry in replicas:
        flat |= {f"r{entry['replica']}_{key}": value for key, value in entry.items()
                 if key != "replica"}
    return flat


def summary_frame(rows: Sequence[tuple[str, dict[str, Any]]]) -> pd.DataFrame:
    """summary.csv's table as a DataFrame."""
    # pandas (a quarter second to import): only when a frame is made
    import pandas as pd

    rows = [(name, _flat_replicas(summary)) for name, summary in rows]
    records = [{"variant": name, **{key: _cell(value) for key, value in summary.items()}}
               for name, summary in rows]
    return pd.DataFrame.from_records(records)


def sweep_columns(unit: str = "", rows: Sequence[dict[str, Any]] = ()) -> list[Column]:
    """The sweep table's figures: the run table's (`unit`, steps or s, goes into the
    headers) and the incidents."""
    return comparison_columns(unit, rows) + [("incidents", incident_kinds)]


SWEEP_COLUMNS: list[Column] = sweep_columns()


def sweep_table(frame: pd.DataFrame, paths: Sequence[str], width: int | None = None,
                picked: Sequence[str] = ()) -> str:
    """One row per grid point and variant: the swept values, then the figures (`picked`,
    from `--columns`, instead of the default ones and never cut to fit)."""
    units = set(frame["time_unit"]) if "time_unit" in frame else set()
    unit = ("steps" if units == {"steps"} else "s") if len(units) == 1 else ""
    records = [{str(k): (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in record.items()} for record in frame.to_dict("records")]
    if picked:
        columns, width = picked_columns(picked, unit), None
    else:
        columns = sweep_columns(unit, records)
    rows = [[fmt(cells[p]) for p in paths] + [cells["variant"]]
            + [fmt(get(cells)) for _, get in columns] for cells in records]
    headers = [*paths, "variant", *(title for title, _ in columns)]
    return fitted_table(headers, rows, width)
