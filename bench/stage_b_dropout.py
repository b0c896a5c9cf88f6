"""Stage B with torch's dropout against MaskDropout: fit minutes and validation AUROC, same seeds,
encodings and precision, both in one run on one machine.

A profile of a Stage B training step on CPU put torch's dropout (one Bernoulli draw per
element) at about a quarter of the step; MaskDropout draws one 64-bit word per four elements.
The masks differ, so the fits differ by seed-level noise: this reports the change in
validation AUROC beside the seed spread (test is never read), at the Stage B point notebook 02
selected, on the scale's cached Stage A encodings (run notebook 02 first).

    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_b_dropout.py --dataset musique
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd
from cached_inputs import seed_comparison  # bench/cached_inputs.py
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.estimators.memsafe import MemSafe
from memsafe_lib.estimators.setmodel import SetModelConfig
from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc

DROPOUTS = {"torch": False, "mask": True}
"""Report label -> SetModelConfig.mask_dropout."""


def main() -> None:
    args, torch_threads, scale, inputs, labels = seed_comparison(__doc__.splitlines()[0])
    encodings, splits, point = inputs.encodings, inputs.splits, inputs.point
    validation = splits["validation"]
    base = SetModelConfig.for_budget(scale.neural, **point)
    rows = []
    for seed in args.seeds:
        for label, mask in DROPOUTS.items():  # alternated, so drifts in machine speed hit both
            start = time.perf_counter()
            model = MemSafe(encodings, seed, replace(base, mask_dropout=mask)).fit(splits["train"], validation)
            seconds = time.perf_counter() - start
            pred = model.predict(validation)
            log = model.log
            epochs = len(log.epochs) if log else 0
            rows.append({"seed": seed, "dropout": label, "fit_minutes": round(seconds / 60, 2), "epochs": epochs,
                         "seconds_per_epoch": round(seconds / max(epochs, 1), 2),
                         "validation_auroc": unsafe_auroc([v.unsafe for v in validation], pred.unsafe_prob),
                         "validation_macro_f1": macro_f1([v.state for v in validation], list(pred.state), labels),
                         "best_epoch": log.best_epoch if log else None})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    by = table.groupby("dropout")
    per_epoch = by.seconds_per_epoch.mean()
    auroc = table.pivot(index="seed", columns="dropout", values="validation_auroc")
    report = {"dataset": args.dataset, "seeds": args.seeds, "torch_threads": torch_threads, "point": point,
              "bf16": base.bf16, "patience": base.patience, "max_epochs": base.epochs,
              "train_memories": len(splits["train"]), "validation_memories": len(validation),
              "speedup_per_epoch": float(per_epoch["torch"] / per_epoch["mask"]),
              "validation_auroc_torch": float(auroc["torch"].mean()),
              "validation_auroc_mask": float(auroc["mask"].mean()),
              "validation_auroc_sd_torch": float(np.std(auroc["torch"], ddof=1)) if len(args.seeds) > 1 else 0.0,
              "validation_auroc_mean_change": float((auroc["mask"] - auroc["torch"]).mean())}
    save_report("stage-b-dropout", f"stage_b_dropout_{args.dataset}", args, inputs.raw_files, report, table=table)


if __name__ == "__main__":
    main()
