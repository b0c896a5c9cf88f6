"""Minutes per notebook and per heavy step of a scale's committed runs (the REPORT's time table).

Reads each executed notebook's progress lines and ``run_times.csv`` under artifacts/<scale>/
(see memsafe_lib/reporting/timings.py); runs nothing heavy. The thread counts each notebook
ran with are in the table: timings at one torch thread (a run beside other work) are not
comparable with timings at two.

    MEMSAFE_RECORD=1 .venv/bin/python bench/notebook_steps.py --scale cpu
"""

from __future__ import annotations

from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.reporting.timings import STEP_COLUMNS, time_table


def main() -> None:
    parser = bench_parser(__doc__)
    args = parser.parse_args()
    run_dir = config.scale_config(args.scale).recorded_dir
    table = time_table(run_dir)
    total = table.set_index("notebook").loc["total"]
    report = {"minutes_total": float(total.minutes),
              **{f"minutes_{c}": float(total[c]) for c in (*STEP_COLUMNS, "other")}}
    inputs = [run_dir / "run_times.csv",
              *(run_dir / n / f"{n}.ipynb" for n in table.notebook if n != "total")]
    save_report("notebook-steps", "notebook_steps", args, [], report, table=table, inputs=inputs)


if __name__ == "__main__":
    main()
