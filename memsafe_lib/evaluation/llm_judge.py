"""The LLM judge's evaluation: score a deterministic subset of a dataset's test split and
compare it, on exactly those variants, with the models ``memsafe evaluate`` fitted."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig
from memsafe_lib.data.loader import hash_rank
from memsafe_lib.encodings.encoders import default_device
from memsafe_lib.estimators.judge import PACKAGED_SMOLLM2, LLMJudge
from memsafe_lib.io import read_csv, write_csv
from memsafe_lib.ledger import data_fingerprint, record_run
from memsafe_lib.measures.metrics import average_precision, unsafe_auroc
from memsafe_lib.progress import step
from memsafe_lib.variants.construction import Variant
from memsafe_lib.variants.store import build


def judge_subset(test: Sequence[Variant], n_base: int | None, salt: str = "judge-subset") -> list[Variant]:
    """All variants of the first ``n_base`` test questions in salted-hash order (the paper
    scores a deterministic 1,000-question MuSiQue subset); the reader study uses its own salt."""
    bases = sorted({v.base_id for v in test}, key=lambda b: hash_rank(b, salt))
    keep = set(bases if n_base is None else bases[:n_base])
    return [v for v in test if v.base_id in keep]


def compare_on_subset(subset: Sequence[Variant], scores: np.ndarray | dict[str, np.ndarray], predictions: Any,
                      models: Sequence[str]) -> list[dict[str, Any]]:
    """Each judge's AUROC/AUPRC (``scores``: one array, named ``llm_judge``, or name -> array)
    and, on the same variants, each model's (mean over its seeds)."""
    y = np.array([v.unsafe for v in subset])
    judges = scores if isinstance(scores, dict) else {"llm_judge": scores}
    rows = [{"model": name, "n_seeds": 1, "unsafe_auroc": unsafe_auroc(y, s), "unsafe_auprc": average_precision(y, s)}
            for name, s in judges.items()]
    ids = [v.variant_id for v in subset]
    test = predictions[predictions.split == "test"]
    for model in models:
        per_seed = []
        for _, group in test[test.model == model].groupby("seed"):
            s = group.set_index("variant_id").reindex(ids)["unsafe_prob"].to_numpy()
            if np.isnan(s).any():
                raise ValueError(f"{model}: missing test predictions for judged variants")
            per_seed.append((unsafe_auroc(y, s), average_precision(y, s)))
        if per_seed:
            rows.append({"model": model, "n_seeds": len(per_seed),
                         "unsafe_auroc": float(np.mean([a for a, _ in per_seed])),
                         "unsafe_auprc": float(np.mean([b for _, b in per_seed]))})
    return rows


def evaluate_judge(dataset: str, scale: ScaleConfig,
                   models: Sequence[str] = ("memsafe", "mean_pool", "tfidf", "lexset"),
                   llm: str = PACKAGED_SMOLLM2, shots: int = 0, device: str | None = None,
                   progress: bool = True) -> dict[str, Path]:
    """Score the judge subset of ``dataset``'s test split and compare with the evaluated
    models (``memsafe evaluate`` must have run); writes judge_scores.csv.gz and
    judge_comparison.csv beside the evaluation and a ledger entry. The judge runs on
    ``device``, by default the run's (a GPU where torch sees one, as Stage A and B)."""
    loaded, result = build(dataset, "size-matched", scale)
    out = scale.output_dir(config.EVALUATE, dataset, "size-matched")
    budget = scale.neural
    subset = judge_subset([v for v in result.variants if v.split == "test"], budget.judge_max_base_queries)
    cache = scale.cache_dir(config.EVALUATE, dataset, "size-matched") / "judge.sqlite"
    judge = LLMJudge(llm, shots=shots, device=device or default_device(), cache_path=cache)
    judge.fit([v for v in result.variants if v.split == "train"])
    with step(f"LLM judge on {dataset}: {len(subset)} test memories"):
        scores = judge.scores(subset, progress=progress)
    rows = compare_on_subset(subset, scores, read_csv(out / "predictions.csv.gz"), models)
    comparison = pd.DataFrame(rows).assign(dataset=dataset, n_variants=len(subset),
                                           n_base_queries=len({v.base_id for v in subset}),
                                           judge=llm, shots=shots, truncated_prompts=judge.truncated)
    files = {
        "scores": write_csv(out / "judge_scores.csv.gz", pd.DataFrame(
            {"variant_id": [v.variant_id for v in subset], "base_id": [v.base_id for v in subset],
             "state": [v.state for v in subset], "unsafe": [v.unsafe for v in subset], "judge_score": scores})),
        "comparison": write_csv(out / "judge_comparison.csv", comparison),
    }
    record_run(f"judge:{dataset}", scale, raw_files=loaded.files,
               settings={"dataset": dataset, "llm": llm, "shots": shots, "n_base": budget.judge_max_base_queries,
                         "judge": judge.config, "data": data_fingerprint(loaded.files)},
               outputs=files.values(), metrics={r["model"]: round(r["unsafe_auroc"], 4) for r in rows})
    return files
