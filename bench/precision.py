"""Does bf16 pay on this machine? fp32 against bf16: a large matmul's GFLOP/s and Stage A's
encoder throughput (pairs/s), and what ``memsafe_lib.precision`` chooses here.

Why: the cpu budget was measured on a CPU with bf16 matrix units, where bf16 autocast is the
fast path; on a CPU without them (AVX2 only) torch's bf16 matmul is a slow fallback, and on one
with AVX512-BF16 but no AMX tiles bf16 may still lose, so ``MEMSAFE_BF16=auto`` computes in bf16
only where its probe measured it faster. One row per machine kind, named by what torch reports
the CPU offers and the CPU's vendor: artifacts/<scale>/bench/precision_<capability>_<vendor>.json
and the ledger (the first AVX2 row, precision_avx2.json, predates the vendor in the name).

    .venv/bin/python bench/precision.py [--pairs 8]
"""

from __future__ import annotations

import os
import time

import torch
from bench_encoder import matmul_gflops  # bench/ (scripts run from bench/)
from report import bench_parser, save_report

from memsafe_lib import precision
from memsafe_lib.encodings.encoders import CrossEncoder, EncoderConfig, Pair, encode_pairs
from memsafe_lib.ledger import environment
from memsafe_lib.threads import configure_threads


def encoder_pairs_per_s(pairs: list[Pair], bf16: bool) -> float:
    """Stage A's encoder (packaged MiniLM) on ``pairs``, forced to one precision, no cache."""
    os.environ[precision.BF16_ENV] = "1" if bf16 else "0"
    model = CrossEncoder(EncoderConfig(bf16=bf16, max_length=128))
    encode_pairs(model, pairs[:2], None, progress=False)  # warm-up
    start = time.perf_counter()
    encode_pairs(model, pairs, None, progress=False)
    return len(pairs) / (time.perf_counter() - start)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--pairs", type=int, default=8, help="pairs encoded per precision (bf16 may be slow)")
    args = parser.parse_args()
    configure_threads()
    auto = os.environ.get(precision.BF16_ENV, "auto")
    os.environ[precision.BF16_ENV] = "auto"
    chosen = precision.use_bf16(True, "cpu")
    unit = ("The committee met in the old town hall on a rainy Tuesday and agreed, after a long debate "
            "about the budget, to rebuild the bridge over the river before the winter floods.")
    question = "when was the bridge rebuilt and by whom?"
    pairs = [Pair(f"question {i}: {question}", f"{unit} ({i})") for i in range(args.pairs)]
    fp32_gflops, bf16_gflops = matmul_gflops(torch.float32, "cpu"), matmul_gflops(torch.bfloat16, "cpu")
    fp32_pairs, bf16_pairs = encoder_pairs_per_s(pairs, False), encoder_pairs_per_s(pairs, True)
    os.environ[precision.BF16_ENV] = auto
    env = environment()
    capability = torch.backends.cpu.get_cpu_capability()
    vendor = env["cpu"].split()[0].split("(")[0].lower() or "cpu"
    amx = bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    report = {"cpu": env["cpu"], "cpu_capability": capability, "amx_tiles": amx,
              "bf16_native": precision.bf16_native("cpu"), "auto_uses_bf16": chosen,
              "threads": torch.get_num_threads(), "torch": torch.__version__,
              "matmul_gflops_fp32": fp32_gflops, "matmul_gflops_bf16": bf16_gflops,
              "matmul_bf16_over_fp32": bf16_gflops / fp32_gflops,
              "encoder_pairs_per_s_fp32": fp32_pairs, "encoder_pairs_per_s_bf16": bf16_pairs,
              "encoder_bf16_over_fp32": bf16_pairs / fp32_pairs, "pairs": len(pairs)}
    save_report("precision", f"precision_{capability.lower()}_{vendor}", args, [], report)


if __name__ == "__main__":
    main()
