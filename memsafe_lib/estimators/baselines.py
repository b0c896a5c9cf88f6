"""Non-neural baselines of Table "main": flat TF-IDF, a sufficient-context-style TF-IDF
judge, and the retrieval-similarity proxy. LexSet has its own module.

All three are deterministic: fitting involves no random state, so every seed gives the
same model (the paper reports zero seed variance for them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression

from memsafe_lib.estimators.controls import Predictions
from memsafe_lib.estimators.text import memory_text, serialize, unit_text
from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc
from memsafe_lib.variants.construction import COMPLETE, MISSING, RELATION_LOST, Variant

C_GRID = ({"C": 0.1}, {"C": 1.0}, {"C": 10.0}, {"C": 100.0})


def _tfidf(**kw: Any) -> TfidfVectorizer:
    return TfidfVectorizer(lowercase=True, sublinear_tf=True, dtype=np.float32, **kw)


@dataclass
class _Heads:
    """A binary (unsafe) and a multinomial (state) logistic regression on one feature matrix."""

    unsafe: LogisticRegression
    state: LogisticRegression

    def predict(self, x: sp.spmatrix) -> Predictions:
        col = list(self.unsafe.classes_).index(True)
        return Predictions(self.unsafe.predict_proba(x)[:, col], self.state.predict(x).astype(object))


def _fit_unsafe(x: sp.spmatrix, train: Sequence[Variant], config: dict[str, Any]) -> LogisticRegression:
    return LogisticRegression(C=config["C"], max_iter=3000).fit(x, [v.unsafe for v in train])


def _fit_state(x: sp.spmatrix, train: Sequence[Variant], config: dict[str, Any]) -> LogisticRegression:
    return LogisticRegression(C=config["C"], max_iter=3000).fit(x, [v.state for v in train])


class _LinearTextBaseline:
    """Shared fit/predict: subclasses only say how a variant becomes a feature vector."""

    name = "linear-text"
    deterministic = True

    def __init__(self, grid: Sequence[dict[str, Any]] = C_GRID) -> None:
        self.grid = list(grid)
        self.config: dict[str, Any] = {}
        self.selection_scores: list[dict[str, Any]] = []
        self._heads: _Heads | None = None

    def _fit_features(self, train: Sequence[Variant]) -> sp.spmatrix:
        raise NotImplementedError

    def _features(self, variants: Sequence[Variant]) -> sp.spmatrix:
        raise NotImplementedError

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> _LinearTextBaseline:
        """Select C by validation unsafe AUROC (macro-F1 tie-break, as everywhere).

        The multinomial state head is the slow part, so it is fitted only for the
        configurations tied at the best AUROC rather than for the whole grid.
        """
        x = self._fit_features(train)
        xv = self._features(validation) if validation else None
        unsafe_heads = {i: _fit_unsafe(x, train, cfg) for i, cfg in enumerate(self.grid)}
        if xv is None or len(self.grid) == 1 or len({v.unsafe for v in validation or []}) < 2:
            best = [0]
        else:
            y = [v.unsafe for v in validation or []]
            aurocs = {i: unsafe_auroc(y, m.predict_proba(xv)[:, list(m.classes_).index(True)])
                      for i, m in unsafe_heads.items()}
            top = max(aurocs.values())
            best = [i for i, a in aurocs.items() if a == top]
            self.selection_scores = [{**cfg, "validation_auroc": aurocs[i]} for i, cfg in enumerate(self.grid)]
        heads = {i: _Heads(unsafe_heads[i], _fit_state(x, train, self.grid[i])) for i in best}
        if len(best) > 1:
            states = [v.state for v in validation or []]
            labels = sorted(set(states))
            best.sort(key=lambda i: (-macro_f1(states, list(heads[i].predict(xv).state), labels), i))
        self._heads, self.config = heads[best[0]], dict(self.grid[best[0]])
        return self

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        if self._heads is None:
            raise RuntimeError(f"{self.name}: call fit() first")
        return self._heads.predict(self._features(variants))


class FlatTfidf(_LinearTextBaseline):
    """Logistic regression on TF-IDF (uni- and bigrams) of the serialised (query, memory)."""

    name = "tfidf"

    def __init__(self, grid: Sequence[dict[str, Any]] = C_GRID, max_features: int = 200_000) -> None:
        super().__init__(grid)
        self.vectorizer = _tfidf(ngram_range=(1, 2), min_df=2, max_features=max_features)

    def _fit_features(self, train: Sequence[Variant]) -> sp.spmatrix:
        return self.vectorizer.fit_transform([serialize(v) for v in train])

    def _features(self, variants: Sequence[Variant]) -> sp.spmatrix:
        return self.vectorizer.transform([serialize(v) for v in variants])


class SufficientContextTfidf(_LinearTextBaseline):
    """A linear stand-in for the answer-free sufficient-context autorater of Joren et al.

    The autorater reads the query and the context and says whether the context suffices.
    Here one TF-IDF vocabulary (unigrams, fit on train queries and memories) embeds the
    query q and the memory m separately; the features are [q, m, q ⊙ m], where the
    term-wise product q ⊙ m is non-zero exactly for query terms the memory covers, the
    lexical core of "does the context contain what the question asks for". Unlike the flat
    baseline, query and memory words live in separate feature blocks.
    """

    name = "sc_tfidf"

    def __init__(self, grid: Sequence[dict[str, Any]] = C_GRID, max_features: int = 100_000) -> None:
        super().__init__(grid)
        self.vectorizer = _tfidf(min_df=2, max_features=max_features)

    def _blocks(self, variants: Sequence[Variant]) -> sp.spmatrix:
        q = self.vectorizer.transform([v.question for v in variants])
        m = self.vectorizer.transform([memory_text(v) for v in variants])
        return sp.hstack([q, m, q.multiply(m)]).tocsr()

    def _fit_features(self, train: Sequence[Variant]) -> sp.spmatrix:
        self.vectorizer.fit([v.question for v in train] + [memory_text(v) for v in train])
        return self._blocks(train)

    def _features(self, variants: Sequence[Variant]) -> sp.spmatrix:
        return self._blocks(variants)


AGGREGATORS = ("max", "mean", "mean_top2")


@dataclass
class RetrievalSimilarity:
    """Unsafe score = 1 - aggregate query-unit TF-IDF cosine; nothing is learned but choices.

    On validation it picks the aggregate (max, mean, or mean of the top two similarities)
    with the best unsafe AUROC, and two thresholds on the score that map it to a state
    (complete below the first, relation-lost between, missing above) with the best macro F1.
    The per-unit evidence score is the unit's similarity to the query.
    """

    name: str = "retrieval_sim"
    deterministic: bool = True
    aggregate: str = "max"
    thresholds: tuple[float, float] = (0.5, 0.5)
    vectorizer: TfidfVectorizer = field(default_factory=lambda: _tfidf(min_df=1))

    def _similarities(self, v: Variant) -> np.ndarray:
        units = self.vectorizer.transform([unit_text(u.title, u.text) for u in v.units])
        q = self.vectorizer.transform([v.question])
        return (units @ q.T).toarray().ravel()  # rows are L2-normalised: dot = cosine

    def _score(self, sims: list[np.ndarray], aggregate: str) -> np.ndarray:
        def agg(s: np.ndarray) -> float:
            if aggregate == "max":
                return float(s.max())
            if aggregate == "mean":
                return float(s.mean())
            return float(np.sort(s)[-2:].mean())

        return np.array([1.0 - agg(s) for s in sims])

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> RetrievalSimilarity:
        texts = {u.unit_id: unit_text(u.title, u.text) for v in train for u in v.units}
        self.vectorizer.fit([*texts.values(), *{v.question for v in train}])
        tune = validation if validation and len({v.unsafe for v in validation}) == 2 else train
        sims = [self._similarities(v) for v in tune]
        unsafe = [v.unsafe for v in tune]
        ranked = {a: (unsafe_auroc(unsafe, self._score(sims, a)), -AGGREGATORS.index(a)) for a in AGGREGATORS}
        self.aggregate = max(ranked, key=ranked.__getitem__)
        self.thresholds = _state_thresholds(self._score(sims, self.aggregate), [v.state for v in tune])
        return self

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        sims = [self._similarities(v) for v in variants]
        score = self._score(sims, self.aggregate)
        lo, hi = self.thresholds
        state = np.where(score <= lo, COMPLETE, np.where(score <= hi, RELATION_LOST, MISSING)).astype(object)
        return Predictions(score, state, unit_scores=sims)


def _state_thresholds(score: np.ndarray, states: Sequence[str], n_grid: int = 21) -> tuple[float, float]:
    """Two cut points on a 1-D unsafe score maximising macro F1 (grid of quantiles)."""
    cuts = np.unique(np.quantile(score, np.linspace(0, 1, n_grid)))
    labels = sorted(set(states))
    best, best_f1 = (float(cuts[0]), float(cuts[-1])), -1.0
    for i, lo in enumerate(cuts):
        for hi in cuts[i:]:
            pred = np.where(score <= lo, COMPLETE, np.where(score <= hi, RELATION_LOST, MISSING))
            f1 = macro_f1(states, list(pred), labels)
            if f1 > best_f1:
                best, best_f1 = (float(lo), float(hi)), f1
    return best
