"""The clinical construction checked by its surface controls alone, before any model is trained:
each table setting of a scale built, and the controls (majority, paragraph count, text length,
provenance, measurement-blind recency) and the recency rule fitted on train and scored on every
split. Deterministic and cheap (about a minute at cpu): notebook 07 reports the same controls
beside MemSafe and LexSet, and this says first whether the construction leaks.

    MEMSAFE_RECORD=1 .venv/bin/python bench/clinical_controls.py --scale cpu
"""

from __future__ import annotations

import argparse

import pandas as pd
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.estimators.registry import make_model
from memsafe_lib.measures.metrics import unsafe_auroc
from memsafe_lib.reporting.clinical import CHANCE_BAND, CONTROLS, control_table
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.store import build

MODELS = (*CONTROLS, "clinical_rule")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    args = parser.parse_args()
    configure_threads()
    scale = config.scale_config(args.scale)
    rows, raw = [], {}
    for setting in scale.clinical.settings:
        loaded, result = build(setting.dataset, "clinical", scale, clinical=setting)
        raw.update({f.path: f for f in loaded.files})
        splits = {s: [v for v in result.variants if v.split == s] for s in ("train", "validation", "test")}
        for model in MODELS:
            fitted = make_model(model, config.DEFAULT_SEED).fit(splits["train"], splits["validation"])
            for split, variants in splits.items():
                preds = fitted.predict(variants)
                rows.append({"dataset": setting.dataset, "construction": setting.construction, "model": model,
                             "seed": config.DEFAULT_SEED, "split": split, "n_variants": len(variants),
                             "unsafe_auroc": unsafe_auroc([v.unsafe for v in variants], preds.unsafe_prob)})
    metrics = pd.DataFrame(rows)
    table = control_table(metrics, scale.clinical.settings, MODELS)
    train = metrics[metrics.split == "train"].set_index(["dataset", "construction", "model"]).unsafe_auroc
    table.insert(table.columns.get_loc("validation_auroc"), "train_auroc",
                 [train[key] for key in zip(table.dataset, table.construction, table.model, strict=True)])
    controls = table[table.role == "control"]
    summary = {"settings": len(scale.clinical.settings), "chance_band": list(CHANCE_BAND),
               "controls_within_band": bool(controls.within_chance.all()),
               "max_control_distance_from_half": float((controls.test_auroc - 0.5).abs().max())}
    save_report("clinical-controls", "clinical_controls", args, list(raw.values()), summary, table=table)


if __name__ == "__main__":
    main()
