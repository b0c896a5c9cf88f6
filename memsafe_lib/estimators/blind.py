"""Blind controls: estimators that never read the question (and one that reads only the question).

The surface controls (:mod:`memsafe_lib.estimators.controls`) test three named cues. A
construction can leak the label through anything else a memory carries: which paragraphs it
holds, whether they look like evidence, whether they were evidence in training, their topic.
A model that never reads the question cannot know which evidence *this* question needs, so
whatever it scores above chance is a cue of the construction, not sufficiency (the analogue of
the hypothesis-only baselines of NLI datasets). Each control here has the estimator interface
(fit on train, select on validation, predict any split):

* ``blind_bow``: TF-IDF (uni- and bigrams) of the whole memory, logistic heads;
* ``blind_unit``: a unit-level evidence model on unit text alone (TF-IDF, logistic), its
  scores aggregated over the memory (max, top-2 sum, mean, sum, count above 1/2) by logistic
  heads; the aggregator is fitted on cross-fitted unit scores (two hash folds of the training
  questions), so it sees what a test memory gets: scores of units the unit model may or may
  not have met;
* ``blind_set``: MemSafe's set transformer over query-free unit encodings (the packaged
  sentence encoder's embedding of each unit, with provenance statistics), trained with the
  same losses, including the per-unit evidence head; the strongest blind model we afford. Its
  embeddings are those Stage A's ranker computes (fp32, the same texts and window), read from
  one disk cache where a run gives it one (:func:`embed_units`);
* ``question_only``: the opposite blind spot, TF-IDF of the question alone (never the memory):
  on a construction where every question contributes the same states it sits at 1/2 exactly
  (Proposition 1 applies to any score constant within a base query). On the clinical data it
  reads the question type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from memsafe_lib.config import DEFAULT_SEED, PACKAGED_ENCODER, ScaleConfig
from memsafe_lib.encodings.encoders import BiEncoder, EncoderConfig, EncodingCache, unit_string
from memsafe_lib.estimators.baselines import C_GRID, _LinearTextBaseline, _tfidf
from memsafe_lib.estimators.controls import Predictions, provenance_stats
from memsafe_lib.estimators.setmodel import SetModelConfig, predict_sets, train_set_model
from memsafe_lib.estimators.text import memory_text, unit_text
from memsafe_lib.measures.metrics import unsafe_auroc
from memsafe_lib.variants.construction import STATES, Variant, memory_key, states_of, train_fold

BLIND_CONTROLS: tuple[str, ...] = ("blind_bow", "blind_unit", "blind_set")
"""The question-blind controls, weakest first."""
QUESTION_ONLY = "question_only"


def _per_content(variants: Sequence[Variant], key: Any, predict: Any) -> Predictions:
    """``predict`` on one variant per distinct ``key(v)``, broadcast to all: identical inputs get
    bit-identical scores whatever batch they fall in, so a score that cannot tell two variants
    apart ties them (what Proposition 1's exact 1/2 needs)."""
    groups: dict[str, int] = {}
    reps: list[Variant] = []
    index: list[int] = []
    for v in variants:
        k = key(v)
        if k not in groups:
            groups[k] = len(reps)
            reps.append(v)
        index.append(groups[k])
    out = predict(reps)
    pick = np.asarray(index, dtype=int)

    def take(x: Any) -> Any:
        return None if x is None else (np.asarray(x)[pick] if not isinstance(x, list) else [x[i] for i in pick])

    return Predictions(np.asarray(out.unsafe_prob)[pick], np.asarray(out.state, dtype=object)[pick],
                       take(out.unit_scores), take(out.missing_count))


class _BlindText(_LinearTextBaseline):
    """A linear text control whose prediction depends on one field of the variant only."""

    def _key(self, v: Variant) -> str:
        raise NotImplementedError

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        return _per_content(variants, self._key, super().predict)


class BlindBagOfWords(_BlindText):
    """Logistic heads on TF-IDF (uni- and bigrams) of the memory's text; the question is never read."""

    name = "blind_bow"

    def __init__(self, grid: Sequence[dict[str, Any]] = C_GRID, max_features: int = 200_000) -> None:
        super().__init__(grid)
        self.vectorizer = _tfidf(ngram_range=(1, 2), min_df=2, max_features=max_features)

    def _key(self, v: Variant) -> str:
        return memory_key(v)

    def _fit_features(self, train: Sequence[Variant]) -> sp.spmatrix:
        return self.vectorizer.fit_transform([memory_text(v) for v in train])

    def _features(self, variants: Sequence[Variant]) -> sp.spmatrix:
        return self.vectorizer.transform([memory_text(v) for v in variants])


class QuestionOnly(_BlindText):
    """Logistic heads on TF-IDF of the question alone; the memory is never read."""

    name = QUESTION_ONLY

    def __init__(self, grid: Sequence[dict[str, Any]] = C_GRID) -> None:
        super().__init__(grid)
        self.vectorizer = _tfidf(ngram_range=(1, 2), min_df=1)

    def _key(self, v: Variant) -> str:
        return v.question

    def _fit_features(self, train: Sequence[Variant]) -> sp.spmatrix:
        return self.vectorizer.fit_transform([v.question for v in train])

    def _features(self, variants: Sequence[Variant]) -> sp.spmatrix:
        return self.vectorizer.transform([v.question for v in variants])


def _units(variants: Sequence[Variant]) -> tuple[list[str], np.ndarray]:
    texts = [unit_text(u.title, u.text) for v in variants for u in v.units]
    return texts, np.array([u.is_evidence for v in variants for u in v.units], dtype=bool)


def aggregate_unit_scores(scores: np.ndarray) -> list[float]:
    """What a memory-level head reads of its units' evidence scores (order-free)."""
    s = np.sort(np.asarray(scores, dtype=float))[::-1]
    return [float(s[0]), float(s[:2].sum()), float(s.mean()), float(s.sum()), float((s > 0.5).sum())]


def _logistic() -> Pipeline:
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))


class BlindUnitEvidence:
    """Unit text -> evidence probability (TF-IDF, logistic), aggregated over the memory by
    logistic heads fitted on cross-fitted unit scores. Never reads the question."""

    name = "blind_unit"
    deterministic = True

    def __init__(self, C: float = 1.0) -> None:
        self.C = C
        self._unit: tuple[Any, LogisticRegression] | None = None
        self._unsafe: Pipeline | None = None
        self._state: Pipeline | None = None

    def _fit_units(self, variants: Sequence[Variant]) -> tuple[Any, LogisticRegression] | None:
        texts, labels = _units(variants)
        if len(set(labels.tolist())) < 2:
            return None
        vec = _tfidf(ngram_range=(1, 2), min_df=1)
        x = vec.fit_transform(texts)
        return vec, LogisticRegression(C=self.C, max_iter=3000).fit(x, labels)

    @staticmethod
    def _score_units(model: tuple[Any, LogisticRegression] | None, variants: Sequence[Variant]) -> list[np.ndarray]:
        texts, _ = _units(variants)
        if model is None:
            flat = np.full(len(texts), 0.5)
        else:
            vec, clf = model
            flat = clf.predict_proba(vec.transform(texts))[:, list(clf.classes_).index(True)]
        out, i = [], 0
        for v in variants:
            out.append(flat[i:i + len(v.units)])
            i += len(v.units)
        return out

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> BlindUnitEvidence:
        folds = [[v for v in train if train_fold(v.base_id) == k] for k in (0, 1)]
        crossed: dict[str, np.ndarray] = {}
        for k in (0, 1):
            model = self._fit_units(folds[1 - k])
            for v, s in zip(folds[k], self._score_units(model, folds[k]), strict=True):
                crossed[v.variant_id] = s
        x = np.array([aggregate_unit_scores(crossed[v.variant_id]) for v in train])
        self._unsafe = _logistic().fit(x, [v.unsafe for v in train])
        self._state = _logistic().fit(x, [v.state for v in train])
        self._unit = self._fit_units(train)
        return self

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        return _per_content(variants, memory_key, self._predict)

    def _predict(self, variants: Sequence[Variant]) -> Predictions:
        if self._unsafe is None or self._state is None:
            raise RuntimeError("blind_unit: call fit() first")
        unit_scores = self._score_units(self._unit, variants)
        x = np.array([aggregate_unit_scores(s) for s in unit_scores])
        col = list(self._unsafe.classes_).index(True)
        return Predictions(self._unsafe.predict_proba(x)[:, col], self._state.predict(x).astype(object),
                           unit_scores=unit_scores)


BLIND_WINDOW = 128
"""Tokens of a unit the question-blind set model embeds where no scale says otherwise (Stage A's
window at cpu). A run passes its scale's encoder and Stage A window (:func:`blind_set_config`), so the blind
set model's embeddings are the ranker's at every scale and each unit is embedded once."""


@dataclass(frozen=True)
class BlindSetConfig:
    """How the question-blind set model is built: which pretrained encoder embeds a unit, through
    how many tokens, and how long its set model trains. A run's is :func:`blind_set_config`."""

    model: str = PACKAGED_ENCODER
    max_length: int = BLIND_WINDOW
    epochs: int = 30
    patience: int | None = 10


DEFAULT_BLIND_SET = BlindSetConfig()
"""The packaged all-MiniLM-L6-v2 at :data:`BLIND_WINDOW` tokens, 30 epochs with patience 10 (the
cpu scale's Stage B): where no scale says otherwise."""


def blind_set_config(scale: ScaleConfig) -> BlindSetConfig:
    """The question-blind set model under ``scale``: the scale's blind encoder
    (:attr:`~memsafe_lib.config.NeuralBudget.blind_encoder`) at its Stage A window, so where that
    encoder is Stage A's start its embeddings are the ranker's, computed once; and trained for
    the scale's Stage B epochs and patience, as MemSafe's own set model is."""
    neural = scale.neural
    return BlindSetConfig(neural.blind_encoder, neural.max_length, neural.stage_b_epochs, neural.stage_b_patience)


_EMBEDDERS: dict[tuple[str, int, str], BiEncoder] = {}


def unit_embedder(model: str = PACKAGED_ENCODER, max_length: int = BLIND_WINDOW,
                  cache: Path | None = None) -> BiEncoder:
    """The process's query-free unit embedder for (model, window, disk cache): the pretrained
    sentence encoder read as a bi-encoder in fp32, exactly as Stage A's ranker reads it
    (:func:`~memsafe_lib.encodings.encoders.make_ranker`), so the two share every cached
    embedding and a blind score is the same on every CPU class. Each distinct text is embedded
    once per process, and once per run with ``cache``."""
    key = (model, max_length, str(cache or ""))
    if key not in _EMBEDDERS:
        store = None
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            store = EncodingCache(cache)
        _EMBEDDERS[key] = BiEncoder(EncoderConfig(model=model, max_length=max_length, bf16=False), cache=store)
    return _EMBEDDERS[key]


def blind_unit_texts(variants: Sequence[Variant]) -> list[str]:
    """What the question-blind set model embeds of each unit, in memory order (Stage A's unit string)."""
    return [unit_string(u.title, u.text) for v in variants for u in v.units]


def embed_units(variants: Sequence[Variant], cache: Path, config: BlindSetConfig = DEFAULT_BLIND_SET,
                progress: bool = True) -> int:
    """Fill ``cache`` with the embeddings ``blind_set`` will read for ``variants``, here (every
    core of this process) before fits side by side read them from disk; returns the distinct texts."""
    texts = list(dict.fromkeys(blind_unit_texts(variants)))
    if texts:
        unit_embedder(config.model, config.max_length, cache).embed(texts, progress=progress)
    return len(texts)


class BlindSet:
    """The Stage B set transformer over query-free unit embeddings and provenance statistics,
    trained with MemSafe's four losses; selected by validation AUROC like Stage B."""

    name = "blind_set"
    deterministic = False

    def __init__(self, seed: int = DEFAULT_SEED, *, epochs: int = DEFAULT_BLIND_SET.epochs,
                 patience: int | None = DEFAULT_BLIND_SET.patience, model: str = DEFAULT_BLIND_SET.model,
                 max_length: int = DEFAULT_BLIND_SET.max_length, device: str = "cpu",
                 embedding_cache: Path | None = None) -> None:
        self.seed = seed
        self.embedding_cache = embedding_cache
        self.set_config = SetModelConfig(epochs=epochs, patience=patience)
        self.config: dict[str, Any] = {"epochs": epochs, "patience": patience, "encoder": model,
                                       "max_length": max_length}
        """What the evaluation tables record of a fit (its choices)."""
        self.encoder = (model, max_length)
        self.device = device
        self._model: Any = None
        self._states: tuple[str, ...] = STATES

    def _inputs(self, variants: Sequence[Variant]) -> tuple[list[np.ndarray], np.ndarray]:
        embed = unit_embedder(*self.encoder, self.embedding_cache).embed
        texts = blind_unit_texts(variants)
        flat = embed(texts, progress=len(texts) > 2000) if texts else np.zeros((0, 1), np.float32)
        units, i = [], 0
        for v in variants:
            units.append(flat[i:i + len(v.units)].astype(np.float32))
            i += len(v.units)
        provenance = np.array([provenance_stats(v) for v in variants], dtype=np.float32)
        return units, provenance

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> BlindSet:
        self._states = states_of([*train, *(validation or [])])
        units, prov = self._inputs(train)
        targets = {"unsafe": [float(v.unsafe) for v in train], "state": [self._states.index(v.state) for v in train],
                   "evidence": [[float(u.is_evidence) for u in v.units] for v in train],
                   "missing": [float(v.missing_count) for v in train]}
        val = None
        if validation and len({v.unsafe for v in validation}) == 2:
            vu, vp = self._inputs(validation)
            val = (vu, vp, np.array([v.unsafe for v in validation]), [v.state for v in validation])
        self._model, log = train_set_model(units, prov, targets, self.set_config, self.seed, val, self.device,
                                           self._states)
        self.config = {**self.config, "best_epoch": log.best_epoch}
        return self

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        return _per_content(variants, memory_key, self._predict)

    def _predict(self, variants: Sequence[Variant]) -> Predictions:
        if self._model is None:
            raise RuntimeError("blind_set: call fit() first")
        units, prov = self._inputs(variants)
        out = predict_sets(self._model, units, prov)
        return Predictions(out.unsafe_prob.astype(float), out.state, unit_scores=out.unit_prob,
                           missing_count=out.missing_count)


def unit_seen_auroc(train: Sequence[Variant], variants: Sequence[Variant],
                    unit_scores: Sequence[np.ndarray]) -> dict[str, float | int | None]:
    """Per-unit evidence AUROC of ``unit_scores`` on ``variants``, over all units, over units
    whose text occurs in a training memory (seen) and over the others (unseen): how much of a
    unit-level model is memorisation. None where a group lacks one class."""
    seen = {unit_text(u.title, u.text) for v in train for u in v.units}
    rows: dict[str, list[tuple[bool, float]]] = {"all": [], "seen": [], "unseen": []}
    for v, scores in zip(variants, unit_scores, strict=True):
        for u, s in zip(v.units, scores, strict=True):
            item = (u.is_evidence, float(s))
            rows["all"].append(item)
            rows["seen" if unit_text(u.title, u.text) in seen else "unseen"].append(item)
    out: dict[str, float | int | None] = {}
    for group, items in rows.items():
        labels = [y for y, _ in items]
        out[f"unit_auroc_{group}"] = (unsafe_auroc(labels, [s for _, s in items])
                                      if len(set(labels)) == 2 else None)
        out[f"units_{group}"] = len(items)
    return out


def unseen_memories(train: Sequence[Variant], variants: Sequence[Variant]) -> np.ndarray:
    """Mask of the memories none of whose units' text occurs in any training memory."""
    seen = {unit_text(u.title, u.text) for v in train for u in v.units}
    return np.array([not any(unit_text(u.title, u.text) in seen for u in v.units) for v in variants], dtype=bool)

