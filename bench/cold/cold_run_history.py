"""Keep every adopted cold run's time table, so the next one can be set beside it.

``cold_run.csv`` holds the adopted run only; adopting a new one overwrites it. Run this before
and after an adoption (``bench/cold/cold_lib.sh`` does) to append the table's rows, one per notebook
and a last ``all``, to ``artifacts/<scale>/bench/cold_run_history.csv``, keyed by the run's
code fingerprint and CPU (a run already kept is replaced, not doubled):

    cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python cold_run_history.py --scale cpu
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from memsafe_lib import config
from memsafe_lib.io import read_csv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: report.py, the shared tail
from report import bench_parser, save_report  # noqa: E402


def add_run(history: pd.DataFrame | None, cold: pd.DataFrame) -> pd.DataFrame:
    """``history`` with ``cold``'s rows in place of any earlier rows of the same run, which the
    ``all`` row names (its code fingerprint and CPU)."""
    total = cold[cold.notebook == "all"]
    if len(total) != 1:
        raise SystemExit("cold_run.csv has no single 'all' row: not a cold run's table")
    run = f"{total.code.iloc[0]} on {total.cpu.iloc[0]}"
    rows = cold.assign(run=run)[["run", *cold.columns]]
    if history is None or history.empty:
        return rows.reset_index(drop=True)
    return pd.concat([history[history.run != run], rows], ignore_index=True)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--if-present", action="store_true", help="do nothing when no cold run was adopted yet")
    args = parser.parse_args()
    bench = config.scale_config(args.scale).output_dir(config.BENCH)
    cold_path, history_path = bench / "cold_run.csv", bench / "cold_run_history.csv"
    if not cold_path.is_file() and args.if_present:
        return
    if not cold_path.is_file():
        raise SystemExit(f"{cold_path} is missing: adopt a cold run (bench/cold/cold_run.sh) first")
    history = add_run(read_csv(history_path) if history_path.is_file() else None, read_csv(cold_path))
    save_report("cold-run-history", "cold_run_history", args, [], {"runs": int(history.run.nunique())},
                table=history, inputs=[cold_path])


if __name__ == "__main__":
    main()
