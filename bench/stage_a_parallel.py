"""Stage A's two fold encoders fine-tuned one after another with two torch threads, against
both at once with one thread each: wall time, and whether the thread count changes the
weights.

A cpu reproduction fine-tunes about fourteen fold-encoder pairs (notebooks 02, 03 and 07),
and a fine-tuning step of MiniLM at 128 tokens uses two threads poorly (bench/stage_a_budget.py
ran one thread). The two folds are independent, so two processes can tune them side by
side. Measured on MuSiQue's training folds exactly as Stage A builds them (hash folds,
balanced cap, plain and bridge pairs; ``--pairs`` per fold, fewer than the scale's 4,000 to
keep the bench short; the ratio is what matters). A third run tunes fold 0 alone with one
thread: its weights against the side-by-side fold 0 say whether a neighbour process changes
a fit, and against the two-thread fold 0 whether the thread count does.

    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_a_parallel.py --dataset musique
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from typing import Any

import pandas as pd
import torch
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.encodings import finetune as finetune_module
from memsafe_lib.encodings.encoders import CrossEncoder, EncodingCache, Pair, make_ranker
from memsafe_lib.encodings.finetune import finetune, training_pairs
from memsafe_lib.encodings.stagea import StageAConfig
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import train_fold
from memsafe_lib.variants.store import build


def fold_pairs(dataset: str, scale_name: str, pairs_per_fold: int) -> tuple[StageAConfig, list, list]:
    """Stage A's config and each fold's (pairs, labels), built once in the parent process."""
    configure_threads()
    scale = config.scale_config(scale_name)
    stage_a = StageAConfig.for_budget(scale.neural)
    stage_a = replace(stage_a, finetune=replace(stage_a.finetune, max_pairs=pairs_per_fold))
    loaded, result = build(dataset, "size-matched", scale)
    train = [v for v in result.variants if v.split == "train"]
    cache = EncodingCache(scale.cache_dir(config.BENCH, f"stage_a_parallel_{dataset}") / "encodings.sqlite")
    bi = make_ranker(stage_a.encoder, cache)
    folds = []
    for fold in (0, 1):
        members = [v for v in train if train_fold(v.base_id) == fold]
        folds.append(training_pairs(members, bi, stage_a.finetune.include_bridge, pairs_per_fold,
                                    stage_a.finetune.balanced_cap))
    cache.close()
    return stage_a, folds, list(loaded.files)


def tune(stage_a: StageAConfig, pairs: list[Pair], labels: Any, seed: int, threads: int) -> dict[str, Any]:
    """One fold encoder fine-tuned with ``threads`` torch threads (lifting the library's
    one-thread pin on fine-tuning, which came from this measurement); its weights' digest."""
    configure_threads(threads)
    finetune_module.FINETUNE_THREADS = threads
    model = CrossEncoder(stage_a.encoder, seed=seed)
    start = time.perf_counter()
    losses = finetune(model, pairs, labels, stage_a.finetune, seed=seed, progress=False)
    seconds = time.perf_counter() - start
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().numpy().tobytes())
    return {"threads": threads, "torch_threads_seen": torch.get_num_threads(), "seconds": seconds,
            "last_loss": float(sum(losses[-20:]) / max(len(losses[-20:]), 1)), "weights": digest.hexdigest()[:16]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--pairs", type=int, default=2000, help="training pairs per fold")
    parser.add_argument("--seed", type=int, default=17)
    args = parser.parse_args()
    stage_a, folds, raw_files = fold_pairs(args.dataset, args.scale, args.pairs)
    context = get_context("spawn")  # fresh interpreters: no thread pool inherited from this one
    runs: list[tuple[str, int, dict[str, Any]]] = []
    start = time.perf_counter()
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        futures = [pool.submit(tune, stage_a, *folds[k], args.seed, 1) for k in (0, 1)]
        runs += [("side by side, 1 thread each", k, f.result()) for k, f in enumerate(futures)]
    parallel_wall = time.perf_counter() - start
    start = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        runs += [("one after another, 2 threads", k, pool.submit(tune, stage_a, *folds[k], args.seed, 2).result())
                 for k in (0, 1)]
    sequential_wall = time.perf_counter() - start
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        runs.append(("alone, 1 thread", 0, pool.submit(tune, stage_a, *folds[0], args.seed, 1).result()))
    table = pd.DataFrame([{"mode": mode, "fold": fold, "pairs": len(folds[fold][0]), **r} for mode, fold, r in runs])
    weights = {(m, f): r["weights"] for m, f, r in runs}
    report = {"dataset": args.dataset, "scale": args.scale, "pairs_per_fold": args.pairs, "seed": args.seed,
              "cores": os.cpu_count(), "parallel_wall_seconds": round(parallel_wall, 1),
              "sequential_wall_seconds": round(sequential_wall, 1),
              "speedup_wall": round(sequential_wall / parallel_wall, 3),
              "fold0_side_by_side_equals_alone": weights[("side by side, 1 thread each", 0)]
              == weights[("alone, 1 thread", 0)],
              "fold0_two_threads_equals_one": weights[("one after another, 2 threads", 0)]
              == weights[("alone, 1 thread", 0)]}
    print(report)
    save_report("stage-a-parallel", f"stage_a_parallel_{args.dataset}", args, raw_files, report, table)


if __name__ == "__main__":
    main()
