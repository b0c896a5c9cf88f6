"""Stage A throughput and the saving from encoding each unique (query, unit) pair once.

Runs, on the same variants in one process: (1) the cached path (unique pairs only), and
(2) a naive loop that encodes every pair of every variant. Reports useful tokens/s, pairs/s
and the ratio of pairs encoded, and sets the throughput against the machine's roofline,
measured in the same run: the GFLOP/s of a large matmul in the encoder's dtype, and the
GFLOP/s the encoder achieves (useful tokens/s x forward FLOPs per token: two per weight of
the transformer layers, plus attention's score and value products at the mean padded
length). Results go to artifacts/<scale>/bench/encoder_<dtype>_<device>.json and the ledger.

    .venv/bin/python bench/bench_encoder.py --dataset musique --base-queries 40 [--fp32]
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

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
from memsafe_lib.ledger import cpu_model
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.store import build


def matmul_gflops(dtype: torch.dtype, device: str, n: int = 1024, seconds: float = 3.0) -> float:
    """GFLOP/s of an n x n matmul in ``dtype``, best of repeated timed loops (the roofline's
    compute ceiling for this machine, thread count and dtype)."""
    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    for _ in range(3):
        a @ b  # warm-up: first calls pay for allocation and kernel selection
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start, reps = time.perf_counter(), 10
        for _ in range(reps):
            a @ b
        best = max(best, 2 * n**3 * reps / (time.perf_counter() - start) / 1e9)
    return best


def forward_flops_per_token(model: CrossEncoder, mean_length: float) -> float:
    """Forward FLOPs per token of the backbone's transformer layers: 2 per weight of the
    linear maps, plus QK^T and AV (4 x hidden x sequence length per layer); embeddings and
    the head are lookups or negligible."""
    cfg = model.backbone.config
    weights = sum(p.numel() for name, p in model.backbone.named_parameters()
                  if ".layer." in name and p.dim() == 2)
    return 2 * weights + 4 * cfg.hidden_size * mean_length * cfg.num_hidden_layers


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--base-queries", type=int, default=40)
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
        "cpu": cpu_model(), "bf16": config.bf16, "batch_size": config.batch_size,
        "pairs_requested": len(pairs), "pairs_unique": cached.unique, "pairs_encoded_cached": cached.encoded,
        "pairs_encoded_naive": naive.encoded, "encode_ratio_naive_over_cached": naive.encoded / max(cached.encoded, 1),
        "cached_seconds": cached.seconds, "naive_seconds": naive.seconds,
        "time_ratio_naive_over_cached": naive.seconds / max(cached.seconds, 1e-9),
        "useful_tokens_per_s": cached.tokens / max(cached.seconds, 1e-9),
        "padding_overhead": cached.padded_tokens / max(cached.tokens, 1) - 1,
        "pairs_per_s": cached.encoded / max(cached.seconds, 1e-9),
    }
    dtype = torch.bfloat16 if config.bf16 else torch.float32
    mean_length = cached.padded_tokens / max(cached.encoded, 1)
    achieved = report["useful_tokens_per_s"] * forward_flops_per_token(model, mean_length) / 1e9
    peak = matmul_gflops(dtype, args.device)
    report.update({"mean_padded_length": mean_length, "matmul_gflops": peak, "encoder_gflops": achieved,
                   "share_of_roofline": achieved / peak})
    save_report("encoder", f"encoder_{'fp32' if args.fp32 else 'bf16'}_{args.device}", args, loaded.files, report)

if __name__ == "__main__":
    main()
