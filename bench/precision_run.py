"""Notebook 02 on one dataset in fp32 beside the committed bf16 run: what "within tolerance" means.

A reproduction on a CPU without bf16 units computes Stage A and Stage B in fp32
(``memsafe_lib.precision``), so its numbers cannot match ours to the last digit. This runs
notebook 02 at ``--scale`` on ``--dataset`` with ``MEMSAFE_BF16=0`` (fp32 everywhere) in a
separate artifact tree with empty caches (nothing committed is touched), then sets every
test metric of every (model, seed) beside the committed run's and asks ``memsafe compare``'s
question of the dataset's tables: is each difference inside k seed SDs of the reference?

    MEMSAFE_RECORD=1 .venv/bin/python bench/precision_run.py --dataset musique --tree ../fp32-run

Writes ``bench/precision_run.{csv,json}`` (one row per model, seed and metric) and a ledger
entry; the fp32 tree keeps its own ledger, executed notebook and run time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.evaluation.compare import DEFAULT_K, compare_trees
from memsafe_lib.io import read_csv

METRICS = ("unsafe_auroc", "macro_f1", "ece", "evidence_auprc", "count_mae", "aurc")


def side_by_side(bf16: pd.DataFrame, fp32: pd.DataFrame) -> pd.DataFrame:
    """Test metrics of both runs per (model, seed, metric), with the difference and the
    reference run's seed SD of that model and metric (0 for a deterministic model)."""
    keys = ["model", "seed"]
    a = bf16[bf16.split == "test"].set_index(keys)
    b = fp32[fp32.split == "test"].set_index(keys)
    rows = []
    for (model, seed), ref in a.iterrows():
        if (model, seed) not in b.index:
            raise ValueError(f"the fp32 run has no test metrics for {model} seed {seed}")
        other = b.loc[(model, seed)]
        for metric in METRICS:
            x, y = float(ref[metric]), float(other[metric])
            if np.isnan(x) and np.isnan(y):
                continue
            sd = a.loc[model, metric].std(ddof=1) if len(a.loc[model]) > 1 else 0.0
            rows.append({"model": model, "seed": int(seed), "deterministic": bool(ref["deterministic"]),
                         "metric": metric, "bf16": x, "fp32": y, "fp32_minus_bf16": y - x,
                         "seed_sd_bf16": float(sd) if np.isfinite(sd) else 0.0})
    return pd.DataFrame(rows)


def _largest(values: pd.Series) -> float:
    return float(values.abs().max()) if len(values) else 0.0


def summary(table: pd.DataFrame, k: float) -> dict[str, float | int]:
    """Largest differences, split by whether the model is deterministic, and how many learned
    values lie outside k seed SDs of the bf16 run."""
    learned = table[~table.deterministic]
    auroc = learned[learned.metric == "unsafe_auroc"]
    outside = (learned.fp32_minus_bf16.abs() > k * learned.seed_sd_bf16) & (learned.fp32_minus_bf16.abs() > 1e-6)
    return {"max_abs_diff_deterministic": _largest(table[table.deterministic].fp32_minus_bf16),
            "max_abs_diff_learned": _largest(learned.fp32_minus_bf16),
            "max_abs_diff_learned_auroc": _largest(auroc.fp32_minus_bf16),
            "mean_diff_memsafe_auroc": float(auroc[auroc.model == "memsafe"].fp32_minus_bf16.mean()),
            "learned_values": int(len(learned)), "learned_outside_k_sd": int(outside.sum())}


def run_fp32(dataset: str, scale: str, tree: Path) -> float:
    """Notebook 02 on ``dataset`` in fp32 into ``tree``; its wall minutes."""
    env = {**os.environ, "MEMSAFE_BF16": "0", "MEMSAFE_ARTIFACTS_DIR": str(tree), config.RECORD_ENV: "1"}
    code = ("from memsafe_lib import config; from memsafe_lib.notebooks import run_notebook; "
            f"run_notebook('{config.NB02_TRAINING}', config.scale_config('{scale}'), "
            f"parameters={{'datasets': ['{dataset}']}})")
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=config.REPO_ROOT)
    return (time.monotonic() - start) / 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--tree", type=Path, required=True, help="a new folder for the fp32 run's artifacts")
    parser.add_argument("--k", type=float, default=DEFAULT_K)
    args = parser.parse_args()
    tree = args.tree.resolve()
    finished = (tree / args.scale / config.LEDGER_FILE).exists()  # a finished fp32 tree is compared, not rerun
    minutes = None if finished else round(run_fp32(args.dataset, args.scale, tree), 1)
    args.tree = os.path.relpath(tree, config.REPO_ROOT)  # the ledger holds no machine paths
    folder = Path(config.EVALUATE) / args.dataset / "size-matched"
    reference = config.scale_config(args.scale).recorded_dir
    other = tree / args.scale / folder
    table = side_by_side(read_csv(reference / folder / "metrics.csv"), read_csv(other / "metrics.csv"))
    tables = compare_trees(reference / folder, other, args.k)
    report = {"dataset": args.dataset, "k": args.k, "fp32_minutes": minutes, **summary(table, args.k),
              "tables": {r.table: r.status for r in tables.itertuples()}}
    save_report("precision-run", "precision_run", args, [], report, table=table,
                inputs=[reference / folder / "metrics.csv"])
    print(tables.to_string(index=False))


if __name__ == "__main__":
    main()
