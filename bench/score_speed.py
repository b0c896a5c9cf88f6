"""``memsafe score``'s speed and where its time goes: memories per second at each Stage A window,
the share spent in the cross-encoder passes, the bi-encoder pass and everything else, and how
close it runs to the encoders' own ceiling on the same inputs, with the unsafe AUROC of the gate.

    MEMSAFE_RECORD=1 .venv/bin/python bench/score_speed.py --gate artifacts/gates/musique-smoke

Timing gate: the given gate with its two fold encoders and its ranker swapped for the packaged
all-MiniLM-L6-v2 at each ``--windows`` value (the cpu scale's encoder; seeded heads, so the
compute of a trained cpu gate and scores that mean nothing). AUROC: the given gate as trained,
on every test memory of ``--dataset`` without provenance (how an agent calls it). Memories: the
first ``--memories`` test memories of ``--dataset`` (size-matched, cpu scale), scored in chunks
of the command's size.

Each window is timed ``--rounds`` times (the command, then its ceiling): ``memories_per_s`` and
its shares are the median round's, ``memories_per_s_min``/``_max`` the spread, and
``ceiling_fraction`` the median of the rounds' fractions (on a shared 2-core machine single
rounds of one code version differ by more than two code versions often do).

Ceiling: the same inputs through the same modules with nothing else: each fold encoder over
every distinct (query, unit) and (query + bridge, unit) pair, pre-tokenised in the command's
length buckets, and the ranker over every distinct text; ``ceiling_fraction`` is that time over
the command's. One row per (code version, window) in ``score_speed.csv``; a later run of the
same code replaces its rows, other code versions' rows stay for comparison.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.cli import SCORE_CHUNK
from memsafe_lib.encodings.encoders import EncoderConfig, _buckets, make_ranker, unit_string, variant_pairs
from memsafe_lib.encodings.stagea import fold_encoder
from memsafe_lib.gate import Gate, batched, memory_variant
from memsafe_lib.io import read_csv
from memsafe_lib.ledger import cpu_model
from memsafe_lib.measures.metrics import unsafe_auroc
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.store import build


def code_version() -> str:
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=config.REPO_ROOT, capture_output=True, text=True).stdout.strip()

    dirty = "+edits" if git("status", "--porcelain", "--untracked-files=no", "memsafe_lib") else ""
    return git("rev-parse", "--short=12", "HEAD") + dirty


class Timer:
    """Seconds spent inside wrapped callables, by name (the outermost call counts)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._depth = 0

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return fn(*args, **kwargs)
            self._depth += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        return timed


def timing_gate(gate: Gate, window: int) -> Gate:
    cfg = replace(EncoderConfig(**gate.config["encoder"]), model=config.PACKAGED_ENCODER, max_length=window)
    encoders = tuple(fold_encoder(cfg, int(gate.config["seed"])).eval() for _ in range(2))
    return Gate(gate.config, (encoders[0], encoders[1]), make_ranker(cfg), gate.tokens, gate.model)


def ceiling_seconds(gate: Gate, memories: list[dict[str, Any]]) -> float:
    """Forward passes only: what scoring these memories cannot do without."""
    variants = [memory_variant(m["query"], m["units"], memory_id=str(m["id"])) for m in memories]
    fresh = make_ranker(gate.bi.config) if hasattr(gate.bi, "config") else gate.bi  # type: ignore[attr-defined]
    plain, bridge, _ = variant_pairs(variants, fresh)  # ranks with its own memo: not timed
    texts = list(dict.fromkeys([u for v in variants for u in (unit_string(x.title, x.text) for x in v.units)]
                               + [v.question for v in variants]))
    pairs = list(dict.fromkeys(plain + bridge))
    seconds = 0.0
    for encoder in gate.encoders:
        lengths = encoder.token_lengths(pairs)
        batches = [encoder.tokenize([pairs[i] for i in idx]) for idx in _buckets(lengths, encoder.config.batch_size)]
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=encoder.bf16):
            for batch in batches:
                encoder(batch)
        seconds += time.perf_counter() - start
    bi = make_ranker(gate.bi.config)  # type: ignore[attr-defined]
    order = sorted(texts, key=len)
    batches = [bi.tokenizer(order[i:i + bi.config.batch_size], truncation=True, max_length=bi.config.max_length,
                            padding=True, return_tensors="pt") for i in range(0, len(order), bi.config.batch_size)]
    start = time.perf_counter()
    with torch.no_grad():
        for batch in batches:
            bi.model(**batch)
    return seconds + time.perf_counter() - start


def score_timed(gate: Gate, memories: list[dict[str, Any]]) -> tuple[float, dict[str, float]]:
    timer = Timer()
    for encoder in gate.encoders:
        encoder.forward = timer.wrap("cross_encoder", encoder.forward)  # type: ignore[method-assign]
    gate.bi.embed = timer.wrap("bi_encoder", gate.bi.embed)  # type: ignore[attr-defined,method-assign]
    start = time.perf_counter()
    for chunk in batched(memories, SCORE_CHUNK):
        gate.score_many(chunk)
    return time.perf_counter() - start, timer.seconds


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--gate", required=True, help="a gate directory (`memsafe train`)")
    parser.add_argument("--dataset", default="hotpotqa")
    parser.add_argument("--memories", type=int, default=64)
    parser.add_argument("--windows", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed rounds per window (command, then ceiling); the row holds their medians")
    args = parser.parse_args()
    configure_threads()
    loaded, result = build(args.dataset, "size-matched", config.scale_config("cpu"))
    test = [v for v in result.variants if v.split == "test"]
    memories = [{"id": v.variant_id, "query": v.question,
                 "units": [{"title": u.title, "text": u.text} for u in v.units]} for v in test]
    gate = Gate.load(args.gate)
    scores = [o.unsafe_prob for o in gate.score_many(memories)]
    auroc = unsafe_auroc([v.unsafe for v in test], scores)
    code, cpu = code_version(), cpu_model()
    table = None
    out = config.scale_config(args.scale).output_dir(config.BENCH) / "score_speed.csv"
    for window in args.windows:
        timed = timing_gate(gate, window)
        timed.score_many(memories[:2])  # warm-up: first-call allocations are not the command's speed
        rounds = []
        for _ in range(args.rounds):
            wall, parts = score_timed(timing_gate(gate, window), memories[:args.memories])
            rounds.append((wall, parts, ceiling_seconds(timed, memories[:args.memories])))
        walls = [r[0] for r in rounds]
        wall, parts, ceiling = rounds[int(np.argsort(walls)[len(walls) // 2])]  # the median round (odd counts)
        rates = [args.memories / w for w in walls]
        row = {"code": code, "window": window, "memories": args.memories,
               "units_per_memory": round(sum(len(m["units"]) for m in memories[:args.memories]) / args.memories, 2),
               "memories_per_s": round(args.memories / wall, 3),
               "memories_per_s_min": round(min(rates), 3), "memories_per_s_max": round(max(rates), 3),
               "rounds": args.rounds,
               "cross_encoder_share": round(parts.get("cross_encoder", 0.0) / wall, 3),
               "bi_encoder_share": round(parts.get("bi_encoder", 0.0) / wall, 3),
               "other_share": round(1 - sum(parts.values()) / wall, 3),
               "ceiling_fraction": round(float(np.median([c / w for w, _, c in rounds])), 3),
               "unsafe_auroc": round(auroc, 4),
               "auroc_gate": Path(args.gate).name, "auroc_memories": len(test), "cpu": cpu,
               "bf16": bool(timed.encoders[0].bf16)}
        old = read_csv(out) if out.exists() else pd.DataFrame(columns=list(row))
        if table is not None:
            old = table
        keep = old[~((old["code"] == code) & (old["window"] == window))]
        table = pd.concat([keep, pd.DataFrame([row])], ignore_index=True)
        table["rounds"] = table["rounds"].astype("Int64")  # rows timed before --rounds: empty
        print(row, flush=True)
    assert table is not None
    args.gate = Path(args.gate).name  # the ledger names the gate, not where it lies on this machine
    save_report("score-speed", "score_speed", args, loaded.files, {"code": code, "cpu": cpu}, table=table)


if __name__ == "__main__":
    main()
