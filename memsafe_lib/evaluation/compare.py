"""Compare two artifact trees table by table: did a reproduction get our numbers?

Every CSV (``.csv`` and ``.csv.gz``) under the reference tree is read beside its namesake in
the other, timing and place columns dropped. A table is ``identical`` when equal cell for cell,
``within tolerance`` when every numeric difference lies inside what the reference run's own
seed spread allows, ``outside tolerance`` when one does not, ``differs`` when it changed and
no spread is known (text, shape, or a deterministic number beyond rounding), ``missing`` when
the other tree lacks it. A file with no columns (a table a scale did not fill) reads as an
empty table; a file that is no CSV stops the comparison with its path.

A ``config`` cell (the JSON a fit records) is compared as its settings: what the fit chose
(:data:`FIT_OUTCOME_KEYS`: early stopping's epoch, the grid point validation picked) differs
by seed and between runs as a metric does, so it neither splits the seeds nor counts as a
changed setting; the metrics it led to are held to their tolerance instead.

The tolerance of a number is ``k`` seed standard deviations (default 3), read from the
reference table itself: a column ``X`` with a sibling ``X_sd`` (a mean over seeds and its SD),
or, in a table with a ``seed`` column, the SD of ``X`` over the seeds of the row's group (the
rows that agree on every non-numeric column). Numbers with no spread (a deterministic model,
a count) must agree to rounding (:data:`ROUNDING`); an ``X_sd`` column may move by ``k`` times
its own reference value.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from memsafe_lib.estimators import baselines, lexset, memsafe
from memsafe_lib.io import read_csv

TIMING_COLUMNS: frozenset[str] = frozenset({
    "fit_seconds", "seconds", "seconds_finetune", "seconds_encode", "minutes", "finished_utc", "time_utc",
    "pairs_per_s", "useful_tokens_per_s", "train_pairs_per_s", "code",
    "cpu", "bf16_units", "bf16_mode", "cores", "fit_threads", "torch_threads",
})
"""Wall times, throughput, clock stamps, the code fingerprint and the machine (its CPU, bf16
units, precision mode, cores and thread counts): they change with the run, not the result."""


FIT_OUTCOME_KEYS: frozenset[str] = frozenset({"best_epoch"} | {
    key for grid in (lexset.GRID, lexset.LOGISTIC_GRID, baselines.C_GRID, memsafe.RelevanceAggregation.grid)
    for point in grid for key in point})
"""Keys of a ``config`` cell that a fit chose (early stopping, selection on validation), not set."""


def fit_settings(cell: object) -> object:
    """A ``config`` cell without what the fit chose, as canonical JSON; any other cell as it is."""
    if not isinstance(cell, str) or not cell.startswith("{"):
        return cell
    try:
        settings = json.loads(cell)
    except json.JSONDecodeError:
        return cell
    return json.dumps({k: v for k, v in settings.items() if k not in FIT_OUTCOME_KEYS}, sort_keys=True)


def read_table(path: Path) -> pd.DataFrame:
    """The table at ``path``: empty where the file has no columns, an error naming it where it is no CSV."""
    try:
        frame = read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as exc:
        raise ValueError(f"{path}: not a CSV table ({exc})") from exc
    if "config" in frame.columns:
        frame["config"] = frame["config"].map(fit_settings)
    return frame


def tables(root: Path) -> list[Path]:
    """CSV tables under ``root`` (relative paths), caches and scratch excluded."""
    found = [*root.rglob("*.csv"), *root.rglob("*.csv.gz")]
    return sorted(p.relative_to(root) for p in found if ".cache" not in p.parts and "scratch" not in p.parts)


ROUNDING = 1e-6
"""Largest difference still read as the same number written twice (CSV round-off)."""
DEFAULT_K = 3.0


def spread(frame: pd.DataFrame, column: str) -> np.ndarray | None:
    """Per row, the seed SD behind ``column`` in the reference table, or None where unknown."""
    if f"{column}_sd" in frame.columns:
        return pd.to_numeric(frame[f"{column}_sd"], errors="coerce").fillna(0.0).to_numpy(float)
    if "seed" in frame.columns:
        keys = [c for c in frame.columns if c != "seed" and not pd.api.types.is_numeric_dtype(frame[c])]
        values = pd.to_numeric(frame[column], errors="coerce")
        grouped = values.groupby([frame[k].astype(str) for k in keys]) if keys else values.groupby(lambda _: 0)
        return grouped.transform(lambda x: x.std(ddof=1) if x.notna().sum() > 1 else 0.0).fillna(0.0).to_numpy(float)
    return None


def compare_table(before: pd.DataFrame, after: pd.DataFrame,
                  k: float = DEFAULT_K) -> tuple[str, dict[str, tuple[float | None, float | None]]]:
    """(status, {differing column: (max abs difference or None for text, the largest
    tolerance exceeded or allowed, None where no spread is known)})."""
    keep = [c for c in before.columns if c not in TIMING_COLUMNS]
    if list(after.columns.drop(list(TIMING_COLUMNS & set(after.columns)))) != keep or len(before) != len(after):
        return "differs", {"<shape or columns>": (None, None)}
    diffs: dict[str, tuple[float | None, float | None]] = {}
    outside = unexplained = False
    for column in keep:
        a, b = before[column], after[column]
        if a.equals(b):
            continue
        if not (pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b)):
            diffs[column] = (None, None)
            unexplained = True
            continue
        x, y = a.to_numpy(float), b.to_numpy(float)
        if (np.isnan(x) != np.isnan(y)).any():
            diffs[column] = (float("nan"), None)
            unexplained = True
            continue
        gap = np.where(np.isnan(x), 0.0, np.abs(x - y))
        if gap.max(initial=0.0) <= ROUNDING:
            continue
        # an SD is itself measured over seeds: it may move by k times its own size
        sd = spread(before, column) if not column.endswith("_sd") else np.nan_to_num(x)
        allowed = np.maximum(k * sd, ROUNDING) if sd is not None else None
        if allowed is None or not (sd > 0).any():
            diffs[column] = (float(gap.max()), None)
            unexplained = True
            continue
        over = gap > allowed
        # the row that breaks its tolerance most, else the largest difference, with its tolerance
        worst = int(np.argmax(gap - allowed)) if over.any() else int(np.argmax(gap))
        diffs[column] = (float(gap[worst]), float(allowed[worst]))
        outside |= bool(over.any())
    if not diffs:
        return "identical", diffs
    if unexplained:
        return "differs", diffs
    return ("outside tolerance" if outside else "within tolerance"), diffs


def _detail(diffs: dict[str, tuple[float | None, float | None]]) -> str:
    parts = []
    for column, (gap, allowed) in diffs.items():
        if gap is None:
            parts.append(f"{column}: text or shape")
        elif allowed is None:
            parts.append(f"{column}: max |diff| {gap:.3g}, no seed spread")
        else:
            parts.append(f"{column}: max |diff| {gap:.3g} (tolerance {allowed:.3g})")
    return "; ".join(parts)


def compare_trees(before: Path, after: Path, k: float = DEFAULT_K) -> pd.DataFrame:
    """One row per table of ``before`` (the reference): status and what differs in ``after``."""
    rows = []
    for rel in tables(before):
        if not (after / rel).exists():
            rows.append({"table": rel.as_posix(), "status": "missing", "differences": ""})
            continue
        status, diffs = compare_table(read_table(before / rel), read_table(after / rel), k)
        rows.append({"table": rel.as_posix(), "status": status, "differences": _detail(diffs)})
    return pd.DataFrame(rows, columns=["table", "status", "differences"])
