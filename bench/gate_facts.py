"""What a user's first gate is made of, so the README states it from a run: the gate of the
quick start (``memsafe train --dataset musique --scale smoke``) or any other, with its base
questions and memories per split, its window, its test AUROC and ECE per dataset (raw and
calibrated, without provenance), the minutes it took to train, its size on disk and the size of
the caches training it left behind.

    MEMSAFE_RECORD=1 .venv/bin/python bench/gate_facts.py --gate-scale smoke --dataset musique

The row is written with the committed benchmarks (``--scale``, default cpu), whatever scale
the gate is trained at. A gate whose directory holds the scale's current budget is reused
(its minutes are then 0); for a cold measurement start without it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from gate_comparison import gate_for  # bench/gate_comparison.py (scripts run from bench/)
from report import bench_parser, save_report  # bench/report.py

from memsafe_lib.config import scale_config
from memsafe_lib.gate import gate_datasets
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.store import build


def megabytes(paths: list[Path]) -> float:
    return round(sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*"))
                     if f.is_file()) / 2**20, 1)


def test_calibration(gate_config: dict, datasets: tuple[str, ...]) -> dict[str, float]:
    """Per dataset the gate's own test AUROC and ECE, raw and temperature-scaled, on memories
    without provenance (as an agent calls it), read from what ``memsafe train`` stored: the
    paper reports ECE 0.0128 for MemSafe on MuSiQue, and a user asks how far a gate is from it."""
    metrics = gate_config["metrics"]
    blocks = metrics["per_dataset"] if len(datasets) > 1 else {datasets[0]: metrics}
    out: dict[str, float] = {}
    for d in datasets:
        test = blocks[d]["test_without_provenance"]
        out[f"test_auroc_{d}"] = round(float(test["unsafe_auroc"]), 4)
        out[f"test_ece_raw_{d}"] = round(float(test["ece"]), 4)
        out[f"test_ece_calibrated_{d}"] = round(float(test["ece_calibrated"]), 4)
    return out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--gate-scale", default="smoke")
    parser.add_argument("--dataset", default="musique", help="one QA dataset or several, comma-separated")
    args = parser.parse_args()
    configure_threads()
    gate_scale = scale_config(args.gate_scale)
    datasets = gate_datasets(args.dataset)
    seed = gate_scale.seeds[0]
    path, minutes = gate_for(datasets, gate_scale, seed)
    gate_config = json.loads((path / "config.json").read_text())
    row: dict[str, object] = {"gate_scale": gate_scale.name, "gate": "+".join(datasets),
                              "window_tokens": gate_config["training"]["budget"]["max_length"]}
    files = []
    variants = []
    for d in datasets:
        loaded, result = build(d, "size-matched", gate_scale)
        files += loaded.files
        variants += result.variants
    for split in ("train", "validation", "test"):
        members = [v for v in variants if v.split == split]
        row[f"{split}_questions"] = len({(v.dataset, v.base_id) for v in members})
        row[f"{split}_memories"] = len(members)
    row.update(test_calibration(gate_config, datasets))
    row["minutes_to_train"] = round(minutes, 1)
    row["gate_mb"] = megabytes([path])
    caches = [p for p in gate_scale.recorded_dir.rglob(".cache") if p.is_dir()]
    row["cache_mb"] = megabytes([p for p in caches if not any(q.name == ".cache" for q in p.parents)])
    table = pd.DataFrame([row])
    name = f"gate_facts_{gate_scale.name}_{row['gate']}"
    save_report("gate_facts", name, args, files, row, table=table)


if __name__ == "__main__":
    main()
