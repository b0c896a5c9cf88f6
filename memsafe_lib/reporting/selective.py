"""Tables and the figure of notebook 05 (selective prediction at a fixed risk budget): Table
"selective" with the prevalence ceiling beside each row, the plain validation threshold
against a Learn-then-Test threshold with a guarantee, the risk-coverage curves, and the error
taxonomy as the paper reports it. Everything is computed from the per-variant predictions an
evaluate run wrote; the paper's values sit in ``paper_*`` columns only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from memsafe_lib.config import paper_reference
from memsafe_lib.data.mimic import independence_group
from memsafe_lib.measures.metrics import error_taxonomy
from memsafe_lib.measures.risk_control import ltt_threshold
from memsafe_lib.measures.risk_coverage import (
    apply_threshold,
    aurc,
    aurc_min,
    coverage_ceiling,
    risk_coverage_curve,
    threshold_for_risk,
)

SELECTIVE_MODELS: tuple[str, ...] = ("memsafe", "mean_pool", "relevance_agg", "lexset")


def _split(predictions: pd.DataFrame, model: str, seed: int, split: str) -> pd.DataFrame:
    return predictions[(predictions.model == model) & (predictions.seed == seed) & (predictions.split == split)]


def operating_points(predictions: pd.DataFrame, dataset: str, models: Sequence[str], alpha: float = 0.05,
                     delta: float = 0.1) -> pd.DataFrame:
    """Per (model, seed): test AURC, and for the plain validation threshold and the
    Learn-then-Test one, the test coverage and realised risk (None when nothing is accepted)."""
    rows = []
    for model in models:
        for seed in sorted(predictions[predictions.model == model].seed.unique()):
            val, test = _split(predictions, model, seed, "validation"), _split(predictions, model, seed, "test")
            if val.empty or test.empty:
                continue
            y_val, s_val = val.unsafe.astype(bool).to_numpy(), val.unsafe_prob.to_numpy(float)
            y, s = test.unsafe.astype(bool).to_numpy(), test.unsafe_prob.to_numpy(float)
            plain = apply_threshold(y, s, threshold_for_risk(y_val, s_val, alpha))
            # one memory per question (per patient on clinical data: its questions share its events)
            groups = [independence_group(dataset, b) for b in val.base_id.astype(str)]
            control = ltt_threshold(y_val, s_val, alpha, delta, groups=groups)
            guaranteed = apply_threshold(y, s, control.threshold)
            pi = float(y.mean())
            rows.append({"dataset": dataset, "model": model, "seed": int(seed), "aurc": aurc(y, s),
                         "coverage": plain.coverage, "realized_risk": plain.realized_risk,
                         "ltt_threshold": control.threshold, "ltt_coverage": guaranteed.coverage,
                         "ltt_realized_risk": guaranteed.realized_risk, "validation_n": int(len(val)),
                         "prevalence": pi, "coverage_ceiling": coverage_ceiling(pi, alpha), "aurc_min": aurc_min(pi)})
    return pd.DataFrame(rows)


def selective_table(points: pd.DataFrame) -> pd.DataFrame:
    """Table "selective": seed means per (dataset, model); a realised risk is averaged over the
    seeds that accepted anything, and ``seeds_accepting`` says how many did."""
    ref = paper_reference()["table_main"]["selective_5pct"]
    rows = []
    for (dataset, model), g in points.groupby(["dataset", "model"], sort=False):
        paper = ref.get(dataset, {}).get(model, {})
        risk = g.realized_risk.dropna()
        ltt_risk = g.ltt_realized_risk.dropna()
        rows.append({"dataset": dataset, "model": model, "n_seeds": len(g), "aurc": g.aurc.mean(),
                     "aurc_min": g.aurc_min.mean(), "coverage": g.coverage.mean(),
                     "coverage_ceiling": g.coverage_ceiling.mean(),
                     "realized_risk": risk.mean() if len(risk) else None, "seeds_accepting": len(risk),
                     "ltt_coverage": g.ltt_coverage.mean(),
                     "ltt_realized_risk": ltt_risk.mean() if len(ltt_risk) else None,
                     "paper_aurc": paper.get("aurc"), "paper_coverage": paper.get("coverage"),
                     "paper_realized_risk": paper.get("realized_risk")})
    return pd.DataFrame(rows)


def risk_coverage_figure(predictions: dict[str, pd.DataFrame], models: Sequence[str], seed: int,
                         alpha: float = 0.05) -> Figure:
    """Test risk-coverage curves of one seed per dataset, with the risk budget (dotted) and
    the prevalence ceiling on coverage at that budget (dashed)."""
    fig = Figure(figsize=(4.4 * len(predictions), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(predictions), sharey=True))
    for ax, (dataset, frame) in zip(axes, predictions.items(), strict=True):
        pi = None
        for model in models:
            test = _split(frame, model, seed, "test")
            if test.empty:
                continue
            curve = risk_coverage_curve(test.unsafe.astype(bool).to_numpy(), test.unsafe_prob.to_numpy(float))
            ax.plot(curve.coverage, curve.risk, label=model, lw=1.2)
            pi = float(test.unsafe.mean())
        ax.axhline(alpha, ls=":", c="k", lw=1, label=f"{alpha:.0%} budget")
        if pi is not None:
            ax.axvline(coverage_ceiling(pi, alpha), ls="--", c="grey", lw=1, label="prevalence ceiling")
        ax.set_xlabel("coverage")
        ax.set_title(f"{dataset} (test, seed {seed})")
    axes[0].set_ylabel("evidence risk of answered memories")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def taxonomy_table(predictions: pd.DataFrame, dataset: str, model: str = "memsafe") -> pd.DataFrame:
    """The error taxonomy of one model's test predictions, as seed means: error rate, the
    two unsafe-state confusions as shares of errors, unsafe memories predicted complete (share
    of unsafe), complete memories rejected (share of complete), and the error rate at one
    surviving evidence item."""
    ref = paper_reference().get("taxonomy", {}).get(dataset, {})
    rows = []
    for seed in sorted(predictions[predictions.model == model].seed.unique()):
        test = _split(predictions, model, seed, "test")
        tax = error_taxonomy(test.state.tolist(), test.pred_state.tolist(), test.surviving.astype(int).tolist())
        share = tax["error_share"]
        rows.append({"error_rate": tax["error_rate"],
                     "relation_lost_as_missing": share.get("relation_lost->missing"),
                     "missing_as_relation_lost": share.get("missing->relation_lost"),
                     "unsafe_predicted_complete": tax["unsafe_accepted_rate"],
                     "complete_rejected": tax["complete_rejected_rate"],
                     "error_rate_one_surviving": tax["error_rate_by_surviving"].get(1)})
    frame = pd.DataFrame(rows)
    out = [{"dataset": dataset, "model": model, "quantity": q,
            "value": frame[q].dropna().mean() if frame[q].notna().any() else None, "n_seeds": len(frame),
            "paper": ref.get(q)} for q in frame.columns]
    return pd.DataFrame(out)


def error_by_surviving(predictions: pd.DataFrame, dataset: str, model: str = "memsafe") -> pd.DataFrame:
    """Test error rate by the number of surviving evidence units (all seeds pooled)."""
    test = predictions[(predictions.model == model) & (predictions.split == "test")]
    wrong = test.state != test.pred_state
    grouped = wrong.groupby(test.surviving.astype(int))
    return pd.DataFrame({"dataset": dataset, "model": model, "surviving": grouped.mean().index,
                         "error_rate": grouped.mean().to_numpy(), "n": grouped.size().to_numpy()})
