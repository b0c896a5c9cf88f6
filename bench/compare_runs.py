"""`memsafe compare` of an earlier run's tree (the reference) against this checkout's
``artifacts/<scale>/``: every table's verdict, the count per verdict, and both runs' code
fingerprints and CPUs (from each tree's ``run_times.csv``), so the docs can show what a
reproduction on another machine looks like with measured numbers. Runs nothing heavy.

    git worktree add ../earlier <commit>
    MEMSAFE_RECORD=1 .venv/bin/python bench/compare_runs.py --reference ../earlier/artifacts/cpu
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.evaluation.compare import DEFAULT_K, compare_trees
from memsafe_lib.io import read_csv


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", type=Path, required=True, help="the earlier run's artifacts/<scale>/")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--k", type=float, default=DEFAULT_K)
    args = parser.parse_args()
    if not args.reference.is_dir():
        parser.error(f"--reference {args.reference} is not a folder of artifacts")
    other = config.scale_config(args.scale).recorded_dir
    table, summary = verdicts(args.reference, other, args.k)
    save_report("compare-runs", "compare_previous_run", args, [], summary, table=table,
                inputs=[p for p in (args.reference / "run_times.csv", other / "run_times.csv") if p.is_file()])


if __name__ == "__main__":
    main()
