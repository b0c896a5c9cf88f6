"""Table "reader" beside the paper's values, and the two reader figures (error against
coverage per gate; the prevalence sweep).

How the table's errors are counted (:func:`memsafe_lib.evaluation.reader_gating.reader_table`):
a gate answers ``k = c * n`` memories; tied scores are accepted in one fixed order for every
gate (salted SHA-256 of the memory id, ``reader_gating.TIE_SALT``), and a fractional ``k``
counts its last memory in part (30 memories at 5%: ``k = 1.5``, the first memory and half of
the second). Notebook 06 says so beside the table.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from memsafe_lib import config
from memsafe_lib.evaluation.reader_gating import COVERAGES

GATE_LABELS = {"answer_all": "Answer everything", "memsafe": "MemSafe", "lexset": "LexSet", "tfidf": "Flat TF-IDF",
               "paragraph_count": "Memory-length control (paragraph count)",
               "text_length": "Text-length control (characters)",
               "llm_judge": "LLM judge (zero-shot)",
               "llm_judge_4shot": "LLM judge (four-shot)", "confidence": "Reader sequence confidence",
               "oracle": "Oracle integrity label",
               "combined": "Combined (MemSafe + judge + confidence)"}
"""The paper's row names; its memory-length control is ``paragraph_count`` (units in the memory);
text length is our extra row."""


def with_paper(table: pd.DataFrame, reference: str = "reader") -> pd.DataFrame:
    """Our rows with the paper's errors in ``paper_error_at_*`` columns: its 7B reader's
    (``reader``), or the three points it quotes for its 1.5B reader (``reader_second``)."""
    paper = config.paper_reference().get(reference, {})
    out = table.copy()
    out.insert(1, "label", out.gate.map(GATE_LABELS).fillna(out.gate))
    for c in COVERAGES:
        out[f"paper_error_at_{c:g}"] = out.gate.map(lambda g, c=c: paper.get(g, {}).get(f"{c:g}"))
    unstated = out.gate.map(lambda g: paper.get(g, {}).get("unstated") if isinstance(paper.get(g), dict) else None)
    if unstated.notna().any():  # a value the paper quotes without saying at which coverage
        out["paper_error_coverage_unstated"] = unstated
    return out


def judge_with_paper(table: pd.DataFrame) -> pd.DataFrame:
    """The judges' and models' unsafe AUROC/AUPRC on the read memories, with the paper's
    values on its 1,000-question subset (7B judge) in ``paper_*`` columns."""
    paper = config.paper_reference().get("llm_judge", {})
    out = table.copy()
    for metric in ("unsafe_auroc", "unsafe_auprc"):
        out[f"paper_{metric}"] = out.model.map(lambda m, k=metric: paper.get(m, {}).get(k))
    return out


def coverage_figure(table: pd.DataFrame) -> Figure:
    fig, ax = plt.subplots(figsize=(6, 4))
    for _, row in table.iterrows():
        ys = [row[f"error_at_{c:g}"] for c in COVERAGES]
        style = "--" if row.gate == "answer_all" else "-"
        ax.plot([100 * c for c in COVERAGES], ys, style, marker="o", label=GATE_LABELS.get(row.gate, row.gate))
    ax.set_xlabel("coverage (% of memories answered)")
    ax.set_ylabel("error among answered")
    ax.set_ylim(0, 1.02)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def prevalence_figure(sweep: pd.DataFrame) -> Figure:
    coverages = sorted(sweep.coverage.unique())
    fig, axes = plt.subplots(1, len(coverages), figsize=(5 * len(coverages), 3.6), sharey=True, squeeze=False)
    for ax, cov in zip(axes[0], coverages, strict=True):
        part = sweep[sweep.coverage == cov].sort_values("prevalence")
        for gate, g in part.groupby("gate", sort=False):
            ax.plot(100 * g.prevalence, g.error, marker="o", label=GATE_LABELS.get(gate, gate))
        ax.set_title(f"{cov:.0%} coverage")
        ax.set_xlabel("unsafe prevalence (%)")
    axes[0][0].set_ylabel("error among answered")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig
