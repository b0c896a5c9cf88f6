"""Training-step time of the encoder with its attention written out in one piece or a few batch
items at a time (memsafe_lib.maskdropout.ATTENTION_CHUNK), on real memories and pairs.

    MEMSAFE_RECORD=1 .venv/bin/python bench/attention_chunk.py --rounds 3

Two workloads, each at one torch thread (as fine-tuning runs): the concatenated cross-encoder's
step (8 whole HotpotQA training memories at 512 tokens) and Stage A's (16 MuSiQue training pairs
at 256 tokens). The settings alternate within each round, so drifts in machine speed hit both.
"before": the attention as the code wrote it before (kept here); "whole batch": today's code
with the whole batch's weights at once; "chunked": today's code as it runs. The masks and the
result are the same in all three, up to bf16 rounding (tests/test_maskdropout.py).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import maskdropout
from memsafe_lib.config import FINETUNE_THREADS, scale_config
from memsafe_lib.encodings.encoders import PACKAGED_MINILM, BiEncoder, CrossEncoder, EncoderConfig, Pair
from memsafe_lib.encodings.finetune import FinetuneConfig, finetune, training_pairs
from memsafe_lib.estimators.concat import pair
from memsafe_lib.ledger import cpu_model
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import by_split
from memsafe_lib.variants.store import build

SETTINGS = {"before": 0, "whole batch": 1 << 62, "chunked": maskdropout.ATTENTION_CHUNK}
"""Value of ATTENTION_CHUNK per setting; "before": the previous code (:func:`attention_before`)."""
CURRENT = maskdropout.attention_scores


def attention_before(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float, dropout: float) -> torch.Tensor:
    """The attention as it was written before the chunking: weights of the whole batch, the
    softmax in fp32, then ``mask_dropout`` (a cast mask and two multiplications) on all of them."""
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = torch.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(maskdropout.mask_dropout(weights, dropout), value).transpose(1, 2).contiguous()


def step_seconds(pairs: list[Pair], max_length: int, batch_size: int, steps: int) -> float:
    """Seconds per optimiser step of a fresh encoder tuned on ``pairs`` (batches of ``batch_size``)."""
    model = CrossEncoder(EncoderConfig(model=PACKAGED_MINILM, max_length=max_length, bf16=True))
    labels = np.arange(len(pairs), dtype=np.float32) % 2
    start = time.perf_counter()
    finetune(model, pairs[:steps * batch_size], labels[:steps * batch_size],
             FinetuneConfig(batch_size=batch_size, include_bridge=False), progress=False)
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    configure_threads()
    scale = scale_config(args.scale)
    hotpot, hotpot_built = build("hotpotqa", "size-matched", scale)
    musique, musique_built = build("musique", "size-matched", scale)
    memories = [pair(v) for v in by_split(hotpot_built.variants)["train"][:8 * args.steps]]
    unit_pairs, _ = training_pairs(by_split(musique_built.variants)["train"], BiEncoder(EncoderConfig()),
                                   max_pairs=16 * args.steps)
    workloads = {"concat_ce, 8 memories at 512 tokens": (memories, 512, 8),
                 "Stage A, 16 pairs at 256 tokens": (unit_pairs, 256, 16)}
    rows = []
    for round_ in range(args.rounds):
        for workload, (pairs, window, batch) in workloads.items():
            for setting, chunk in SETTINGS.items():
                maskdropout.ATTENTION_CHUNK = chunk
                maskdropout.attention_scores = attention_before if setting == "before" else CURRENT
                seconds = step_seconds(pairs, window, batch, args.steps)
                rows.append({"round": round_ + 1, "workload": workload, "attention": setting,
                             "seconds_per_step": round(seconds, 3)})
                print(rows[-1], flush=True)
    maskdropout.ATTENTION_CHUNK = SETTINGS["chunked"]
    maskdropout.attention_scores = CURRENT
    table = pd.DataFrame(rows)
    median = table.groupby(["workload", "attention"]).seconds_per_step.median().unstack()
    summary = median.assign(speedup=median["before"] / median["chunked"]).reset_index()
    summary.insert(0, "cpu", cpu_model())
    summary.insert(1, "cpu_capability", torch.backends.cpu.get_cpu_capability())
    summary.insert(2, "finetune_threads", FINETUNE_THREADS)
    summary["rounds"] = args.rounds
    report = {row.workload: {"before_s": row["before"], "whole_batch_s": row["whole batch"],
                             "chunked_s": row["chunked"], "speedup": row["speedup"]} for _, row in summary.iterrows()}
    report["cpu"] = cpu_model()
    save_report("attention-chunk", "attention_chunk", args, hotpot.files + musique.files, report, table=summary)


if __name__ == "__main__":
    main()
