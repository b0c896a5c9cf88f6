"""Build what the neural estimators need (:class:`~memsafe_lib.estimators.context.NeuralContext`):
Stage A encodings per encoder seed, and the Stage B configuration chosen on MuSiQue validation.

Stage A is cached by content (weights and pairs), so a context for a dataset whose encoders
were already tuned costs only a load.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig, encoder_seed_for
from memsafe_lib.encodings.encoders import CrossEncoder, VariantEncoding
from memsafe_lib.encodings.stagea import StageAConfig, StageAResult, run_stage_a
from memsafe_lib.estimators.context import NeuralContext, model_cache_dir, pretrained_embeddings
from memsafe_lib.estimators.memsafe import MemSafe
from memsafe_lib.estimators.registry import FROZEN_MODELS, RELEVANCE_ONLY_MODELS
from memsafe_lib.estimators.selection import best_index, validation_scores
from memsafe_lib.estimators.setmodel import GRID, SetModelConfig
from memsafe_lib.io import atomic_open, canonical_json, sha256_bytes
from memsafe_lib.ledger import code_fingerprint, module_fingerprint, record_run
from memsafe_lib.parallel import side_by_side
from memsafe_lib.precision import signature
from memsafe_lib.progress import log, step
from memsafe_lib.variants.construction import BLIND_HARD, ConstructionResult, Variant, by_split
from memsafe_lib.variants.store import build
from memsafe_lib.variants.supervision import training_subset, with_silver_training

GRID_DATASET = "musique"
"""The paper selects the Stage B configuration on MuSiQue validation and uses it everywhere."""


def stage_a_dir(scale: ScaleConfig, dataset: str) -> Path:
    """Fold encoders, checkpoints and the SQLite encoding cache of a dataset (not committed)."""
    return model_cache_dir(scale, dataset) / "stage_a"


def pooled_encoder_dir(scale: ScaleConfig) -> Path:
    """Fold encoders shared by the datasets of ``NeuralBudget.stage_a_pool`` (not committed)."""
    return scale.cache_dir(config.NB02_TRAINING) / "stage_a_pooled"


def pool_training(result: ConstructionResult, scale: ScaleConfig) -> list[Variant]:
    """The other pooled datasets' training memories that ``result``'s fold encoders also train
    on; none when its dataset is not in the pool. They are derived as ``result`` was (same
    construction, silver targets, training fraction), so an ablation or a learning-curve point
    changes what Stage A sees on every pooled dataset alike."""
    pool = scale.neural.stage_a_pool
    if result.dataset not in pool:
        return []
    out = []
    for dataset in pool:
        if dataset == result.dataset:
            continue
        other = build(dataset, result.source_construction, scale)[1]
        if result.silver:
            other = with_silver_training(other)
        other = training_subset(other, result.training_fraction)
        out += [v for v in other.variants if v.split == "train"]
    return out


STAGE_A_TUNED_ON: dict[str, str] = {"blind-matched": "size-matched", BLIND_HARD: "size-matched"}
"""Constructions whose Stage A is another construction's. Stage A learns a property of a
(question, unit) pair, whether the unit is evidence for the question, which is the same in
every construction built from one dataset's questions; a construction only changes which
negatives sit beside a question. The blind constructions (ours, not the paper's) therefore read
the fold encoders the paper's size-matched memories tune, with their own memories encoded by
them (cross-fitting holds: the same question folds), and only their set models train on their
own memories. One Stage A then serves all three, and pairs shared between constructions are
encoded once (one encoding cache beside the fold encoders)."""


def stage_a_tuning(result: ConstructionResult, scale: ScaleConfig) -> ConstructionResult:
    """The construction whose training memories tune ``result``'s fold encoders (with the pool's)."""
    source = STAGE_A_TUNED_ON.get(result.construction)
    return build(result.dataset, source, scale)[1] if source is not None else result


def stage_a_for(result: ConstructionResult, scale: ScaleConfig, encoder_seed: int, device: str = "cpu",
                progress: bool = True, frozen: bool = False, relevance_only: bool = False) -> StageAResult:
    stage_a = replace(StageAConfig.for_budget(scale.neural, device), frozen=frozen, relevance_only=relevance_only)
    tuning = stage_a_tuning(result, scale) if not frozen else result
    pool = pool_training(tuning, scale) if not frozen else []
    joint = len({v.dataset for v in result.variants}) > 1  # a gate trained on several datasets
    return run_stage_a(result.variants, stage_a, encoder_seed, stage_a_dir(scale, result.dataset), progress,
                       tune_on=[v for v in tuning.variants if v.split == "train"], pool_train=pool,
                       encoder_dir=pooled_encoder_dir(scale) if pool or joint else None,
                       ranker_cache=pretrained_embeddings(scale, result.dataset))


def grid_file(scale: ScaleConfig) -> Path:
    return scale.output_dir(config.NB02_TRAINING) / "stage_b_grid.csv"


STAGE_B_CODE = "memsafe_lib.estimators.memsafe"
"""The module whose code (with everything it imports) turns encodings into a selection."""


def stage_b_inputs_key(result: ConstructionResult, encodings: dict[str, VariantEncoding], scale: ScaleConfig,
                       seed: int) -> str:
    """What the grid's selection depends on, and nothing else: the training and validation
    memories (id, state) with their Stage A encodings, the Stage B code, the grid, the budget
    and the seed. Edits to notebooks, reports or other estimators leave it unchanged; a
    changed encoding (data, construction or Stage A) or Stage B edit changes it. The torch
    thread count is not in it: it moves the grid's scores in the third decimal, not the
    selection (docs/run_history.md)."""
    h = hashlib.sha256()
    for v in sorted((v for v in result.variants if v.split in ("train", "validation")), key=lambda v: v.variant_id):
        h.update(f"{v.variant_id}\x1f{v.split}\x1f{v.state}\n".encode())
        e = encodings[v.variant_id]
        for array in (e.plain, e.bridge, e.plain_logit, e.bridge_logit):
            h.update(np.ascontiguousarray(array).tobytes())
        h.update(str(e.top_unit).encode())
    # the grid reads one encoder (``seed``'s), not the others: a scale whose Stage B seeds share
    # it (config.experiment_scale) keeps notebook 02's selection; written as [seed] so a
    # one-encoder scale's key (cpu's recorded one) is unchanged
    budget = {**asdict(scale.neural), "encoder_seeds": [seed]}
    return sha256_bytes(canonical_json({"code": module_fingerprint(STAGE_B_CODE), "grid": list(GRID), "seed": seed,
                                        "budget": budget, "encodings": h.hexdigest()}).encode())


def select_stage_b(scale: ScaleConfig, device: str = "cpu", progress: bool = True) -> dict[str, Any]:
    """The grid point chosen on MuSiQue validation (seed 17, first encoder seed).

    Written to ``stage_b_grid.csv`` with :func:`stage_b_inputs_key`; reused while that key is
    unchanged (Stage A encodings come from their cache). At scales without the full grid, the
    paper's point is used unevaluated.
    """
    budget = scale.neural
    if not budget.full_grid:
        return dict(GRID[0])
    path = grid_file(scale)
    meta = path.with_suffix(".json")
    recorded = scale.recorded_dir / config.NB02_TRAINING / meta.name  # a scratch run may reuse it
    loaded, result = build(GRID_DATASET, "size-matched", scale)
    seed = budget.encoder_seeds[0]
    encodings = stage_a_for(result, scale, seed, device, progress).encodings
    key = stage_b_inputs_key(result, encodings, scale, seed)
    for saved_meta in dict.fromkeys([meta, recorded]):
        saved = json.loads(saved_meta.read_text()) if saved_meta.exists() else {}
        if saved.get("inputs_key") == key:
            log(f"Stage B grid: reusing the selection in {saved_meta} ({saved['selected']})")
            return dict(saved["selected"])
    splits = by_split(result.variants)
    base = SetModelConfig.for_budget(budget)
    with step(f"Stage B grid: {len(GRID)} points on {GRID_DATASET} validation"):
        rows = side_by_side(_grid_point, list(GRID), (encodings, splits, seed, base, device),
                            label="Stage B grid", workers=None if device == "cpu" else 1)
    scores = pd.DataFrame(rows)
    selected = dict(GRID[best_index(rows)])
    with atomic_open(path, "w") as fh:
        scores.to_csv(fh, index=False, float_format="%.6f")
    with atomic_open(meta, "w") as fh:
        json.dump({"inputs_key": key, "code": code_fingerprint(), "selected": selected, "dataset": GRID_DATASET,
                   "seed": seed, "torch_threads": config.STAGE_B_THREADS, "fit_workers": config.fit_workers(),
                   "rule": "validation unsafe AUROC, macro-F1 tie-break, then grid order"}, fh, indent=2)
    record_run("stage-b-grid", scale, raw_files=loaded.files, outputs=[path, meta],
               settings={"dataset": GRID_DATASET, "seed": seed, "grid": list(GRID), "budget": asdict(budget)},
               metrics={"selected": selected})
    return selected


def _grid_point(shared: tuple[dict[str, VariantEncoding], dict[str, list[Variant]], int, SetModelConfig, str],
                point: dict[str, Any]) -> dict[str, Any]:
    """One Stage B grid point fitted on training and scored on validation (a worker's task)."""
    encodings, splits, seed, base, device = shared
    model = MemSafe(encodings, seed=seed, base=replace(base, **point), device=device)
    model.fit(splits["train"], splits["validation"])
    auroc, f1 = validation_scores(model.predict, splits["validation"])
    return {**point, "validation_auroc": auroc, "validation_macro_f1": f1}


def build_context(result: ConstructionResult, scale: ScaleConfig, seeds: Sequence[int], device: str = "cpu",
                  progress: bool = True, *, finetuned: bool = True, frozen: bool = False,
                  frozen_representations: bool = True, stage_b: dict[str, Any] | None = None) -> NeuralContext:
    """Stage A for every encoder seed the Stage B ``seeds`` use (fine-tuned, and without
    fine-tuning when ``frozen``; relevance scores only when no frozen model reads the
    representations, see :func:`memsafe_lib.estimators.registry.stage_a_kinds`), and the
    selected Stage B point (``stage_b`` gives it instead, for data the MuSiQue selection does not
    concern: a user's own records)."""
    needed = sorted({encoder_seed_for(s, scale.neural.encoder_seeds) for s in seeds})
    stage_a = {s: stage_a_for(result, scale, s, device, progress) for s in needed} if finetuned else {}
    frozen_a = {s: stage_a_for(result, scale, s, device, progress, frozen=True,
                               relevance_only=not frozen_representations) for s in needed} if frozen else {}
    point = dict(stage_b) if stage_b is not None else select_stage_b(scale, device, progress)
    return NeuralContext(result.dataset, scale, stage_a, point, device, frozen_a)


def context_summary(context: NeuralContext) -> dict[str, Any]:
    summary = {"budget": asdict(context.budget), "stage_b": context.stage_b,
               "stage_a": {str(s): r.summary() for s, r in context.stage_a.items()}}
    if context.frozen:
        summary["stage_a_frozen"] = {str(s): r.summary() for s, r in context.frozen.items()}
    return summary


# ---------------------------------------------------------------- what a cached fit read

STAGE_A_BUDGET: tuple[str, ...] = ("encoder", "encoder_pooling", "max_length", "finetune_max_pairs", "finetune_lr",
                                    "finetune_head_lr", "stage_a_scorer", "stage_a_features", "stage_a_pool")
"""Budget fields that make a Stage A: in the key of every model that reads its encodings (with
the encoder seed read and the fold encoders' weights, :func:`stage_a_fingerprint`)."""
STAGE_B_BUDGET: tuple[str, ...] = ("stage_b_epochs", "stage_b_bf16", "stage_b_patience", "full_grid")
"""Budget fields of the set models (with the selected grid point, :meth:`NeuralContext.set_config`)."""
CONCAT_BUDGET: tuple[str, ...] = ("encoder", "concat_max_train", "concat_max_length", "concat_start",
                                   "concat_epochs")
"""What the concatenated cross-encoder reads of the budget; it tunes its own encoder from
``encoder`` or from a Stage A fold encoder (named by its weight file, whose name holds the content
key of its fine-tuning), never Stage A's encodings."""
JOINT_BUDGET: tuple[str, ...] = ("joint_encoder", "concat_max_train", "joint_max_length", "concat_epochs")
"""What the 8k joint encoder reads of the budget (its own start and window)."""
OWN_ENCODER_BUDGETS: dict[str, tuple[str, ...]] = {"concat_ce": CONCAT_BUDGET, "joint_8k": JOINT_BUDGET}
OWN_ENCODER_MODELS: frozenset[str] = frozenset(OWN_ENCODER_BUDGETS)

_ENCODER_FINGERPRINTS: weakref.WeakKeyDictionary[CrossEncoder, str] = weakref.WeakKeyDictionary()
"""Per fold encoder object, its weights fingerprint (0.1 s for MiniLM, asked for by every
(model, seed) key of a run). A memo only: the value hashes the weights, never the object."""


def _encoder_fingerprint(encoder: CrossEncoder) -> str:
    if encoder not in _ENCODER_FINGERPRINTS:
        _ENCODER_FINGERPRINTS[encoder] = encoder.fingerprint()
    return _ENCODER_FINGERPRINTS[encoder]


def _encodings_fingerprint(encodings: Mapping[str, VariantEncoding]) -> str:
    h = hashlib.sha256()
    for variant_id in sorted(encodings):
        e = encodings[variant_id]
        h.update(f"{variant_id}\x1f{e.top_unit}\n".encode())
        for array in (e.plain, e.bridge, e.plain_logit, e.bridge_logit):
            h.update(str(np.shape(array)).encode())
            h.update(np.ascontiguousarray(array, dtype=np.float32).tobytes())
    return h.hexdigest()


def stage_a_fingerprint(result: StageAResult) -> str:
    """What the models reading a Stage A depend on besides the memories: both fold encoders'
    fingerprints (their tuned weights, max length, pooling and precision: the key of Stage A's
    own encoding cache; the weights follow from the start, the fine-tuning settings and
    pairs, and the seed), how relevance was scored, and whether pairs were encoded. A Stage A
    without its fold encoders (a worker's copy, or one built by hand) is keyed by its
    encodings themselves, which is exact but reads every array."""
    if not result.encoders:
        return "encodings:" + _encodings_fingerprint(result.encodings)
    parts = [_encoder_fingerprint(e) for e in result.encoders]
    parts += [result.relevance, str(result.pair_encodings), getattr(result.bi, "description", "")]
    return "encoders:" + sha256_bytes("\x1f".join(parts).encode())


def fit_inputs(context: NeuralContext, model: str, seed: int) -> dict[str, Any]:
    """Everything a neural ``model`` fitted with ``seed`` reads from ``context``, for the keys
    of cached fits (``evaluate``'s and transfer's): the Stage A it reads (fine-tuned, or frozen
    for the ``*_frozen`` models) with its budget and encoder seed, and for set models the
    Stage B configuration (the scale's budget with the selected grid point); the concatenated
    cross-encoder instead reads its start (by name: its own fine-tuning cache is keyed by the
    start's weights) and its budget. The precision neural models compute in is part of it.
    Only what a model reads, so a changed Stage B budget keeps relevance aggregation's fits.
    Plain JSON values only, so the key is the same in every process."""
    budget = context.budget
    inputs: dict[str, Any] = {"precision": signature(context.device)}
    if model in OWN_ENCODER_MODELS:
        inputs["concat"] = {name: getattr(budget, name) for name in OWN_ENCODER_BUDGETS[model]}
        if model == "concat_ce" and budget.concat_start != "pretrained":
            start = context.concat_start_file(seed)
            inputs["concat"]["start_file"] = start.name if start is not None else None
        return inputs
    frozen = model in FROZEN_MODELS
    encoder_seed = encoder_seed_for(seed, budget.encoder_seeds)
    table = context.frozen if frozen else context.stage_a
    inputs["stage_a"] = {"frozen": frozen, "encoder_seed": encoder_seed,
                         **{name: getattr(budget, name) for name in STAGE_A_BUDGET},
                         "fingerprint": stage_a_fingerprint(table[encoder_seed]) if encoder_seed in table else None}
    if model not in RELEVANCE_ONLY_MODELS:  # every other Stage A reader trains a set model
        inputs["stage_b"] = {**asdict(context.set_config()), **{name: getattr(budget, name) for name in STAGE_B_BUDGET}}
    return inputs
