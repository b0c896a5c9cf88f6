"""Models trained on one construction, scored unchanged on another (notebook 04): family A to
family B on MuSiQue, and MuSiQue to SQuAD 2.0; plus the memorization audit of the test splits.

A transferred model sees its target memories as test memories: neural models read them
through the average of the source's two fold encoders, exactly as they read the source's own
test split, and nothing is fitted on the target. A target from another dataset (SQuAD 2.0)
is read through its own token window (``NeuralBudget.transfer_max_length``), so that a scale
training at a short window still sees about as much of each paragraph as the paper's 256
tokens did. Fits and target predictions are cached under the code, source and target
fingerprints and (neural models) what they read of the context: the Stage A encoder, the
budget and the targets' windows, like ``evaluate``'s.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from memsafe_lib import config
from memsafe_lib.config import NeuralBudget
from memsafe_lib.encodings.encoders import Pair, VariantEncoding, unit_string
from memsafe_lib.encodings.window import window_counts
from memsafe_lib.estimators.context import NeuralContext
from memsafe_lib.estimators.controls import Predictions
from memsafe_lib.estimators.neural_context import OWN_ENCODER_MODELS, fit_inputs
from memsafe_lib.estimators.registry import SET_MODELS, fitted_once, is_neural, make_model, seeds_for
from memsafe_lib.evaluation.runs import SIDE_BY_SIDE_MODELS
from memsafe_lib.io import atomic_open, canonical_json, sha256_bytes
from memsafe_lib.ledger import code_fingerprint
from memsafe_lib.measures.metrics import average_precision, brier_score, expected_calibration_error, unsafe_auroc
from memsafe_lib.parallel import side_by_side
from memsafe_lib.progress import log, step
from memsafe_lib.variants.construction import ConstructionResult, Variant, by_split


def as_test(variants: Sequence[Variant]) -> list[Variant]:
    """Target memories are test memories for a transferred model (split relabelled only)."""
    return [replace(v, split="test") for v in variants]


def target_window(budget: NeuralBudget, source_dataset: str, variants: Sequence[Variant]) -> int:
    """Tokens per pair for a target: the training window for the source dataset's own memories
    (family B: the same kind of paragraphs, read as the source's test split, so H3's drop
    measures the construction and not the window), ``budget.transfer_window`` for a target
    from another dataset (SQuAD 2.0: the paper's appendix reads it at its one 256-token cap,
    truncating 4.79% of pairs; a scale training at fewer tokens widens it to a like share)."""
    foreign = any(v.dataset != source_dataset for v in variants)
    return budget.transfer_window if foreign else budget.max_length


def add_target_encodings(context: NeuralContext, variants: Sequence[Variant], progress: bool = True,
                         max_length: int | None = None) -> None:
    """Encode target memories with every encoder seed's fold encoders (their average) and add
    them to the context's encodings, fine-tuned and frozen alike, each as its Stage A encoded
    its own memories (a frozen start without a head: the ranker's relevance scores), through a
    ``max_length``-token window (None: the training window; see :func:`target_window`).
    Encodings already held are kept: the window follows from the budget and the target's
    dataset, both fixed for a context, so a variant id is only ever read at one window."""
    for table in (context.stage_a, context.frozen):
        for result in table.values():
            todo = [v for v in variants if v.variant_id not in result.encodings]
            if todo:
                encoded = result.encode(todo, progress=progress, max_length=max_length)
                result.encodings.update({e.variant_id: e for e in encoded})


@dataclass
class TransferResult:
    model: str
    seed: int
    predictions: dict[str, Predictions]
    """Per target name; ``"source_test"`` and ``"source_validation"`` are the source's own splits
    (validation: for thresholds chosen on the source and carried to a target)."""


def _fingerprint(variants: Sequence[Variant]) -> str:
    return sha256_bytes("\n".join(v.variant_id + v.split + "".join("1" if u.is_evidence else "0" for u in v.units)
                                  for v in variants).encode())


def _cache_key(key_base: str, model: str, seed: int, context: NeuralContext | None,
               windows: Mapping[str, int] | None = None) -> str:
    """``key_base`` (code, source and targets) and, for a neural model, what it reads of the
    context (:func:`~memsafe_lib.estimators.neural_context.fit_inputs`) and, where it reads Stage A,
    the token window of each target's encodings (``windows``: target name -> tokens); a model
    that reads no context keeps the key it had before the encoder entered it (model and seed
    are in the file name)."""
    if context is not None and is_neural(model):
        key_base += "|" + canonical_json(fit_inputs(context, model, seed))
        if windows and model not in OWN_ENCODER_MODELS:
            key_base += "|windows:" + canonical_json(dict(sorted(windows.items())))
    return sha256_bytes(key_base.encode())[:20]


def _transfer_fit(shared: tuple[dict[str, list[Variant]], dict[str, list[Variant]], NeuralContext | None],
                  job: tuple[str, int, Path | None]) -> TransferResult:
    """Fit one (model, seed) on the source and predict its splits and every target; cached."""
    splits, targets, context = shared
    model, seed, path = job
    with step(f"transfer {splits['train'][0].dataset}: {model} seed {seed}"):
        estimator = make_model(model, seed, context).fit(splits["train"], splits.get("validation"))
        predictions = {"source_test": estimator.predict(splits["test"]),
                       "source_validation": estimator.predict(splits["validation"]),
                       **{name: estimator.predict(vs) for name, vs in targets.items() if vs}}
    result = TransferResult(model, seed, predictions)
    if path is not None:
        with atomic_open(path, "wb") as fh:
            pickle.dump(result, fh)
    return result


def transfer(source: ConstructionResult, targets: dict[str, Sequence[Variant]], models: Sequence[str],
             seeds: Sequence[int], context: NeuralContext | None = None, cache_dir: Path | None = None
             ) -> list[TransferResult]:
    """Fit each (model, seed) on the source's train split (selection on its validation) and
    predict the source's test split and every target, unchanged. On CPU the set models' fits
    run side by side (one torch thread each, as in ``evaluate``: the same fits as one after
    another), the others here."""
    splits = by_split(source.variants)
    target_tests = {name: as_test(vs) for name, vs in targets.items()}
    windows: dict[str, int] = {}
    if context is not None:
        windows = {name: target_window(context.budget, source.dataset, vs) for name, vs in target_tests.items()}
        for name, vs in target_tests.items():
            add_target_encodings(context, vs, max_length=windows[name])
    key_base = "|".join([code_fingerprint(), _fingerprint(source.variants),
                         *(f"{n}:{_fingerprint(vs)}" for n, vs in sorted(target_tests.items()))])
    done: dict[tuple[str, int], TransferResult] = {}
    todo: list[tuple[str, int, Path | None]] = []
    for model in models:
        # a deterministic model's one fit serves every seed (as in evaluate): the first seed's
        fit_seeds = seeds_for(model, seeds)
        if fitted_once(model):
            fit_seeds = fit_seeds[:1]
        for seed in fit_seeds:
            path = None
            if cache_dir is not None:
                key = _cache_key(key_base, model, seed, context, windows)
                path = cache_dir / f"transfer-{model}-{seed}-{key}.pkl"
                if path.exists():
                    log(f"transfer {source.dataset}: {model} seed {seed}: resumed from cache")
                    with open(path, "rb") as fh:
                        done[(model, seed)] = pickle.load(fh)
                    continue
            todo.append((model, seed, path))
    together = [j for j in todo if j[0] in SIDE_BY_SIDE_MODELS]
    together.sort(key=lambda j: j[0] not in SET_MODELS)  # the long set-model fits first, the short ones fill in
    shared = (splits, target_tests, context)
    if context is not None and context.device == "cpu" and config.fit_workers() >= 2 and len(together) >= 2:
        kinds = "Stage B fits" if all(m in SET_MODELS for m, _, _ in together) else "fits (Stage B, LexSet, baselines)"
        with step(f"transfer {source.dataset}: {len(together)} {kinds} side by side"):
            fits = side_by_side(_transfer_fit, together, (splits, target_tests, context.without_encoders()),
                                label=f"transfer {source.dataset}")
        done.update({(m, s): fit for (m, s, _), fit in zip(together, fits, strict=True)})
    for model, seed, path in todo:
        if (model, seed) not in done:
            done[(model, seed)] = _transfer_fit(shared, (model, seed, path))
    out = []
    for model in models:
        first = seeds_for(model, seeds)[0]
        for seed in seeds_for(model, seeds):
            fit = done.get((model, seed)) or replace(done[(model, first)], seed=seed)  # deterministic: shared
            out.append(fit)
    return out


# ---------------------------------------------------------------- what the window cuts


def target_pairs(variants: Sequence[Variant], encodings: Mapping[str, VariantEncoding]
                 ) -> tuple[list[Pair], list[Pair]]:
    """The (q, u_i) and (q || u_top, u_i) pairs Stage A read for ``variants``, with each
    memory's u_top as its encodings hold it (no ranker is run again)."""
    plain, bridge = [], []
    for v in variants:
        units = [unit_string(u.title, u.text) for u in v.units]
        top = units[encodings[v.variant_id].top_unit]
        plain += [Pair(v.question, u) for u in units]
        bridge += [Pair(v.question, u, bridge=top) for u in units]
    return plain, bridge


def truncation(tokenizer: Any, pairs: Sequence[Pair], window: int) -> dict[str, Any]:
    """How many ``pairs`` are longer than ``window`` tokens, i.e. read only in part: exact
    tokenization of each whole pair as the encoder reads it (first text, unit, special tokens);
    :func:`memsafe_lib.encodings.window.window_counts` also says whose tokens are lost."""
    counts = window_counts(tokenizer, pairs, window)
    return {"window": window, "pairs": counts["pairs"], "truncated": counts["cut"], "share": counts["share_cut"]}


def scores(variants: Sequence[Variant], predictions: Predictions) -> dict[str, Any]:
    """AUROC, AUPRC (unsafe as positive), Brier and ECE of one scored population."""
    y = np.array([v.unsafe for v in variants])
    p = np.clip(np.asarray(predictions.unsafe_prob, dtype=float), 0.0, 1.0)
    both = y.any() and not y.all()
    return {"n": len(variants), "prevalence": float(y.mean()) if len(y) else None,
            "unsafe_auroc": unsafe_auroc(y, p) if both else None,
            "unsafe_auprc": average_precision(y, p) if both else None,
            "brier": brier_score(y, p) if len(y) else None,
            "ece": expected_calibration_error(y, p) if len(y) else None}


def transfer_table(results: Sequence[TransferResult], source_test: Sequence[Variant],
                   targets: dict[str, Sequence[Variant]]) -> pd.DataFrame:
    """One row per (model, seed, population) with the scores above."""
    populations = {"source_test": list(source_test), **{n: as_test(vs) for n, vs in targets.items()}}
    results = [replace(r, predictions={k: v for k, v in r.predictions.items() if k in populations}) for r in results]
    rows = []
    for r in results:
        for name, preds in r.predictions.items():
            rows.append({"model": r.model, "seed": r.seed, "population": name, **scores(populations[name], preds)})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- memorization audit


def _unit_key(title: str, text: str) -> str:
    return f"{title}\x1f{text}"


def memorization(variants: Sequence[Variant]) -> dict[str, Any]:
    """How much of the test split's text the training split already holds: the fraction of
    test paragraphs (title and text) that also occur in training, whether their evidence
    status agrees there, and which test questions have no gold evidence paragraph seen in
    training (the population of the restricted re-scoring)."""
    splits = by_split(variants)
    train_status: dict[str, set[bool]] = {}
    for v in splits.get("train", []):
        for u in v.units:
            train_status.setdefault(_unit_key(u.title, u.text), set()).add(u.is_evidence)
    test = splits.get("test", [])
    paragraphs = {(_unit_key(u.title, u.text), u.is_evidence) for v in test for u in v.units}
    seen = [(k, ev) for k, ev in paragraphs if k in train_status]
    agree = [ev in train_status[k] and len(train_status[k]) == 1 for k, ev in seen]
    seen_evidence: dict[str, bool] = {}
    for v in test:
        hit = any(u.is_evidence and _unit_key(u.title, u.text) in train_status for u in v.units)
        seen_evidence[v.base_id] = seen_evidence.get(v.base_id, False) or hit
    unseen_questions = sorted(b for b, hit in seen_evidence.items() if not hit)
    return {"test_paragraphs": len({k for k, _ in paragraphs}), "also_in_training": len({k for k, _ in seen}),
            "fraction_in_training": len({k for k, _ in seen}) / max(len({k for k, _ in paragraphs}), 1),
            "evidence_status_agrees": float(np.mean(agree)) if agree else None,
            "test_questions": len({v.base_id for v in test}), "questions_evidence_unseen": len(unseen_questions),
            "unseen_ids": unseen_questions}


def restricted_auroc(predictions: pd.DataFrame, keep_base_ids: Sequence[str], models: Sequence[str]) -> pd.DataFrame:
    """Each model's test AUROC (seed mean) on all test questions and on the kept ones only."""
    keep = set(keep_base_ids)
    rows = []
    test = predictions[predictions.split == "test"]
    for model in models:
        per_seed = []
        for _, g in test[test.model == model].groupby("seed"):
            sub = g[g.base_id.isin(keep)]
            both = sub.unsafe.any() and not sub.unsafe.all()
            per_seed.append((unsafe_auroc(g.unsafe.astype(bool), g.unsafe_prob),
                             unsafe_auroc(sub.unsafe.astype(bool), sub.unsafe_prob) if both else np.nan))
        if per_seed:
            full, restricted = np.nanmean([a for a, _ in per_seed]), np.nanmean([b for _, b in per_seed])
            rows.append({"model": model, "n_seeds": len(per_seed), "auroc_all": float(full),
                         "auroc_evidence_unseen": None if np.isnan(restricted) else float(restricted),
                         "change": None if np.isnan(restricted) else float(restricted - full),
                         "questions_kept": len(keep)})
    return pd.DataFrame(rows)
