"""One Stage B training step on CPU: torch's dropout, MaskDropout, and MaskDropout under
``torch.compile``, alternating in one run on one machine.

A profile of a MemSafe fit put the backward pass, dropout's random masks and the linear
layers at the top (``bench/profile_memsafe_fit.py``); the set model is small, so elementwise
work weighs as much as the matrix products. This times the step the fits repeat, on
synthetic sets of the cpu shape (unit width, 6-20 units a memory, batch 32, bf16 autocast,
one thread as Stage B trains), so it needs no cached encodings; the compiled arm pays its
compilation in the first round, which the median leaves out and ``compile_s`` reports.

    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_b_step.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import pandas as pd
import torch
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.config import STAGE_B_THREADS
from memsafe_lib.estimators.setmodel import SetBatch, SetModel, SetModelConfig, collate, loss_fn
from memsafe_lib.ledger import environment

ARMS = {"torch_dropout": {"mask_dropout": False}, "mask_dropout": {"mask_dropout": True},
        "mask_dropout_compiled": {"mask_dropout": True}}


def synthetic_batches(n_batches: int, unit_dim: int, provenance_dim: int, seed: int = 0) -> list[SetBatch]:
    rng = np.random.default_rng(seed)
    n = 32 * n_batches
    units = [rng.normal(size=(int(rng.integers(6, 21)), unit_dim)).astype(np.float32) for _ in range(n)]
    prov = rng.normal(size=(n, provenance_dim)).astype(np.float32)
    targets: dict[str, Any] = {"unsafe": rng.integers(0, 2, n).astype(float), "state": rng.integers(0, 3, n),
                               "evidence": [rng.integers(0, 2, len(u)).astype(float) for u in units],
                               "missing": rng.integers(0, 3, n).astype(float)}
    return [collate(units[i:i + 32], prov[i:i + 32], {k: v[i:i + 32] for k, v in targets.items()})
            for i in range(0, n, 32)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--unit-dim", type=int, default=790,
                        help="about the cpu unit token width (two encodings, two logits, LexSet features)")
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(STAGE_B_THREADS)
    batches = synthetic_batches(args.batches, args.unit_dim, 8)
    steps: dict[str, tuple[Any, Any]] = {}
    compile_s = 0.0
    for arm, flags in ARMS.items():
        torch.manual_seed(0)
        model = SetModel(args.unit_dim, 8, SetModelConfig(width=args.width, bf16=True, **flags)).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
        steps[arm] = (torch.compile(model, dynamic=True) if arm.endswith("compiled") else model, optimizer)
    rows = []
    for round_ in range(args.rounds):
        for arm, (model, optimizer) in steps.items():
            start = time.perf_counter()
            for batch in batches:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = loss_fn(model(batch), batch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
            seconds = time.perf_counter() - start
            if round_ == 0 and arm.endswith("compiled"):
                compile_s = seconds
            rows.append({"round": round_ + 1, "arm": arm, "ms_per_step": 1000 * seconds / len(batches)})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    later = table[table["round"] > 1]
    median = {arm: statistics.median(later[later.arm == arm].ms_per_step) for arm in ARMS}
    report = {"cpu": environment()["cpu"], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "torch_threads": STAGE_B_THREADS, "rounds": args.rounds, "batches": args.batches,
              "unit_dim": args.unit_dim, "width": args.width, "compile_round_s": compile_s,
              **{f"median_ms_{arm}": ms for arm, ms in median.items()},
              "mask_over_torch": median["torch_dropout"] / median["mask_dropout"],
              "compiled_over_eager": median["mask_dropout"] / median["mask_dropout_compiled"]}
    save_report("stage-b-step", "stage_b_step", args, [], report, table=table)


if __name__ == "__main__":
    main()
