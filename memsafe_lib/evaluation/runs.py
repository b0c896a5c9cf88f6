"""Fit models on a construction and score them: one metrics row per (model, seed, split).

Each (model, seed) result is cached on disk under a key made of the code, data and
settings fingerprints, so an interrupted ``memsafe evaluate`` resumes where it stopped
and a changed input never reuses a stale result. Deterministic models are fitted once and
their result is reported under every seed (labelled ``deterministic``); those that read Stage A
encodings are fitted once per encoder seed (:func:`shared_fit`).
"""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig, encoder_seed_for
from memsafe_lib.encodings.encoders import default_device
from memsafe_lib.estimators.context import NeuralContext
from memsafe_lib.estimators.controls import Predictions
from memsafe_lib.estimators.registry import SET_MODELS, is_neural, make_model, seeds_for, stage_a_kinds
from memsafe_lib.evaluation.neural import build_context, context_summary
from memsafe_lib.io import atomic_open, sha256_bytes, write_csv, write_json
from memsafe_lib.ledger import code_fingerprint, data_fingerprint, record_run
from memsafe_lib.measures.metrics import (
    error_taxonomy,
    evidence_auprc,
    expected_calibration_error,
    macro_f1,
    missing_count_mae,
    unsafe_auroc,
)
from memsafe_lib.measures.risk_coverage import selective_report
from memsafe_lib.parallel import side_by_side
from memsafe_lib.progress import elapsed, log, step
from memsafe_lib.variants.construction import ConstructionResult, Variant, by_split, present_states, states_of
from memsafe_lib.variants.store import build
from memsafe_lib.variants.supervision import training_subset, with_silver_training

EVAL_SPLITS: tuple[str, ...] = ("validation", "test")
RISK_TARGET = 0.05


@dataclass
class FitResult:
    model: str
    seed: int
    deterministic: bool
    config: dict[str, Any]
    fit_seconds: float
    predictions: dict[str, Predictions]
    """Per evaluation split."""


def split_metrics(variants: Sequence[Variant], preds: Predictions) -> dict[str, Any]:
    """Every per-split metric of the paper for one model's predictions."""
    unsafe = [v.unsafe for v in variants]
    states = [v.state for v in variants]
    labels = present_states(states)
    row: dict[str, Any] = {
        "n_variants": len(variants),
        "n_base_queries": len({v.base_id for v in variants}),
        "prevalence": float(np.mean(unsafe)),
        "unsafe_auroc": unsafe_auroc(unsafe, preds.unsafe_prob),
        "macro_f1": macro_f1(states, list(preds.state), labels),
        "ece": expected_calibration_error(unsafe, np.clip(preds.unsafe_prob, 0.0, 1.0)),
        "evidence_auprc": None,
        "count_mae": None,
    }
    if preds.unit_scores is not None:
        row["evidence_auprc"] = evidence_auprc([[u.is_evidence for u in v.units] for v in variants], preds.unit_scores)
    if preds.missing_count is not None:
        row["count_mae"] = missing_count_mae([v.missing_count for v in variants], preds.missing_count)
    return row


def shared_fit(model: str, seed: int, context: NeuralContext | None) -> int | None:
    """Which seeds a deterministic model's one fit serves: every seed (None), except for models
    that read Stage A encodings (relevance aggregation), whose inputs change with the encoder
    seed; they are fitted once per encoder seed."""
    if context is not None and is_neural(model):
        return encoder_seed_for(seed, context.budget.encoder_seeds)
    return None


def _cache_key(dataset: str, construction: str, model: str, seed: int, result: ConstructionResult) -> str:
    # ids, splits and every unit's evidence label: silver targets or a training subset never
    # share a cached fit with the gold, full-data one
    variants = sha256_bytes("\n".join(v.variant_id + v.split + "".join("1" if u.is_evidence else "0" for u in v.units)
                                      for v in result.variants).encode())
    return sha256_bytes(f"{code_fingerprint()}|{dataset}|{construction}|{model}|{seed}|{variants}".encode())[:20]


def fit_and_predict(model: str, seed: int, splits: dict[str, list[Variant]], cache_dir: Path | None,
                    key: str | None, context: NeuralContext | None = None) -> FitResult:
    """Fit ``model`` with ``seed`` on train (selecting on validation) and predict the
    evaluation splits, reusing a cached result when one exists for the same inputs."""
    path = _cache_path(cache_dir, model, seed, key) if cache_dir and key else None
    label = f"{splits['train'][0].dataset}: {model} seed {seed}"
    if path is not None and path.exists():
        log(f"{label}: resumed from cache")
        with open(path, "rb") as fh:
            return pickle.load(fh)
    start = time.perf_counter()
    with step(f"{label}: fit and predict"):
        estimator = make_model(model, seed, context).fit(splits["train"], splits.get("validation"))
        predictions = {s: estimator.predict(splits[s]) for s in EVAL_SPLITS if splits.get(s)}
    result = FitResult(model, seed, bool(estimator.deterministic), dict(getattr(estimator, "config", {}) or {}),
                       time.perf_counter() - start, predictions)
    if path is not None:
        with atomic_open(path, "wb") as fh:
            pickle.dump(result, fh)
    return result


def _fit_job(shared: tuple[dict[str, list[Variant]], Path | None, NeuralContext], job: tuple[str, int, str]
             ) -> FitResult:
    splits, cache_dir, context = shared
    model, seed, key = job
    return fit_and_predict(model, seed, splits, cache_dir, key, context)


SIDE_BY_SIDE_MODELS: frozenset[str] = SET_MODELS | {"concat_ce"}
"""Models whose seeded fits run side by side in worker processes, in one batch per dataset:
the Stage B set models, and the concatenated cross-encoder (fitted and scored with one thread,
:data:`memsafe_lib.config.FINETUNE_THREADS`). The longest fits (the cross-encoder's) start
first, so the short Stage B fits fill the other core."""


def _fit_side_by_side(result: ConstructionResult, jobs: Sequence[tuple[str, int]],
                      splits: dict[str, list[Variant]], cache_dir: Path | None,
                      context: NeuralContext | None) -> dict[tuple[str, int], FitResult]:
    """Fit the :data:`SIDE_BY_SIDE_MODELS` among ``jobs`` that have no cached result, side by
    side (:mod:`memsafe_lib.parallel`); each result is cached by its worker as it ends."""
    if context is None or context.device != "cpu" or config.fit_workers() < 2:
        return {}
    todo = []
    for model, seed in jobs:
        if model in SIDE_BY_SIDE_MODELS:
            key = _cache_key(result.dataset, result.construction, model, seed, result)
            if not (cache_dir and _cache_path(cache_dir, model, seed, key).exists()):
                todo.append((model, seed, key))
    if len(todo) < 2:
        return {}
    todo = [j for j in todo if j[0] not in SET_MODELS] + [j for j in todo if j[0] in SET_MODELS]

    def report(job: tuple[str, int, str], fit: FitResult) -> None:
        log(f"{result.dataset}: {job[0]} seed {job[1]}: fitted in a worker in {elapsed(fit.fit_seconds)}")

    what = "Stage B fits side by side"
    if any(model not in SET_MODELS for model, _, _ in todo):
        what = "fits side by side (Stage B and the concatenated cross-encoder)"
    with step(f"{result.dataset}: {len(todo)} {what}"):
        fits = side_by_side(_fit_job, todo, (splits, cache_dir, context.without_encoders()),
                            label=f"fits {result.dataset}", on_result=report)
    return {(model, seed): fit for (model, seed, _), fit in zip(todo, fits, strict=True)}


def _cache_path(cache_dir: Path, model: str, seed: int, key: str) -> Path:
    return cache_dir / f"{model}-{seed}-{key}.pkl"


def evaluate(
    result: ConstructionResult,
    models: Sequence[str],
    seeds: Sequence[int],
    *,
    cache_dir: Path | None = None,
    progress: bool = True,
    context: NeuralContext | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Return (metrics rows, per-variant predictions, test error taxonomies).

    Neural models need ``context`` (Stage A encodings and the Stage B configuration)."""
    splits = by_split(result.variants)
    if not splits.get("train"):
        raise ValueError(f"{result.dataset}/{result.construction}: no training variants")
    if not splits.get("test"):
        raise ValueError(f"{result.dataset}/{result.construction}: no test variants among {len(result.variants)} "
                         f"(splits: {', '.join(sorted(splits))}); too few questions or patients: raise the cap")
    rows, pred_rows, taxonomy = [], [], {}
    jobs = [(m, s) for m in models for s in seeds_for(m, seeds)]
    prefitted = _fit_side_by_side(result, jobs, splits, cache_dir, context)
    fitted: dict[tuple[str, int | None], FitResult] = {}
    for model, seed in tqdm(jobs, desc=f"evaluate {result.dataset}", disable=not progress):
        done = prefitted.get((model, seed)) or fitted.get((model, shared_fit(model, seed, context)))
        if (model, seed) not in prefitted and (done is None or not done.deterministic):
            key = _cache_key(result.dataset, result.construction, model, seed, result)
            done = fit_and_predict(model, seed, splits, cache_dir, key, context)
            fitted[(model, shared_fit(model, seed, context))] = done
        base = {"dataset": result.dataset, "construction": result.construction, "model": model, "seed": seed,
                "deterministic": done.deterministic, "fitted_seed": done.seed, "config": json.dumps(done.config),
                "fit_seconds": done.fit_seconds}
        for split, preds in done.predictions.items():
            variants = splits[split]
            row = {**base, "split": split, **split_metrics(variants, preds)}
            if split == "test" and "validation" in done.predictions:
                val = splits["validation"]
                sel = selective_report([v.unsafe for v in val], done.predictions["validation"].unsafe_prob,
                                       [v.unsafe for v in variants], preds.unsafe_prob, alpha=RISK_TARGET)
                row.update({"aurc": sel["aurc"], "risk_target": RISK_TARGET, "risk_threshold": sel["threshold"],
                            "coverage_at_target": sel["coverage"], "realized_risk": sel["realized_risk"],
                            "coverage_ceiling": sel["coverage_ceiling"], "aurc_min": sel["aurc_min"]})
                taxonomy[f"{model}/{seed}"] = error_taxonomy(
                    [v.state for v in variants], list(preds.state),
                    [v.n_evidence - v.missing_count for v in variants],
                    labels=list(states_of(variants)))
            rows.append(row)
            for i, v in enumerate(variants):
                pred_rows.append({
                    "model": model, "seed": seed, "split": split, "variant_id": v.variant_id, "base_id": v.base_id,
                    "state": v.state, "unsafe": v.unsafe, "missing_count": v.missing_count,
                    "surviving": v.n_evidence - v.missing_count, "unsafe_prob": float(preds.unsafe_prob[i]),
                    "pred_state": preds.state[i],
                    "pred_missing": None if preds.missing_count is None else float(preds.missing_count[i]),
                })
    return pd.DataFrame(rows), pd.DataFrame(pred_rows), taxonomy



def run_evaluation(dataset: str, models: Sequence[str], seeds: Sequence[int], scale: ScaleConfig,
                   construction: str = "size-matched", progress: bool = True,
                   device: str | None = None, folder: str = config.EVALUATE, supervision: str = "gold",
                   train_fraction: float = 1.0, question_cap: int | None = None) -> dict[str, Path]:
    """Everything ``memsafe evaluate`` does: build, (run Stage A,) fit, score, write, ledger.

    Results go to ``<folder>/<dataset>/<construction>/`` (notebook 03 keeps its ablations
    apart from Table "main"); fitted models are cached under ``evaluate/`` for every folder,
    so a model already fitted for another table is only loaded. ``supervision="silver"``
    trains on answer-matched per-unit targets, ``train_fraction`` on a nested hash subset of
    the training questions; either changes the construction's name (``size-matched-silver``,
    ``size-matched-train25``) and so where results and caches go."""
    loaded, result = build(dataset, construction, scale, question_cap=question_cap)
    if supervision not in ("gold", "silver"):
        raise ValueError(f"supervision must be 'gold' or 'silver', not {supervision!r}")
    if supervision == "silver":
        result = with_silver_training(result)
    result = training_subset(result, train_fraction)
    construction = result.construction
    out = scale.output_dir(folder, dataset, construction)
    cache = scale.cache_dir(config.EVALUATE, dataset, construction)
    context = None
    neural_settings: dict[str, Any] = {}
    finetuned, frozen = stage_a_kinds(models)
    if finetuned or frozen:
        context = build_context(result, scale, seeds, device=device or default_device(), progress=progress,
                                finetuned=finetuned, frozen=frozen)
        summary = context_summary(context)
        neural_settings = {"budget": summary["budget"], "stage_b": summary["stage_b"]}
    metrics, predictions, taxonomy = evaluate(result, models, seeds, cache_dir=cache, progress=progress,
                                              context=context)
    files = {
        "metrics": write_csv(out / "metrics.csv", metrics),
        "predictions": write_csv(out / "predictions.csv.gz", predictions),
        "taxonomy": write_json(out / "taxonomy.json", taxonomy),
    }
    if neural_settings:
        files["neural"] = write_json(out / "neural.json", summary)
    means = metrics[metrics["split"] == "test"].groupby("model")[["unsafe_auroc", "macro_f1"]].mean().round(4)
    record_run(f"evaluate:{dataset}" if folder == config.EVALUATE else f"evaluate:{folder}:{dataset}", scale,
               raw_files=loaded.files,
               settings={"dataset": dataset, "construction": construction, "supervision": supervision,
                         "train_fraction": train_fraction, "models": list(models),
                         "seeds": list(seeds), "data": data_fingerprint(loaded.files), **neural_settings},
               outputs=files.values(), metrics={"test_mean": means.to_dict(orient="index"),
                                                **({"stage_a": summary["stage_a"]} if context else {})})
    return files

