"""What the lexical estimator and a rule read in a clinical memory (notebook 07): the asked
measurement, the query day, and per unit its day and value (see
:mod:`memsafe_lib.variants.clinical` for the rendering ``Day 412: Creatinine (Blood) 1.1 mg/dL``).

* LexSet's clinical feature groups (the paper: numeric trend, event position, inter-event
  gap): per unit, whether it is the asked measurement, its age at the query day and its
  recency rank among the asked measurement's units; per memory, how many such units there
  are, the age of the newest, the gap between the two newest and the trend between them.
* :class:`ClinicalRule`: the recency rule a clinician would apply ("unsafe unless a recent
  value of the asked measurement is present"): unsafe score = age of the newest value (the
  two newest for a change question), with the stale/complete age cut-off learned on train.
* :func:`recency_stats`: a surface control's features: the memory's day offsets from the query
  day, read *without* looking at which measurement was asked. A construction in which it beats
  chance leaks the state through recency (notebook 07's control table).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memsafe_lib.estimators.controls import FeatureControl, Predictions
from memsafe_lib.estimators.lexset import MemoryView
from memsafe_lib.measures.metrics import macro_f1
from memsafe_lib.variants.construction import COMPLETE, MISSING, RELATION_LOST, STALE, Variant, present_states

_LATEST = re.compile(r"^As of day (\d+), what is the patient's most recent (.+)\?$")
_CHANGE = re.compile(r"^As of day (\d+), how did the patient's (.+) change between its last two measurements\?$")
_UNIT = re.compile(r"^Day (\d+): (.*)$")
NO_VALUE_AGE = 10_000.0
"""Age (days) given to an absent value, far beyond any real gap."""


@dataclass(frozen=True)
class ClinicalQuestion:
    day: int
    measurement: str
    kind: str


def parse_question(question: str) -> ClinicalQuestion | None:
    for kind, pattern in (("latest", _LATEST), ("change", _CHANGE)):
        m = pattern.match(question)
        if m:
            return ClinicalQuestion(int(m.group(1)), m.group(2), kind)
    return None


def asked_units(variant: Variant) -> list[tuple[int, int, float | None]]:
    """(position, day, value) of the memory's units of the asked measurement, newest first."""
    q = parse_question(variant.question)
    if q is None:
        raise ValueError(f"{variant.variant_id}: not a clinical question")
    out = []
    for u in variant.units:
        m = _UNIT.match(u.text)
        if m and m.group(2).startswith(q.measurement + " "):
            rest = m.group(2)[len(q.measurement) + 1:].split()
            try:
                value: float | None = float(rest[0].split("/")[0]) if rest else None
            except ValueError:
                value = None
            out.append((u.position, int(m.group(1)), value))
    return sorted(out, key=lambda x: (-x[1], -x[0]))


def clinical_unit_features(view: MemoryView) -> np.ndarray:
    """Per unit: asked measurement (0/1), log age at the query day, recency rank among the
    asked measurement's units (0 newest; 1 when not asked), value z-score among them."""
    v = view.variant
    q = parse_question(v.question)
    assert q is not None
    asked = asked_units(v)
    rank = {pos: i for i, (pos, _, _) in enumerate(asked)}
    values = np.array([x for _, _, x in asked if x is not None], dtype=float)
    mean, std = (values.mean(), values.std() + 1e-9) if len(values) else (0.0, 1.0)
    rows = []
    for u in v.units:
        m = _UNIT.match(u.text)
        day = int(m.group(1)) if m else q.day
        r = rank.get(u.position)
        value = next((x for pos, _, x in asked if pos == u.position), None)
        rows.append([float(r is not None), math.log1p(max(q.day - day, 0)),
                     r / max(len(asked) - 1, 1) if r is not None else 1.0,
                     (value - mean) / std if value is not None else 0.0])
    return np.array(rows, dtype=float)


def clinical_set_features(view: MemoryView, scores: np.ndarray) -> list[float]:
    """Per memory: number of asked units, log age of the newest, log gap between the two
    newest, their relative trend, and whether the question asks for a change."""
    q = parse_question(view.variant.question)
    assert q is not None
    asked = asked_units(view.variant)
    newest_age = q.day - asked[0][1] if asked else NO_VALUE_AGE
    gap = asked[0][1] - asked[1][1] if len(asked) > 1 else NO_VALUE_AGE
    a, b = (asked[0][2], asked[1][2]) if len(asked) > 1 else (None, None)
    trend = (a - b) / (abs(b) + 1e-9) if a is not None and b is not None else 0.0
    return [float(len(asked)), math.log1p(newest_age), math.log1p(gap), float(np.clip(trend, -10, 10)),
            float(q.kind == "change")]


def recency_stats(variant: Variant) -> list[float]:
    """Measurement-blind recency: log age (days before the query day) of the newest and oldest
    unit, the mean and spread of the log ages, the number of distinct days, and how many units
    share the newest day. Never which measurement a unit is, nor its value."""
    q = parse_question(variant.question)
    if q is None:
        raise ValueError(f"{variant.variant_id}: not a clinical question")
    days = [int(m.group(1)) for u in variant.units if (m := _UNIT.match(u.text))]
    if not days:
        return [0.0] * 6
    ages = np.log1p(np.maximum(q.day - np.array(days, dtype=float), 0.0))
    newest = max(days)
    return [float(ages.min()), float(ages.max()), float(ages.mean()), float(ages.std()), float(len(set(days))),
            float(sum(d == newest for d in days))]


def recency_control() -> FeatureControl:
    """The recency control: logistic regressions on :func:`recency_stats` (clinical data only)."""
    return FeatureControl("recency_only", recency_stats)


def recency_age(variant: Variant) -> float:
    """Days from the query day back to the newest value of the asked measurement;
    :data:`NO_VALUE_AGE` when it is absent (for a change question: when fewer than two are)."""
    q = parse_question(variant.question)
    assert q is not None
    asked = asked_units(variant)
    need = 1 if q.kind == "latest" else 2
    if len(asked) < need:
        return NO_VALUE_AGE
    return float(q.day - asked[0][1])


@dataclass
class ClinicalRule:
    """Unsafe unless a recent enough value of the asked measurement is present: the unsafe
    score rises with the newest value's age; the age cut-off between complete and stale is
    the one with the best training macro F1. Deterministic."""

    name: str = "clinical_rule"
    deterministic: bool = True
    config: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def _state(v: Variant, age: float, cutoff: float) -> str:
        q = parse_question(v.question)
        assert q is not None
        asked = asked_units(v)
        if not asked:
            return MISSING
        if q.kind == "change" and len(asked) < 2:
            return RELATION_LOST
        return COMPLETE if age <= cutoff else STALE

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> ClinicalRule:
        ages = [recency_age(v) for v in train]
        labels = present_states(v.state for v in train)
        candidates = sorted({a for a in ages if a < NO_VALUE_AGE}) or [0.0]
        best = max(candidates, key=lambda c: (macro_f1([v.state for v in train],
                                                       [self._state(v, a, c) for v, a in zip(train, ages, strict=True)],
                                                       labels), -c))
        self.config = {"age_cutoff_days": best}
        return self

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        if not self.config:
            raise RuntimeError("clinical_rule: call fit() first")
        cutoff = self.config["age_cutoff_days"]
        ages = np.array([recency_age(v) for v in variants])
        unsafe = ages / (ages + max(cutoff, 1.0))
        states = np.array([self._state(v, a, cutoff) for v, a in zip(variants, ages, strict=True)], dtype=object)
        return Predictions(unsafe, states)
