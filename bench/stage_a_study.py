"""Which Stage A makes the cpu scale a fair test of MemSafe: one row per (point, dataset),
every point kept, decided on *validation* only (the test split is never encoded or read).

    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_a_study.py --scale cpu [--points NAME ...]

Per point and QA dataset: per-unit evidence AUROC/AUPRC of the fold encoders' relevance
logits on the validation memories' unique (q, u) and (q || u_top, u) pairs; MemSafe's
memory-level validation unsafe AUROC on three Stage B seeds against LexSet's (LexSet does not
read Stage A, so it is fitted once per dataset and seed); the minutes Stage A took (both fold
encoders side by side, then encoding the training and validation memories) and how many
encoder passes it made (pairs for a cross-encoder, texts for a bi-encoder), with the CPU.

Stage B uses the point notebook 02 selected on MuSiQue validation under today's Stage A
(width 256, dropout 0.1, lr 3e-4; the grid is not re-run per point) and the scale's epochs,
precision and patience. Stage A is the library's own (:func:`memsafe_lib.estimators.neural_context.stage_a_for`)
with the point's budget, so its encoders and encodings land in the caches a notebook run
with that budget reuses. Each finished (point, dataset) row and each fit is cached under
``.cache/stage_a_study/``, keyed by the code it ran (:data:`STUDY_CODE`); a killed run resumes.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.config import FAMILY_A_DATASETS, ScaleConfig, scale_config
from memsafe_lib.encodings.encoders import unit_string
from memsafe_lib.encodings.stagea import StageAResult
from memsafe_lib.estimators.memsafe import MemSafe
from memsafe_lib.estimators.neural_context import stage_a_for
from memsafe_lib.estimators.registry import MODELS
from memsafe_lib.estimators.selection import validation_scores
from memsafe_lib.estimators.setmodel import SetModelConfig
from memsafe_lib.io import canonical_json, sha256_bytes, write_json
from memsafe_lib.ledger import cpu_model, module_fingerprint
from memsafe_lib.measures.metrics import average_precision, unsafe_auroc
from memsafe_lib.parallel import side_by_side
from memsafe_lib.precision import bf16_native
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import ConstructionResult, Variant, by_split
from memsafe_lib.variants.store import build

QA = tuple(d for d in FAMILY_A_DATASETS if d != "squad2")
"""The pool: the three multi-hop QA datasets (never SQuAD 2.0, the transfer target)."""
BI = {"stage_a_scorer": "bi", "finetune_lr": 5e-5, "finetune_head_lr": 1e-2}
"""The bi-encoder recipe of the issue's probe: body lr 5e-5, cosine scale and bias at 1e-2."""
POINTS: dict[str, dict[str, Any]] = {
    "bi-encoder, pooled 3 x 4k pairs": {**BI, "stage_a_pool": QA},
    "cross-encoder, own 4k pairs (cpu today)": {},
    "bi-encoder, pooled 3 x 4k pairs, unit + product": {**BI, "stage_a_pool": QA, "stage_a_features": "unit_product"},
    "bi-encoder, own 4k pairs": BI,
    "bi-encoder, pooled 3 x 8k pairs": {**BI, "stage_a_pool": QA, "finetune_max_pairs": 8000},
    "cross-encoder, pooled 3 x 4k pairs": {"stage_a_pool": QA},
    "cross-encoder, own 8k pairs": {"finetune_max_pairs": 8000},
    "bi-encoder, pooled 3 x 16k pairs": {**BI, "stage_a_pool": QA, "finetune_max_pairs": 16000},
}
"""Overrides of the scale's :class:`~memsafe_lib.config.NeuralBudget`, in the order run."""
STAGE_B_POINT = {"width": 256, "dropout": 0.1, "lr": 3e-4}
"""Notebook 02's selection at cpu in the run before this study; the committed cold run's grid
(``artifacts/cpu/02_training/stage_b_grid.json``) selects dropout 0.2. Kept fixed so the
study's rows stay comparable."""
ENCODER_SEED = 17
STUDY_CODE = ("memsafe_lib.estimators.neural_context", "memsafe_lib.estimators.registry")
"""What a row computes with (Stage A, the variants, MemSafe, LexSet, and what they import): its
cache survives edits elsewhere (the CLI, reports, notebooks), not edits to these."""


def study_code() -> str:
    h = hashlib.sha256(module_fingerprint(*STUDY_CODE).encode())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def train_and_validation(result: ConstructionResult) -> ConstructionResult:
    """The memories the study may read: training and validation only."""
    return replace(result, variants=[v for v in result.variants if v.split in ("train", "validation")])


def unit_metrics(stage_a: StageAResult, validation: list[Variant]) -> dict[str, float]:
    """Per-unit evidence AUROC/AUPRC of the relevance logits over the validation memories'
    unique plain and bridge pairs (a pair shared by several memories counts once)."""
    out: dict[str, float] = {}
    for kind in ("plain", "bridge"):
        seen: dict[tuple[str, str, str], tuple[float, bool]] = {}
        for v in validation:
            e = stage_a.encodings[v.variant_id]
            texts = [unit_string(u.title, u.text) for u in v.units]
            logits = e.plain_logit if kind == "plain" else e.bridge_logit
            bridge = texts[e.top_unit] if kind == "bridge" else ""
            for u, text, logit in zip(v.units, texts, logits, strict=True):
                seen.setdefault((v.question, bridge, text), (float(logit), bool(u.is_evidence)))
        scores = np.array([s for s, _ in seen.values()])
        labels = np.array([y for _, y in seen.values()])
        out[f"unit_{kind}_auroc"] = float(unsafe_auroc(labels, scores))
        out[f"unit_{kind}_auprc"] = float(average_precision(labels, scores))
    return out


def _fit(shared: tuple[str, Any, dict[str, list[Variant]], SetModelConfig], seed: int) -> float:
    """Validation unsafe AUROC of one seed's MemSafe (``encodings``) or LexSet (None)."""
    kind, encodings, splits, set_config = shared
    model = MODELS["lexset"](seed) if kind == "lexset" else MemSafe(encodings, seed, set_config, device="cpu")
    model.fit(splits["train"], splits["validation"])
    return validation_scores(model.predict, splits["validation"])[0]


def seed_aurocs(kind: str, encodings: Any, splits: dict[str, list[Variant]], set_config: SetModelConfig,
                seeds: tuple[int, ...], cache: Any, key: dict[str, Any]) -> list[float]:
    path = cache / f"{kind}-{sha256_bytes(canonical_json(key).encode())[:20]}.json"
    key = json.loads(json.dumps(key))  # as it reads back (tuples as lists)
    if path.exists() and json.loads(path.read_text())["key"] == key:
        return list(json.loads(path.read_text())["aurocs"])
    aurocs = side_by_side(_fit, list(seeds), (kind, encodings, splits, set_config), label=f"{kind} fits")
    write_json(path, {"key": key, "aurocs": aurocs})
    return [float(a) for a in aurocs]


def study_row(name: str, scale: ScaleConfig, dataset: str, cache: Any) -> dict[str, Any]:
    budget = replace(scale.neural, **POINTS[name])
    point_scale = replace(scale, neural=budget)
    result = build(dataset, "size-matched", point_scale)[1]
    result = train_and_validation(result)
    splits = by_split(result.variants)
    start = time.perf_counter()
    stage_a = stage_a_for(result, point_scale, ENCODER_SEED, "cpu", progress=True)
    wall = time.perf_counter() - start
    set_config = SetModelConfig.for_budget(budget, **STAGE_B_POINT)
    code = study_code()
    memsafe = seed_aurocs("memsafe", stage_a.encodings, splits, set_config, scale.seeds, cache,
                          {"point": POINTS[name], "dataset": dataset, "code": code, "stage_b": asdict(set_config)})
    lexset = seed_aurocs("lexset", None, splits, set_config, scale.seeds, cache, {"dataset": dataset, "code": code})
    diffs = np.array(memsafe) - np.array(lexset)
    summary = stage_a.summary()
    return {"point": name, "dataset": dataset, "scorer": budget.stage_a_scorer,
            "features": budget.stage_a_features if budget.stage_a_scorer == "bi" else "",
            "pooled": "+".join(budget.stage_a_pool), "pairs_per_fold": summary["train_pairs_per_fold"][0],
            "body_lr": budget.finetune_lr, "head_lr": budget.finetune_head_lr, "max_length": budget.max_length,
            **unit_metrics(stage_a, splits["validation"]),
            "memsafe_validation_auroc": float(np.mean(memsafe)), "lexset_validation_auroc": float(np.mean(lexset)),
            "memsafe_minus_lexset": float(diffs.mean()), "seeds_memsafe_ahead": int((diffs > 0).sum()),
            "memsafe_seed_aurocs": " ".join(f"{a:.4f}" for a in memsafe),
            "lexset_seed_aurocs": " ".join(f"{a:.4f}" for a in lexset),
            "minutes_finetune": round(stage_a.seconds.get("finetune", 0.0) / 60, 2),
            "minutes_encode": round(stage_a.seconds.get("encode", 0.0) / 60, 2),
            "minutes_stage_a_wall": round(wall / 60, 2), "encoder_passes": summary["pairs_encoded"],
            "train_memories": len(splits["train"]), "validation_memories": len(splits["validation"])}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--datasets", nargs="+", default=list(QA), choices=list(QA))
    parser.add_argument("--points", nargs="+", default=list(POINTS), choices=list(POINTS), metavar="POINT")
    args = parser.parse_args()
    configure_threads()
    scale = scale_config(args.scale)
    cache = scale.output_dir(config.BENCH) / ".cache" / "stage_a_study"
    cache.mkdir(parents=True, exist_ok=True)
    cpu = {"cpu": cpu_model(), "bf16_units": bf16_native("cpu")}
    rows = []
    for name in args.points:
        for dataset in args.datasets:
            done = cache / f"row-{slug(name)}-{dataset}.json"
            settings = json.loads(json.dumps({"point": POINTS[name], "code": study_code(), "scale": scale.name}))
            if done.exists() and (saved := json.loads(done.read_text()))["settings"] == settings:
                row = saved["row"]
            else:
                row = {**study_row(name, scale, dataset, cache), **cpu}
                write_json(done, {"settings": settings, "row": row})
            print({k: row[k] for k in ("point", "dataset", "unit_plain_auprc", "memsafe_validation_auroc",
                                       "lexset_validation_auroc", "minutes_stage_a_wall")}, flush=True)
            rows.append(row)
    table = pd.DataFrame(rows)
    loaded = [build(d, "size-matched", scale)[0] for d in args.datasets]
    save_report("stage_a_study", "stage_a_study", args, [f for s in loaded for f in s.files],
                {"stage_b_point": STAGE_B_POINT, "encoder_seed": ENCODER_SEED, "seeds": list(scale.seeds),
                 "rows": table.to_dict(orient="records")}, table=table)


if __name__ == "__main__":
    main()
