"""The reader's and the four-shot judge's LLM work against what the hardware allows, one run.

    MEMSAFE_RECORD=1 .venv/bin/python bench/llm_rate.py --memories 3

Rows, for each backend (``--backends``: llama.cpp through xllamacpp, and transformers reading
the same GGUF weights, bf16 where the CPU has bf16 units), one per memory and pass, on the
reader sample's first complete MuSiQue test memories at ``--scale``, the GGUF model of
notebook 06 at cpu, threads from the config:

* ``reader``: the backend's own compute time for the request (llama.cpp's ``timings``; the
  forward passes for transformers) against our wall time for the same library call:
  ``compute_share`` is the fraction of the wall time spent computing (1.0 = no overhead of ours).
* ``fourshot_interleaved``: the four-shot judge run memory by memory right after the reader on
  one model (what a per-memory loop does): the exemplars are evaluated again every time.
* ``fourshot_grouped``: the four-shot judge as notebook 06 runs it, a pass of its own after the
  reader: the exemplar prefix is evaluated once (first memory) and reused (``cache_n``).

``tokens_evaluated`` is what the model computed for the request (prompt tokens not served by
the cache, plus generated ones): the quantity the prefix reuse cuts.
"""

from __future__ import annotations

import os
import time

import pandas as pd
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.config import scale_config
from memsafe_lib.data.loader import hash_rank
from memsafe_lib.estimators.judge import LLMJudge
from memsafe_lib.estimators.llm import LLM_BACKEND_ENV, LanguageModel, load_model
from memsafe_lib.estimators.reader import reader_messages
from memsafe_lib.ledger import cpu_model
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import COMPLETE
from memsafe_lib.variants.store import build

READER = "qwen2.5-coder-1.5b-instruct-q4_k_m"


def timed_chat(lm: LanguageModel, messages: list[dict[str, str]], max_tokens: int = 0, top_n: int = 0) -> dict:
    """One request through the library's own call (``generate`` or ``next_token``), timed, with
    the backend's account of what it computed (``last_timings``)."""
    start = time.perf_counter()
    if max_tokens:
        g = lm.generate(messages, max_tokens)
        answer, prompt_tokens = g.text, g.prompt_tokens
    else:
        top, prompt_tokens = lm.next_token(messages, top_n)
        answer = max(top, key=top.get)
    wall = time.perf_counter() - start
    t = lm.last_timings  # type: ignore[attr-defined]
    computed = (t.get("prompt_ms", 0.0) + t.get("predicted_ms", 0.0)) / 1000
    return {"wall_s": wall, "compute_s": computed, "compute_share": computed / wall,
            "prompt_tokens": prompt_tokens, "cache_n": int(t.get("cache_n", 0)),
            "prompt_n": int(t.get("prompt_n", 0)), "predicted_n": int(t.get("predicted_n", 0)),
            "tokens_evaluated": int(t.get("prompt_n", 0)) + int(t.get("predicted_n", 0)),
            "prompt_tok_s": 1000 * t.get("prompt_n", 0) / max(t.get("prompt_ms", 0.0), 1e-9), "answer": answer}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--model", default=READER)
    parser.add_argument("--memories", type=int, default=3)
    parser.add_argument("--shots", type=int, default=4)
    parser.add_argument("--n-ctx", type=int, default=16384)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--tag", default="", help="appended to the output file name, to keep a record beside another")
    parser.add_argument("--backends", default="llama.cpp,transformers", help="MEMSAFE_LLM_BACKEND values, in order")
    args = parser.parse_args()
    configure_threads()
    loaded, result = build(args.dataset, "size-matched", scale_config(args.scale))
    test = sorted((v for v in result.variants if v.split == "test" and v.state == COMPLETE),
                  key=lambda v: hash_rank(v.variant_id, "reader-sample"))[: args.memories]
    train = [v for v in result.variants if v.split == "train"]
    rows = []

    for backend in args.backends.split(","):
        os.environ[LLM_BACKEND_ENV] = backend
        start = time.perf_counter()
        lm = load_model(args.model, n_ctx=args.n_ctx)
        load_s = time.perf_counter() - start
        judge = LLMJudge(args.model, shots=args.shots, n_ctx=args.n_ctx, lm=lm).fit(train)
        tag = {"backend": backend, "load_s": load_s, "fingerprint": lm.fingerprint}
        for v in test:  # per memory: reader, then the four-shot judge on the same slot
            rows.append({**tag, "pass": "reader", "variant_id": v.variant_id,
                         **timed_chat(lm, reader_messages(v), max_tokens=args.max_tokens)})
            rows.append({**tag, "pass": "fourshot_interleaved", "variant_id": v.variant_id,
                         **timed_chat(lm, judge.messages(v), top_n=judge.top_n)})
        del lm, judge
        lm = load_model(args.model, n_ctx=args.n_ctx)  # a fresh model: nothing cached
        judge = LLMJudge(args.model, shots=args.shots, n_ctx=args.n_ctx, lm=lm).fit(train)
        for v in test:
            rows.append({**tag, "pass": "fourshot_grouped", "variant_id": v.variant_id,
                         **timed_chat(lm, judge.messages(v), top_n=judge.top_n)})
        del lm, judge
    first = {(r["pass"], r["variant_id"]): r["answer"] for r in rows if r["backend"] == rows[0]["backend"]}
    for r in rows:
        r["same_output_as_first_backend"] = r["answer"] == first[(r["pass"], r["variant_id"])]
    table = pd.DataFrame(rows).drop(columns=["answer"])
    table["threads"] = config.torch_threads()
    table["cpu"] = cpu_model()
    columns = ["wall_s", "compute_share", "tokens_evaluated", "prompt_tokens", "prompt_tok_s", "load_s"]
    summary = table.groupby(["backend", "pass"], sort=False)[columns].mean().round(3)
    print(summary.to_string())
    # another model than notebook 06's keeps its own file beside the reader's
    suffix = "" if args.model == READER else "_" + args.model.replace(".", "_").replace("/", "_")
    suffix += f"_{args.tag}" if args.tag else ""
    save_report("llm-rate", f"llm_rate_{args.dataset}{suffix}", args, loaded.files,
                {"model": args.model, "memories": len(test), "passes": summary.reset_index().to_dict(orient="records")},
                table=table)


if __name__ == "__main__":
    main()
