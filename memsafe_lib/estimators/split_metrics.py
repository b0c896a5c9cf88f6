"""Every per-split metric of the paper for one model's predictions: what a notebook's metrics
rows and a trained gate's ``config.json`` both report, computed one way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from memsafe_lib.estimators.controls import Predictions
from memsafe_lib.measures.metrics import (
    evidence_auprc,
    expected_calibration_error,
    macro_f1,
    missing_count_mae,
    unsafe_auroc,
)
from memsafe_lib.variants.construction import Variant, present_states

EVAL_SPLITS: tuple[str, ...] = ("validation", "test")
"""The splits a fitted model is scored on (training is for fitting only)."""


def split_metrics(variants: Sequence[Variant], preds: Predictions) -> dict[str, Any]:
    """Every per-split metric of the paper for one model's predictions."""
    unsafe = [v.unsafe for v in variants]
    states = [v.state for v in variants]
    labels = present_states(states)
    row: dict[str, Any] = {
        "n_variants": len(variants),
        "n_base_queries": len({v.base_id for v in variants}),
        "prevalence": float(np.mean(unsafe)),
        "unsafe_auroc": unsafe_auroc(unsafe, preds.unsafe_prob),
        "macro_f1": macro_f1(states, list(preds.state), labels),
        "ece": expected_calibration_error(unsafe, np.clip(preds.unsafe_prob, 0.0, 1.0)),
        "evidence_auprc": None,
        "count_mae": None,
    }
    if preds.unit_scores is not None:
        row["evidence_auprc"] = evidence_auprc([[u.is_evidence for u in v.units] for v in variants], preds.unit_scores)
    if preds.missing_count is not None:
        row["count_mae"] = missing_count_mae([v.missing_count for v in variants], preds.missing_count)
    return row
