"""How many of Stage B's 30 epochs matter: every epoch's validation score of the fits a cpu
reproduction makes, and what stopping after ``P`` epochs without improvement would change.

Stage B trains 30 epochs and keeps the epoch with the best validation (AUROC, macro F1); on
MuSiQue the best epoch came early (``bench/stage_b_parallel.py``), so most epochs may be
spent after it. This fits MemSafe and the mean-pooling comparator on the three QA datasets
and MemSafe on the clinical outpatient records (three seeds, the selected Stage B point, the
scale's cached Stage A encodings), records each epoch's validation scores, and replays
patience ``P``: the epoch it would keep, whether that differs from the 30-epoch choice, the
validation AUROC given up, and the share of epochs it runs. Validation only; test is never
read. Reads the caches notebooks 02 and 07 leave (run them first).

Rule, fixed before the first run: adopt the smallest ``P`` that changes the kept epoch of at
most one fit in ten and gives up less than 0.002 validation AUROC on average, on the QA fits
and on the clinical fits separately; if none does, keep 30 full epochs.

    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_b_patience.py
"""

from __future__ import annotations

import argparse
import functools
import time
from dataclasses import replace
from typing import Any

import pandas as pd
from cached_inputs import StageBInputs, stage_b_inputs  # bench/cached_inputs.py
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.estimators.memsafe import MemSafe
from memsafe_lib.estimators.setmodel import SetModelConfig
from memsafe_lib.parallel import side_by_side
from memsafe_lib.threads import configure_threads

PATIENCE = (3, 5, 8, 10, 15)
QA = ("musique", "hotpotqa", "2wikimultihopqa")


@functools.cache  # a worker fits several seeds of a dataset: load its inputs once
def _inputs(scale_name: str, dataset: str, construction: str) -> StageBInputs:
    return stage_b_inputs(dataset, config.scale_config(scale_name), construction)


def fit_curve(scale_name: str, task: tuple[str, str, str, int]) -> dict[str, Any]:
    """One 30-epoch fit's validation curve (a worker's task)."""
    dataset, construction, model, seed = task
    got = _inputs(scale_name, dataset, construction)
    encodings, splits, point = got.encodings, got.splits, got.point
    scale = config.scale_config(scale_name)
    base = replace(SetModelConfig(epochs=scale.neural.stage_b_epochs, bf16=scale.neural.stage_b_bf16), **point,
                   attention=model == "memsafe")
    start = time.perf_counter()
    fitted = MemSafe(encodings, seed, base, name=model).fit(splits["train"], splits["validation"])
    assert fitted.log is not None
    return {"dataset": dataset, "model": model, "seed": seed, "fit_seconds": round(time.perf_counter() - start, 1),
            "train_memories": len(splits["train"]), "best_epoch": fitted.log.best_epoch,
            "auroc": [e["validation_auroc"] for e in fitted.log.epochs],
            "macro_f1": [e["validation_macro_f1"] for e in fitted.log.epochs], "raw_files": got.raw_files}


def replay(auroc: list[float], macro_f1: list[float], patience: int | None) -> tuple[int, int]:
    """(kept epoch, epochs run), both 1-based, under the training loop's rule (a strictly
    better (AUROC, macro F1) is an improvement) stopped after ``patience`` epochs without one."""
    best, kept = None, 0
    for epoch, key in enumerate(zip(auroc, macro_f1, strict=True), start=1):
        if best is None or key > best:
            best, kept = key, epoch
        elif patience is not None and epoch - kept >= patience:
            return kept, epoch
    return kept, len(auroc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--seeds", type=int, nargs="+", default=[17, 29, 43])
    parser.add_argument("--clinical", default="mimic-omr")
    args = parser.parse_args()
    configure_threads()
    tasks = [(d, "size-matched", m, s) for d in QA for m in ("memsafe", "mean_pool") for s in args.seeds]
    tasks += [(args.clinical, "clinical", "memsafe", s) for s in args.seeds]
    fits = side_by_side(fit_curve, tasks, args.scale, label="Stage B curves")
    raw = {f.path: f for fit in fits for f in fit.pop("raw_files")}
    rows = []
    for fit in fits:
        full_epoch, _ = replay(fit["auroc"], fit["macro_f1"], None)
        assert full_epoch == fit["best_epoch"], fit  # the replay is the training loop's rule
        row = {k: v for k, v in fit.items() if k not in {"auroc", "macro_f1"}}
        row["best_auroc"] = fit["auroc"][full_epoch - 1]
        for p in PATIENCE:
            kept, ran = replay(fit["auroc"], fit["macro_f1"], p)
            row[f"kept_p{p}"], row[f"epochs_p{p}"] = kept, ran
            row[f"auroc_lost_p{p}"] = row["best_auroc"] - fit["auroc"][kept - 1]
        row["kind"] = "clinical" if fit["dataset"] == args.clinical else "qa"
        row["curve"] = " ".join(f"{a:.4f}" for a in fit["auroc"])
        rows.append(row)
    table = pd.DataFrame(rows)
    epochs = len(fits[0]["auroc"])
    report: dict[str, Any] = {"scale": args.scale, "seeds": args.seeds, "fits": len(fits), "epochs": epochs}
    for p in PATIENCE:
        for kind, part in [("all", table), *table.groupby("kind")]:
            report[f"p{p}_{kind}_changed"] = int((part[f"kept_p{p}"] != part.best_epoch).sum())
            report[f"p{p}_{kind}_auroc_lost_mean"] = round(float(part[f"auroc_lost_p{p}"].mean()), 5)
            report[f"p{p}_{kind}_auroc_lost_max"] = round(float(part[f"auroc_lost_p{p}"].max()), 5)
            report[f"p{p}_{kind}_epoch_share"] = round(float(part[f"epochs_p{p}"].sum() / (epochs * len(part))), 4)
    save_report("stage-b-patience", "stage_b_patience", args, list(raw.values()), report, table)


if __name__ == "__main__":
    main()
