"""Tables and figures of the construction audit (notebook 01), as plain functions.

Figures are built on :class:`matplotlib.figure.Figure` objects, so the library never
touches the global backend; notebooks display them inline, scripts save them to files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure

from memsafe_lib.config import paper_reference
from memsafe_lib.measures.proposition import counterexample_auroc, size_only_bound, two_group_tv
from memsafe_lib.reporting.figures import seeded_global_rng
from memsafe_lib.variants.construction import STATES, ConstructionResult, by_split

STATE_ORDER = list(STATES)
PALETTE = {"complete": "#2a9d8f", "missing": "#e76f51", "relation_lost": "#e9c46a"}


# ---------------------------------------------------------------- tables


def data_table(accountings: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Raw records, base questions, exclusions by reason and variants by state, with the
    paper's full-data counts in ``paper_*`` reference columns."""
    ref = paper_reference()["table_data"]
    rows = []
    for acc in accountings:
        paper = ref.get(acc["dataset"], {}) if acc["construction"] == "size-matched" else {}
        row = {
            "dataset": acc["dataset"],
            "construction": acc["construction"],
            "raw_records": acc["raw_records"],
            "base_questions": acc["base_questions"],
            "excluded": acc["excluded"],
            "excluded_by_reason": "; ".join(f"{k}: {v}" for k, v in acc["excluded_by_reason"].items()) or "-",
            "variants": acc["variants"],
            **{f"variants_{s}": acc["variants_by_state"][s] for s in STATES},
            "base_lacking_a_state": sum(acc["absent_states"].values()),
            "paper_raw_records": paper.get("raw_records"),
            "paper_base_questions": paper.get("base_questions"),
            "paper_excluded": paper.get("excluded"),
            "paper_variants": paper.get("variants"),
        }
        rows.append(row)
    frame = pd.DataFrame(rows)
    paper_cols = [c for c in frame.columns if c.startswith("paper_")]
    return frame.astype({c: "Int64" for c in paper_cols})


EXCLUSION_COLUMNS = ["dataset", "record_id", "reason", "file", "record_index", "stage", "detail", "kind"]


def exclusion_table(result: ConstructionResult) -> pd.DataFrame:
    """One line per raw record a construction did not use (with its reason) and per used base
    query that lacks a state: the exclusion ledger written beside the data table."""
    rows = [{**asdict(e), "kind": "excluded"} for e in result.exclusions]
    rows += [{**asdict(e), "kind": "state absent"} for e in result.absent]
    return pd.DataFrame(rows, columns=EXCLUSION_COLUMNS)


def control_table(audits: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per (dataset, construction, control) on the test split, with the paper's
    reported test AUROC / macro F1 where it gives one."""
    ref = paper_reference()["shortcut"]
    rows = []
    for report in audits:
        for row in report["rows"]:
            ds, cons, model = row["dataset"], row["construction"], row["model"]
            rows.append({
                **row,
                "paper_unsafe_auroc": ref.get(cons, {}).get(ds, {}).get(model),
                "paper_macro_f1": ref.get(f"{cons}_macro_f1", {}).get(ds, {}).get(model),
            })
    return pd.DataFrame(rows)


def proposition_table(audits: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Proposition 1 per dataset: the bound for any size-only score against the fitted
    paragraph-count control's observed deviation from 1/2 (test split) and against the
    exact AUROC of memory size itself (test split and all splits)."""
    rows = []
    for report in audits:
        if report["construction"] != "size-matched":
            continue
        for scope in ("test", "all"):
            p = report[f"proposition_1_{scope}"]
            rows.append({
                "dataset": report["dataset"],
                "scope": scope,
                "base_queries": p["base_queries"],
                "fraction_one_unsafe": p["fraction_one_unsafe"],
                "total_variation": p["total_variation"],
                "bound": p["bound"],
                "bound_case": p["bound_case"],
                "memory_size_auroc_exact": p["memory_size_auroc_exact"],
                "memory_size_deviation": abs(p["memory_size_auroc_exact"] - 0.5),
                "paragraph_count_control_auroc": p.get("observed_auroc"),
                "paragraph_count_control_deviation": p.get("observed_deviation"),
            })
    return pd.DataFrame(rows)


def proposition_closed_form() -> pd.DataFrame:
    """The paper's closed-form MuSiQue quantities of Proposition 1, recomputed by the library
    from the multiplicities the paper states (epsilon = 409 of 21,902 base questions lack
    relation-lost), beside the values it reports."""
    ref = paper_reference()["proposition_1"]
    n, one_unsafe = ref["musique_eps_denominator"], ref["musique_eps_numerator"]
    bound = size_only_bound([1] * one_unsafe + [2] * (n - one_unsafe), [1] * n)
    return pd.DataFrame([
        {"quantity": "TV(P_u, P_c), closed form", "memsafe": two_group_tv(one_unsafe / n),
         "paper": ref["musique_total_variation"]},
        {"quantity": "TV from multiplicities", "memsafe": bound.total_variation,
         "paper": ref["musique_total_variation"]},
        {"quantity": "two-group bound TV/2", "memsafe": bound.bound, "paper": ref["musique_two_group_bound"]},
        {"quantity": "counterexample AUROC (must exceed)", "memsafe": counterexample_auroc(),
         "paper": ref["counterexample_auroc_lower_bound"]},
    ])


def text_length_table(controls: pd.DataFrame, external: Mapping[str, Any]) -> pd.DataFrame:
    """The text-length control's test AUROC on each size-matched dataset and on the external
    single-paragraph set (SQuAD 2.0 as released; ``external`` is its :func:`audit` report),
    with the paper's SQuAD value (it fits on SQuAD train and reports dev) as reference."""
    rows = [r for r in controls.to_dict("records")
            if r["model"] == "text_length" and r["construction"] == "size-matched"]
    paper_squad = paper_reference()["shortcut"]["squad2_text_length"]["dev"]
    rows += [{**r, "paper_unsafe_auroc": paper_squad} for r in external["rows"] if r["model"] == "text_length"]
    return pd.DataFrame(rows)[["dataset", "construction", "n_variants", "unsafe_auroc", "paper_unsafe_auroc"]]


# ---------------------------------------------------------------- figures




def plot_shortcut(
    results: Mapping[str, ConstructionResult], controls: pd.DataFrame, dataset: str = "musique"
) -> Figure:
    """Left: memory size by state on ``dataset``'s test split under deletion and under size
    matching. Then one panel per construction in ``controls`` (deletion, size-matched,
    blind-matched): every control's test AUROC."""
    constructions = [c for c in ("deletion", "size-matched", "blind-matched") if c in set(controls["construction"])]
    fig = Figure(figsize=(5 + 5.2 * len(constructions), 4.4))
    axes = fig.subplots(1, 1 + len(constructions), gridspec_kw={"width_ratios": [1.0] + [1.2] * len(constructions)})
    sizes = []
    for cons in ("deletion", "size-matched"):
        for v in by_split(results[cons].variants).get("test", []):
            sizes.append({"construction": cons, "state": v.state, "memory size (units)": len(v.units)})
    frame = pd.DataFrame(sizes)
    with seeded_global_rng(0):  # seaborn jitters with numpy's global RNG: same data, same figure
        sns.stripplot(data=frame, x="construction", y="memory size (units)", hue="state", hue_order=STATE_ORDER,
                      palette=PALETTE, dodge=True, jitter=0.25, size=3, alpha=0.6, ax=axes[0])
    axes[0].set_title(f"{dataset}: memory size by state (test)")
    for ax, cons in zip(axes[1:], constructions, strict=True):
        sub = controls[controls["construction"] == cons]
        sns.barplot(data=sub, x="model", y="unsafe_auroc", hue="dataset", errorbar=None, ax=ax)
        ax.axhline(0.5, ls=":", c="k", lw=1)
        ax.set_ylim(0.0, 1.05)
        ax.legend(loc="lower right", fontsize=8, title="dataset", title_fontsize=8)
        ax.set_title(f"controls under {cons} construction (test)")
        ax.set_xlabel("")
        ax.set_ylabel("unsafe AUROC")
        ax.tick_params(axis="x", rotation=35)
    fig.tight_layout()
    return fig


def plot_proposition(table: pd.DataFrame) -> Figure:
    """Bound vs observed deviation from chance for size-only scores (size-matched)."""
    fig = Figure(figsize=(8, 3.6))
    ax = fig.subplots()
    test = table[table["scope"] == "test"].set_index("dataset")
    x = np.arange(len(test))
    ax.bar(x - 0.27, test["bound"], 0.27, label="Prop. 1 bound (test multiplicities)", color="#264653")
    ax.bar(x, test["memory_size_deviation"], 0.27, label="|AUROC - 1/2|, memory size", color="#2a9d8f")
    ax.bar(x + 0.27, test["paragraph_count_control_deviation"], 0.27, label="|AUROC - 1/2|, fitted control",
           color="#e9c46a")
    for xi, (_, row) in zip(x, test.iterrows(), strict=True):
        if row["bound"] == 0 and row["memory_size_deviation"] == 0:
            ax.annotate("bound 0, AUROC exactly 1/2", (xi, 0), xytext=(0, 6), textcoords="offset points",
                        ha="center", fontsize=8)
    ax.set_xticks(x, test.index)
    ax.set_ylabel("deviation from chance")
    ax.set_title("Size-only scores under size matching stay within the bound")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_text_length(results: Mapping[str, ConstructionResult]) -> Figure:
    """Total memory characters by state (size-matched, all splits): the residual cue."""
    fig = Figure(figsize=(4.2 * len(results), 3.6))
    axes = np.atleast_1d(fig.subplots(1, len(results)))
    for ax, (dataset, result) in zip(axes, results.items(), strict=True):
        frame = pd.DataFrame(
            {"state": v.state, "characters": sum(len(u.text) for u in v.units)} for v in result.variants
        )
        order = [s for s in STATE_ORDER if s in set(frame.state)]
        sns.histplot(data=frame, x="characters", hue="state", hue_order=order, palette=PALETTE,
                     element="step", stat="density", common_norm=False, ax=ax)
        ax.set_title(f"{dataset} ({result.construction})")
    fig.tight_layout()
    return fig
