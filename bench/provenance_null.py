"""Does provenance carry the integrity state on size-matched memories? The provenance-only
control against a null that has no state signal by design.

The control reads the kept units' source positions (mean, spread, extremes, gaps), the memory's
size and |M|/|H|. Under size matching a question's three memories keep different source slots
(a missing memory drops the evidence's, a complete one distractors'), so these statistics vary
within a question even when they say nothing about its state; a classifier that then stops
predicting one class scores a macro F1 near 1/3 on three balanced states by chance (majority:
1/6). The null keeps every feature and permutes the states among each question's memories
(train and test alike, ``--permutations`` draws): what the control scores there is what
within-question variation alone buys. Also: how well a unit's normalised source position tells
evidence from distractors (AUROC over the units of complete memories; 1/2: evidence sits where
distractors sit).

    MEMSAFE_RECORD=1 .venv/bin/python bench/provenance_null.py --scale cpu
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace

import numpy as np
import pandas as pd
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.config import FAMILY_A_DATASETS, scale_config
from memsafe_lib.estimators.controls import CONTROLS, Estimator
from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import STATES, Variant
from memsafe_lib.variants.store import build


def scores(control: Estimator, variants: list[Variant]) -> tuple[float, float]:
    """Test unsafe AUROC and macro F1 of ``control`` fitted on the training split."""
    train = [v for v in variants if v.split == "train"]
    test = [v for v in variants if v.split == "test"]
    preds = control.fit(train).predict(test)
    return (unsafe_auroc([v.unsafe for v in test], preds.unsafe_prob),
            macro_f1([v.state for v in test], list(preds.state), list(STATES)))


def permuted_states(variants: list[Variant], draw: int) -> list[Variant]:
    """The same memories with each question's states shuffled among its memories."""
    rng = np.random.default_rng(draw)
    by_question: dict[str, list[Variant]] = defaultdict(list)
    for v in variants:
        by_question[v.base_id].append(v)
    out = []
    for base in sorted(by_question):
        group = by_question[base]
        states = [v.state for v in group]
        rng.shuffle(states)
        out += [replace(v, state=s) for v, s in zip(group, states, strict=True)]
    return out


def position_auroc(variants: list[Variant]) -> float:
    """Evidence vs distractor units of complete memories, scored by normalised source position."""
    pos, evidence = [], []
    for v in variants:
        if not v.unsafe:
            for u in v.units:
                pos.append(u.source_position / max(v.source_units - 1, 1))
                evidence.append(u.is_evidence)
    return unsafe_auroc(evidence, pos)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--datasets", nargs="+", default=list(FAMILY_A_DATASETS))
    parser.add_argument("--permutations", type=int, default=100)
    args = parser.parse_args()
    configure_threads()
    rows, files = [], []
    for dataset in args.datasets:
        loaded, result = build(dataset, "size-matched", scale_config(args.scale))
        files += list(loaded.files)
        variants = list(result.variants)
        auroc, f1 = scores(CONTROLS["provenance_only"](), variants)
        null = np.array([scores(CONTROLS["provenance_only"](), permuted_states(variants, d))
                         for d in range(args.permutations)])
        majority = scores(CONTROLS["majority"](), variants)[1]
        rows.append({"dataset": dataset, "test_unsafe_auroc": round(auroc, 4), "test_macro_f1": round(f1, 4),
                     "majority_macro_f1": round(majority, 4),
                     "null_auroc_mean": round(float(null[:, 0].mean()), 4),
                     "null_auroc_lo": round(float(np.percentile(null[:, 0], 2.5)), 4),
                     "null_auroc_hi": round(float(np.percentile(null[:, 0], 97.5)), 4),
                     "null_macro_f1_mean": round(float(null[:, 1].mean()), 4),
                     "null_macro_f1_lo": round(float(np.percentile(null[:, 1], 2.5)), 4),
                     "null_macro_f1_hi": round(float(np.percentile(null[:, 1], 97.5)), 4),
                     "share_null_f1_at_least_observed": round(float((null[:, 1] >= f1).mean()), 3),
                     "evidence_position_auroc": round(position_auroc(variants), 4),
                     "permutations": args.permutations})
        print(rows[-1], flush=True)
    save_report("provenance_null", "provenance_null", args, files, {"rows": rows}, table=pd.DataFrame(rows))


if __name__ == "__main__":
    main()
