"""Tables and the figure of notebook 07 (clinical memories): the clinical data table, the
surface-control table, Table "clinical" (MemSafe against LexSet with seed wins, beside the
recency rule), Table "clinical_curve" and its figure. Counts and metrics only: nothing of a person leaves here.
The paper's rows (its own MIMIC-IV construction, credentialed data) are reference only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

MODELS: tuple[str, ...] = ("memsafe", "lexset", "clinical_rule")
CONTROLS: tuple[str, ...] = ("majority", "paragraph_count", "text_length", "provenance_only", "recency_only",
                             "blind_bow", "blind_unit", "blind_set", "question_only")
"""Surface and blind controls: each sees only what a leaky construction would give away (the
memory without the question, or the question without the memory)."""
CHANCE_BAND: tuple[float, float] = (0.45, 0.55)
"""Test unsafe AUROC a control must stay within (the tolerance of the QA rows, notebook 01)."""


def control_table(metrics: pd.DataFrame, settings: Sequence[Any], models: Sequence[str]) -> pd.DataFrame:
    """One row per (setting, model): seed-mean validation and test unsafe AUROC, and for a
    control whether its test AUROC lies in :data:`CHANCE_BAND` (None for an estimator)."""
    rows = []
    for s in settings:
        for model in models:
            sel = metrics[(metrics.dataset == s.dataset) & (metrics.construction == s.construction)
                          & (metrics.model == model)]
            if sel.empty:
                continue
            test = sel[sel.split == "test"].unsafe_auroc.mean()
            control = model in CONTROLS
            rows.append({"setting": s.label, "dataset": s.dataset, "construction": s.construction, "model": model,
                         "role": "control" if control else "estimator",
                         "validation_auroc": sel[sel.split == "validation"].unsafe_auroc.mean(), "test_auroc": test,
                         "within_chance": bool(CHANCE_BAND[0] <= test <= CHANCE_BAND[1]) if control else None})
    return pd.DataFrame(rows)


def data_table(accountings: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    rows = []
    for a in accountings:
        rows.append({k: ("; ".join(f"{r}: {n}" for r, n in v.items()) or "-") if isinstance(v, dict) else v
                     for k, v in a.items()})
    return pd.DataFrame(rows)


def _test(metrics: pd.DataFrame, dataset: str, construction: str, model: str) -> pd.DataFrame:
    return metrics[(metrics.dataset == dataset) & (metrics.construction == construction) & (metrics.model == model)
                   & (metrics.split == "test")].sort_values("seed")


def comparison_row(metrics: pd.DataFrame, dataset: str, construction: str, train_variants: int,
                   patients: int) -> dict[str, Any]:
    """Seed means of MemSafe, LexSet and the rule; MemSafe minus LexSet with seed wins."""
    row: dict[str, Any] = {"dataset": dataset, "construction": construction, "patients": patients,
                           "train_variants": train_variants}
    per_model = {m: _test(metrics, dataset, construction, m) for m in MODELS}
    for m, frame in per_model.items():
        row[f"{m}_auroc"] = frame.unsafe_auroc.mean() if len(frame) else None
        row[f"{m}_macro_f1"] = frame.macro_f1.mean() if len(frame) else None
    a, b = per_model["memsafe"], per_model["lexset"]
    if len(a) and len(b):
        paired = a.merge(b, on="seed", suffixes=("_m", "_l"))
        row["delta_auroc"] = float((paired.unsafe_auroc_m - paired.unsafe_auroc_l).mean())
        row["seed_wins"] = f"{int((paired.unsafe_auroc_m > paired.unsafe_auroc_l).sum())}/{len(paired)}"
        row["delta_macro_f1"] = float((paired.macro_f1_m - paired.macro_f1_l).mean())
    return row


def curve_figure(curve: pd.DataFrame) -> Figure:
    """MemSafe and LexSet test AUROC against training variants, one panel per dataset."""
    datasets = list(dict.fromkeys(curve.dataset))
    fig = Figure(figsize=(4.6 * len(datasets), 3.6))
    axes = np.atleast_1d(fig.subplots(1, len(datasets), sharey=True))
    for ax, dataset in zip(axes, datasets, strict=True):
        sub = curve[curve.dataset == dataset].sort_values("train_variants")
        for model, color in (("memsafe", "#264653"), ("lexset", "#e76f51"), ("clinical_rule", "#8d99ae")):
            ax.plot(sub.train_variants, sub[f"{model}_auroc"], marker="o", color=color, label=model)
        ax.set_xscale("log")
        ax.set_xlabel("training variants")
        ax.set_title(dataset)
    axes[0].set_ylabel("test unsafe AUROC")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def crossing(curve: pd.DataFrame) -> pd.DataFrame:
    """Per dataset: where MemSafe first leads LexSet on the curve (training variants), or
    that it never does on our data."""
    rows = []
    for dataset, sub in curve.sort_values("train_variants").groupby("dataset", sort=False):
        lead = sub[sub.delta_auroc > 0]
        rows.append({"dataset": dataset, "points": len(sub),
                     "memsafe_leads_from_train_variants": int(lead.train_variants.iloc[0]) if len(lead) else None,
                     "memsafe_leads_at_largest": bool(sub.delta_auroc.iloc[-1] > 0) if len(sub) else None})
    return pd.DataFrame(rows)
