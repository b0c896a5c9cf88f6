"""Compare two artifact trees table by table: the check behind "the same seeds and data give
the same metrics" after a change of code, ignoring columns that measure time or place.

Every CSV (``.csv`` and ``.csv.gz``) under the first tree is read beside its namesake in the
second; a table is ``identical`` when the two frames are equal cell for cell after the
timing columns are dropped, ``differs`` otherwise (with the differing columns and the
largest absolute difference of each numeric one), ``missing`` when the second lacks it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from memsafe_lib.io import read_csv

TIMING_COLUMNS: frozenset[str] = frozenset({
    "fit_seconds", "seconds", "seconds_finetune", "seconds_encode", "minutes", "finished_utc", "time_utc",
    "pairs_per_s", "useful_tokens_per_s", "train_pairs_per_s", "code",
})
"""Wall times, throughput, clock stamps and the code fingerprint: they change with the run, not the result."""


def tables(root: Path) -> list[Path]:
    """CSV tables under ``root`` (relative paths), caches and scratch excluded."""
    found = [*root.rglob("*.csv"), *root.rglob("*.csv.gz")]
    return sorted(p.relative_to(root) for p in found if ".cache" not in p.parts and "scratch" not in p.parts)


def compare_table(before: pd.DataFrame, after: pd.DataFrame) -> tuple[str, dict[str, float | None]]:
    """(status, {differing column: max abs difference or None for non-numeric})."""
    keep = [c for c in before.columns if c not in TIMING_COLUMNS]
    if list(after.columns.drop(list(TIMING_COLUMNS & set(after.columns)))) != keep or len(before) != len(after):
        return "differs", {"<shape or columns>": None}
    diffs: dict[str, float | None] = {}
    for column in keep:
        a, b = before[column], after[column]
        if a.equals(b):
            continue
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            gap = np.abs(a.to_numpy(float) - b.to_numpy(float))
            both_nan = np.isnan(a.to_numpy(float)) & np.isnan(b.to_numpy(float))
            gap = np.where(both_nan, 0.0, gap)
            if np.nanmax(gap, initial=0.0) == 0.0 and not np.isnan(gap).any():
                continue
            diffs[column] = float(np.nanmax(gap, initial=np.nan))
        else:
            diffs[column] = None
    return ("identical" if not diffs else "differs"), diffs


def compare_trees(before: Path, after: Path) -> pd.DataFrame:
    """One row per table of ``before``: status and what differs in ``after``."""
    rows = []
    for rel in tables(before):
        if not (after / rel).exists():
            rows.append({"table": rel.as_posix(), "status": "missing", "differences": ""})
            continue
        status, diffs = compare_table(read_csv(before / rel), read_csv(after / rel))
        detail = "; ".join(f"{c}: {'text' if d is None else f'max |diff| {d:.3g}'}" for c, d in diffs.items())
        rows.append({"table": rel.as_posix(), "status": status, "differences": detail})
    return pd.DataFrame(rows, columns=["table", "status", "differences"])
