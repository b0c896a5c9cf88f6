"""The shortcut audit of Section 4.1: fit every control on train, score the test split,
and compare the paragraph-count control with the Proposition 1 bound."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memsafe_lib.config import DEFAULT_SEED
from memsafe_lib.estimators.controls import CONTROLS, Estimator, Predictions
from memsafe_lib.estimators.registry import make_model
from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc
from memsafe_lib.measures.proposition import size_only_auroc, size_only_bound
from memsafe_lib.variants.construction import ConstructionResult, Variant, by_split, multiplicities, present_states


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
        }


def run_controls(
    result: ConstructionResult,
    controls: Sequence[str] = tuple(CONTROLS),
    eval_splits: Sequence[str] = ("test",),
    seed: int = DEFAULT_SEED,
) -> list[ControlResult]:
    """Fit each model (a control or any registered baseline) on the train split of
    ``result``, selecting on validation where it has choices, and predict ``eval_splits``."""
    splits = by_split(result.variants)
    for split in ("train", *eval_splits):
        labels = {v.unsafe for v in splits.get(split, [])}
        if labels != {True, False}:
            raise ValueError(
                f"{result.dataset}/{result.construction}: the {split} split has "
                f"{len(splits.get(split, []))} variants and needs both unsafe and complete ones"
            )
    out = []
    for name in controls:
        estimator: Estimator = make_model(name, seed).fit(splits["train"], splits.get("validation"))
        for split in eval_splits:
            variants = splits[split]
            out.append(ControlResult(name, split, variants, estimator.predict(variants)))
    return out



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


def audit(result: ConstructionResult, controls: Sequence[str] = tuple(CONTROLS)) -> dict[str, Any]:
    """Everything ``memsafe audit`` prints for one dataset and construction."""
    fitted = run_controls(result, controls)
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
