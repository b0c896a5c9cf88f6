"""Stage B in fp32 against bf16 autocast: fit minutes and validation AUROC, same seeds and encodings.

MemSafe's own fits are the largest cost of a cpu reproduction (bench/notebook_steps.py), and
a machine with bf16 matrix units runs them much faster in bf16. Whether to do so is decided
here on MuSiQue *validation* only (test is never read): every seed is fitted both ways at
the Stage B point notebook 02 selected, on the scale's cached Stage A encodings.

    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_b_precision.py --dataset musique
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


def main() -> None:
    args, torch_threads, scale, inputs, labels = seed_comparison(__doc__.splitlines()[0])
    encodings, splits, point = inputs.encodings, inputs.splits, inputs.point
    validation = splits["validation"]
    base = SetModelConfig(epochs=scale.neural.stage_b_epochs, **point)
    rows = []
    for seed in args.seeds:
        for bf16 in (False, True):
            start = time.perf_counter()
            model = MemSafe(encodings, seed, replace(base, bf16=bf16)).fit(splits["train"], validation)
            seconds = time.perf_counter() - start
            pred = model.predict(validation)
            rows.append({"seed": seed, "precision": "bf16" if bf16 else "fp32", "fit_minutes": round(seconds / 60, 2),
                         "validation_auroc": unsafe_auroc([v.unsafe for v in validation], pred.unsafe_prob),
                         "validation_macro_f1": macro_f1([v.state for v in validation], list(pred.state), labels),
                         "best_epoch": model.log.best_epoch if model.log else None})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    by = table.groupby("precision")
    report = {"dataset": args.dataset, "seeds": args.seeds, "torch_threads": torch_threads, "point": point,
              "train_memories": len(splits["train"]), "validation_memories": len(validation),
              "speedup": float(by.fit_minutes.mean()["fp32"] / by.fit_minutes.mean()["bf16"]),
              "validation_auroc_fp32": float(by.validation_auroc.mean()["fp32"]),
              "validation_auroc_bf16": float(by.validation_auroc.mean()["bf16"]),
              "validation_auroc_sd_fp32": float(np.std(table[table.precision == "fp32"].validation_auroc, ddof=1))
              if len(args.seeds) > 1 else 0.0}
    save_report("stage-b-precision", f"stage_b_precision_{args.dataset}", args, inputs.raw_files, report, table=table)


if __name__ == "__main__":
    main()
