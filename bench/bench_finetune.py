"""Stage A fine-tuning throughput (training pairs/s) on real data, for planning CPU budgets.

    .venv/bin/python bench/bench_finetune.py --dataset musique --pairs 256

``--compare-dropout``: the same pairs tuned with torch's dropout and with MaskDropout
(memsafe_lib.maskdropout), alternating for ``--rounds`` rounds so that drifts in machine speed
hit both; reports pairs/s and the mean loss of each (the masks differ, so the losses do too).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd
import torch
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.config import FINETUNE_THREADS, scale_config
from memsafe_lib.encodings.encoders import BiEncoder, CrossEncoder, EncoderConfig, Pair
from memsafe_lib.encodings.finetune import FinetuneConfig, finetune, training_pairs
from memsafe_lib.ledger import cpu_model
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import by_split
from memsafe_lib.variants.store import build


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--fp32", action="store_true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compare-dropout", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    configure_threads()

    loaded, result = build(args.dataset, "size-matched", scale_config(args.scale))
    train = by_split(result.variants)["train"]
    config = EncoderConfig(device=args.device, bf16=not args.fp32)
    bi = BiEncoder(config)
    all_pairs, _ = training_pairs(train, bi)
    pairs, labels = training_pairs(train, bi, max_pairs=args.pairs)
    if args.compare_dropout:
        compare_dropout(args, loaded.files, config, pairs, labels)
        return
    model = CrossEncoder(config)
    start = time.perf_counter()
    losses = finetune(model, pairs, labels, FinetuneConfig(batch_size=args.batch_size, bf16=not args.fp32))
    seconds = time.perf_counter() - start
    report = {"dataset": args.dataset, "device": args.device, "bf16": not args.fp32, "batch_size": args.batch_size,
              "threads": torch.get_num_threads(), "finetune_threads": FINETUNE_THREADS, "cpu": cpu_model(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), "pairs_trained": len(pairs),
              "seconds": seconds,
              "train_pairs_per_s": len(pairs) / seconds, "unique_training_pairs_cpu_scale": len(all_pairs),
              "estimated_minutes_one_epoch_all_pairs": len(all_pairs) / (len(pairs) / seconds) / 60,
              "first_loss": losses[0], "last_loss": losses[-1]}
    save_report("finetune", f"finetune_{'fp32' if args.fp32 else 'bf16'}_{args.device}", args, loaded.files, report)


def compare_dropout(args: argparse.Namespace, files: list[str], config: EncoderConfig, pairs: list[Pair],
                    labels: np.ndarray) -> None:
    rows = []
    for round_ in range(args.rounds):
        for label, mask in (("torch", False), ("mask", True)):
            model = CrossEncoder(config)
            tune = FinetuneConfig(batch_size=args.batch_size, bf16=not args.fp32, mask_dropout=mask)
            start = time.perf_counter()
            losses = finetune(model, pairs, labels, tune)
            seconds = time.perf_counter() - start
            rows.append({"round": round_ + 1, "dropout": label, "pairs": len(pairs), "seconds": round(seconds, 2),
                         "train_pairs_per_s": len(pairs) / seconds, "mean_loss": float(np.mean(losses)),
                         "last_loss": losses[-1]})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    rate = table.groupby("dropout").train_pairs_per_s.median()
    report = {"dataset": args.dataset, "device": args.device, "bf16": not args.fp32, "batch_size": args.batch_size,
              "finetune_threads": FINETUNE_THREADS, "cpu": cpu_model(),
              "cpu_capability": torch.backends.cpu.get_cpu_capability(), "pairs_trained": len(pairs),
              "rounds": args.rounds, "train_pairs_per_s_torch": float(rate["torch"]),
              "train_pairs_per_s_mask": float(rate["mask"]), "speedup": float(rate["mask"] / rate["torch"])}
    save_report("finetune-dropout", f"finetune_dropout_{args.device}", args, files, report, table=table)


if __name__ == "__main__":
    main()
