"""Stage A encoding against the matrix units' ceiling: where the time goes besides matmuls.

The committed encoder benchmark (``bench/bench_encoder.py``) put Stage A encoding at about 30%
of a large bf16 matmul's rate. This times the packaged encoder (all-MiniLM-L6-v2) forward on
synthetic token ids at the training window, with the library's settings (fp32 weights under
bf16 autocast, SDPA attention, batch 32) and with each setting changed alone (bf16 weights,
eager attention, batch 128, torch.compile, torch.compile with bf16 weights), and sets their
FLOP rates beside two ceilings measured in the same run: a matmul of the encoder's own
feed-forward shape (tokens x 384 x 1536) and a large square one. Rounds alternate, medians are
reported. The default window, 128 tokens, writes
``encoder_ceiling.csv``; another (the paper's 256, which notebook 02 encodes at) writes
``encoder_ceiling_<tokens>.csv`` beside it, so both profiles stay:

    cd bench && MEMSAFE_RECORD=1 ../.venv/bin/python encoder_ceiling.py [--tokens 256]
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pandas as pd
import torch
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.config import PACKAGED_ENCODER
from memsafe_lib.encodings.encoders import resolve_model
from memsafe_lib.ledger import cpu_model
from memsafe_lib.threads import configure_threads

DEFAULT_TOKENS = 128  # the committed profile's window; --tokens 256 profiles the paper's
ARMS: dict[str, dict[str, Any]] = {
    "library": {"attention": "sdpa", "bf16_weights": False, "batch": 32},
    "bf16_weights": {"attention": "sdpa", "bf16_weights": True, "batch": 32},
    "eager_attention": {"attention": "eager", "bf16_weights": False, "batch": 32},
    "batch_128": {"attention": "sdpa", "bf16_weights": False, "batch": 128},
    "compiled": {"attention": "sdpa", "bf16_weights": False, "batch": 32, "compiled": True},
    "compiled_bf16_weights": {"attention": "sdpa", "bf16_weights": True, "batch": 32, "compiled": True},
}


def flops_per_pair(config: Any, tokens: int) -> float:
    """Forward FLOPs of one pair: the layers' matmuls (2 x parameters x tokens) and attention."""
    h, f, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    dense = 2 * tokens * (4 * h * h + 2 * h * f)
    attention = 2 * 2 * tokens * tokens * h
    return float(layers * (dense + attention))


def matmul_rate(m: int, k: int, n: int, repeats: int = 20) -> float:
    a, b = torch.randn(m, k, dtype=torch.bfloat16), torch.randn(k, n, dtype=torch.bfloat16)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9


def model_key(settings: dict[str, Any]) -> str:
    """Which of ``main``'s models an arm runs: its weights' precision or attention, compiled or not."""
    base = "bf16" if settings["bf16_weights"] else settings["attention"]
    return f"compiled_{base}" if settings.get("compiled") else base


def main() -> None:
    from transformers import AutoModel  # lazy: heavy

    parser = bench_parser(__doc__)
    parser.add_argument("--tokens", type=int, default=DEFAULT_TOKENS)
    parser.add_argument("--pairs", type=int, default=256, help="pairs per arm per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    threads = configure_threads()
    path = resolve_model(PACKAGED_ENCODER)
    models = {}
    for attention in ("sdpa", "eager"):
        models[attention] = AutoModel.from_pretrained(path, attn_implementation=attention).float().eval()
    models["bf16"] = copy.deepcopy(models["sdpa"]).to(torch.bfloat16)
    # torch.compile (inductor) of the library's model: shapes are fixed here, so it compiles once
    # in the first round's warm-up call (its seconds are reported apart); the library's length
    # buckets would need dynamic shapes or one compile per bucket length
    models["compiled_sdpa"] = torch.compile(models["sdpa"])
    models["compiled_bf16"] = torch.compile(models["bf16"])
    compile_seconds = 0.0
    per_pair = flops_per_pair(models["sdpa"].config, args.tokens)
    rows = []
    for round_ in range(args.rounds):
        for arm, s in ARMS.items():
            model = models[model_key(s)]
            ids = torch.randint(1000, 20000, (s["batch"], args.tokens))
            batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
            with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=not s["bf16_weights"]):
                start = time.perf_counter()
                model(**batch)
                if s.get("compiled") and round_ == 0:
                    compile_seconds += time.perf_counter() - start
                start = time.perf_counter()
                for _ in range(max(1, args.pairs // s["batch"])):
                    model(**batch)
                seconds = time.perf_counter() - start
            pairs = max(1, args.pairs // s["batch"]) * s["batch"]
            rows.append({"round": round_ + 1, "arm": arm, **s, "compiled": bool(s.get("compiled")),
                         "pairs_per_s": pairs / seconds, "gflops": pairs * per_pair / seconds / 1e9})
            print(rows[-1], flush=True)
        rows.append({"round": round_ + 1, "arm": "ceiling_ffn_shape",
                     "gflops": matmul_rate(32 * args.tokens, 384, 1536)})
        rows.append({"round": round_ + 1, "arm": "ceiling_square_4096", "gflops": matmul_rate(4096, 4096, 4096, 5)})
    table = pd.DataFrame(rows).assign(tokens=args.tokens)
    median = table.groupby("arm").gflops.median()
    report = {"cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "torch_threads": threads[1], "tokens": args.tokens,
              "compile_seconds": compile_seconds, "gflop_per_pair": per_pair / 1e9,
              **{f"gflops_{arm}": float(v) for arm, v in median.items()},
              "library_share_of_ffn_ceiling": float(median["library"] / median["ceiling_ffn_shape"]),
              "library_share_of_square_ceiling": float(median["library"] / median["ceiling_square_4096"])}
    name = "encoder_ceiling" if args.tokens == DEFAULT_TOKENS else f"encoder_ceiling_{args.tokens}"
    save_report("encoder-ceiling", name, args, [], report, table=table)


if __name__ == "__main__":
    main()
