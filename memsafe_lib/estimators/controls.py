"""Surface controls: estimators that see only what a leak could exploit.

Each control is fit on the train split and scores any split, with the interface every
estimator of the project shares (``fit`` / ``predict`` returning :class:`Predictions`).
A control that does well reveals a shortcut in the construction, not an ability to
judge evidence sufficiency.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from memsafe_lib.variants.construction import COMPLETE, Variant


@dataclass
class Predictions:
    """What every estimator returns for a list of variants (in the same order)."""

    unsafe_prob: np.ndarray
    state: np.ndarray
    """Predicted integrity state per variant."""
    unit_scores: list[np.ndarray] | None = None
    """Per-unit evidence scores, one array per variant in memory order (where meaningful)."""
    missing_count: np.ndarray | None = None
    """Estimated number of missing evidence units g per variant (where meaningful)."""
    extras: dict[str, object] = field(default_factory=dict)


class Estimator(Protocol):
    """Fit on train, select hyper-parameters on validation (if any), score anything."""

    name: str
    deterministic: bool
    """True when fitting has no random state, so every seed gives the same model."""

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> Estimator: ...

    def predict(self, variants: Sequence[Variant]) -> Predictions: ...


Featurizer = Callable[[Variant], list[float]]


def paragraph_count(v: Variant) -> list[float]:
    return [float(len(v.units))]


def text_length(v: Variant) -> list[float]:
    """Total characters in the memory."""
    return [float(sum(len(u.text) for u in v.units))]


def provenance_stats(v: Variant) -> list[float]:
    """Positional statistics only: memory size, compression ratio |M|/|H|, and the
    distribution of the kept units' positions in the source context (normalised to
    [0, 1]); never the text."""
    n = len(v.units)
    denom = max(v.source_units - 1, 1)
    pos = np.array([u.source_position / denom for u in v.units], dtype=float) if n else np.zeros(1)
    gaps = np.diff(np.sort(pos)) if n > 1 else np.zeros(1)
    return [
        float(n), n / max(v.source_units, 1), float(pos.mean()), float(pos.std()),
        float(pos.min()), float(pos.max()), float(gaps.mean()), float(gaps.max()),
    ]


def without_provenance(v: Variant) -> Variant:
    """The memory as it reaches an agent's gate without provenance: each unit's source position
    is its memory position and the history is the memory itself (|M|/|H| = 1)."""
    units = tuple(replace(u, source_position=u.position) for u in v.units)
    return replace(v, units=units, source_units=len(units))


def _logistic() -> Pipeline:
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=5000))


class FeatureControl:
    """Logistic regressions on a few hand-picked features: one for the unsafe label, one
    (multinomial) for the integrity state."""

    deterministic = True

    def __init__(self, name: str, featurize: Featurizer) -> None:
        self.name = name
        self.featurize = featurize
        self._unsafe: Pipeline | None = None
        self._state: Pipeline | None = None

    def _x(self, variants: Sequence[Variant]) -> np.ndarray:
        return np.array([self.featurize(v) for v in variants], dtype=float)

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> FeatureControl:
        x = self._x(train)
        self._unsafe = _logistic().fit(x, [v.unsafe for v in train])
        self._state = _logistic().fit(x, [v.state for v in train])
        return self

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        if self._unsafe is None or self._state is None:
            raise RuntimeError(f"{self.name}: call fit() first")
        x = self._x(variants)
        unsafe_col = list(self._unsafe.classes_).index(True)
        return Predictions(self._unsafe.predict_proba(x)[:, unsafe_col], self._state.predict(x))


class MajorityControl:
    """Predicts the most frequent training state and the training unsafe rate for everyone."""

    name = "majority"
    deterministic = True

    def __init__(self) -> None:
        self._state: str | None = None
        self._rate = 0.0

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> MajorityControl:
        counts = Counter(v.state for v in train)
        # Ties broken towards COMPLETE, then alphabetically, so the choice is deterministic.
        self._state = max(sorted(counts), key=lambda s: (counts[s], s == COMPLETE))
        self._rate = float(np.mean([v.unsafe for v in train]))
        return self

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        if self._state is None:
            raise RuntimeError("majority: call fit() first")
        n = len(variants)
        return Predictions(np.full(n, self._rate), np.array([self._state] * n, dtype=object))


CONTROLS: dict[str, Callable[[], Estimator]] = {
    "majority": MajorityControl,
    "paragraph_count": lambda: FeatureControl("paragraph_count", paragraph_count),
    "text_length": lambda: FeatureControl("text_length", text_length),
    "provenance_only": lambda: FeatureControl("provenance_only", provenance_stats),
}
"""Factories, so every fit starts from a fresh estimator."""
