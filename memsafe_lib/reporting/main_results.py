"""Tables and the figure of notebook 02 (Table "main", seed variability, localisation,
calibration, selective prediction, bootstrap intervals), each with the paper's values in
``paper_*`` reference columns that are never used as results."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from memsafe_lib.config import paper_reference
from memsafe_lib.measures.metrics import state_auroc, unsafe_auroc
from memsafe_lib.variants.construction import MISSING, RELATION_LOST

MODEL_LABELS: dict[str, str] = {
    "memsafe": "MemSafe", "mean_pool": "Encoder + mean pool",
    "memsafe_no_provenance": "MemSafe without provenance", "mean_pool_no_provenance": "Mean pool without provenance",
    "relevance_agg": "Relevance aggregation",
    "concat_ce": "Concatenated cross-encoder", "joint_8k": "8k joint encoder (exploratory)",
    "llm_judge": "LLM judge (zero-shot)",
    "tfidf": "Flat TF-IDF logistic", "sc_tfidf": "Sufficient-context-style (TF-IDF)", "lexset": "LexSet",
    "lexset_no_title": "LexSet without title features", "lexset_logistic": "LexSet with logistic heads",
    "retrieval_sim": "Retrieval-similarity proxy", "text_length": "Text-length control",
    "paragraph_count": "Paragraph-count control", "provenance_only": "Provenance-only control", "majority": "Majority",
    "blind_bow": "Blind control: memory bag of words", "blind_unit": "Blind control: unit evidence from text",
    "blind_set": "Blind control: set model without the question", "question_only": "Question-only control",
    "qu_tfidf": "Shallow control: question-unit TF-IDF cosines",
    "title_named": "Shallow control: titles the question names",
}
TABLE_ORDER: tuple[str, ...] = tuple(MODEL_LABELS)


def table_order(models: Sequence[str]) -> list[str]:
    known = [m for m in TABLE_ORDER if m in set(models)]
    return known + sorted(set(models) - set(known))


def main_table(summary: pd.DataFrame, datasets: Sequence[str], construction: str = "size-matched") -> pd.DataFrame:
    """One row per model; per dataset: test unsafe AUROC and macro F1 (seed means), the seed
    SD of AUROC, the number of seeds, and the paper's two values beside them (size-matched
    only: the paper has no other construction's table)."""
    sub = summary[(summary.construction == construction) & summary.dataset.isin(datasets)]
    rows = []
    for model in table_order(sub.model.unique()):
        row: dict[str, object] = {"model": model, "label": MODEL_LABELS.get(model, model)}
        for d in datasets:
            hit = sub[(sub.dataset == d) & (sub.model == model)]
            r = hit.iloc[0] if len(hit) else None
            row[f"{d}_auroc"] = None if r is None else r.unsafe_auroc
            row[f"{d}_auroc_sd"] = None if r is None else r.unsafe_auroc_sd
            row[f"{d}_macro_f1"] = None if r is None else r.macro_f1
            row[f"{d}_seeds"] = None if r is None else int(r.n_seeds)
            row[f"{d}_paper_auroc"] = None if r is None else r.paper_unsafe_auroc
            row[f"{d}_paper_macro_f1"] = None if r is None else r.paper_macro_f1
        rows.append(row)
    return pd.DataFrame(rows)


def construction_table(summary: pd.DataFrame, datasets: Sequence[str], construction: str) -> pd.DataFrame:
    """Table "main" of a construction the paper has no table for (blind-matched, blind-hard):
    the same columns without the paper's, which would be size-matched values beside ours."""
    return main_table(summary, datasets, construction).drop(
        columns=[f"{d}_paper_{m}" for d in datasets for m in ("auroc", "macro_f1")])


PROVENANCE_PAIRS: tuple[tuple[str, str], ...] = (("memsafe", "memsafe_no_provenance"),
                                                 ("mean_pool", "mean_pool_no_provenance"))


def provenance_table(summary: pd.DataFrame, datasets: Sequence[str]) -> pd.DataFrame:
    """Per set model and dataset: test unsafe AUROC and macro F1 (seed means, size-matched) with
    and without provenance, and without minus with. Rows only for pairs both of whose models ran."""
    sub = summary[(summary.construction == "size-matched") & summary.dataset.isin(datasets)]
    rows = []
    for with_, without in PROVENANCE_PAIRS:
        for d in datasets:
            a = sub[(sub.dataset == d) & (sub.model == with_)]
            b = sub[(sub.dataset == d) & (sub.model == without)]
            if not len(a) or not len(b):
                continue
            row: dict[str, object] = {"model": with_, "dataset": d}
            for metric in ("unsafe_auroc", "macro_f1"):
                row[metric] = float(a.iloc[0][metric])
                row[f"{metric}_without"] = float(b.iloc[0][metric])
                row[f"{metric}_change"] = row[f"{metric}_without"] - row[metric]  # type: ignore[operator]
            rows.append(row)
    return pd.DataFrame(rows)


PER_STATE_MODELS: tuple[str, ...] = ("memsafe", "mean_pool", "relevance_agg", "lexset", "qu_tfidf", "title_named",
                                     "retrieval_sim")
"""The models whose test AUROC is split by unsafe state: the set models, LexSet and the shallow
question-aware controls (a topic gap shows first on complete vs missing)."""


def per_state_table(predictions: dict[tuple[str, str], pd.DataFrame],
                    models: Sequence[str] = PER_STATE_MODELS) -> pd.DataFrame:
    """Per (dataset, construction) run and model: test unsafe AUROC overall, complete vs missing
    and complete vs relation-lost, each the mean over seeds of that seed's AUROC on those
    memories only (as Table "main" averages seeds). ``predictions`` maps a run to its
    ``predictions.csv.gz`` frame; models a run lacks are left out."""
    rows = []
    for (dataset, construction), frame in predictions.items():
        test = frame[frame.split == "test"]
        for model in table_order([m for m in models if m in set(test.model)]):
            per_seed = []
            for _, g in test[test.model == model].groupby("seed"):
                states, score = g.state.tolist(), g.unsafe_prob.to_numpy(float)
                per_seed.append({"unsafe_auroc": unsafe_auroc(g.unsafe.to_numpy(bool), score),
                                 "auroc_complete_vs_missing": state_auroc(states, score, MISSING),
                                 "auroc_complete_vs_relation_lost": state_auroc(states, score, RELATION_LOST)})
            means = pd.DataFrame(per_seed).astype(float).mean()
            rows.append({"dataset": dataset, "construction": construction, "model": model,
                         "label": MODEL_LABELS.get(model, model), **means.to_dict(), "n_seeds": len(per_seed)})
    return pd.DataFrame(rows)


def _paper(section: str, *keys: str) -> object:
    node: object = paper_reference()["table_main"].get(section, {})
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
    return node


def seed_variability(metrics: pd.DataFrame, datasets: Sequence[str]) -> pd.DataFrame:
    """Sample SD over seeds of test unsafe AUROC for seeded (non-deterministic) models, and for
    every model the paper's seed table lists even where ours is deterministic (relevance
    aggregation over one shared encoder: its SD here is 0, the paper's is not)."""
    listed = {m for d in datasets for m in (_paper("seed_sd_unsafe_auroc", d) or {})}  # type: ignore[union-attr]
    sub = metrics[(metrics.split == "test") & (metrics.construction == "size-matched")
                  & (~metrics.deterministic | metrics.model.isin(listed)) & metrics.dataset.isin(datasets)]
    rows = []
    for model in table_order(sub.model.unique()):
        row: dict[str, object] = {"model": model}
        for d in datasets:
            vals = sub[(sub.dataset == d) & (sub.model == model)].unsafe_auroc
            row[f"{d}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else None
            row[f"{d}_seeds"] = int(len(vals))
            row[f"{d}_paper_sd"] = _paper("seed_sd_unsafe_auroc", d, model)
        rows.append(row)
    return pd.DataFrame(rows)


LOCALIZATION_METRICS = ("evidence_auprc", "count_mae", "ece")


def localization_calibration(summary: pd.DataFrame, datasets: Sequence[str]) -> pd.DataFrame:
    """Per-unit evidence AUPRC, missing-count MAE and ECE (seed means) for models that produce them."""
    sub = summary[(summary.construction == "size-matched") & summary.dataset.isin(datasets)]
    rows = []
    for d in datasets:
        for model in table_order(sub[sub.dataset == d].model.unique()):
            r = sub[(sub.dataset == d) & (sub.model == model)].iloc[0]
            if pd.isna(r.evidence_auprc) and pd.isna(r.count_mae) and model not in ("memsafe", "mean_pool"):
                continue
            row: dict[str, object] = {"dataset": d, "model": model}
            for m in LOCALIZATION_METRICS:
                row[m] = None if pd.isna(r[m]) else float(r[m])
                row[f"paper_{m}"] = _paper("localization", m, d, model)
            rows.append(row)
    return pd.DataFrame(rows)


def selective_table(summary: pd.DataFrame, datasets: Sequence[str], models: Sequence[str]) -> pd.DataFrame:
    sub = summary[(summary.construction == "size-matched") & summary.dataset.isin(datasets)
                  & summary.model.isin(models)]
    rows = []
    for d in datasets:
        for model in table_order(sub[sub.dataset == d].model.unique()):
            r = sub[(sub.dataset == d) & (sub.model == model)].iloc[0]
            ref = _paper("selective_5pct", d, model) or {}
            rows.append({"dataset": d, "model": model, "aurc": r.aurc, "coverage_at_5pct": r.coverage_at_target,
                         "realized_risk": r.realized_risk, "paper_aurc": ref.get("aurc"),
                         "paper_coverage": ref.get("coverage"), "paper_realized_risk": ref.get("realized_risk")})
    return pd.DataFrame(rows)


def interval_table(intervals: pd.DataFrame, model: str = "memsafe",
                   against: Sequence[str] = ("lexset", "tfidf", "mean_pool")) -> pd.DataFrame:
    """Paired bootstrap differences ``model - other`` (test, size-matched) with the paper's."""
    sub = intervals[(intervals.construction == "size-matched") & (intervals.model_a == model)
                    & intervals.model_b.isin(against)].copy()
    refs = [_paper("bootstrap", d, f"{model}-{b}") if m == "unsafe_auroc" else None
            for d, b, m in zip(sub.dataset, sub.model_b, sub.metric, strict=True)]
    sub["paper_estimate"] = [r[0] if r else None for r in refs]
    sub["paper_lo"] = [r[1] if r else None for r in refs]
    sub["paper_hi"] = [r[2] if r else None for r in refs]
    return sub.reset_index(drop=True)


def auroc_figure(summary: pd.DataFrame, datasets: Sequence[str]) -> Figure:
    """Test unsafe AUROC by model and dataset (bars: ours, seed means with seed SD; red
    ticks: the paper's values). A bare Figure, so the library never picks a backend."""
    sub = summary[(summary.construction == "size-matched") & summary.dataset.isin(datasets)].copy()
    order = table_order(sub.model.unique())
    fig = Figure(figsize=(4.2 * len(datasets), 0.32 * len(order) + 1.4))
    axes = fig.subplots(1, len(datasets), sharey=True, squeeze=False)[0]
    for ax, d in zip(axes, datasets, strict=True):
        part = sub[sub.dataset == d].set_index("model").reindex(order).reset_index()
        sns.barplot(data=part, y="model", x="unsafe_auroc", ax=ax, color="#4C72B0", orient="h")
        ax.errorbar(part.unsafe_auroc, range(len(order)), xerr=part.unsafe_auroc_sd.fillna(0), fmt="none",
                    ecolor="black", lw=1)
        ax.scatter(part.paper_unsafe_auroc, range(len(order)), marker="|", s=160, color="#C44E52",
                   label="paper (full data)", zorder=3)
        ax.axvline(0.5, color="grey", lw=0.8, ls=":")
        ax.set_xlim(0.4, 1.0)
        ax.set_title(d)
        ax.set_xlabel("test unsafe AUROC")
        ax.set_ylabel("")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


JOINT_FIGURE_MODELS: tuple[str, ...] = ("concat_ce", "joint_8k", "mean_pool", "memsafe")
"""Figure "hardening-joint": the truncated and the long-window joint encoders beside the set models."""


def joint_table(summary: pd.DataFrame, datasets: Sequence[str]) -> pd.DataFrame:
    """Figure "hardening-joint"'s numbers: per dataset and model, test unsafe AUROC (seed mean and
    SD), macro F1 and coverage at the validation-selected 5% risk, with the paper's values."""
    sub = summary[(summary.construction == "size-matched") & summary.dataset.isin(datasets)
                  & summary.model.isin(JOINT_FIGURE_MODELS)]
    rows = []
    for d in datasets:
        for model in JOINT_FIGURE_MODELS:
            hit = sub[(sub.dataset == d) & (sub.model == model)]
            if not len(hit):
                continue
            r = hit.iloc[0]
            rows.append({"dataset": d, "model": model, "label": MODEL_LABELS[model], "n_seeds": int(r.n_seeds),
                         "unsafe_auroc": r.unsafe_auroc, "unsafe_auroc_sd": r.unsafe_auroc_sd, "macro_f1": r.macro_f1,
                         "coverage_at_5pct": r.coverage_at_target, "paper_unsafe_auroc": r.paper_unsafe_auroc,
                         "paper_coverage": (_paper("selective_5pct", d, model) or {}).get("coverage")})
    return pd.DataFrame(rows)


def joint_figure(table: pd.DataFrame) -> Figure:
    """Bars per dataset (seed means, SD bars) for the models of :func:`joint_table`; the paper's
    values as red ticks."""
    datasets = list(dict.fromkeys(table.dataset))
    fig = Figure(figsize=(4.2 * max(len(datasets), 1), 2.6))
    axes = fig.subplots(1, max(len(datasets), 1), sharey=True, squeeze=False)[0]
    for ax, d in zip(axes, datasets, strict=False):
        part = table[table.dataset == d].reset_index(drop=True)
        ax.barh(range(len(part)), part.unsafe_auroc, xerr=part.unsafe_auroc_sd.fillna(0), color="#4C72B0")
        ax.scatter(part.paper_unsafe_auroc, range(len(part)), marker="|", s=160, color="#C44E52",
                   label="paper (full data)", zorder=3)
        ax.set_yticks(range(len(part)), part.label)
        ax.axvline(0.5, color="grey", lw=0.8, ls=":")
        ax.set_xlim(0.4, 1.0)
        ax.set_title(d)
        ax.set_xlabel("test unsafe AUROC")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
