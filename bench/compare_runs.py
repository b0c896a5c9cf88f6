"""`memsafe compare` of an earlier run's tree (the reference) against this checkout's
``artifacts/<scale>/``: every table's verdict, the count per verdict, and both runs' code
fingerprints and CPUs (from each tree's ``run_times.csv``), so the docs can show what a
reproduction on another machine looks like with measured numbers; and, in
``compare_previous_run_models.csv``, which models moved each ``metrics.csv`` that moved.
Runs nothing heavy.

    git worktree add ../earlier <commit>
    MEMSAFE_RECORD=1 .venv/bin/python bench/compare_runs.py --reference ../earlier/artifacts/cpu
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.evaluation.compare import DEFAULT_K, TIMING_COLUMNS, compare_trees
from memsafe_lib.io import read_csv, sha256_file


def run_identity(tree: Path) -> dict[str, str]:
    """The code fingerprints (12 hex) and CPUs a tree's notebooks ran on, ';'-joined where several."""
    times = tree / "run_times.csv"
    if not times.is_file():
        return {"code": "", "cpu": ""}
    frame = read_csv(times)
    return {column: ";".join(sorted({str(v) for v in frame[column].dropna()})) if column in frame else ""
            for column in ("code", "cpu")}


def verdicts(reference: Path, other: Path, k: float = DEFAULT_K) -> tuple[pd.DataFrame, dict[str, object]]:
    """(one row per reference table, the summary: counts per verdict and both runs' identities)."""
    table = compare_trees(reference, other, k)
    counts = table["status"].value_counts()
    ref, new = run_identity(reference), run_identity(other)
    summary: dict[str, object] = {
        "tables": int(len(table)), "k": k,
        **{f"n_{status.replace(' ', '_')}": int(counts.get(status, 0))
           for status in ("identical", "within tolerance", "outside tolerance", "differs", "missing")},
        "reference_code": ref["code"], "reference_cpu": ref["cpu"], "code": new["code"], "cpu": new["cpu"],
    }
    return table, summary


ROW_KEYS = ("dataset", "construction", "model", "seed", "split")
"""The columns that name a row of a ``metrics.csv`` (those a table has)."""


def models_moved(reference: Path, other: Path, atol: float = 1e-6) -> pd.DataFrame:
    """Per ``metrics.csv`` in both trees, every model with a metric that changed (wall times and
    the machine ignored): which rows (model x seed x split) and columns moved, and by how much.
    A table's verdict says that it moved; this says which model moved it."""
    rows = []
    for path in sorted(reference.rglob("metrics.csv")):
        name = path.relative_to(reference).as_posix()
        if not (other / name).is_file():
            continue
        old, new = read_csv(path), read_csv(other / name)
        keys = [c for c in ROW_KEYS if c in old.columns and c in new.columns]
        if "model" not in keys:  # not a per-model table
            continue
        values = [c for c in old.columns if c in new.columns and c not in TIMING_COLUMNS and c not in keys
                  and pd.api.types.is_float_dtype(old[c]) and pd.api.types.is_float_dtype(new[c])]
        both = old[keys + values].merge(new[keys + values], on=keys, suffixes=("_old", "_new"))
        changed = pd.DataFrame({c: ~np.isclose(both[f"{c}_old"], both[f"{c}_new"], rtol=0, atol=atol, equal_nan=True)
                                for c in values})
        gaps = pd.DataFrame({c: (both[f"{c}_old"] - both[f"{c}_new"]).abs() for c in values})
        for model, index in both.groupby("model").groups.items():
            moved = changed.loc[index]
            if not moved.to_numpy().any():
                continue
            columns = [c for c in values if moved[c].any()]
            rows.append({"table": name, "model": model, "rows_moved": int(moved.any(axis=1).sum()), "rows": len(index),
                         "columns": ", ".join(columns), "max_abs_diff": float(gaps.loc[index, columns].max().max())})
    return pd.DataFrame(rows, columns=["table", "model", "rows_moved", "rows", "columns", "max_abs_diff"])


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--reference", type=Path, required=True, help="the earlier run's artifacts/<scale>/")
    parser.add_argument("--k", type=float, default=DEFAULT_K)
    args = parser.parse_args()
    if not args.reference.is_dir():
        parser.error(f"--reference {args.reference} is not a folder of artifacts")
    other = config.scale_config(args.scale).recorded_dir
    table, summary = verdicts(args.reference, other, args.k)
    # the reference tree lies outside this checkout: its run_times.csv is named by its hash in the
    # summary, since a ledger input outside the checkout would be keyed by this machine's path
    reference_times = args.reference / "run_times.csv"
    if reference_times.is_file():
        summary["reference_run_times_sha256"] = sha256_file(reference_times)
    inputs = [p for p in (other / "run_times.csv",) if p.is_file()]
    save_report("compare-runs", "compare_previous_run", args, [], summary, table=table, inputs=inputs)
    moved = models_moved(args.reference, other)
    save_report("compare-runs-models", "compare_previous_run_models", args, [],
                {"metrics_tables_moved": int(moved["table"].nunique()),
                 "models_moved": ", ".join(sorted(set(moved["model"])))}, table=moved, inputs=inputs)


if __name__ == "__main__":
    main()
