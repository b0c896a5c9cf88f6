"""Stage A encoding per CPU: the encoder benchmarks of two machines side by side, and what the
committed cpu run's encoding minutes would be on the other one (an estimate of that step only).

Reads ``encoder_bf16_cpu.json`` (the machine that made the committed run; its ``cpu`` field
names it, or the ledger does for reports that predate the field), the other machines'
``encoder_fp32_cpu.json``, and the committed run's Stage A encoding minutes from
``notebook_steps.csv``. Runs nothing heavy.

    MEMSAFE_RECORD=1 .venv/bin/python bench/encode_by_cpu.py
"""

from __future__ import annotations

import json

import pandas as pd
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.ledger import read_ledger
from memsafe_lib.reporting.timings import encode_by_cpu


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--reference", default="encoder_bf16_cpu")
    parser.add_argument("--others", nargs="+", default=["encoder_fp32_cpu"])
    args = parser.parse_args()
    scale = config.scale_config(args.scale)
    bench = scale.recorded_dir / config.BENCH
    reports = {name: json.loads((bench / f"{name}.json").read_text()) for name in [args.reference, *args.others]}
    for entry in read_ledger(scale):  # the CPU model from the ledger, where the report says only "x86_64"
        cpu = entry.get("environment", {}).get("cpu")
        for name, report in reports.items():
            if cpu and f"{scale.name}/{config.BENCH}/{name}.json" in entry.get("outputs", {}):
                report["cpu"] = cpu
    steps = pd.read_csv(bench / "notebook_steps.csv").set_index("notebook")
    table = encode_by_cpu(reports[args.reference], [reports[n] for n in args.others],
                          float(steps.loc["total", "stage_a_encode"]))
    summary = {"reference_cpu": table.cpu.iloc[0], "reference_encode_minutes": float(table.encode_minutes.iloc[0]),
               **{f"encode_minutes_{row.cpu}": float(row.encode_minutes) for row in table.iloc[1:].itertuples()}}
    save_report("encode-by-cpu", "encode_by_cpu", args, [], summary, table=table,
                inputs=[bench / f"{n}.json" for n in reports] + [bench / "notebook_steps.csv"])


if __name__ == "__main__":
    main()
