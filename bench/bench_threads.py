"""Native thread pools on a small machine: LexSet fit time and Stage A encoding throughput
with each library's default threads (``MEMSAFE_THREADS=0``, the code before the thread
setting), with our defaults (``MEMSAFE_THREADS`` unset: one thread for scikit-learn fits,
one per core for torch) and with 1 and 2 threads everywhere, and a whole smoke run of
notebook 01 before/after, on an idle machine and on one where as many busy processes as
cores run beside it.

Each measurement runs in a fresh process (OpenMP reads its settings when it loads), so the
settings cannot leak from one run to the next. A run that exceeds ``--timeout`` is reported
as at least that long.

    MEMSAFE_RECORD=1 MEMSAFE_DATA_DIR=../shared/data .venv/bin/python bench/bench_threads.py [--kinds notebook]
    (MEMSAFE_RECORD=1 writes artifacts/cpu/bench/ and its ledger; without it, artifacts/scratch/)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from report import save_report  # bench/report.py (scripts run from bench/)

HERE = Path(__file__).resolve()


def worker(kind: str, dataset: str, scale: str, pairs: int) -> dict[str, float]:
    """One measurement in this process, after the entry-point thread setting."""
    from memsafe_lib.threads import configure_threads

    configure_threads()
    if kind == "notebook":  # the whole smoke notebook 01 (its audit fits LexSet), kernel included
        from memsafe_lib.config import SCALES
        from memsafe_lib.notebooks import run_notebook

        start = time.perf_counter()
        run_notebook("01_construction_audit", SCALES["smoke"])
        return {"seconds": time.perf_counter() - start}
    from memsafe_lib.config import scale_config
    from memsafe_lib.variants.construction import by_split
    from memsafe_lib.variants.store import build

    _, result = build(dataset, "size-matched", scale_config(scale))
    split = by_split(result.variants)
    if kind == "lexset":
        from memsafe_lib.estimators.lexset import LexSet
        from memsafe_lib.measures.metrics import unsafe_auroc

        start = time.perf_counter()
        model = LexSet(seed=17).fit(split["train"], split["validation"])
        seconds = time.perf_counter() - start
        preds = model.predict(split["test"])
        return {"seconds": seconds, "test_auroc": unsafe_auroc([v.unsafe for v in split["test"]], preds.unsafe_prob)}
    import torch

    from memsafe_lib.encodings.encoders import (
        BiEncoder,
        CrossEncoder,
        EncoderConfig,
        EncodeStats,
        encode_pairs,
        variant_pairs,
    )

    config = EncoderConfig(max_length=128)
    plain, _, _ = variant_pairs(split["test"][:360], BiEncoder(config))
    model = CrossEncoder(config)
    stats = EncodeStats()
    encode_pairs(model, plain[:pairs], None, progress=False, stats=stats)
    return {"seconds": stats.seconds, "pairs_per_s": stats.encoded / max(stats.seconds, 1e-9),
            "torch_threads": torch.get_num_threads()}


SETTINGS = {"library defaults": "0", "memsafe defaults": None, "1 thread": "1", "2 threads": "2"}
"""Row label -> MEMSAFE_THREADS (None = unset)."""
STEPS = {"lexset": ("LexSet fit", tuple(SETTINGS)), "torch": ("Stage A encode", tuple(SETTINGS)),
         "notebook": ("notebook 01 at smoke", ("library defaults", "memsafe defaults"))}
"""Measurement kind -> (row label, settings compared); the notebook takes minutes, so only
the before/after pair."""


def measure(kind: str, threads: str | None, args: argparse.Namespace) -> dict[str, float | str]:
    env = dict(os.environ)
    for var in ("MEMSAFE_THREADS", "MEMSAFE_RECORD", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(var, None)  # the "library defaults" row must really be the defaults; workers never record
    if threads is not None:
        env["MEMSAFE_THREADS"] = threads
    cmd = [sys.executable, str(HERE), "--worker", kind, "--dataset", args.dataset, "--scale", args.scale,
           "--pairs", str(args.pairs)]
    start = time.perf_counter()
    # Own session, so a timeout also ends what the worker started (a notebook's kernel).
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"seconds": float(args.timeout), "timed_out": "yes"}
    if proc.returncode:
        raise SystemExit(f"worker failed:\n{stderr}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - start
    result["timed_out"] = "no"
    return result


def busy_processes(n: int) -> list[subprocess.Popen]:
    """``n`` processes that each keep one core busy: the 'other work beside it'."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--pairs", type=int, default=1024, help="pairs encoded in the torch measurement")
    parser.add_argument("--timeout", type=int, default=300, help="seconds before a run counts as stalled")
    parser.add_argument("--kinds", default=",".join(STEPS),
                        help="what to measure; rows of other kinds are kept from the last saved table")
    parser.add_argument("--worker", choices=list(STEPS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.dataset, args.scale, args.pairs)))
        return

    import pandas as pd

    from memsafe_lib import config
    from memsafe_lib.io import read_csv
    from memsafe_lib.variants.store import build

    scale = config.scale_config(args.scale)

    kinds = args.kinds.split(",")
    cores = os.cpu_count() or 1
    rows: list[dict[str, float | str]] = []
    for load in ("idle", "busy"):
        procs = busy_processes(cores) if load == "busy" else []
        try:
            for kind in kinds:
                step, settings = STEPS[kind]
                for label in settings:
                    result = measure(kind, SETTINGS[label], args)
                    print(f"{kind:8s} {load:4s} {label:16s} {json.dumps(result)}", flush=True)
                    rows.append({"step": step, "machine": load, "threads": label, **result})
        finally:
            for p in procs:
                p.kill()
    table = pd.DataFrame(rows)
    saved = scale.output_dir(config.BENCH) / f"threads_{args.dataset}.csv"
    if saved.exists():  # keep the other kinds' rows of the last full run
        old = read_csv(saved)
        measured = {STEPS[k][0] for k in kinds}
        table = pd.concat([old[~old.step.isin(measured)], table], ignore_index=True)
    loaded, _ = build(args.dataset, "size-matched", scale)
    report = {"dataset": args.dataset, "cores": cores, "timeout_s": args.timeout, "pairs": args.pairs,
              "rows": table.to_dict(orient="records")}
    save_report("threads", f"threads_{args.dataset}", args, loaded.files, report, table=table)


if __name__ == "__main__":
    main()
