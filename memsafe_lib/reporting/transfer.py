"""Tables and figures of notebook 04 (transfer and saturation): family A to B with each model's
AUROC drop and H3 from those drops, MuSiQue to SQuAD 2.0 with thresholds carried over from
MuSiQue validation, and the memorization audit. Paper values only in ``paper_*`` columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from memsafe_lib.config import NeuralBudget, paper_reference
from memsafe_lib.encodings.encoders import VariantEncoding
from memsafe_lib.evaluation.hypotheses import FAMILY_A, FAMILY_B, evaluate_hypotheses
from memsafe_lib.evaluation.transfer import TransferResult, as_test, scores, target_pairs, truncation
from memsafe_lib.measures.risk_coverage import apply_threshold, threshold_for_risk
from memsafe_lib.reporting.main_results import MODEL_LABELS
from memsafe_lib.variants.construction import Variant

SQUAD_LABELS: dict[str, str] = {**MODEL_LABELS, "paragraph_count": "Memory-length control (paragraph count)"}
"""Row names of the SQuAD table. The paper's SQuAD paragraph calls ``paragraph_count`` the
"memory-length control" (exactly 0.5000: one paragraph per memory) and ``text_length`` the
"text-length control"; each label says which length it measures."""


def drop_table(table: pd.DataFrame, target: str = "family-b") -> pd.DataFrame:
    """Per model (seed means): AUROC and ECE on the source test split and on the target, and
    the AUROC drop source minus target."""
    wide = table.groupby(["model", "population"])[["unsafe_auroc", "ece"]].mean().unstack("population")
    rows = []
    for model in wide.index:
        a, b = wide.loc[model, ("unsafe_auroc", "source_test")], wide.loc[model].get(("unsafe_auroc", target))
        rows.append({"model": model, "auroc_a": a, "auroc_b": b, "drop": None if pd.isna(b) else a - b,
                     "ece_a": wide.loc[model, ("ece", "source_test")], "ece_b": wide.loc[model].get(("ece", target))})
    return pd.DataFrame(rows)


def h3_verdict(table: pd.DataFrame, dataset: str = "musique", target: str = "family-b") -> pd.Series:
    """H3 from the transfer rows as the paper defines it (trained on A, scored on A and B)."""
    rows = []
    for r in table.itertuples():
        if r.population not in ("source_test", target) or r.unsafe_auroc is None or pd.isna(r.unsafe_auroc):
            continue
        rows.append({"dataset": dataset, "construction": FAMILY_A if r.population == "source_test" else FAMILY_B,
                     "model": r.model, "seed": r.seed, "split": "test", "unsafe_auroc": r.unsafe_auroc,
                     "macro_f1": np.nan})
    report = evaluate_hypotheses(pd.DataFrame(rows, columns=["dataset", "construction", "model", "seed", "split",
                                                             "unsafe_auroc", "macro_f1"]))
    return report.set_index("id").loc["H3"]


def squad_table(results: Sequence[TransferResult], source_validation: Sequence[Variant],
                squad: Sequence[Variant], alphas: Sequence[float] = (0.05, 0.10)) -> pd.DataFrame:
    """Per model (seed means): SQuAD AUROC/AUPRC/Brier/ECE, and for each risk target the
    threshold chosen on the source's validation split applied to SQuAD (fraction accepted and
    realised risk), beside the paper's numbers."""
    ref = paper_reference().get("squad_transfer", {})
    y_val = np.array([v.unsafe for v in source_validation])
    squad = as_test(squad)
    y = np.array([v.unsafe for v in squad])
    per_seed = []
    for r in results:
        if "squad2" not in r.predictions:
            continue
        row: dict[str, object] = {"model": r.model, "seed": r.seed, **scores(squad, r.predictions["squad2"])}
        for alpha in alphas:
            t = threshold_for_risk(y_val, r.predictions["source_validation"].unsafe_prob, alpha)
            sel = apply_threshold(y, r.predictions["squad2"].unsafe_prob, t)
            row[f"accepted_at_{alpha:g}"] = sel.coverage
            row[f"risk_at_{alpha:g}"] = sel.realized_risk
        per_seed.append(row)
    frame = pd.DataFrame(per_seed)
    if frame.empty:
        return frame
    out = frame.drop(columns="seed").groupby("model", sort=False).mean(numeric_only=True).reset_index()
    out.insert(1, "label", out.model.map(SQUAD_LABELS).fillna(out.model))
    out.insert(2, "n_seeds", frame.groupby("model", sort=False).size().to_numpy())
    out["paper_unsafe_auroc"] = [ref.get(m, {}).get("unsafe_auroc") for m in out.model]
    return out


PAPER_SQUAD_WINDOW: int = NeuralBudget().max_length
"""The paper reads SQuAD 2.0 at its one pair cap, 256 tokens (the paper's budget is the default)."""


def squad_truncation_table(tokenizer: Any, squad: Sequence[Variant], encodings: Mapping[str, VariantEncoding],
                           window: int) -> pd.DataFrame:
    """Share of SQuAD's pairs longer than the window they were read at (exact tokenization with
    the encoder's tokenizer), beside the paper's 4.79% at 256 tokens: plain (q, u) pairs at
    ``window`` and, where it differs, at the paper's 256 (this tokenizer's count there), and
    bridge (q || u_top, u) pairs at ``window``. The paper's figure concerns "question-context
    pairs", so it stands beside the plain rows only; a bridge pair holds the paragraph twice
    (u_top is the memory's one paragraph) and is cut far more often."""
    paper_share = paper_reference().get("squad_transfer", {}).get("truncated_pairs")
    plain, bridge = target_pairs(squad, encodings)
    rows = [{"pair": "plain", **truncation(tokenizer, plain, window), "paper_share": paper_share}]
    if window != PAPER_SQUAD_WINDOW:
        rows.append({"pair": "plain", **truncation(tokenizer, plain, PAPER_SQUAD_WINDOW), "paper_share": paper_share})
    rows.append({"pair": "bridge", **truncation(tokenizer, bridge, window), "paper_share": None})
    frame = pd.DataFrame(rows)
    frame.insert(5, "paper_window", PAPER_SQUAD_WINDOW)
    return frame.astype({"share": float, "paper_share": float})


def memorization_table(audits: dict[str, dict[str, object]]) -> pd.DataFrame:
    """Per dataset: test paragraphs seen in training, agreement of their evidence status, and
    the test questions whose gold evidence never occurs in training."""
    ref = paper_reference().get("memorization", {})
    rows = [{"dataset": d, **{k: v for k, v in a.items() if k != "unseen_ids"},
             "paper_fraction_in_training": ref.get(d)} for d, a in audits.items()]
    return pd.DataFrame(rows)


def transfer_figure(drops: pd.DataFrame | None, restricted: pd.DataFrame) -> Figure:
    """Left: AUROC on family A and B per model (or a note where B is absent). Right: the
    change in test AUROC when only questions with unseen gold evidence are kept."""
    fig = Figure(figsize=(10, 3.8))
    left, right = fig.subplots(1, 2)
    if drops is None or drops.empty or drops.auroc_b.isna().all():
        left.text(0.5, 0.5, "family B: no MuSiQue-Full twins\nunder MEMSAFE_DATA_DIR", ha="center", va="center")
        left.set_axis_off()
    else:
        x = np.arange(len(drops))
        left.bar(x - 0.2, drops.auroc_a, 0.4, label="family A (trained)", color="#264653")
        left.bar(x + 0.2, drops.auroc_b, 0.4, label="family B (transfer)", color="#e9c46a")
        left.set_xticks(x, drops.model, rotation=20)
        left.set_ylabel("test unsafe AUROC")
        left.legend(fontsize=8)
    sub = restricted.dropna(subset=["change"])
    labels = [f"{d}\n{m}" for d, m in zip(sub.dataset, sub.model, strict=True)]
    right.barh(np.arange(len(sub)), sub.change, color="#2a9d8f")
    right.set_yticks(np.arange(len(sub)), labels, fontsize=7)
    right.axvline(0, c="k", lw=1)
    right.set_xlabel("AUROC change, questions with unseen gold evidence only")
    fig.tight_layout()
    return fig


def squad_figure(results: Sequence[TransferResult], squad: Sequence[Variant], model: str = "memsafe") -> Figure:
    """Figure "hardening-external": the transferred model's unsafe scores on SQuAD 2.0 by label."""
    fig = Figure(figsize=(5.2, 3.6))
    ax = fig.subplots()
    y = np.array([v.unsafe for v in squad])
    for r in results:
        if r.model == model and "squad2" in r.predictions:
            p = np.asarray(r.predictions["squad2"].unsafe_prob)
            ax.hist(p[~y], bins=30, alpha=0.6, density=True, label="answerable (complete)", color="#2a9d8f")
            ax.hist(p[y], bins=30, alpha=0.6, density=True, label="unanswerable (unsafe)", color="#e76f51")
            ax.set_title(f"{model} trained on MuSiQue, SQuAD 2.0 dev (seed {r.seed})")
            break
    ax.set_xlabel("unsafe probability")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
