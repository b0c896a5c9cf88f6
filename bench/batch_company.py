"""Whether a unit's pretrained embedding depends on the batch it is embedded in: the fp32
query-free unit embeddings (the question-blind set model's input, and the frozen bi-encoder
rung of notebook 03) of the first N MuSiQue unit texts, embedded alone, again alone, and in
the company of N other units.

Same texts in the same batches give the same bits; other company changes the length buckets and
so the padded matmul shapes, and with them the order of floating-point sums. A run that fills
the embedding cache in another order (an untimed warm-up, say) gets embeddings that differ in
the last bits, which moves only a model whose scores sit on near-ties.

    cd bench && MEMSAFE_RECORD=1 ../.venv/bin/python batch_company.py [--units 512]
"""

from __future__ import annotations

import numpy as np
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.data.loader import load_dataset
from memsafe_lib.encodings.encoders import BiEncoder, EncoderConfig, unit_string
from memsafe_lib.estimators.blind import BlindSetConfig, blind_set_config
from memsafe_lib.ledger import cpu_model
from memsafe_lib.threads import configure_threads


def embed(texts: list[str], blind: BlindSetConfig) -> np.ndarray:
    """``texts`` embedded by a fresh fp32 unit embedder, as the scale's blind set model reads
    them (no cache shared between calls)."""
    encoder = BiEncoder(EncoderConfig(model=blind.model, max_length=blind.max_length, bf16=False))
    return np.asarray(encoder.embed(texts, progress=False), dtype=np.float32)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--units", type=int, default=512, help="units embedded, and as many as company")
    args = parser.parse_args()
    configure_threads()
    blind = blind_set_config(config.scale_config(args.scale))
    loaded = load_dataset("musique")
    texts = list(dict.fromkeys(unit_string(u.title, u.text) for q in loaded.queries for u in q.units))
    if len(texts) < 2 * args.units:
        raise SystemExit(f"musique has {len(texts)} distinct unit texts, fewer than 2 x --units {args.units}")
    alone, again = embed(texts[:args.units], blind), embed(texts[:args.units], blind)
    company = embed(texts[:2 * args.units], blind)[:args.units]
    moved = np.abs(alone - company)
    report = {"cpu": cpu_model(), "units": args.units, "window": blind.max_length,
              "max_abs_diff_same_batches": float(np.abs(alone - again).max()),
              "max_abs_diff_other_company": float(moved.max()),
              "share_of_units_moved": float((moved.max(axis=1) > 0).mean()),
              "max_abs_cosine_diff": float(np.abs((alone * company).sum(1)
                                                  / np.linalg.norm(alone, axis=1) / np.linalg.norm(company, axis=1)
                                                  - 1).max())}
    save_report("batch-company", "batch_company", args, loaded.files, report)


if __name__ == "__main__":
    main()
