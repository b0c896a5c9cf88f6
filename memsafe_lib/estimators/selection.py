"""Hyper-parameter selection on the validation split, shared by every learned baseline.

The rule is the paper's: highest validation unsafe AUROC, ties broken by integrity
macro F1, then by the order of the grid (so the choice is deterministic).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc
from memsafe_lib.variants.construction import Variant, present_states

M = TypeVar("M")


@dataclass
class Selected(Generic[M]):
    model: M
    config: dict[str, Any]
    validation_auroc: float | None
    validation_macro_f1: float | None
    grid_scores: list[dict[str, Any]]


def validation_scores(
    predict: Callable[[Sequence[Variant]], Any], validation: Sequence[Variant]
) -> tuple[float, float]:
    preds = predict(validation)
    states = [v.state for v in validation]
    labels = present_states(states)
    return (unsafe_auroc([v.unsafe for v in validation], preds.unsafe_prob),
            macro_f1(states, list(preds.state), labels))


def select(
    grid: Sequence[dict[str, Any]],
    fit: Callable[[dict[str, Any]], M],
    predict: Callable[[M, Sequence[Variant]], Any],
    validation: Sequence[Variant] | None,
) -> Selected[M]:
    """Fit every configuration of ``grid`` and keep the best on ``validation``.

    Without validation data (or with a one-configuration grid) the first configuration is used.
    """
    if not grid:
        raise ValueError("empty hyper-parameter grid")
    if validation is None or len(grid) == 1 or len({v.unsafe for v in validation}) < 2:
        model = fit(grid[0])
        return Selected(model, dict(grid[0]), None, None, [])
    models, scores = [], []
    for config in grid:
        model = fit(config)
        auroc, f1 = validation_scores(lambda vs, m=model: predict(m, vs), validation)
        models.append(model)
        scores.append({**config, "validation_auroc": auroc, "validation_macro_f1": f1})
    i = best_index(scores)
    return Selected(models[i], dict(grid[i]), scores[i]["validation_auroc"], scores[i]["validation_macro_f1"], scores)


def best_index(scores: Sequence[dict[str, Any]]) -> int:
    """The rule on already-scored grid points (``validation_auroc``, ``validation_macro_f1``):
    highest AUROC, then macro F1, then the earliest point."""
    if not scores:
        raise ValueError("no scored grid points")
    return max(range(len(scores)), key=lambda i: (scores[i]["validation_auroc"], scores[i]["validation_macro_f1"], -i))
