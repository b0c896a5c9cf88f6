"""Summaries of ``memsafe evaluate`` runs: seed means beside the paper's values, paired
bootstrap intervals and descriptive Wilcoxon tests for model comparisons, and the verdicts of
the pre-registered hypotheses and smoke gates that the summarized folder decides (written as
verdict files and gathered into the one table, :mod:`memsafe_lib.evaluation.hypotheses`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig, paper_reference
from memsafe_lib.estimators.registry import ABLATIONS, LADDER
from memsafe_lib.evaluation.hypotheses import (
    decided_in,
    evaluate_hypotheses,
    smoke_gates,
    write_hypotheses_table,
    write_verdicts,
)
from memsafe_lib.io import read_csv, write_csv
from memsafe_lib.ledger import record_run
from memsafe_lib.measures.inference import paired_bootstrap, wilcoxon_holm
from memsafe_lib.variants.construction import accounting
from memsafe_lib.variants.store import build

SUMMARY_METRICS = ("unsafe_auroc", "macro_f1", "ece", "evidence_auprc", "count_mae", "aurc",
                   "coverage_at_target", "realized_risk")

BASELINE_COMPARISONS: tuple[tuple[str, str], ...] = (
    ("lexset", "tfidf"),
    ("sc_tfidf", "tfidf"),
    ("tfidf", "text_length"),
    ("lexset", "retrieval_sim"),
)
NEURAL_COMPARISONS: tuple[tuple[str, str], ...] = (
    ("memsafe", "lexset"),
    ("memsafe", "tfidf"),
    ("memsafe", "mean_pool"),
    ("memsafe", "relevance_agg"),
    ("mean_pool", "relevance_agg"),
)
"""H1 (MemSafe vs mean pooling) and H2 (MemSafe vs LexSet and TF-IDF) read these intervals."""
COMPARISONS = (*NEURAL_COMPARISONS, *BASELINE_COMPARISONS)
"""Pairs compared with the paired bootstrap wherever both models were evaluated."""
ABLATION_COMPARISONS: tuple[tuple[str, str], ...] = (
    *(("memsafe", m) for m in ABLATIONS[1:]),
    *zip(LADDER[1:], LADDER[:-1], strict=True),
    ("memsafe_frozen", "relevance_agg_frozen"),
)
"""Table "ablation" (full model against each part removed; H4 reads memsafe vs no bridge), each
step of the attribution ladder, and the marginal gains of figure "interaction"."""

INTERVAL_COLUMNS = ("dataset", "construction", "model_a", "model_b", "metric", "estimate", "lo", "hi",
                    "n_resamples", "n_redrawn", "n_seeds", "excludes_zero")


ROW_KEY = ["dataset", "construction", "model", "seed", "split"]


def evaluation_dirs(scale: ScaleConfig, sources: Sequence[str] = (config.EVALUATE,)) -> list[Path]:
    """``<source>/<dataset>/<construction>/`` folders holding a metrics.csv, source by source."""
    return [p.parent for source in sources for p in sorted((scale.run_dir / source).glob("*/*/metrics.csv"))]


def load_metrics(scale: ScaleConfig, sources: Sequence[str] = (config.EVALUATE,)) -> pd.DataFrame:
    """Every metrics row of the sources; a (dataset, construction, model, seed, split) evaluated
    in two sources (the same cached fit) is kept once, from the first source."""
    frames = [pd.read_csv(d / "metrics.csv") for d in evaluation_dirs(scale, sources)]
    if not frames:
        raise FileNotFoundError(f"no evaluate results under {scale.run_dir} / {list(sources)}; "
                                "run `memsafe evaluate --dataset D --scale S` first")
    return pd.concat(frames, ignore_index=True).drop_duplicates(ROW_KEY, keep="first", ignore_index=True)


def summary_table(metrics: pd.DataFrame, split: str = "test") -> pd.DataFrame:
    """Mean and seed standard deviation per (dataset, construction, model), paper values beside."""
    ref = paper_reference()["table_main"]
    sub = metrics[metrics["split"] == split]
    cols = [c for c in SUMMARY_METRICS if c in sub.columns]
    grouped = sub.groupby(["dataset", "construction", "model"], sort=False)
    out = grouped[cols].mean()
    out["unsafe_auroc_sd"] = grouped["unsafe_auroc"].std(ddof=1).fillna(0.0)
    out["n_seeds"] = grouped["seed"].nunique()
    out["deterministic"] = grouped["deterministic"].all()
    out = out.reset_index()
    keys = list(zip(out.dataset, out.model, strict=True))
    out["paper_unsafe_auroc"] = [ref["unsafe_auroc"].get(d, {}).get(m) for d, m in keys]
    out["paper_macro_f1"] = [ref["macro_f1"].get(d, {}).get(m) for d, m in keys]
    return out.sort_values(["dataset", "unsafe_auroc"], ascending=[True, False], ignore_index=True)


def comparison_frame(predictions: pd.DataFrame, a: str, b: str, split: str = "test") -> pd.DataFrame:
    """Seed-aligned rows of two models on the same variants, in the bootstrap's format."""
    sub = predictions[predictions["split"] == split]
    key = ["seed", "variant_id"]
    left = sub[sub.model == a].set_index(key)
    right = sub[sub.model == b].set_index(key)
    if left.empty or right.empty:
        raise ValueError(f"no {split} predictions for {a if left.empty else b}")
    joined = left.join(right[["unsafe_prob", "pred_state"]].add_suffix("_b"), how="inner")
    if len(joined) != len(left) or len(joined) != len(right):
        raise ValueError(f"{a} and {b} were not scored on the same (seed, variant) rows")
    return pd.DataFrame({
        "seed": joined.index.get_level_values("seed"), "base_id": joined["base_id"].to_numpy(),
        "unsafe": joined["unsafe"].astype(bool).to_numpy(), "state": joined["state"].to_numpy(),
        "score_a": joined["unsafe_prob"].to_numpy(), "score_b": joined["unsafe_prob_b"].to_numpy(),
        "pred_a": joined["pred_state"].to_numpy(), "pred_b": joined["pred_state_b"].to_numpy(),
    })


def bootstrap_intervals(directory: Path, comparisons: Sequence[tuple[str, str]], n_resamples: int = 1000,
                        random_state: int = 0) -> pd.DataFrame:
    predictions = read_csv(directory / "predictions.csv.gz")
    dataset, construction = directory.parent.name, directory.name
    rows: list[dict[str, Any]] = []
    available = set(predictions.model)
    for a, b in comparisons:
        if not {a, b} <= available:
            continue
        frame = comparison_frame(predictions, a, b)
        for metric in ("unsafe_auroc", "macro_f1"):
            res = paired_bootstrap(frame, metric=metric, n_resamples=n_resamples, random_state=random_state)
            rows.append({"dataset": dataset, "construction": construction, "model_a": a, "model_b": b,
                         "metric": metric, "estimate": res.estimate, "lo": res.lo, "hi": res.hi,
                         "n_resamples": res.n_resamples, "n_redrawn": res.n_redrawn,
                         "n_seeds": len(res.per_seed), "excludes_zero": res.excludes_zero})
    return pd.DataFrame(rows, columns=list(INTERVAL_COLUMNS))


def data_invariants_hold(datasets: Sequence[str], scale: ScaleConfig) -> bool:
    """raw = used + excluded for every dataset, and complete/missing counts agree."""
    for dataset in datasets:
        loaded, result = build(dataset, "size-matched", scale)
        acc = accounting(loaded, result)
        states = acc["variants_by_state"]
        if acc["raw_records"] != acc["used_records"] + acc["excluded"] or states["complete"] != states["missing"]:
            return False
    return True


def summarize(scale: ScaleConfig, n_resamples: int = 1000, *, sources: Sequence[str] = (config.EVALUATE,),
              folder: str = config.EVALUATE, comparisons: Sequence[tuple[str, str]] = COMPARISONS
              ) -> dict[str, Path]:
    """Write summary, intervals and Wilcoxon of the ``sources``' evaluations under
    ``artifacts/<scale>/<folder>/`` (notebook 02: evaluate/; notebook 03 adds its ablations and
    writes its own, leaving notebook 02's files as they were), the verdict files of the checks
    ``folder`` decides (evaluate/: H1, H2 and the gates; 03_ablations/: H4), then the one
    table of all verdicts (``files["hypotheses"]``, ``artifacts/<scale>/hypotheses.csv``)."""
    metrics = load_metrics(scale, sources)
    out = scale.output_dir(folder)
    summary = summary_table(metrics)
    dirs = evaluation_dirs(scale, sources)
    intervals = pd.concat([bootstrap_intervals(d, comparisons, n_resamples) for d in dirs], ignore_index=True)
    intervals = intervals.drop_duplicates(["dataset", "construction", "model_a", "model_b", "metric"],
                                          keep="first", ignore_index=True)
    per_seed = metrics[(metrics.split == "test") & (metrics.construction == "size-matched")]
    wilcoxon = []
    for dataset, group in per_seed.groupby("dataset"):
        comps = [(a, b, m) for a, b in comparisons for m in ("unsafe_auroc", "macro_f1")
                 if {a, b} <= set(group.model)]
        if comps:
            wilcoxon.append(wilcoxon_holm(group, comps).assign(dataset=dataset))
    decides = decided_in(folder)
    verdicts = evaluate_hypotheses(metrics, intervals[intervals.construction == "size-matched"])
    if any(i.startswith("G") for i in decides):  # the invariants rebuild every dataset: only where needed
        datasets = sorted(metrics[metrics.construction == "size-matched"].dataset.unique())
        verdicts = pd.concat([verdicts, smoke_gates(metrics, invariants_hold=data_invariants_hold(datasets, scale))],
                             ignore_index=True)
    files = {
        "summary": write_csv(out / "summary_test.csv", summary),
        "intervals": write_csv(out / "bootstrap_intervals.csv", intervals),
        "wilcoxon": write_csv(out / "wilcoxon_holm.csv", pd.concat(wilcoxon, ignore_index=True) if wilcoxon
                              else pd.DataFrame()),
        **{p.stem: p for p in write_verdicts(verdicts, scale.run_dir, folder)},
    }
    record_run("summarize" if folder == config.EVALUATE else f"summarize:{folder}", scale,
               settings={"n_resamples": n_resamples, "comparisons": list(comparisons), "sources": list(sources)},
               inputs=[f for d in dirs for f in (d / "metrics.csv", d / "predictions.csv.gz")],
               outputs=files.values(),
               metrics={"verdicts": verdicts.set_index("id").loc[decides, "status"].to_dict()})
    return {**files, "hypotheses": write_hypotheses_table(scale)}
