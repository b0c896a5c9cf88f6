"""The shortcut audit of Section 4.1: fit every control on train, score the test split,
and compare the paragraph-count control with the Proposition 1 bound; and the blind audit
(:func:`blind_audit`): the same for controls that never read the question, with how much of
each comes from memorisation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memsafe_lib.config import DEFAULT_SEED, ScaleConfig
from memsafe_lib.estimators.blind import (
    DEFAULT_BLIND_SET,
    BlindSetConfig,
    blind_set_config,
    embed_units,
    unit_seen_auroc,
    unseen_memories,
)
from memsafe_lib.estimators.context import pretrained_embeddings
from memsafe_lib.estimators.controls import CONTROLS, Estimator, Predictions
from memsafe_lib.estimators.registry import BLIND, SHALLOW, make_model
from memsafe_lib.measures.metrics import macro_f1, state_auroc, unsafe_auroc
from memsafe_lib.measures.proposition import size_only_auroc, size_only_bound
from memsafe_lib.parallel import side_by_side
from memsafe_lib.progress import step
from memsafe_lib.variants.construction import (
    MISSING,
    RELATION_LOST,
    ConstructionResult,
    Variant,
    by_split,
    memory_multiplicities,
    multiplicities,
    present_states,
)

CHANCE_BAND: tuple[float, float] = (0.45, 0.55)
"""Test unsafe AUROC a control must stay within for a construction to count as clean (below
0.45 is a leak too: the cue flipped)."""
AUDIT_CONTROLS: tuple[str, ...] = (*CONTROLS, *BLIND, *SHALLOW)
"""Every control the blind audit fits: the surface ones, the question-blind ones, question-only,
and the shallow question-aware ones (topic or title overlap)."""


def per_state(states: Sequence[str], score: np.ndarray) -> dict[str, float | None]:
    """Unsafe AUROC of ``score`` per unsafe state against the complete memories: where a
    construction's difficulty sits (missing is the easy side of a topic gap)."""
    return {"auroc_complete_vs_missing": state_auroc(states, score, MISSING),
            "auroc_complete_vs_relation_lost": state_auroc(states, score, RELATION_LOST)}


def control_role(model: str) -> str:
    """``blind`` (never reads the question, or only it), ``shallow`` (the question through topic
    or title overlap only) or ``surface`` (size, length, provenance)."""
    return "blind" if model in BLIND else "shallow" if model in SHALLOW else "surface"


@dataclass
class ControlResult:
    control: str
    split: str
    variants: list[Variant]
    predictions: Predictions

    def row(self, dataset: str, construction: str) -> dict[str, Any]:
        unsafe = [v.unsafe for v in self.variants]
        states = [v.state for v in self.variants]
        labels = present_states(states)
        return {
            "dataset": dataset,
            "construction": construction,
            "model": self.control,
            "split": self.split,
            "n_variants": len(self.variants),
            "n_base_queries": len({v.base_id for v in self.variants}),
            "unsafe_auroc": unsafe_auroc(unsafe, self.predictions.unsafe_prob),
            "macro_f1": macro_f1(states, self.predictions.state.tolist(), labels),
            **per_state(states, np.asarray(self.predictions.unsafe_prob)),
        }


def run_controls(
    result: ConstructionResult,
    controls: Sequence[str] = tuple(CONTROLS),
    eval_splits: Sequence[str] = ("test",),
    seed: int = DEFAULT_SEED,
    embedding_cache: Path | None = None,
    blind_config: BlindSetConfig = DEFAULT_BLIND_SET,
) -> list[ControlResult]:
    """Fit each model (a control or any registered baseline) on the train split of
    ``result``, selecting on validation where it has choices, and predict ``eval_splits``;
    every split named must hold both classes (:func:`fit_controls` with ``strict``)."""
    where = f"{result.dataset}/{result.construction}"
    return fit_controls(result.variants, controls, eval_splits, seed, where, strict=True,
                        embedding_cache=embedding_cache, blind_config=blind_config)[1]


BlindFits = dict[tuple[str, str], tuple[list[Variant], list[ControlResult]]]


@dataclass(frozen=True)
class AuditJob:
    """One dataset's share of notebook 01's audit: its constructions, and which controls each gets."""

    dataset: str
    results: dict[str, ConstructionResult]
    shortcut: tuple[str, ...]
    shortcut_constructions: tuple[str, ...]
    blind: tuple[str, ...]
    blind_constructions: tuple[str, ...]
    embedding_cache: Path | None
    blind_config: BlindSetConfig


def _audit_dataset(_: None, job: AuditJob) -> tuple[list[dict[str, Any]], BlindFits]:
    audits = [audit(job.results[c], job.shortcut) for c in job.shortcut_constructions]
    fits = {(job.dataset, c): fit_controls(job.results[c].variants, job.blind, where=f"{job.dataset}/{c}",
                                           embedding_cache=job.embedding_cache, blind_config=job.blind_config)
            for c in job.blind_constructions}
    return audits, fits


def audit_side_by_side(results: dict[str, dict[str, ConstructionResult]], shortcut: Sequence[str],
                       shortcut_constructions: Sequence[str], blind: Sequence[str],
                       blind_constructions: Sequence[str], scale: ScaleConfig,
                       progress: bool = True) -> tuple[list[dict[str, Any]], BlindFits]:
    """:func:`audit` (``shortcut`` controls) and :func:`fit_controls` (``blind`` ones) on every
    dataset's named constructions, one dataset per worker process (largest first): each fit is
    one-threaded, so one after another they left a core idle for the whole audit. The
    question-blind set model's unit embeddings are computed here first, on every core, into the
    cache Stage A's ranker reads later. Returns (audits in dataset, construction order; blind fits
    by (dataset, construction)), the same as the loops they replace."""
    jobs = []
    blind_config = blind_set_config(scale)
    for dataset, by_construction in results.items():
        cache = None
        if "blind_set" in blind:
            cache = pretrained_embeddings(scale, dataset)
            variants = [v for c in blind_constructions for v in by_construction[c].variants]
            with step(f"{dataset}: blind_set's unit embeddings"):
                embed_units(variants, cache, blind_config, progress=progress)
        jobs.append(AuditJob(dataset, {c: by_construction[c] for c in {*shortcut_constructions, *blind_constructions}},
                             tuple(shortcut), tuple(shortcut_constructions), tuple(blind),
                             tuple(blind_constructions), cache, blind_config))
    order = sorted(range(len(jobs)), key=lambda i: -sum(len(r.variants) for r in jobs[i].results.values()))
    with step(f"audit of {len(jobs)} datasets side by side"):
        done = side_by_side(_audit_dataset, [jobs[i] for i in order], None, label="audit")
    by_dataset = {jobs[i].dataset: out for i, out in zip(order, done, strict=True)}
    audits = [a for dataset in results for a in by_dataset[dataset][0]]
    fits: BlindFits = {}
    for dataset in results:
        fits.update(by_dataset[dataset][1])
    return audits, fits


def proposition_check(variants: Sequence[Variant], observed_auroc: float | None = None) -> dict[str, Any]:
    """Proposition 1 on a set of variants: the bound for any size-only score, the exact
    AUROC of the memory-size score itself, and (optionally) a fitted control's AUROC."""
    ids, n_u, n_c = multiplicities(variants)
    bound = size_only_bound(n_u, n_c)
    size = {v.base_id: len(v.units) for v in variants}
    sizes_constant = all(len(v.units) == size[v.base_id] for v in variants)
    exact = size_only_auroc([size[i] for i in ids], n_u, n_c) if sizes_constant else None
    one_unsafe = sum(1 for u in n_u if u == 1)
    out = {
        "base_queries": len(ids),
        "unsafe_examples": int(sum(n_u)),
        "complete_examples": int(sum(n_c)),
        "fraction_one_unsafe": one_unsafe / len(ids),
        "total_variation": bound.total_variation,
        "bound": bound.bound,
        "bound_case": bound.case,
        "size_constant_within_query": sizes_constant,
        "memory_size_auroc_exact": exact,
    }
    if observed_auroc is not None:
        out["observed_auroc"] = observed_auroc
        out["observed_deviation"] = abs(observed_auroc - 0.5)
        out["within_bound"] = bool(sizes_constant and abs(observed_auroc - 0.5) <= bound.bound + 1e-12)
    return out


def blind_bounds(variants: Sequence[Variant]) -> dict[str, Any]:
    """Proposition 1 with two groupings: by memory (the bound on |AUROC - 1/2| for every score of
    the memory alone: every question-blind model) and by base question (every score of the question
    alone, and every size-only score on a size-matched construction)."""
    _, m_u, m_c = memory_multiplicities(variants)
    _, q_u, q_c = multiplicities(variants)
    return {"memories": len(m_u), "memory_bound": size_only_bound(m_u, m_c).bound,
            "question_bound": size_only_bound(q_u, q_c).bound}


def _auroc_or_none(unsafe: Sequence[bool], score: np.ndarray) -> float | None:
    return unsafe_auroc(unsafe, score) if len(set(unsafe)) == 2 else None


def fit_controls(variants: Sequence[Variant], controls: Sequence[str] = AUDIT_CONTROLS,
                 eval_splits: Sequence[str] = ("validation", "test"), seed: int = DEFAULT_SEED,
                 where: str = "variants", strict: bool = False,
                 embedding_cache: Path | None = None,
                 blind_config: BlindSetConfig = DEFAULT_BLIND_SET) -> tuple[list[Variant], list[ControlResult]]:
    """Fit each control on the train split of ``variants`` (selecting on validation where it has
    choices) and predict the evaluation splits; returns (train, fitted). The train split must hold
    both classes. An evaluation split without both is an error when ``strict`` and otherwise left
    out (a small sample), as long as one evaluation split remains. ``embedding_cache``: where
    ``blind_set`` reads its unit embeddings (:func:`~memsafe_lib.estimators.context.pretrained_embeddings`),
    as ``blind_config`` says (a run's: :func:`~memsafe_lib.estimators.blind.blind_set_config`)."""
    splits = by_split(variants)
    for split in ("train", *eval_splits) if strict else ("train",):
        if {v.unsafe for v in splits.get(split, [])} != {True, False}:
            raise ValueError(f"{where}: the {split} split has {len(splits.get(split, []))} variants and needs "
                             "both unsafe and complete ones")
    eval_splits = [s for s in eval_splits if {v.unsafe for v in splits.get(s, [])} == {True, False}]
    if not eval_splits:
        raise ValueError(f"{where}: no evaluation split holds both unsafe and complete variants")
    fitted = []
    for name in controls:
        model: Estimator = make_model(name, seed, embedding_cache=embedding_cache,
                                      blind_config=blind_config).fit(splits["train"], splits.get("validation"))
        fitted += [ControlResult(name, s, splits[s], model.predict(splits[s])) for s in eval_splits]
    return splits["train"], fitted


def blind_table(train: Sequence[Variant], fitted: Sequence[ControlResult], dataset: str = "",
                construction: str = "") -> list[dict[str, Any]]:
    """One row per fitted (control, split): unsafe AUROC; the same on the memories none of whose
    units' text occurs in a training memory (how much is memorisation); per-unit evidence AUROC
    on units seen and unseen in training (models with unit scores); the Proposition 1 bounds of
    the split; and whether the AUROC lies in :data:`CHANCE_BAND`."""
    bounds: dict[str, dict[str, Any]] = {}
    unseen: dict[str, np.ndarray] = {}
    rows = []
    for r in fitted:
        if r.split not in bounds:
            bounds[r.split] = blind_bounds(r.variants)
            unseen[r.split] = unseen_memories(train, r.variants)
        y = np.array([v.unsafe for v in r.variants])
        auroc = unsafe_auroc(y, r.predictions.unsafe_prob)
        mask = unseen[r.split]
        row: dict[str, Any] = {
            "dataset": dataset, "construction": construction, "model": r.control, "split": r.split,
            "role": control_role(r.control), "n_variants": len(r.variants),
            "unsafe_auroc": auroc, "within_chance": bool(CHANCE_BAND[0] <= auroc <= CHANCE_BAND[1]),
            **per_state([v.state for v in r.variants], np.asarray(r.predictions.unsafe_prob)),
            "unseen_memories": int(mask.sum()),
            "unseen_memory_auroc": _auroc_or_none(y[mask].tolist(), np.asarray(r.predictions.unsafe_prob)[mask]),
            **bounds[r.split]}
        if r.predictions.unit_scores is not None:
            row.update(unit_seen_auroc(train, r.variants, r.predictions.unit_scores))
        rows.append(row)
    return rows


def blind_rows(variants: Sequence[Variant], controls: Sequence[str] = AUDIT_CONTROLS,
               eval_splits: Sequence[str] = ("validation", "test"), seed: int = DEFAULT_SEED,
               dataset: str = "", construction: str = "") -> list[dict[str, Any]]:
    """:func:`fit_controls` then :func:`blind_table`: the blind audit of one set of variants."""
    where = f"{dataset or 'variants'}/{construction or '?'}"
    train, fitted = fit_controls(variants, controls, eval_splits, seed, where)
    return blind_table(train, fitted, dataset, construction)


def blind_verdict(rows: Sequence[dict[str, Any]], split: str = "test") -> tuple[bool, list[str]]:
    """(clean, the controls outside :data:`CHANCE_BAND` on ``split`` with their AUROC). The
    shallow question-aware controls read the question, so they are not held to chance: a
    construction is judged on them against size-matched memories (notebook 01's topic gap)."""
    out = [f"{r['model']} {r['unsafe_auroc']:.3f}" for r in rows
           if r["split"] == split and not r["within_chance"] and r.get("role") != "shallow"]
    return not out, out


def audit(result: ConstructionResult, controls: Sequence[str] = tuple(CONTROLS),
          blind_config: BlindSetConfig = DEFAULT_BLIND_SET) -> dict[str, Any]:
    """Everything ``memsafe audit`` prints for one dataset and construction (``blind_config``:
    the question-blind set model's, :func:`~memsafe_lib.estimators.blind.blind_set_config`)."""
    fitted = run_controls(result, controls, blind_config=blind_config)
    rows = [r.row(result.dataset, result.construction) for r in fitted]
    test = by_split(result.variants).get("test", [])
    count_auroc = next((r["unsafe_auroc"] for r in rows if r["model"] == "paragraph_count"), None)
    return {
        "dataset": result.dataset,
        "construction": result.construction,
        "test_auroc": {r["model"]: r["unsafe_auroc"] for r in rows},
        "test_macro_f1": {r["model"]: r["macro_f1"] for r in rows},
        "proposition_1_test": proposition_check(test, count_auroc),
        "proposition_1_all": proposition_check(result.variants),
        "rows": rows,
    }


def scores_frame(fitted: Sequence[ControlResult]) -> list[dict[str, Any]]:
    """Long-format per-variant scores, for the score-distribution figures."""
    out = []
    for r in fitted:
        for v, p in zip(r.variants, r.predictions.unsafe_prob, strict=True):
            out.append({"model": r.control, "split": r.split, "state": v.state, "unsafe": v.unsafe,
                        "score": float(p), "base_id": v.base_id})
    return out
