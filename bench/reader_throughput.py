"""Reader and judge throughput of each packaged model on real memories: prompt and generated
tokens per second, seconds per memory, and whether the judge's pass reuses the reader's
prompt cache (memory first, task last).

    MEMSAFE_RECORD=1 .venv/bin/python bench/reader_throughput.py --dataset musique --memories 4

Memories are the first complete test memories in salted-hash order (the reader study's
sample order); nothing is cached across runs here (a fresh GenerationCache-free model), so
the times are what a cold reader pays. Threads come from the config (``MEMSAFE_THREADS``).
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.config import scale_config
from memsafe_lib.data.loader import hash_rank
from memsafe_lib.estimators.judge import LLMJudge
from memsafe_lib.estimators.llm import PACKAGED_MODELS, load_model
from memsafe_lib.estimators.reader import Reader
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import COMPLETE
from memsafe_lib.variants.store import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--memories", type=int, default=4)
    parser.add_argument("--models", default=",".join(PACKAGED_MODELS))
    parser.add_argument("--n-ctx", type=int, default=8192)
    args = parser.parse_args()
    configure_threads()
    loaded, result = build(args.dataset, "size-matched", scale_config(args.scale))
    test = sorted((v for v in result.variants if v.split == "test" and v.state == COMPLETE),
                  key=lambda v: hash_rank(v.variant_id, "reader-sample"))[: args.memories]
    rows = []
    for name in args.models.split(","):
        start = time.perf_counter()
        lm = load_model(name, n_ctx=args.n_ctx)
        load_s = time.perf_counter() - start
        reader, judge = Reader(lm), LLMJudge(name, lm=lm)
        read_s = judge_s = 0.0
        answers, scores, prompt_tokens, answer_tokens = [], [], 0, 0
        for v in test:  # one memory at a time: reader, then judge on the same memory
            t = time.perf_counter()
            a = reader.answer([v], progress=False)[0]
            read_s += time.perf_counter() - t
            t = time.perf_counter()
            scores.append(float(judge.scores([v], progress=False)[0]))
            judge_s += time.perf_counter() - t
            answers.append(a)
            prompt_tokens += a.prompt_tokens
            answer_tokens += a.answer_tokens
        rows.append({
            "model": name, "backend": lm.fingerprint.split("|")[0], "threads": config.torch_threads(),
            "memories": len(test), "mean_prompt_tokens": prompt_tokens / len(test), "seconds_load": load_s,
            "seconds_per_memory_reader": read_s / len(test), "seconds_per_memory_judge": judge_s / len(test),
            "reader_prompt_tokens_per_s": prompt_tokens / read_s,
            "mean_answer_tokens": answer_tokens / len(test),
            "exact_match_complete": sum(a.correct for a in answers) / len(test),
            "mean_judge_p_no_complete": sum(scores) / len(scores),
            "answers_truncated": sum(a.truncated for a in answers),
        })
        print(rows[-1], flush=True)
        del lm, reader, judge
    table = pd.DataFrame(rows)
    save_report("reader", f"reader_throughput_{args.dataset}", args, loaded.files,
                {"dataset": args.dataset, "rows": table.to_dict(orient="records")}, table=table)


if __name__ == "__main__":
    main()
