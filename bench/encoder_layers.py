"""What cutting the packaged encoder to its first layers saves: the smoke scale's encoder.

Smoke reads all-MiniLM-L6-v2 through its embeddings and first layer only
(``config.SMOKE_ENCODER``). This times a forward pass of the same synthetic pairs (smoke's
window, batch 32, fp32 as on a CPU without bf16 units) through the first 1, 2 and all 6 layers,
rounds alternating, and reports the median seconds per arm with the CPU it ran on.

    MEMSAFE_RECORD=1 .venv/bin/python bench/encoder_layers.py
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
import torch
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.config import PACKAGED_ENCODER
from memsafe_lib.encodings.encoders import first_layers, resolve_model
from memsafe_lib.ledger import environment
from memsafe_lib.threads import configure_threads

LAYERS = (1, 2, 6)


def main() -> None:
    from transformers import AutoModel  # lazy: heavy

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu", help="where the record goes (artifacts/<scale>/bench)")
    parser.add_argument("--tokens", type=int, default=32, help="smoke's Stage A window")
    parser.add_argument("--pairs", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    threads = configure_threads()
    models = {n: AutoModel.from_pretrained(resolve_model(first_layers(PACKAGED_ENCODER, n) if n < 6
                                                         else PACKAGED_ENCODER)).float().eval()
              for n in LAYERS}
    ids = torch.randint(1000, 20000, (args.pairs, args.tokens))
    rows = []
    for round_ in range(args.rounds):
        for n, model in models.items():
            start = time.perf_counter()
            with torch.inference_mode():
                for i in range(0, args.pairs, 32):
                    batch = ids[i:i + 32]
                    model(input_ids=batch, attention_mask=torch.ones_like(batch),
                          token_type_ids=torch.zeros_like(batch))
            rows.append({"round": round_ + 1, "layers": n, "seconds": time.perf_counter() - start})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    median = table.groupby("layers").seconds.median()
    report = {"cpu": environment()["cpu"], "cpu_capability": torch.backends.cpu.get_cpu_capability(),
              "torch_threads": threads[1], "tokens": args.tokens, "pairs": args.pairs,
              **{f"seconds_{n}_layers": float(median[n]) for n in LAYERS},
              "speedup_1_vs_6": float(median[6] / median[1])}
    save_report("encoder-layers", "encoder_layers", args, [], report, table=table)


if __name__ == "__main__":
    main()
