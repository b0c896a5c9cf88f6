"""Tables and figures of notebook 03 (where MemSafe's signal comes from): Table "ablation",
the attribution ladder with the share of the LexSet-to-MemSafe gap a frozen encoder closes,
and the fine-tuning x set-model interaction. Each reads the seed-mean summary and the
paired bootstrap intervals of a summarize run; the paper's values sit in ``paper_*``
columns and are never used as results."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from memsafe_lib.config import paper_reference
from memsafe_lib.estimators.registry import ABLATIONS, INTERACTION, LADDER

LABELS: dict[str, str] = {
    "memsafe": "Full MemSafe",
    "memsafe_frozen": "w/o encoder fine-tuning (frozen encoder)",
    "memsafe_no_bridge": "w/o bridge-conditioned encoding",
    "mean_pool": "w/o set model (mean pooling)",
    "memsafe_no_lexical": "w/o lexical and position features",
    "memsafe_no_localization": "w/o localization heads",
    "relevance_agg_frozen": "w/o encoder fine-tuning and set model",
}
RUNGS: dict[str, str] = {
    "lexset": "LexSet", "relevance_agg_frozen": "frozen encoder + relevance aggregation",
    "relevance_agg": "fine-tuned encoder + relevance aggregation", "mean_pool": "+ mean pooling",
    "memsafe": "+ attention (MemSafe)",
}


def _row(summary: pd.DataFrame, dataset: str, model: str) -> pd.Series | None:
    hit = summary[(summary.dataset == dataset) & (summary.model == model) & (summary.construction == "size-matched")]
    return hit.iloc[0] if len(hit) else None


def _interval(intervals: pd.DataFrame, dataset: str, a: str, b: str, metric: str) -> pd.Series | None:
    hit = intervals[(intervals.dataset == dataset) & (intervals.model_a == a) & (intervals.model_b == b)
                    & (intervals.metric == metric) & (intervals.construction == "size-matched")]
    return hit.iloc[0] if len(hit) else None


def _paper_main(dataset: str, model: str, metric: str) -> float | None:
    value = paper_reference()["table_main"][metric].get(dataset, {}).get(model)
    return None if value is None else float(value)


def ablation_table(summary: pd.DataFrame, intervals: pd.DataFrame, dataset: str = "musique") -> pd.DataFrame:
    """Table "ablation": each row removes one part of the full model (the last, two).
    ``delta_*`` is the paired bootstrap estimate against the full model (row minus full),
    with its 95% interval; empty where a row was not run."""
    paper = paper_reference()["ablation"].get(dataset, {})
    rows = []
    for model in ABLATIONS:
        r = _row(summary, dataset, model)
        row: dict[str, object] = {"dataset": dataset, "model": model, "variant": LABELS[model],
                                  "n_seeds": None if r is None else int(r.n_seeds)}
        for metric in ("unsafe_auroc", "macro_f1"):
            row[metric] = None if r is None else float(r[metric])
            if metric == "unsafe_auroc":
                row["unsafe_auroc_sd"] = None if r is None else float(r.unsafe_auroc_sd)
            iv = _interval(intervals, dataset, "memsafe", model, metric) if model != "memsafe" else None
            # the intervals are memsafe minus the row; the table shows the row minus memsafe
            row[f"delta_{metric}"] = None if iv is None else 0.0 - float(iv.estimate)
            row[f"delta_{metric}_lo"] = None if iv is None else 0.0 - float(iv.hi)
            row[f"delta_{metric}_hi"] = None if iv is None else 0.0 - float(iv.lo)
            row[f"paper_{metric}"] = paper.get(model, {}).get(metric)
            row[f"paper_delta_{metric}"] = paper.get(model, {}).get(f"delta_{metric}")  # as printed
        rows.append(row)
    return pd.DataFrame(rows)


def ladder_summary(main: pd.DataFrame, ablation: pd.DataFrame) -> pd.DataFrame:
    """The summary rows the ladder reads: a (dataset, construction, model) of Table "main"
    (``main``: notebook 02, every seed of the scale, as the paper's five-seed figure) from
    there, the rest (the frozen rung, which only notebook 03 fits) from notebook 03's
    ``ablation`` summary (three Stage B seeds sharing one encoder). The frozen rung is
    deterministic given the frozen encoder, so its mean does not depend on the seeds."""
    keys = ["dataset", "construction", "model"]
    return pd.concat([main, ablation], ignore_index=True).drop_duplicates(keys, keep="first", ignore_index=True)


def ladder_table(summary: pd.DataFrame, datasets: Sequence[str]) -> pd.DataFrame:
    """Figure "attribution": each rung's seed-mean test AUROC and seed SD per dataset."""
    attribution = paper_reference()["attribution"]
    rows = []
    for dataset in datasets:
        for step, model in enumerate(LADDER):
            r = _row(summary, dataset, model)
            paper = _paper_main(dataset, model, "unsafe_auroc")
            if paper is None:
                paper = attribution.get(dataset, {}).get(model)
            rows.append({"dataset": dataset, "step": step, "model": model, "rung": RUNGS[model],
                         "unsafe_auroc": None if r is None else float(r.unsafe_auroc),
                         "unsafe_auroc_sd": None if r is None else float(r.unsafe_auroc_sd),
                         "n_seeds": None if r is None else int(r.n_seeds), "paper_unsafe_auroc": paper})
    return pd.DataFrame(rows)


def gap_closed(ladder: pd.DataFrame, ablation: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per dataset: the LexSet-to-MemSafe AUROC gap and the share of it a frozen encoder with
    relevance aggregation closes. The full model is the ablation's own (``ablation``: notebook
    03's summary, the runs whose frozen rung is measured), as the paper divides 0.1587 by
    0.9674 - 0.5820 = 0.3854, not by Table main's MemSafe; the ladder's value where the ablation
    lacks it. Undefined (empty) where MemSafe does not beat LexSet: a share of a negative gap
    means nothing."""
    paper = paper_reference()["attribution"]
    rows = []
    for dataset, group in ladder.groupby("dataset", sort=False):
        auroc = group.set_index("model").unsafe_auroc
        lexset, frozen, full = auroc.get("lexset"), auroc.get("relevance_agg_frozen"), auroc.get("memsafe")
        own = None if ablation is None else _row(ablation, str(dataset), "memsafe")
        full = full if own is None else float(own.unsafe_auroc)
        known = all(v is not None and not pd.isna(v) for v in (lexset, frozen, full))
        gap = float(full - lexset) if known else None
        closed = float(frozen - lexset) if known else None
        rows.append({"dataset": dataset, "full_model": full, "gap": gap, "closed_by_frozen_encoder": closed,
                     "fraction_closed": closed / gap if gap is not None and gap > 0 else None,
                     "paper_gap": paper.get(dataset, {}).get("gap"),
                     "paper_fraction_closed": paper.get(dataset, {}).get("fraction_closed_by_frozen_encoder")})
    return pd.DataFrame(rows)


def interaction_table(summary: pd.DataFrame, dataset: str = "musique") -> pd.DataFrame:
    """Figure "interaction": the four (encoder, aggregation) cells and the marginal gain of each
    factor given the other. All four cells here share one encoder seed per Stage B seed (the
    paper's fine-tuned, no-set-model cell came from its five-seed main table)."""
    rows = []
    for (encoder, aggregation), model in INTERACTION.items():
        r = _row(summary, dataset, model)
        rows.append({"dataset": dataset, "encoder": encoder, "aggregation": aggregation, "model": model,
                     "unsafe_auroc": None if r is None else float(r.unsafe_auroc),
                     "unsafe_auroc_sd": None if r is None else float(r.unsafe_auroc_sd)})
    return pd.DataFrame(rows)


def interaction_gains(cells: pd.DataFrame) -> pd.DataFrame:
    """Marginal gain of the set model at each encoder, and of fine-tuning at each aggregation."""
    a = cells.set_index(["encoder", "aggregation"]).unsafe_auroc
    paper = paper_reference()["attribution"].get(str(cells.dataset.iloc[0]), {})

    def diff(x: tuple[str, str], y: tuple[str, str]) -> float | None:
        return None if pd.isna(a.get(x)) or pd.isna(a.get(y)) else float(a[x] - a[y])

    ra, sm = "relevance aggregation", "set model"
    return pd.DataFrame([
        {"gain": "set model, frozen encoder", "unsafe_auroc": diff(("frozen", sm), ("frozen", ra)),
         "paper": paper.get("set_model_gain_frozen")},
        {"gain": "set model, fine-tuned encoder", "unsafe_auroc": diff(("fine-tuned", sm), ("fine-tuned", ra)),
         "paper": paper.get("set_model_gain_finetuned")},
        {"gain": "fine-tuning, relevance aggregation", "unsafe_auroc": diff(("fine-tuned", ra), ("frozen", ra)),
         "paper": paper.get("finetuning_gain_without_set_model")},
        {"gain": "fine-tuning, set model", "unsafe_auroc": diff(("fine-tuned", sm), ("frozen", sm)),
         "paper": paper.get("finetuning_gain_with_set_model")},
    ])


def attribution_figure(ladder: pd.DataFrame) -> Figure:
    """Ladder bars per dataset (seed means, SD bars), paper values as markers, chance dotted."""
    datasets = list(dict.fromkeys(ladder.dataset))
    fig = Figure(figsize=(4.2 * len(datasets), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(datasets), sharey=True))
    for ax, dataset in zip(axes, datasets, strict=True):
        sub = ladder[ladder.dataset == dataset].sort_values("step")
        x = np.arange(len(sub))
        ax.bar(x, sub.unsafe_auroc.fillna(0), yerr=sub.unsafe_auroc_sd.fillna(0), color="#2a9d8f", capsize=3,
               label="ours (seed mean, SD)")
        ax.scatter(x, sub.paper_unsafe_auroc.astype(float), color="k", marker="_", s=300, label="paper", zorder=3)
        ax.axhline(0.5, ls=":", c="k", lw=1)
        ax.set_xticks(x, [RUNGS[m] for m in sub.model], rotation=35, ha="right", fontsize=8)
        ax.set_ylim(0.4, 1.02)
        ax.set_title(dataset)
    axes[0].set_ylabel("test unsafe AUROC")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def interaction_figure(cells: pd.DataFrame, lexset: float | None = None) -> Figure:
    """AUROC of the four cells: one line per encoder across aggregation (arrows: the set
    model's gain); the dashed line marks LexSet."""
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.subplots()
    order = ["relevance aggregation", "set model"]
    for encoder, color in (("frozen", "#e76f51"), ("fine-tuned", "#264653")):
        sub = cells[cells.encoder == encoder].set_index("aggregation").reindex(order)
        ax.errorbar([0, 1], sub.unsafe_auroc, yerr=sub.unsafe_auroc_sd.fillna(0), marker="o", color=color,
                    capsize=3, label=f"{encoder} encoder")
        if sub.unsafe_auroc.notna().all():
            gain = sub.unsafe_auroc.iloc[1] - sub.unsafe_auroc.iloc[0]
            ax.annotate(f"{gain:+.3f}", (0.5, sub.unsafe_auroc.mean()), color=color, ha="center",
                        xytext=(0, 6), textcoords="offset points")
    if lexset is not None:
        ax.axhline(lexset, ls="--", c="grey", lw=1, label="LexSet")
    ax.set_xticks([0, 1], ["without set model\n(relevance aggregation)", "with set model"])
    ax.set_xlim(-0.3, 1.3)
    ax.set_ylabel("test unsafe AUROC")
    ax.set_title(f"{cells.dataset.iloc[0]}: fine-tuning x set model")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def silver_table(summary: pd.DataFrame, quality: dict[str, dict[str, object]], datasets: Sequence[str]) -> pd.DataFrame:
    """Gold- against silver-supervised MemSafe per dataset (test split, seed means; per-unit
    AUPRC always against gold), with the silver targets' precision and recall on train."""
    rows = []
    for dataset in datasets:
        for supervision, construction in (("gold", "size-matched"), ("silver", "size-matched-silver")):
            hit = summary[(summary.dataset == dataset) & (summary.model == "memsafe")
                          & (summary.construction == construction)]
            r = hit.iloc[0] if len(hit) else None
            q = quality.get(dataset, {}) if supervision == "silver" else {}
            rows.append({"dataset": dataset, "supervision": supervision,
                         **{m: None if r is None else float(r[m])
                            for m in ("unsafe_auroc", "macro_f1", "evidence_auprc")},
                         "n_seeds": None if r is None else int(r.n_seeds),
                         "silver_precision": q.get("precision"), "silver_recall": q.get("recall")})
    return pd.DataFrame(rows)


CURVE_MODELS: tuple[str, ...] = ("memsafe", "lexset")


def learning_curve_table(summary: pd.DataFrame, datasets: Sequence[str], fractions: Sequence[float],
                         train_questions: dict[str, int]) -> pd.DataFrame:
    """Test AUROC of MemSafe and LexSet trained on nested fractions of the training questions
    (1.0 = the full training split of notebook 02)."""
    rows = []
    for dataset in datasets:
        for fraction in sorted({*fractions, 1.0}):
            construction = "size-matched" if fraction == 1 else f"size-matched-train{round(fraction * 100)}"
            for model in CURVE_MODELS:
                hit = summary[(summary.dataset == dataset) & (summary.model == model)
                              & (summary.construction == construction)]
                r = hit.iloc[0] if len(hit) else None
                rows.append({"dataset": dataset, "fraction": fraction,
                             "train_questions": round(fraction * train_questions.get(dataset, 0)), "model": model,
                             "unsafe_auroc": None if r is None else float(r.unsafe_auroc),
                             "unsafe_auroc_sd": None if r is None else float(r.unsafe_auroc_sd),
                             "n_seeds": None if r is None else int(r.n_seeds)})
    return pd.DataFrame(rows)


def curve_crossing(curve: pd.DataFrame) -> pd.DataFrame:
    """Per dataset: MemSafe minus LexSet at each fraction, the slope of that difference per
    doubling of the training questions (least squares in log2 fraction), and the fraction
    where the line reaches zero: a descriptive extrapolation from three points, marked as
    such when it lies beyond the data we have."""
    rows = []
    for dataset, group in curve.groupby("dataset", sort=False):
        wide = group.pivot_table(index="fraction", columns="model", values="unsafe_auroc")
        if not set(CURVE_MODELS) <= set(wide.columns):
            continue
        diff = (wide["memsafe"] - wide["lexset"]).dropna()
        row: dict[str, object] = {"dataset": dataset, **{f"gap_at_{f:g}": float(d) for f, d in diff.items()}}
        if len(diff) >= 2:
            slope, intercept = np.polyfit(np.log2(diff.index.to_numpy(float)), diff.to_numpy(float), 1)
            row["gap_change_per_doubling"] = float(slope)
            crossing = float(2 ** (-intercept / slope)) if slope != 0 else None
            row["crossing_fraction"] = crossing
            row["crossing_is_extrapolated"] = (None if crossing is None
                                               else bool(crossing > 1 or crossing < diff.index.min()))
            n_full = int(group[group.fraction == 1.0].train_questions.iloc[0]) if (group.fraction == 1.0).any() else 0
            row["crossing_train_questions"] = None if crossing is None or crossing <= 0 else round(crossing * n_full)
        rows.append(row)
    return pd.DataFrame(rows)


def learning_curve_figure(curve: pd.DataFrame) -> Figure:
    """Test AUROC against training questions (log scale), one panel per dataset."""
    datasets = list(dict.fromkeys(curve.dataset))
    fig = Figure(figsize=(4.4 * len(datasets), 3.6))
    axes = np.atleast_1d(fig.subplots(1, len(datasets), sharey=True))
    for ax, dataset in zip(axes, datasets, strict=True):
        for model, color in (("memsafe", "#264653"), ("lexset", "#e76f51")):
            sub = curve[(curve.dataset == dataset) & (curve.model == model)].sort_values("fraction")
            ax.errorbar(sub.train_questions, sub.unsafe_auroc, yerr=sub.unsafe_auroc_sd.fillna(0), marker="o",
                        capsize=3, color=color, label=model)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("training base questions")
        ax.set_title(dataset)
    axes[0].set_ylabel("test unsafe AUROC")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig
