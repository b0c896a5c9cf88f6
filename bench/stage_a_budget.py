"""Where the cpu budget for Stage A buys most: fine-tune one fold encoder per setting and score
its relevance logits on MuSiQue *validation* pairs (per-unit evidence AUROC and AUPRC, plain
and bridge pairs), with the cost in minutes. One row per point tried, every point kept.

    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_a_budget.py --dataset musique

The encoder is fine-tuned on training fold 0 exactly as Stage A does (hash fold, balanced cap,
plain and bridge pairs); validation memories are never trained on. Choosing the cpu scale's
point from this table uses validation only; the test split is not read. Each finished point
is cached (``.cache/stage_a_budget_<dataset>/``, keyed by the point, budget, threads and code), so
a killed run resumes at the next point.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.config import scale_config
from memsafe_lib.encodings.encoders import CrossEncoder, EncoderConfig, encode_pairs, make_ranker, variant_pairs
from memsafe_lib.encodings.finetune import FinetuneConfig, finetune, training_pairs
from memsafe_lib.io import write_json
from memsafe_lib.ledger import code_fingerprint
from memsafe_lib.measures.metrics import average_precision, unsafe_auroc
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import by_split, train_fold
from memsafe_lib.variants.store import build

POINTS: dict[str, dict[str, object]] = {
    "cpu scale today (4k pairs; 128 tok; lr 1e-4)": {},
    "8k pairs": {"max_pairs": 8000},
    "256 tokens": {"max_length": 256},
    "lr 3e-5": {"lr": 3e-5},
    "2 epochs over 2k pairs": {"max_pairs": 2000, "epochs": 2},
    "top 2 layers; 12k pairs": {"max_pairs": 12000, "train_layers": 2},
    "top 3 layers; 8k pairs": {"max_pairs": 8000, "train_layers": 3},
}
"""Settings tried, as overrides of the cpu scale's budget (pairs per fold, tokens, learning
rate, epochs, trainable layers)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--points", nargs="+", default=list(POINTS), choices=list(POINTS), metavar="POINT",
                        help=f"names of POINTS to run (default all: {', '.join(map(repr, POINTS))})")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    configure_threads()
    scale = scale_config(args.scale)
    budget = scale.neural
    loaded, result = build(args.dataset, "size-matched", scale)
    splits = by_split(result.variants)
    train0 = [v for v in splits["train"] if train_fold(v.base_id) == 0]
    validation = splits["validation"]
    cache = scale.output_dir(config.BENCH) / ".cache" / f"stage_a_budget_{args.dataset}"
    rows = []
    for name in args.points:
        cached = cache / f"{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}.json"
        settings = {"point": POINTS[name], "budget": repr(budget), "device": args.device,
                    "torch_threads": torch.get_num_threads(), "code": code_fingerprint()}
        if cached.exists() and (done := json.loads(cached.read_text()))["settings"] == settings:
            print(f"{name}: cached", flush=True)
            rows.append(done["row"])
            continue
        point = dict(POINTS[name])
        max_length = int(point.pop("max_length", budget.max_length))  # type: ignore[call-overload]
        encoder = EncoderConfig(model=budget.encoder, max_length=max_length, device=args.device)
        tune = replace(FinetuneConfig(lr=budget.finetune_lr, max_pairs=budget.finetune_max_pairs), **point)
        ranker = make_ranker(encoder)
        pairs, labels = training_pairs(train0, ranker, tune.include_bridge, tune.max_pairs, tune.balanced_cap)
        model = CrossEncoder(encoder, seed=17)
        start = time.perf_counter()
        finetune(model, pairs, labels, tune, seed=17, progress=True)
        tuned = time.perf_counter() - start
        plain, bridge, _ = variant_pairs(validation, ranker)
        evidence = np.array([u.is_evidence for v in validation for u in v.units])
        start = time.perf_counter()
        row: dict[str, object] = {"point": name, "pairs_per_fold": len(pairs), "max_length": max_length,
                                  "lr": tune.lr, "epochs": tune.epochs, "train_layers": tune.train_layers,
                                  "torch_threads": torch.get_num_threads()}
        for kind, kind_pairs in (("plain", plain), ("bridge", bridge)):
            logits = encode_pairs(model, kind_pairs, None, progress=False)[1]
            row[f"validation_{kind}_auroc"] = float(unsafe_auroc(evidence, logits))
            row[f"validation_{kind}_auprc"] = float(average_precision(evidence, logits))
        row["minutes_finetune_one_fold"] = tuned / 60
        row["minutes_encode_validation"] = (time.perf_counter() - start) / 60
        rows.append(row)
        write_json(cached, {"settings": settings, "row": row})
        print(row, flush=True)
    table = pd.DataFrame(rows)
    save_report("stage_a_budget", f"stage_a_budget_{args.dataset}", args, loaded.files,
                {"dataset": args.dataset, "rows": table.to_dict(orient="records")}, table=table)


if __name__ == "__main__":
    main()
