"""Stage B fits one after another with two torch threads, against two fits at once with one
thread each: wall time, and whether one thread gives the same fit as two.

A cpu reproduction spends most of its time in MemSafe fits (bench/notebook_steps.py), each a
small set transformer whose matrices are too small for two threads to share well. Fits of
different seeds are independent, so two processes can run them side by side. This measures
the gain on MuSiQue at the Stage B point notebook 02 selected (lifting the library's
one-thread pin on Stage B for the two-thread fits; the pin came from this measurement), on the scale's cached Stage A
encodings (validation only; test is never read), and records every epoch's validation AUROC
so the epoch budget can be judged from the same fits.

    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_b_parallel.py --dataset musique
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

import numpy as np
import pandas as pd
from cached_inputs import stage_b_inputs  # bench/cached_inputs.py
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.estimators import setmodel
from memsafe_lib.estimators.memsafe import MemSafe
from memsafe_lib.estimators.setmodel import SetModelConfig
from memsafe_lib.measures.metrics import unsafe_auroc
from memsafe_lib.threads import configure_threads


def fit(dataset: str, scale_name: str, seed: int, threads: int) -> dict[str, Any]:
    """One MemSafe fit at the scale's Stage B point with ``threads`` native threads."""
    os.environ[config.THREADS_ENV] = str(threads)
    configure_threads()
    setmodel.STAGE_B_THREADS = threads  # the library pins Stage B to one thread; lift it to compare
    scale = config.scale_config(scale_name)
    inputs = stage_b_inputs(dataset, scale)
    validation = inputs.splits["validation"]
    base = SetModelConfig(epochs=scale.neural.stage_b_epochs, bf16=scale.neural.stage_b_bf16, **inputs.point)
    start = time.perf_counter()
    model = MemSafe(inputs.encodings, seed, base).fit(inputs.splits["train"], validation)
    seconds = time.perf_counter() - start
    prob = model.predict(validation).unsafe_prob
    assert model.log is not None
    return {"seed": seed, "threads": threads, "fit_seconds": seconds, "started": start,
            "validation_auroc": unsafe_auroc([v.unsafe for v in validation], prob), "prob": prob,
            "best_epoch": model.log.best_epoch,
            "curve": [round(e["validation_auroc"], 4) for e in model.log.epochs], "raw_files": inputs.raw_files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--seeds", type=int, nargs=2, default=[17, 29])
    args = parser.parse_args()
    context = get_context("spawn")  # fresh interpreters: no thread pool inherited from this one
    # side by side: one thread each (wall time = the slower fit, each measured inside its process)
    start = time.perf_counter()
    with ProcessPoolExecutor(2, mp_context=context) as pool:
        parallel = list(pool.map(fit, [args.dataset] * 2, [args.scale] * 2, args.seeds, [1, 1]))
    parallel_wall = time.perf_counter() - start
    # one after another: two threads each, in a fresh process too
    start = time.perf_counter()
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        sequential = list(pool.map(fit, [args.dataset] * 2, [args.scale] * 2, args.seeds, [2, 2]))
    sequential_wall = time.perf_counter() - start
    rows = []
    for mode, fits in (("side by side, 1 thread each", parallel), ("one after another, 2 threads", sequential)):
        for f in fits:
            kept = {k: v for k, v in f.items() if k not in {"prob", "curve", "started", "raw_files"}}
            rows.append({"mode": mode, **kept, "curve": " ".join(map(str, f["curve"]))})
    table = pd.DataFrame(rows)
    same = [float(np.abs(p["prob"] - s["prob"]).max()) for p, s in zip(parallel, sequential, strict=True)]
    sequential_fits = sum(f["fit_seconds"] for f in sequential)
    parallel_fits = max(f["fit_seconds"] for f in parallel)
    report = {"dataset": args.dataset, "scale": args.scale, "seeds": args.seeds, "cores": os.cpu_count(),
              "sequential_fit_seconds": round(sequential_fits, 1), "parallel_fit_seconds": round(parallel_fits, 1),
              "speedup_fits": round(sequential_fits / parallel_fits, 3),
              "sequential_wall_seconds": round(sequential_wall, 1), "parallel_wall_seconds": round(parallel_wall, 1),
              "max_abs_diff_validation_prob_1_vs_2_threads": same,
              "same_best_epoch": [p["best_epoch"] == s["best_epoch"]
                                  for p, s in zip(parallel, sequential, strict=True)]}
    print(report)
    save_report("stage-b-parallel", f"stage_b_parallel_{args.dataset}", args, parallel[0]["raw_files"], report, table)


if __name__ == "__main__":
    main()
