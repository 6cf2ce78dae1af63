"""BurstGPT's traces (HPMLL/BurstGPT, CC-BY 4.0): `Timestamp` (seconds from the start of
the first day), `Model`, `Request tokens`, `Response tokens`, `Total tokens`, `Log Type`, and in
BurstGPT_3 `Session ID` and `Elapsed time`. A request that failed is a row with `Response tokens`
0; it produced nothing, so it is dropped here, as the `*_without_fails` files the authors
publish drop it (`format: burstgpt` in a trace workload)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

RESPONSE = "Response tokens"
SESSION = "Session ID"  # the README announces it as `SessionID`: either is read


def read(path: Path) -> pd.DataFrame:
    """The rows of a BurstGPT CSV that got a response, in file order; the index keeps each
    row's place in the file (errors name the file's line)."""
    table = pd.read_csv(path).rename(columns={"SessionID": SESSION})
    if RESPONSE not in table.columns:
        raise ValueError(f"no '{RESPONSE}' column: not a BurstGPT file (columns: "
                         f"{', '.join(map(str, table.columns))})")
    answered = pd.to_numeric(table[RESPONSE], errors="coerce") != 0
    return table[answered]
