"""LexSet, the lexical event-set estimator.

Two levels, as the paper's description implies (per-unit lexical, position and rank
features, aggregated over the set):

1. **Unit model.** Each (query, unit) pair gets lexical similarity features (TF-IDF cosine,
   BM25, query-token recall and precision, title overlap) and, within its memory, position
   and rank features. A gradient-boosted classifier predicts whether the unit is evidence.
   On the training split it is cross-fitted over two hash-defined folds of base questions,
   so the set model never sees evidence scores of units the unit model was trained on.
2. **Set model.** Sorted evidence scores and similarity aggregates describe the memory; a
   gradient-boosted classifier predicts unsafe, another the integrity state, and a
   regressor the missing count g. Hyper-parameters are selected on validation.

Feature groups are plain functions registered in :data:`UNIT_FEATURE_GROUPS` and
:data:`SET_FEATURE_GROUPS`; the clinical estimator (numeric trends, event positions,
inter-event gaps) extends these tuples instead of rewriting the model.

The boosters subsample features with ``random_state = seed``, so LexSet varies with the seed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from memsafe_lib.config import DEFAULT_SEED
from memsafe_lib.estimators.controls import Predictions
from memsafe_lib.estimators.selection import select
from memsafe_lib.estimators.text import content_tokens, unit_text
from memsafe_lib.threads import limited_threads
from memsafe_lib.variants.construction import Variant, train_fold


@dataclass
class PairStats:
    """Corpus statistics the pair features need (fit on the training split)."""

    vectorizer: TfidfVectorizer
    idf: dict[str, float]
    avg_len: float


@dataclass
class MemoryView:
    """A variant with its per-unit pair features already computed (memory-independent part)."""

    variant: Variant
    pair: np.ndarray
    """(n_units, n_pair_features)"""


# ---------------------------------------------------------------- per-pair lexical features


def _bm25(q: frozenset[str], u: list[str], stats: PairStats, k1: float = 1.2, b: float = 0.75) -> float:
    tf = Counter(u)
    norm = k1 * (1 - b + b * len(u) / stats.avg_len)
    # Sum in sorted term order: iterating the set would follow string hashes, which change
    # from process to process, and float addition is not associative, so the same features
    # would differ in their last bits between runs (and the boosted trees with them).
    return sum(stats.idf.get(t, 0.0) * tf[t] * (k1 + 1) / (tf[t] + norm) for t in sorted(q) if t in tf)


def lexical_pair_features(question: str, title: str, text: str, cosine: float, stats: PairStats) -> list[float]:
    q = content_tokens(question)
    u_tokens = [t for t in text.lower().split()]
    u = content_tokens(f"{title} {text}")
    t = content_tokens(title)
    inter = len(q & u)
    return [
        cosine,
        _bm25(q, u_tokens, stats),
        inter / max(len(q), 1),  # query-token recall
        inter / max(len(u), 1),  # unit-token precision
        len(q & t) / max(len(q), 1),  # query tokens in the title
        len(q & t) / max(len(t), 1),  # title tokens in the query (the title is named)
        math.log1p(len(u)),
    ]


PAIR_FEATURE_NAMES = ["cosine", "bm25", "q_recall", "u_precision", "title_q_recall", "title_named", "log_len"]


# ---------------------------------------------------------------- memory-dependent unit features


def position_rank_features(view: MemoryView) -> np.ndarray:
    """Position in memory and rank of each unit by similarity, within its memory."""
    n = len(view.variant.units)
    pos = np.array([u.position / max(n - 1, 1) for u in view.variant.units])
    cosine, bm25 = view.pair[:, 0], view.pair[:, 1]
    rank_cos = np.argsort(np.argsort(-cosine, kind="stable"), kind="stable") / max(n - 1, 1)
    rank_bm25 = np.argsort(np.argsort(-bm25, kind="stable"), kind="stable") / max(n - 1, 1)
    z = (cosine - cosine.mean()) / (cosine.std() + 1e-9)
    gap = cosine - cosine.max()
    return np.column_stack([pos, rank_cos, rank_bm25, z, gap])


UnitGroup = Callable[[MemoryView], np.ndarray]
UNIT_FEATURE_GROUPS: tuple[UnitGroup, ...] = (lambda view: view.pair, position_rank_features)

TITLE_FEATURES: tuple[int, ...] = (PAIR_FEATURE_NAMES.index("title_q_recall"), PAIR_FEATURE_NAMES.index("title_named"))
"""The pair features that read the unit's title alone (the TF-IDF cosine and BM25 read title and
text together and stay)."""


def pair_without_title(view: MemoryView) -> np.ndarray:
    """The pair features less :data:`TITLE_FEATURES` (``lexset_no_title``)."""
    return np.delete(view.pair, TITLE_FEATURES, axis=1)


NO_TITLE_UNIT_GROUPS: tuple[UnitGroup, ...] = (pair_without_title, position_rank_features)


# ---------------------------------------------------------------- set features


def evidence_score_aggregates(view: MemoryView, scores: np.ndarray, k: int = 4) -> list[float]:
    top = np.sort(scores)[::-1]
    top = np.pad(top[:k], (0, max(0, k - len(top))))
    return [*top, scores.sum(), (scores > 0.5).sum(), (scores > 0.25).sum(), scores.mean()]


def similarity_aggregates(view: MemoryView, scores: np.ndarray) -> list[float]:
    cosine = np.sort(view.pair[:, 0])[::-1]
    return [cosine[0], cosine[: min(2, len(cosine))].mean(), cosine.mean(), view.pair[:, 2].max(),
            view.pair[:, 5].max(), float(len(view.variant.units))]


def similarity_aggregates_without_title(view: MemoryView, scores: np.ndarray) -> list[float]:
    """:func:`similarity_aggregates` less the largest title-named feature."""
    return [x for i, x in enumerate(similarity_aggregates(view, scores)) if i != 4]


SetGroup = Callable[[MemoryView, np.ndarray], list[float]]
SET_FEATURE_GROUPS: tuple[SetGroup, ...] = (evidence_score_aggregates, similarity_aggregates)
NO_TITLE_SET_GROUPS: tuple[SetGroup, ...] = (evidence_score_aggregates, similarity_aggregates_without_title)

GRID = (
    {"learning_rate": 0.05, "max_leaf_nodes": 15},
    {"learning_rate": 0.1, "max_leaf_nodes": 15},
    {"learning_rate": 0.05, "max_leaf_nodes": 31},
    {"learning_rate": 0.1, "max_leaf_nodes": 31},
)
LOGISTIC_GRID = ({"C": 0.1}, {"C": 1.0}, {"C": 10.0})
"""Inverse regularisation of the logistic set heads (``head="logistic"``), on standardised features."""


@dataclass
class _SetHeads:
    unsafe: Any  # a classifier with predict_proba and classes_ (boosting, or a logistic pipeline)
    state: Any
    count: Any


@dataclass
class UnitFeaturizer:
    """Per-unit lexical, position and rank features of a memory: LexSet's unit inputs, and
    part of MemSafe's unit tokens. Corpus statistics are fit on the training split; each
    unique (question, unit) pair is featurised once per instance."""

    unit_groups: tuple[UnitGroup, ...] = UNIT_FEATURE_GROUPS
    stats: PairStats | None = None
    _pair_cache: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)

    def fit(self, train: Sequence[Variant]) -> UnitFeaturizer:
        units = {u.unit_id: unit_text(u.title, u.text) for v in train for u in v.units}
        vectorizer = TfidfVectorizer(sublinear_tf=True, dtype=np.float32).fit(
            [*units.values(), *{v.question for v in train}])
        n_docs = len(units)
        df: Counter[str] = Counter()
        lengths = []
        for text in units.values():
            tokens = text.lower().split()
            lengths.append(len(tokens))
            df.update(set(tokens))
        idf = {t: math.log(1 + (n_docs - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        self.stats = PairStats(vectorizer, idf, float(np.mean(lengths)) if lengths else 1.0)
        self._pair_cache.clear()
        return self

    def views(self, variants: Sequence[Variant]) -> list[MemoryView]:
        """Pair features for every unit; each unique (question, unit) pair is computed once."""
        if self.stats is None:
            raise RuntimeError("UnitFeaturizer: call fit() first")
        todo = {}
        for v in variants:
            for u in v.units:
                key = (v.question, u.unit_id, u.text)
                if key not in self._pair_cache:
                    todo[key] = (v.question, u.title, u.text)
        if todo:
            keys = list(todo)
            q = self.stats.vectorizer.transform([todo[k][0] for k in keys])
            u = self.stats.vectorizer.transform([unit_text(todo[k][1], todo[k][2]) for k in keys])
            cosine = np.asarray(q.multiply(u).sum(axis=1)).ravel()
            for k, c in zip(keys, cosine, strict=True):
                self._pair_cache[k] = lexical_pair_features(*todo[k], float(c), self.stats)
        return [MemoryView(v, np.array([self._pair_cache[(v.question, u.unit_id, u.text)] for u in v.units]))
                for v in variants]

    def unit_matrix(self, view: MemoryView) -> np.ndarray:
        return np.column_stack([g(view) for g in self.unit_groups])

    def __call__(self, variants: Sequence[Variant]) -> list[np.ndarray]:
        """(n_units, n_features) per variant."""
        return [self.unit_matrix(w) for w in self.views(variants)]

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready statistics (vocabulary, idf weights), so a saved gate needs no pickle."""
        assert self.stats is not None
        vec = self.stats.vectorizer
        return {"vocabulary": {t: int(i) for t, i in vec.vocabulary_.items()},
                "tfidf_idf": [float(x) for x in vec.idf_], "bm25_idf": self.stats.idf,
                "avg_len": self.stats.avg_len}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> UnitFeaturizer:
        vec = TfidfVectorizer(sublinear_tf=True, dtype=np.float32, vocabulary=state["vocabulary"])
        vec.idf_ = np.asarray(state["tfidf_idf"], dtype=np.float64)
        return cls(stats=PairStats(vec, dict(state["bm25_idf"]), float(state["avg_len"])))


@dataclass
class LexSet:
    seed: int = DEFAULT_SEED
    name: str = "lexset"
    deterministic: bool = False
    unit_groups: tuple[UnitGroup, ...] = UNIT_FEATURE_GROUPS
    set_groups: tuple[SetGroup, ...] = SET_FEATURE_GROUPS
    construction_groups: dict[str, tuple[UnitGroup, SetGroup]] = field(default_factory=dict)
    """Extra (unit, set) feature groups used only when the training variants come from that
    construction (clinical: numeric trend, position and gap features)."""
    grid: tuple[dict[str, Any], ...] = GRID
    head: str = "boosting"
    """Set-level heads: ``boosting`` (the paper's description: gradient boosting) or ``logistic``
    (logistic regression for unsafe and state, ridge for the count, standardised features, grid
    :data:`LOGISTIC_GRID`), the ``lexset_logistic`` row that shows what boosting adds. The unit
    model is gradient boosting in both."""
    config: dict[str, Any] = field(default_factory=dict)
    selection_scores: list[dict[str, Any]] = field(default_factory=list)
    _features: UnitFeaturizer | None = None
    _set_groups: tuple[SetGroup, ...] = SET_FEATURE_GROUPS
    _unit_model: HistGradientBoostingClassifier | None = None
    _heads: _SetHeads | None = None

    # -- features

    def _views(self, variants: Sequence[Variant]) -> list[MemoryView]:
        assert self._features is not None
        return self._features.views(variants)

    def _unit_matrix(self, view: MemoryView) -> np.ndarray:
        assert self._features is not None
        return self._features.unit_matrix(view)

    def _set_row(self, view: MemoryView, scores: np.ndarray) -> list[float]:
        return [x for g in self._set_groups for x in g(view, scores)]

    # -- unit model

    def _fit_unit_model(self, views: Sequence[MemoryView]) -> HistGradientBoostingClassifier:
        x = np.vstack([self._unit_matrix(w) for w in views])
        y = np.concatenate([[u.is_evidence for u in w.variant.units] for w in views])
        return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.1, max_features=0.8,
                                              random_state=self.seed).fit(x, y)

    @staticmethod
    def _unit_scores(model: HistGradientBoostingClassifier, matrices: Sequence[np.ndarray]) -> list[np.ndarray]:
        if not matrices:
            return []
        probs = model.predict_proba(np.vstack(matrices))[:, 1]
        return np.split(probs, np.cumsum([len(m) for m in matrices])[:-1])

    def _crossfit_train_scores(self, views: Sequence[MemoryView]) -> list[np.ndarray]:
        """Evidence scores for training memories from the unit model fit on the other fold."""
        fold = np.array([train_fold(w.variant.base_id) for w in views])
        matrices = [self._unit_matrix(w) for w in views]
        scores: list[np.ndarray] = [np.empty(0)] * len(views)
        for k in (0, 1):
            model = self._fit_unit_model([w for w, f in zip(views, fold, strict=True) if f != k])
            idx = np.flatnonzero(fold == k)
            for i, s in zip(idx, self._unit_scores(model, [matrices[i] for i in idx]), strict=True):
                scores[i] = s
        return scores

    # -- estimator interface

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> LexSet:
        with limited_threads():  # OpenMP boosters: see threads.py for the stall this avoids
            return self._fit(train, validation)

    def _fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None) -> LexSet:
        extra = self.construction_groups.get(train[0].construction) if train else None
        unit_groups = (*self.unit_groups, extra[0]) if extra else self.unit_groups
        self._set_groups = (*self.set_groups, extra[1]) if extra else self.set_groups
        self._features = UnitFeaturizer(unit_groups).fit(train)
        views = self._views(train)
        train_scores = self._crossfit_train_scores(views)
        self._unit_model = self._fit_unit_model(views)
        x = np.array([self._set_row(w, s) for w, s in zip(views, train_scores, strict=True)])
        xv = self._set_matrix(validation)[0] if validation else None

        def fit_heads(cfg: dict[str, Any]) -> _SetHeads:
            if self.head == "logistic":
                def logistic() -> Any:
                    return make_pipeline(StandardScaler(), LogisticRegression(C=cfg["C"], max_iter=2000))
                ridge = make_pipeline(StandardScaler(), Ridge(alpha=1 / cfg["C"]))
                return _SetHeads(logistic().fit(x, [v.unsafe for v in train]),
                                 logistic().fit(x, [v.state for v in train]),
                                 ridge.fit(x, [v.missing_count for v in train]))
            kw = dict(max_iter=300, max_features=0.8, random_state=self.seed, **cfg)
            return _SetHeads(
                HistGradientBoostingClassifier(**kw).fit(x, [v.unsafe for v in train]),
                HistGradientBoostingClassifier(**kw).fit(x, [v.state for v in train]),
                HistGradientBoostingRegressor(**kw).fit(x, [v.missing_count for v in train]),
            )

        if self.head not in ("boosting", "logistic"):
            raise ValueError(f"{self.name}: head must be 'boosting' or 'logistic', not {self.head!r}")
        grid = LOGISTIC_GRID if self.head == "logistic" else self.grid
        chosen = select(list(grid), fit_heads, lambda heads, _vs: self._predict_heads(heads, xv), validation)
        self._heads, self.config, self.selection_scores = chosen.model, chosen.config, chosen.grid_scores
        return self

    def _set_matrix(self, variants: Sequence[Variant]) -> tuple[np.ndarray, list[np.ndarray]]:
        assert self._unit_model is not None
        views = self._views(variants)
        scores = self._unit_scores(self._unit_model, [self._unit_matrix(w) for w in views])
        return np.array([self._set_row(w, s) for w, s in zip(views, scores, strict=True)]), scores

    @staticmethod
    def _predict_heads(heads: _SetHeads, x: np.ndarray) -> Predictions:
        col = list(heads.unsafe.classes_).index(True)
        return Predictions(heads.unsafe.predict_proba(x)[:, col], heads.state.predict(x).astype(object),
                           missing_count=np.clip(heads.count.predict(x), 0, None))

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        if self._heads is None:
            raise RuntimeError("lexset: call fit() first")
        with limited_threads():
            x, unit_scores = self._set_matrix(variants)
            preds = self._predict_heads(self._heads, x)
        preds.unit_scores = unit_scores
        return preds
