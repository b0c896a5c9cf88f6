"""The trained gate against the LLM judge on the same memories, in one run: memories per
second (cold: no encoding or generation cache) and unsafe AUROC of each.

    MEMSAFE_RECORD=1 .venv/bin/python bench/gate_vs_judge.py --dataset musique --questions 6

Memories are every variant of the first ``--questions`` MuSiQue test questions in the reader
study's salted-hash order. The gate is ``memsafe train`` at the given scale and seed (trained
here if ``--gate`` is not given; Stage A reads the scale's caches, so that costs one Stage B
fit), scored the way an agent calls it (``Gate.score_variants``, both fold encoders, nothing
cached). The judge is the packaged Qwen2.5-Coder-1.5B GGUF through llama.cpp, zero-shot.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.config import scale_config
from memsafe_lib.estimators.judge import LLMJudge
from memsafe_lib.evaluation.reader_gating import reader_sample
from memsafe_lib.gate import Gate, train_gate
from memsafe_lib.measures.metrics import unsafe_auroc
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import by_split
from memsafe_lib.variants.store import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--questions", type=int, default=6)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--gate", default=None, help="a saved gate directory (default: train one)")
    parser.add_argument("--judge", default="qwen2.5-coder-1.5b-instruct-q4_k_m")
    parser.add_argument("--n-ctx", type=int, default=8192)
    args = parser.parse_args()
    configure_threads()
    scale = scale_config(args.scale)
    loaded, result = build(args.dataset, "size-matched", scale)
    memories = reader_sample(by_split(result.variants)["test"], args.questions)
    y = np.array([v.unsafe for v in memories])
    gate_dir = Path(args.gate) if args.gate else train_gate(args.dataset, scale, args.seed)
    rows = []

    start = time.perf_counter()
    gate = Gate.load(gate_dir)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    gate_scores = np.array([o.unsafe_prob for o in gate.score_variants(memories)])
    gate_s = time.perf_counter() - start
    rows.append({"scorer": "memsafe gate", "model": str(gate_dir.name), "memories": len(memories),
                 "seconds_load": load_s, "seconds": gate_s, "memories_per_s": len(memories) / gate_s,
                 "unsafe_auroc": unsafe_auroc(y, gate_scores)})

    start = time.perf_counter()
    judge = LLMJudge(args.judge, n_ctx=args.n_ctx)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    judge_scores = np.asarray(judge.scores(memories, progress=True), float)
    judge_s = time.perf_counter() - start
    rows.append({"scorer": "llm judge (zero-shot)", "model": args.judge, "memories": len(memories),
                 "seconds_load": load_s, "seconds": judge_s, "memories_per_s": len(memories) / judge_s,
                 "unsafe_auroc": unsafe_auroc(y, judge_scores)})
    table = pd.DataFrame(rows).assign(threads=config.torch_threads(), questions=args.questions,
                                      unsafe_share=float(y.mean()))
    save_report("gate-vs-judge", f"gate_vs_judge_{args.dataset}", args, loaded.files,
                {"dataset": args.dataset, "rows": table.to_dict(orient="records")}, table=table)


if __name__ == "__main__":
    main()
