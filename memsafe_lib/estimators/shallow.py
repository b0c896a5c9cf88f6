"""Shallow question-aware controls: models that read the question only through topic or title
overlap with the memory's units.

A construction is clean only when a model that never reads the question sits at chance on it
(:mod:`memsafe_lib.estimators.blind`) *and* a model that reads the question shallowly does no
better on it than on size-matched memories. Deleting evidence and filling the gap with other
questions' evidence (the blind-matched construction) removes the first cue but can hand the
second one a topic gap: the units that replace a question's evidence are off its topic, which a
bag of question-unit cosines notices without judging any evidence. These controls measure that
gap; ``retrieval_sim`` (:mod:`memsafe_lib.estimators.baselines`) is the third of them.

* ``qu_tfidf``: the six largest question-unit TF-IDF cosines of a memory, sorted (zero-padded),
  under logistic heads for the unsafe label and the state.
* ``title_named``: how many units' titles the question names (every content token of the title
  occurs in the question), and that count over the memory's size, under the same heads.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from memsafe_lib.estimators.controls import FeatureControl, Predictions
from memsafe_lib.estimators.text import content_tokens, unit_text
from memsafe_lib.variants.construction import Variant

TOP_COSINES = 6
"""Cosines per memory the ``qu_tfidf`` control reads (a memory's largest, in descending order)."""


def top_cosines(similarities: np.ndarray, k: int = TOP_COSINES) -> list[float]:
    """The ``k`` largest values in descending order, zero-padded where the memory is smaller."""
    top = np.sort(np.asarray(similarities, dtype=float))[::-1][:k]
    return [*top.tolist(), *[0.0] * (k - len(top))]


class QuestionUnitCosines:
    """``qu_tfidf``: logistic heads over a memory's sorted largest question-unit TF-IDF cosines.
    The vectoriser is fitted on the training units and questions, as ``retrieval_sim``'s is."""

    name = "qu_tfidf"
    deterministic = True

    def __init__(self, k: int = TOP_COSINES) -> None:
        self.k = k
        self.vectorizer = TfidfVectorizer(lowercase=True, sublinear_tf=True, dtype=np.float32)
        self._heads = FeatureControl(self.name, self._featurize)

    def similarities(self, v: Variant) -> np.ndarray:
        units = self.vectorizer.transform([unit_text(u.title, u.text) for u in v.units])
        return (units @ self.vectorizer.transform([v.question]).T).toarray().ravel()  # L2 rows: dot = cosine

    def _featurize(self, v: Variant) -> list[float]:
        return top_cosines(self.similarities(v), self.k)

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> QuestionUnitCosines:
        texts = {unit_text(u.title, u.text) for v in train for u in v.units}
        self.vectorizer.fit([*sorted(texts), *sorted({v.question for v in train})])
        self._heads.fit(train)
        return self

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        out = self._heads.predict(variants)
        out.unit_scores = [self.similarities(v) for v in variants]
        return out


def title_named(question: str, title: str) -> bool:
    """Whether ``question`` names ``title``: every content token of the title occurs in it."""
    t = content_tokens(title)
    return bool(t) and t <= content_tokens(question)


def title_named_features(v: Variant) -> list[float]:
    """How many units' titles the question names, and that count over the memory's size."""
    named = sum(title_named(v.question, u.title) for u in v.units)
    return [float(named), named / max(len(v.units), 1)]


SHALLOW_CONTROLS: tuple[str, ...] = ("qu_tfidf", "title_named", "retrieval_sim")
"""The question-aware shallow controls every construction's control table shows."""


def make_title_named() -> FeatureControl:
    return FeatureControl("title_named", title_named_features)
