"""MemSafe and its matched comparators as estimators (``fit`` / ``predict`` on variants).

All three read the *same* Stage A encodings (looked up by variant id), so differences
between them come from the aggregation alone:

* :class:`MemSafe`: unit tokens + set transformer (``attention=False``: mean pooling);
* :class:`RelevanceAggregation`: logistic models on aggregated relevance logits (maximum,
  top-k means, counts above thresholds), nothing learned per unit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from memsafe_lib.config import DEFAULT_SEED
from memsafe_lib.data.loader import hash_rank
from memsafe_lib.encodings.encoders import VariantEncoding
from memsafe_lib.estimators.controls import Predictions, provenance_stats, without_provenance
from memsafe_lib.estimators.lexset import UnitFeaturizer
from memsafe_lib.estimators.selection import select
from memsafe_lib.estimators.setmodel import SetModel, SetModelConfig, TrainLog, predict_sets, train_set_model
from memsafe_lib.variants.construction import STATES, Variant, states_of


class MissingEncodingError(KeyError):
    pass


def lookup(encodings: Mapping[str, VariantEncoding], variants: Sequence[Variant]) -> list[VariantEncoding]:
    try:
        return [encodings[v.variant_id] for v in variants]
    except KeyError as exc:
        raise MissingEncodingError(f"no Stage A encoding for variant {exc.args[0]!r}: run Stage A on the "
                                   "variants first (memsafe_lib.encodings.stagea.run_stage_a)") from None


@dataclass
class Standardizer:
    """Per-column mean and standard deviation, fit on training rows (std floor 1e-6)."""

    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, rows: np.ndarray) -> Standardizer:
        return cls(rows.mean(0).astype(np.float32), np.maximum(rows.std(0), 1e-6).astype(np.float32))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) / self.std).astype(np.float32)


@dataclass
class TokenBuilder:
    """Unit tokens and query-token provenance of memories, standardised on the training split."""

    bridge: bool = True
    lexical: bool = True
    featurizer: UnitFeaturizer | None = None
    unit_scale: Standardizer | None = None
    provenance_scale: Standardizer | None = None

    def raw_units(self, variants: Sequence[Variant], encodings: Sequence[VariantEncoding]) -> list[np.ndarray]:
        lexical = self.featurizer(variants) if self.lexical and self.featurizer is not None else None
        out = []
        for i, e in enumerate(encodings):
            parts = [e.plain, e.plain_logit[:, None]]
            if self.bridge:
                parts += [e.bridge, e.bridge_logit[:, None]]
            if lexical is not None:
                parts.append(lexical[i])
            out.append(np.column_stack(parts).astype(np.float32))
        return out

    def fit(self, variants: Sequence[Variant], encodings: Sequence[VariantEncoding],
            provenance_dropout: float = 0.0) -> TokenBuilder:
        if self.lexical:
            self.featurizer = UnitFeaturizer().fit(variants)
        self.unit_scale = Standardizer.fit(np.vstack(self.raw_units(variants, encodings)))
        self.provenance_scale = Standardizer.fit(provenance_rows(variants, provenance_dropout))
        return self

    def __call__(self, variants: Sequence[Variant], encodings: Sequence[VariantEncoding],
                 provenance_dropout: float = 0.0) -> tuple[list[np.ndarray], np.ndarray]:
        assert self.unit_scale is not None and self.provenance_scale is not None, "fit() first"
        units = [self.unit_scale(u) for u in self.raw_units(variants, encodings)]
        return units, self.provenance_scale(provenance_rows(variants, provenance_dropout))


PROVENANCE_DROPOUT_SALT = "memsafe-provenance-dropout-v1"


def provenance_rows(variants: Sequence[Variant], dropout: float = 0.0) -> np.ndarray:
    """Provenance features per memory; with ``dropout``, a salted-hash fraction of the memories
    is shown as it would arrive without provenance (:func:`without_provenance`), so a model
    trained this way also knows that case (the gate: agents rarely pass provenance)."""
    def dropped(v: Variant) -> bool:
        return dropout > 0 and hash_rank(v.variant_id, PROVENANCE_DROPOUT_SALT) < dropout * 2**64
    return np.array([provenance_stats(without_provenance(v) if dropped(v) else v) for v in variants])


def targets(variants: Sequence[Variant], states: tuple[str, ...] = STATES) -> dict[str, Any]:
    return {"unsafe": [float(v.unsafe) for v in variants], "state": [states.index(v.state) for v in variants],
            "evidence": [np.array([u.is_evidence for u in v.units], np.float32) for v in variants],
            "missing": [float(v.missing_count) for v in variants]}


@dataclass
class MemSafe:
    """The set integrity model over Stage A encodings (``attention=False``: mean pooling)."""

    encodings: Mapping[str, VariantEncoding]
    seed: int = DEFAULT_SEED
    base: SetModelConfig = SetModelConfig()
    grid: tuple[dict[str, Any], ...] = ({},)
    """Overrides of ``base`` to select among on validation; the default ``({},)`` trains ``base``
    as given (a grid point overrides the fields it names, so passing ``GRID[:1]`` here would
    silently replace a selected configuration with the paper's)."""
    bridge: bool = True
    name: str = "memsafe"
    device: str = "cpu"
    """Where the set model trains and predicts (``--device``)."""
    provenance_dropout: float = 0.0
    """Fraction of training memories shown without provenance (0 in every table; the gate
    uses :data:`memsafe_lib.gate.GATE_PROVENANCE_DROPOUT`)."""
    provenance: bool = True
    """False: every memory, in training and scoring, is read as it would arrive without provenance
    (:func:`without_provenance`: source positions are memory positions, |H| = |M|), so the query
    token carries the memory's size and nothing about which source slots it kept (the rows
    "without provenance" beside the main ones)."""
    deterministic: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    selection_scores: list[dict[str, Any]] = field(default_factory=list)
    tokens: TokenBuilder | None = None
    model: SetModel | None = None
    log: TrainLog | None = None

    def _read(self, variants: Sequence[Variant]) -> Sequence[Variant]:
        return variants if self.provenance else [without_provenance(v) for v in variants]

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> MemSafe:
        train = self._read(train)
        validation = self._read(validation) if validation else validation
        enc = lookup(self.encodings, train)
        self.tokens = TokenBuilder(bridge=self.bridge, lexical=self.base.use_lexical).fit(
            train, enc, self.provenance_dropout)
        units, prov = self.tokens(train, enc, self.provenance_dropout)
        states = states_of(train)
        y = targets(train, states)
        val = None
        if validation:
            vu, vp = self.tokens(validation, lookup(self.encodings, validation))
            val = (vu, vp, np.array([v.unsafe for v in validation]), [v.state for v in validation])

        def fit_one(point: dict[str, Any]) -> tuple[SetModel, TrainLog]:
            return train_set_model(units, prov, y, replace(self.base, **point), self.seed, val, device=self.device,
                                   states=states)

        chosen = select(list(self.grid), fit_one, lambda m, vs: self._predict_with(m[0], vs), validation)
        (self.model, self.log), point = chosen.model, chosen.config
        self.selection_scores = chosen.grid_scores
        self.config = {**asdict(replace(self.base, **point)), "bridge": self.bridge,
                       "best_epoch": self.log.best_epoch,
                       **({"provenance_dropout": self.provenance_dropout} if self.provenance_dropout else {}),
                       **({} if self.provenance else {"provenance": False})}
        return self

    def _predict_with(self, model: SetModel, variants: Sequence[Variant]) -> Predictions:
        assert self.tokens is not None
        units, prov = self.tokens(variants, lookup(self.encodings, variants))
        out = predict_sets(model, units, prov)
        return Predictions(out.unsafe_prob.astype(float), out.state, unit_scores=out.unit_prob,
                           missing_count=out.missing_count.astype(float),
                           extras={"state_prob": out.state_prob})

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        if self.model is None:
            raise RuntimeError(f"{self.name}: call fit() first")
        return self._predict_with(self.model, self._read(variants))


def relevance_features(e: VariantEncoding, ks: Sequence[int] = (2, 3, 4)) -> list[float]:
    """Aggregates of the plain and bridge relevance logits of one memory."""
    row: list[float] = []
    for logits in (e.plain_logit, e.bridge_logit):
        top = np.sort(logits)[::-1]
        prob = 1 / (1 + np.exp(-logits))
        row += [float(top[0]), *[float(top[:k].mean()) for k in ks], float(logits.mean()),
                float((prob > 0.5).sum()), float((prob > 0.25).sum()), float(prob.sum())]
    return row


@dataclass
class RelevanceAggregation:
    """Logistic unsafe and state models on aggregated relevance logits (C chosen on validation)."""

    encodings: Mapping[str, VariantEncoding]
    name: str = "relevance_agg"
    deterministic: bool = True
    grid: tuple[dict[str, Any], ...] = ({"C": 0.1}, {"C": 1.0}, {"C": 10.0})
    config: dict[str, Any] = field(default_factory=dict)
    _models: tuple[Any, Any] | None = None

    def _x(self, variants: Sequence[Variant]) -> np.ndarray:
        return np.array([relevance_features(e) for e in lookup(self.encodings, variants)])

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> RelevanceAggregation:
        x = self._x(train)

        def fit_one(point: dict[str, Any]) -> tuple[Any, Any]:
            def lr() -> Any:
                return make_pipeline(StandardScaler(), LogisticRegression(C=point["C"], max_iter=5000))
            return lr().fit(x, [v.unsafe for v in train]), lr().fit(x, [v.state for v in train])

        chosen = select(list(self.grid), fit_one, lambda m, vs: self._predict_with(m, vs), validation)
        self._models, self.config = chosen.model, chosen.config
        return self

    def _predict_with(self, models: tuple[Any, Any], variants: Sequence[Variant]) -> Predictions:
        x = self._x(variants)
        unsafe, state = models
        col = list(unsafe.classes_).index(True)
        enc = lookup(self.encodings, variants)
        scores = [1 / (1 + np.exp(-(e.plain_logit + e.bridge_logit) / 2)) for e in enc]
        return Predictions(unsafe.predict_proba(x)[:, col], state.predict(x).astype(object), unit_scores=scores)

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        if self._models is None:
            raise RuntimeError("relevance_agg: call fit() first")
        return self._predict_with(self._models, variants)
