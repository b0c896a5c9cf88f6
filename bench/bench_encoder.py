"""Stage A throughput and the saving from encoding each unique (query, unit) pair once.

Runs, on the same variants in one process: (1) the cached path (unique pairs only), and
(2) a naive loop that encodes every pair of every variant. Reports useful tokens/s, pairs/s
and the ratio of pairs encoded. Results go to artifacts/<scale>/bench/encoder.json and the
run ledger.

    .venv/bin/python bench/bench_encoder.py --dataset musique --base-queries 40 [--fp32]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.config import scale_config
from memsafe_lib.data.loader import hash_rank
from memsafe_lib.encodings.encoders import (
    BiEncoder,
    CrossEncoder,
    EncoderConfig,
    EncodeStats,
    EncodingCache,
    encode_pairs,
    variant_pairs,
)
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.store import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--base-queries", type=int, default=40)
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--fp32", action="store_true", help="disable bf16 autocast")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    configure_threads()

    loaded, result = build(args.dataset, "size-matched", scale_config(args.scale))
    ids = sorted({v.base_id for v in result.variants}, key=lambda i: hash_rank(i, "bench"))[: args.base_queries]
    keep = set(ids)
    variants = [v for v in result.variants if v.base_id in keep]
    config = EncoderConfig(batch_size=args.batch_size, bf16=not args.fp32, device=args.device)
    model = CrossEncoder(config)
    bi = BiEncoder(config)
    plain, bridge, _ = variant_pairs(variants, bi)
    pairs = plain + bridge

    cached = EncodeStats()
    with tempfile.TemporaryDirectory() as tmp:
        cache = EncodingCache(Path(tmp) / "enc.sqlite")
        encode_pairs(model, pairs, cache, stats=cached)
        cache.close()

    naive = EncodeStats()  # every variant encodes all of its pairs, no sharing
    start = time.perf_counter()
    for v in variants:
        p, b, _ = variant_pairs([v], bi)
        tmp_stats = EncodeStats()
        encode_pairs(model, p + b, None, progress=False, stats=tmp_stats)
        naive.requested += tmp_stats.requested
        naive.encoded += tmp_stats.encoded
        naive.tokens += tmp_stats.tokens
    naive.seconds = time.perf_counter() - start

    report = {
        "dataset": args.dataset, "variants": len(variants), "base_queries": len(ids),
        "device": args.device, "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(), "bf16": config.bf16, "batch_size": config.batch_size,
        "pairs_requested": len(pairs), "pairs_unique": cached.unique, "pairs_encoded_cached": cached.encoded,
        "pairs_encoded_naive": naive.encoded, "encode_ratio_naive_over_cached": naive.encoded / max(cached.encoded, 1),
        "cached_seconds": cached.seconds, "naive_seconds": naive.seconds,
        "time_ratio_naive_over_cached": naive.seconds / max(cached.seconds, 1e-9),
        "useful_tokens_per_s": cached.tokens / max(cached.seconds, 1e-9),
        "padding_overhead": cached.padded_tokens / max(cached.tokens, 1) - 1,
        "pairs_per_s": cached.encoded / max(cached.seconds, 1e-9),
    }
    save_report("encoder", f"encoder_{'fp32' if args.fp32 else 'bf16'}_{args.device}", args, loaded.files, report)

if __name__ == "__main__":
    main()
