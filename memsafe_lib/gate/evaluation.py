"""Judging a gate on your own labelled memories (``memsafe evaluate --gate DIR --input FILE
--out DIR2``): the discrimination, calibration and selective-answering numbers peers report,
from one scoring pass, with the files a reader needs to check them.

Writes ``scores.jsonl`` (``id``, ``unsafe_prob``, ``unsafe``, and ``state``/``predicted_state``
where states are given), ``reliability.png``, ``risk_coverage.png`` and, last,
``metrics.json``: its presence means the others are complete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from memsafe_lib.gate.memories import LabelledMemories
from memsafe_lib.gate.model import FORMS, Gate, GateOutput, form_of
from memsafe_lib.io import write_json, write_jsonl
from memsafe_lib.measures.inference import cluster_bootstrap_auroc
from memsafe_lib.measures.metrics import brier_score, expected_calibration_error, macro_f1, unsafe_auroc
from memsafe_lib.measures.risk_coverage import aurc, risk_coverage_curve, selective_summary
from memsafe_lib.reporting.figures import save_figure
from memsafe_lib.variants.construction import present_states

ECE_BINS = 15
"""The ECE's equal-width bins (the library's convention), also the reliability diagram's."""


def gate_metrics(memories: LabelledMemories, outputs: Sequence[GateOutput], answered: np.ndarray,
                 threshold: float | dict[str, float | None] | None, threshold_rule: str,
                 resamples: int = 1000) -> dict[str, Any]:
    """Every number ``evaluate`` reports, from the labels, the gate's (calibrated) outputs and its
    answer/abstain decisions at ``threshold`` (one value, or one per input form under ``--risk``)."""
    unsafe = np.array([v.unsafe for v in memories.variants], dtype=bool)
    prob = np.array([o.unsafe_prob for o in outputs], dtype=float)
    out: dict[str, Any] = {"n_memories": int(unsafe.size), "n_questions": len(set(memories.groups)),
                           "prevalence": float(unsafe.mean()), "unsafe_auroc": None, "unsafe_auroc_ci": None,
                           "macro_f1": None, "ece": expected_calibration_error(unsafe, prob, ECE_BINS),
                           "brier": brier_score(unsafe, prob), "aurc": aurc(unsafe, prob),
                           "threshold": threshold, "threshold_rule": threshold_rule,
                           **selective_summary(unsafe, answered),
                           "truncated_units": int(sum(o.truncated_units for o in outputs)),
                           "window_tokens": outputs[0].max_length if outputs else None}
    if unsafe.any() and not unsafe.all():
        out["unsafe_auroc"] = unsafe_auroc(unsafe, prob)
        lo, hi = cluster_bootstrap_auroc(unsafe, prob, memories.groups, n_resamples=resamples)
        out["unsafe_auroc_ci"] = {"lo": lo, "hi": hi, "confidence": 0.95, "resamples": resamples,
                                  "over": "questions (all memories of a drawn question come along)"}
    if memories.has_states:
        states = [v.state for v in memories.variants]
        predicted = [max(o.state_probs, key=o.state_probs.__getitem__) for o in outputs]
        out["macro_f1"] = macro_f1(states, predicted, present_states(states))
    return out


def summary_lines(metrics: Mapping[str, Any]) -> list[str]:
    """The one readable summary ``evaluate`` prints."""
    ci = metrics.get("unsafe_auroc_ci")
    auroc = ("n/a (one class only)" if metrics["unsafe_auroc"] is None else
             f"{metrics['unsafe_auroc']:.3f} [{ci['lo']:.3f}, {ci['hi']:.3f}] (95%, questions resampled)")

    def f(x: Any) -> str:
        if isinstance(x, dict):
            return ", ".join(f"{f(v)} {k.replace('_', ' ')}" for k, v in x.items())
        return "n/a" if x is None else f"{x:.3f}"

    lines = [f"memories {metrics['n_memories']:,} from {metrics['n_questions']:,} questions, "
             f"{metrics['prevalence']:.1%} unsafe",
             f"unsafe AUROC     {auroc}",
             f"macro F1         {f(metrics['macro_f1'])}" + ("" if metrics["macro_f1"] is not None else
                                                             "  (give 'state' on every line for it)"),
             f"ECE              {metrics['ece']:.4f}   Brier {metrics['brier']:.4f}   AURC {metrics['aurc']:.4f}",
             f"at threshold {f(metrics['threshold'])} ({metrics['threshold_rule']}): "
             f"coverage {f(metrics['coverage'])}, "
             f"risk {f(metrics['risk'])}, false abstention rate {f(metrics['false_abstention_rate'])}, correct "
             f"abstention rate {f(metrics['correct_abstention_rate'])}"]
    if metrics.get("truncated_units"):
        lines.append(f"warning: {metrics['truncated_units']} units were longer than the "
                     f"{metrics['window_tokens']}-token window with the query (read from their beginning)")
    return lines


def reliability_figure(unsafe: np.ndarray, prob: np.ndarray, ece: float) -> Figure:
    """Observed unsafe share per ECE bin (bars) and each bin's mean predicted probability (dots):
    a calibrated gate's dots sit on the diagonal."""
    fig = Figure(figsize=(4.2, 4.2))
    ax = fig.subplots()
    edges = np.linspace(0, 1, ECE_BINS + 1)
    index = np.minimum((prob * ECE_BINS).astype(int), ECE_BINS - 1)
    for k in range(ECE_BINS):
        rows = index == k
        if rows.any():
            ax.bar(edges[k], unsafe[rows].mean(), width=1 / ECE_BINS, align="edge", color="#4c72b0",
                   edgecolor="white", alpha=0.85)
            ax.plot(prob[rows].mean(), unsafe[rows].mean(), "o", color="#dd8452", ms=4)
    ax.plot([0, 1], [0, 1], "--", color="grey", lw=1)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="predicted unsafe probability", ylabel="observed unsafe share",
           title=f"Reliability (ECE {ece:.4f}, {ECE_BINS} bins)")
    return fig


def risk_coverage_figure(unsafe: np.ndarray, prob: np.ndarray, point: Mapping[str, Any], area: float) -> Figure:
    """The risk of the answered memories at every coverage, with the gate's operating point."""
    curve = risk_coverage_curve(unsafe, prob)
    fig = Figure(figsize=(4.6, 3.6))
    ax = fig.subplots()
    ax.step(curve.coverage, curve.risk, where="post", color="#4c72b0", label=f"gate (AURC {area:.3f})")
    ax.axhline(float(unsafe.mean()), color="grey", lw=1, ls="--", label="answer everything")
    if point.get("risk") is not None:
        t = point["threshold"]
        label = f"threshold {t:.3g}" if isinstance(t, float) else "thresholds per input form"
        ax.plot(point["coverage"], point["risk"], "o", color="#c44e52", label=label)
    ax.set(xlim=(0, 1), ylim=(0, max(0.05, float(curve.risk.max()) * 1.05)), xlabel="coverage (share answered)",
           ylabel="risk (unsafe share of answered)", title="Risk-coverage")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def write_evaluation(out_dir: str | Path, memories: LabelledMemories, outputs: Sequence[GateOutput],
                     metrics: Mapping[str, Any]) -> dict[str, Path]:
    """The scores, the two figures, then ``metrics.json`` (last: its presence means success)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    unsafe = np.array([v.unsafe for v in memories.variants], dtype=bool)
    prob = np.array([o.unsafe_prob for o in outputs], dtype=float)
    rows = []
    for v, o in zip(memories.variants, outputs, strict=True):
        row: dict[str, Any] = {"id": v.variant_id, "unsafe_prob": o.unsafe_prob, "unsafe": bool(v.unsafe)}
        if memories.has_states:
            row |= {"state": v.state, "predicted_state": max(o.state_probs, key=o.state_probs.__getitem__)}
        rows.append(row)
    files = {"scores": write_jsonl(out / "scores.jsonl", rows)}
    files["reliability"] = save_figure(reliability_figure(unsafe, prob, float(metrics["ece"])), out / "reliability.png")
    point = {k: metrics[k] for k in ("threshold", "coverage", "risk")}
    files["risk_coverage"] = save_figure(risk_coverage_figure(unsafe, prob, point, float(metrics["aurc"])),
                                         out / "risk_coverage.png")
    files["metrics"] = write_json(out / "metrics.json", dict(metrics))
    return files


def evaluate_gate(gate: Gate, memories: LabelledMemories, risk: float | None = None, delta: float = 0.1,
                  resamples: int = 1000, progress: bool = True) -> tuple[list[GateOutput], dict[str, Any]]:
    """Score every memory and judge the gate: at its own threshold, or with ``risk`` at the
    Learn-then-Test threshold of each memory's input form (with or without provenance)."""
    outputs = gate.score_variants(memories.variants, progress=progress)
    forms = [form_of(v) for v in memories.variants]
    present = [f for f in FORMS if f in forms]
    if risk is None:
        thresholds: dict[str, float | None] = {f: gate.threshold for f in present}
        rule = "the gate's threshold on the calibrated unsafe probability"
    else:
        controls = {f: gate.risk_control(risk, delta, with_provenance=f == FORMS[0]) for f in present}
        thresholds = {f: c.threshold for f, c in controls.items()}
        rule = f"Learn-then-Test at risk {risk:g}, delta {delta:g} on the gate's validation memories"
    answered = np.array([thresholds[f] is not None and o.unsafe_prob <= thresholds[f]  # type: ignore[operator]
                         for f, o in zip(forms, outputs, strict=True)], dtype=bool)
    shown: float | dict[str, float | None] | None = thresholds[present[0]] if len(present) == 1 else thresholds
    return outputs, gate_metrics(memories, outputs, answered, shown, rule, resamples)
