"""Fit models on a construction and score them: one metrics row per (model, seed, split).

Each (model, seed) result is cached on disk under a key made of the code, data and
settings fingerprints (for neural models, the Stage A encoder and the budget they read), so
an interrupted ``memsafe evaluate`` resumes where it stopped and a changed input never
reuses a stale result. Deterministic models are fitted once and
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

import pandas as pd

from memsafe_lib import config
from memsafe_lib.config import ClinicalSetting, ScaleConfig, encoder_seed_for
from memsafe_lib.encodings.encoders import default_device
from memsafe_lib.estimators.blind import BLIND_CONTROLS, blind_set_config, embed_units
from memsafe_lib.estimators.context import NeuralContext
from memsafe_lib.estimators.controls import Predictions
from memsafe_lib.estimators.neural_context import STAGE_A_TUNED_ON, build_context, context_summary, fit_inputs
from memsafe_lib.estimators.registry import (
    LEXSET_VARIANTS,
    SET_MODELS,
    fitted_once,
    frozen_representations,
    is_neural,
    make_model,
    seeds_for,
    stage_a_kinds,
)
from memsafe_lib.estimators.split_metrics import EVAL_SPLITS, split_metrics
from memsafe_lib.io import atomic_open, canonical_json, sha256_bytes, write_csv, write_json
from memsafe_lib.ledger import code_fingerprint, data_fingerprint, record_run
from memsafe_lib.measures.metrics import (
    error_taxonomy,
)
from memsafe_lib.measures.risk_coverage import selective_report
from memsafe_lib.parallel import side_by_side
from memsafe_lib.precision import signature
from memsafe_lib.progress import elapsed, log, progress_bar, step
from memsafe_lib.variants.construction import ConstructionResult, Variant, by_split, states_of
from memsafe_lib.variants.store import build
from memsafe_lib.variants.supervision import training_subset, with_silver_training

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


def write_predictions(path: Path, predictions: pd.DataFrame) -> Path:
    """Per-variant scores in pandas' shortest round-trip form, so every metric recomputes from
    them exactly (`memsafe verify`, check 9); ten significant digits tie scores near 1."""
    return write_csv(path, predictions, float_format=None)


def shared_fit(model: str, seed: int, context: NeuralContext | None) -> int | None:
    """Which seeds a deterministic model's one fit serves: every seed (None), except for models
    that read Stage A encodings (relevance aggregation), whose inputs change with the encoder
    seed; they are fitted once per encoder seed."""
    if context is not None and is_neural(model):
        return encoder_seed_for(seed, context.budget.encoder_seeds)
    return None


def _cache_key(dataset: str, construction: str, model: str, seed: int, result: ConstructionResult,
               context: NeuralContext | None = None) -> str:
    """The key of a cached (model, seed) fit: code, precision, data and everything the model
    reads from ``context`` (neural models: :func:`~memsafe_lib.estimators.neural_context.fit_inputs`,
    so another encoder or budget is a new fit). A model that reads no context keeps the key
    it has without one, so changing the encoder reuses the baselines' fits."""
    # ids, splits and every unit's evidence label: silver targets or a training subset never
    # share a cached fit with the gold, full-data one
    variants = sha256_bytes("\n".join(v.variant_id + v.split + "".join("1" if u.is_evidence else "0" for u in v.units)
                                      for v in result.variants).encode())
    # and the precision neural models compute in here (bf16 or its fp32 fallback)
    precision = signature(default_device())
    text = f"{code_fingerprint()}|{precision}|{dataset}|{construction}|{model}|{seed}|{variants}"
    if context is not None and is_neural(model):
        text += "|" + canonical_json(fit_inputs(context, model, seed))
    return sha256_bytes(text.encode())[:20]


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


SIDE_BY_SIDE_MODELS: frozenset[str] = SET_MODELS | {"concat_ce", "joint_8k", "lexset", *LEXSET_VARIANTS, "blind_set",
                                                    "blind_unit", "blind_bow", "tfidf", "sc_tfidf"}
"""Models whose fits run side by side in worker processes: the Stage B set models, the
concatenated cross-encoder (fitted and scored with one thread,
:data:`memsafe_lib.config.FINETUNE_THREADS`), LexSet and the question-blind set model (one
thread wherever they run) and the text baselines that take more than a few seconds (one
thread: :func:`memsafe_lib.config.fit_threads`). Fitted here, one after another, each would
leave the other core idle: 36 minutes of a cold cpu run did (notebooks 02 and 07)."""


@dataclass(frozen=True)
class FitBatch:
    """One run's share of a side-by-side batch: its splits, cache and context (Stage A
    encodings only), and the (model, seed, cache key) fits it still lacks."""

    dataset: str
    splits: dict[str, list[Variant]]
    cache_dir: Path
    context: NeuralContext
    todo: tuple[tuple[str, int, str], ...]


def pending_fits(result: ConstructionResult, jobs: Sequence[tuple[str, int]], splits: dict[str, list[Variant]],
                 cache_dir: Path | None, context: NeuralContext | None) -> FitBatch | None:
    """The :data:`SIDE_BY_SIDE_MODELS` fits among ``jobs`` without a cached result, or None when
    fits do not run side by side here (no cache, not on CPU, one worker)."""
    if context is None or cache_dir is None or context.device != "cpu" or config.fit_workers() < 2:
        return None
    todo, queued = [], set()
    for model, seed in jobs:
        if fitted_once(model):  # one fit serves every seed (evaluate): queue the first seed's
            if model in queued:
                continue
            queued.add(model)
        if model in SIDE_BY_SIDE_MODELS:
            key = _cache_key(result.dataset, result.construction, model, seed, result, context)
            if not _cache_path(cache_dir, model, seed, key).exists():
                todo.append((model, seed, key))
    return FitBatch(result.dataset, splits, cache_dir, context.without_encoders(), tuple(todo)) if todo else None


def _batch_job(shared: Sequence[FitBatch | None], job: tuple[int, str, int, str]) -> FitResult:
    index, model, seed, key = job
    batch = shared[index]
    assert batch is not None
    return fit_and_predict(model, seed, batch.splits, batch.cache_dir, key, batch.context)


def fit_batches(batches: Sequence[FitBatch | None]) -> list[dict[tuple[str, int], FitResult]]:
    """Every pending fit of several runs in one side-by-side batch (:mod:`memsafe_lib.parallel`);
    each result is cached by its worker as it ends. Pooling matters because one run's three
    seeds on two workers leave a core idle for a whole fit at the end of its batch; pooled,
    the next run's fits fill it. Order (longest first, a greedy schedule): the cross-encoder's
    fits, then set-model fits by the size of their run's training split, largest first, then
    the short LexSet fits, which fill the gaps."""
    jobs = [(i, model, seed, key) for i, b in enumerate(batches) if b is not None for model, seed, key in b.todo]
    out: list[dict[tuple[str, int], FitResult]] = [{} for _ in batches]
    if len(jobs) < 2:
        return out

    def longest_first(job: tuple[int, str, int, str]) -> tuple[int, int]:
        batch = batches[job[0]]
        kind = 1 if job[1] in {*SET_MODELS, "blind_set"} else 0 if job[1] in ("concat_ce", "joint_8k") else 2
        return kind, -len(batch.splits["train"]) if batch else 0

    jobs.sort(key=longest_first)  # stable: seeds keep their order

    def report(job: tuple[int, str, int, str], fit: FitResult) -> None:
        log(f"{batches[job[0]].dataset}: {job[1]} seed {job[2]}: fitted in a worker "  # type: ignore[union-attr]
            f"in {elapsed(fit.fit_seconds)}")

    active = [b for b in batches if b is not None and b.todo]
    datasets = ", ".join(sorted({b.dataset for b in active}))
    where = datasets + (f" ({len(active)} runs)" if len(active) > 1 else "")
    what = "Stage B fits side by side"
    models = {model for _, model, _, _ in jobs}
    if models - SET_MODELS:  # named, so the time table can tell what the batch held
        named = (("Stage B", bool(models & SET_MODELS)), ("concatenated cross-encoder", "concat_ce" in models),
                 ("joint encoder", "joint_8k" in models),
                 ("LexSet", any(m.startswith("lexset") for m in models)),
                 ("blind controls", bool(models & set(BLIND_CONTROLS))),
                 ("TF-IDF", bool(models & {"tfidf", "sc_tfidf"})))
        kinds = [kind for kind, present in named if present]
        what = f"fits side by side ({', '.join(kinds)})"
    with step(f"{where}: {len(jobs)} {what}"):
        fits = side_by_side(_batch_job, jobs, list(batches), label=f"fits {datasets}", on_result=report)
    for (index, model, seed, _), fit in zip(jobs, fits, strict=True):
        out[index][(model, seed)] = fit
    return out


def checked_splits(result: ConstructionResult) -> dict[str, list[Variant]]:
    """The construction's splits; a run without training or test variants fails before any fit."""
    splits = by_split(result.variants)
    if not splits.get("train"):
        raise ValueError(f"{result.dataset}/{result.construction}: no training variants")
    if not splits.get("test"):
        raise ValueError(f"{result.dataset}/{result.construction}: no test variants among {len(result.variants)} "
                         f"(splits: {', '.join(sorted(splits))}); too few questions or patients: raise the cap")
    return splits


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
    prefitted: dict[tuple[str, int], FitResult] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """Return (metrics rows, per-variant predictions, test error taxonomies).

    Neural models need ``context`` (Stage A encodings and the Stage B configuration);
    ``prefitted`` holds fits already made side by side for this run (:func:`fit_batches`)."""
    splits = checked_splits(result)
    rows, pred_rows, taxonomy = [], [], {}
    jobs = [(m, s) for m in models for s in seeds_for(m, seeds)]
    prefitted = {**fit_batches([pending_fits(result, jobs, splits, cache_dir, context)])[0], **(prefitted or {})}
    fitted: dict[tuple[str, int | None], FitResult] = {}
    for model, seed in progress_bar(jobs, desc=f"evaluate {result.dataset}", disable=not progress):
        done = prefitted.get((model, seed)) or fitted.get((model, shared_fit(model, seed, context)))
        if (model, seed) in prefitted and done.deterministic:
            fitted[(model, shared_fit(model, seed, context))] = done  # serves the other seeds
        if (model, seed) not in prefitted and (done is None or not done.deterministic):
            key = None if cache_dir is None else _cache_key(result.dataset, result.construction, model, seed, result,
                                                            context)
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



@dataclass(frozen=True)
class EvaluationRequest:
    """One ``memsafe evaluate`` run: which dataset, construction and models, trained how.

    ``supervision="silver"`` trains on answer-matched per-unit targets, ``train_fraction`` on
    a nested hash subset of the training questions, ``clinical`` selects clinical patients and
    questions; each changes the construction's name (``size-matched-silver``,
    ``size-matched-train25``, ``clinical-1in16-cap5000``) and so where results and caches go. Results go to
    ``<folder>/<dataset>/<construction>/`` (notebook 03 keeps its ablations apart from Table
    "main"); fitted models are cached under ``evaluate/`` for every folder, so a model
    already fitted for another table is only loaded."""

    dataset: str
    models: tuple[str, ...]
    construction: str = "size-matched"
    folder: str = config.EVALUATE
    supervision: str = "gold"
    train_fraction: float = 1.0
    clinical: ClinicalSetting | None = None

    def __post_init__(self) -> None:
        if self.supervision not in ("gold", "silver"):
            raise ValueError(f"supervision must be 'gold' or 'silver', not {self.supervision!r}")


@dataclass
class _PreparedRun:
    request: EvaluationRequest
    loaded: Any
    result: ConstructionResult
    splits: dict[str, list[Variant]]
    context: NeuralContext | None
    cache: Path


def _prepare(request: EvaluationRequest, seeds: Sequence[int], scale: ScaleConfig, progress: bool,
             device: str | None) -> _PreparedRun:
    """Build the construction and, for neural models, run Stage A (cached)."""
    loaded, result = build(request.dataset, request.construction, scale, clinical=request.clinical)
    if request.supervision == "silver":
        result = with_silver_training(result)
    result = training_subset(result, request.train_fraction)
    splits = checked_splits(result)
    context = None
    finetuned, frozen = stage_a_kinds(request.models)
    if finetuned or frozen:
        context = build_context(result, scale, seeds, device=device or default_device(), progress=progress,
                                finetuned=finetuned, frozen=frozen,
                                frozen_representations=frozen_representations(request.models))
    if context is not None and "blind_set" in request.models:
        # here, on every core, before its fits read them from disk side by side
        with step(f"{result.dataset}/{result.construction}: blind_set's unit embeddings"):
            embed_units(result.variants, context.pretrained_embeddings, blind_set_config(context.scale),
                        progress=progress)
    return _PreparedRun(request, loaded, result, splits, context,
                        scale.cache_dir(config.EVALUATE, request.dataset, result.construction))


def _finish(run: _PreparedRun, seeds: Sequence[int], scale: ScaleConfig, progress: bool,
            prefitted: dict[tuple[str, int], FitResult]) -> dict[str, Path]:
    """Fit what is left, score, write the run's files and its ledger entry."""
    request, result, context = run.request, run.result, run.context
    out = scale.output_dir(request.folder, request.dataset, result.construction)
    metrics, predictions, taxonomy = evaluate(result, request.models, seeds, cache_dir=run.cache, progress=progress,
                                              context=context, prefitted=prefitted)
    files = {
        "metrics": write_csv(out / "metrics.csv", metrics),
        "predictions": write_predictions(out / "predictions.csv.gz", predictions),
        "taxonomy": write_json(out / "taxonomy.json", taxonomy),
    }
    neural_settings: dict[str, Any] = {}
    if context is not None:
        # which construction's training memories tuned Stage A (STAGE_A_TUNED_ON: blind ones read size matching's)
        tuned_on = STAGE_A_TUNED_ON.get(result.construction, result.construction)
        summary = {**context_summary(context), "stage_a_tuned_on": tuned_on}
        neural_settings = {"budget": summary["budget"], "stage_b": summary["stage_b"], "stage_a_tuned_on": tuned_on}
        files["neural"] = write_json(out / "neural.json", summary)
    means = metrics[metrics["split"] == "test"].groupby("model")[["unsafe_auroc", "macro_f1"]].mean().round(4)
    name = request.dataset if request.folder == config.EVALUATE else f"{request.folder}:{request.dataset}"
    record_run(f"evaluate:{name}", scale, raw_files=run.loaded.files,
               settings={"dataset": request.dataset, "construction": result.construction,
                         "supervision": request.supervision, "train_fraction": request.train_fraction,
                         "models": list(request.models), "seeds": list(seeds),
                         "data": data_fingerprint(run.loaded.files), **neural_settings},
               outputs=files.values(), metrics={"test_mean": means.to_dict(orient="index"),
                                                **({"stage_a": summary["stage_a"]} if context else {})})
    return files


def run_evaluations(requests: Sequence[EvaluationRequest], seeds: Sequence[int], scale: ScaleConfig,
                    progress: bool = True, device: str | None = None) -> list[dict[str, Path]]:
    """Several runs with the side-by-side fits of all of them in one batch (:func:`fit_batches`):
    every run is built and its Stage A run first, then all their set-model fits run together,
    then each run is scored and written. The numbers are those of one run after another (each
    fit is the same one-thread fit in a worker); only the idle core at each run's end goes."""
    runs = [_prepare(r, seeds, scale, progress, device) for r in requests]
    pending = []
    for run in runs:
        jobs = [(m, s) for m in run.request.models for s in seeds_for(m, seeds)]
        pending.append(pending_fits(run.result, jobs, run.splits, run.cache, run.context))
    prefitted = fit_batches(pending)
    return [_finish(run, seeds, scale, progress, fits) for run, fits in zip(runs, prefitted, strict=True)]


def run_evaluation(dataset: str, models: Sequence[str], seeds: Sequence[int], scale: ScaleConfig,
                   construction: str = "size-matched", progress: bool = True,
                   device: str | None = None, folder: str = config.EVALUATE, supervision: str = "gold",
                   train_fraction: float = 1.0, clinical: ClinicalSetting | None = None) -> dict[str, Path]:
    """Everything ``memsafe evaluate`` does for one run (see :class:`EvaluationRequest`):
    build, (run Stage A,) fit, score, write, ledger."""
    request = EvaluationRequest(dataset, tuple(models), construction, folder, supervision, train_fraction,
                                clinical)
    return run_evaluations([request], seeds, scale, progress=progress, device=device)[0]
