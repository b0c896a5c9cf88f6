"""A gate's card (``card.md`` in every gate directory): what it was trained on, how it reads a
memory, how well calibrated it is, where its threshold sits, and what it has never seen.
Generated from ``config.json`` alone, so ``memsafe card --gate DIR`` rewrites it for any gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memsafe_lib import config as project
from memsafe_lib.gate.model import DEFAULT_THRESHOLD, FORMS
from memsafe_lib.io import atomic_open
from memsafe_lib.measures.calibration import MIN_CALIBRATION_MEMORIES

CARD = "card.md"


def _f(x: Any, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _test_rows(name: str, block: Mapping[str, Any]) -> list[str]:
    rows = []
    for form, key in zip(FORMS, ("test", "test_without_provenance"), strict=True):
        m = block.get(key)
        if m:
            at = m.get("at_threshold", {})
            rows.append(f"| {name} | {form.replace('_', ' ')} | {m['n_variants']:,} | {_f(m['unsafe_auroc'])} | "
                        f"{_f(m.get('macro_f1'))} | {_f(m['ece'], 4)} | {_f(m.get('ece_calibrated'), 4)} | "
                        f"{_f(at.get('coverage'))} | {_f(at.get('risk'))} | {_f(at.get('false_abstention_rate'))} |")
    return rows


def render_card(cfg: Mapping[str, Any]) -> str:
    """The card's markdown for a gate's ``config.json``."""
    training = cfg.get("training", {})
    datasets = list(training.get("datasets", [cfg.get("dataset", "?")]))
    encoder = cfg.get("encoder", {})
    calibration = cfg.get("calibration") or {}
    threshold = cfg.get("threshold", {})
    metrics = cfg.get("metrics", {})
    sizes = cfg.get("split_sizes", {})
    units = cfg.get("train_memory_units", {})
    own = training.get("source") == "records"
    lines = [f"# Gate card: {cfg.get('dataset', '?')} (seed {cfg.get('seed', '?')}, scale {cfg.get('scale', '?')})",
             "", "Generated from `config.json` by memsafe; do not edit.", "", "## Trained on", ""]
    source = ("your records file" if own else "size-matched memories of " + ", ".join(datasets))
    lines.append(f"- {source}: MemSafe (Stage A fold encoders, Stage B set model) fitted on the training split, "
                 "its epoch and calibration chosen on validation.")
    for split in ("train", "validation", "test"):
        if split in sizes:
            lines.append(f"- {split}: {sizes[split]['questions']:,} questions, {sizes[split]['memories']:,} memories")
    if units:
        lines.append(f"- units per training memory: {units['min']}-{units['max']} (median {units['median']:g})")
    lines.append(f"- half the training memories shown without provenance (dropout "
                 f"{training.get('provenance_dropout', 'n/a')}), so memories without source positions are in "
                 "distribution")
    fp = cfg.get("fingerprint")
    if isinstance(fp, Mapping):
        lines.append("- fingerprint: " + ", ".join(f"{k} `{str(v)[:12]}`" for k, v in sorted(fp.items())))
    lines += ["", "## How it reads a memory", "",
              f"- encoder `{encoder.get('model', '?')}`, {encoder.get('max_length', '?')}-token window per "
              "(question, unit) pair; a longer unit is read from its beginning only (`truncated_units` says how many)",
              "- Stage B: " + ", ".join(f"{k} {v}" for k, v in sorted(cfg.get("set_model", {}).items())
                                        if k in ("width", "dropout", "lr")),
              "", "## Calibration", ""]
    if calibration.get("temperature"):
        lines.append("Temperatures fitted on validation by log loss, kept where they lower the validation ECE; "
                     "scores are calibrated before they reach you (AUROC unchanged).")
        few = {e.get("n") for e in calibration.get("ece", {}).values() if e.get("n", MIN_CALIBRATION_MEMORIES)
               < MIN_CALIBRATION_MEMORIES}
        if few:
            lines.append(f"This gate had too few validation memories ({min(few)}, under {MIN_CALIBRATION_MEMORIES}) "
                         "to fit one: its temperatures are 1 and its probabilities the set model's own.")
        lines += ["", "| input | unsafe temperature | state temperature | validation ECE before | after |",
                  "|---|---|---|---|---|"]
        for form in FORMS:
            t = calibration["temperature"].get(form, {})
            e = calibration.get("ece", {}).get(form, {})
            lines.append(f"| {form.replace('_', ' ')} | {t.get('unsafe', 1.0):.3g} | {t.get('state', 1.0):.3g} | "
                         f"{_f(e.get('ece_before'), 4)} | {_f(e.get('ece_after'), 4)} |")
    else:
        lines.append("None: this gate was saved before gates were calibrated (format 2); its probabilities are the "
                     "set model's own. Train it again to calibrate it.")
    at_most = threshold.get("unsafe_prob", DEFAULT_THRESHOLD)
    lines += ["", "## Threshold", "",
              f"Answers when the calibrated unsafe probability is at most {at_most}"
              " (`memsafe score --risk ALPHA` replaces it with a Learn-then-Test threshold with a guarantee). On "
              "validation:", "", "| input | coverage | risk | false abstention rate |", "|---|---|---|---|"]
    for form in FORMS:
        at = threshold.get("validation", {}).get(form)
        if at:
            lines.append(f"| {form.replace('_', ' ')} | {_f(at['coverage'])} | {_f(at['risk'])} | "
                         f"{_f(at['false_abstention_rate'])} |")
    lines += ["", "## Test", "",
              "Held-out test questions of the training data (never used for fitting, selection or calibration).",
              "", "| data | input | memories | unsafe AUROC | macro F1 | ECE raw | ECE calibrated | coverage | risk | "
              "false abstention |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += _test_rows("all", metrics)
    for name, block in metrics.get("per_dataset", {}).items():
        lines += _test_rows(name, block)
    unseen = [d for d in project.FAMILY_A_DATASETS if d not in datasets]
    lines += ["", "## Never seen", ""]
    if own:
        lines.append("- any data but your records: a question unlike them (other topics, lengths, units) is "
                     "out of distribution")
    else:
        lines.append(f"- other QA datasets{': ' + ', '.join(unseen) if unseen else ''}; SQuAD 2.0 (single "
                     "paragraphs, author-written unanswerable questions); clinical records; any language but English")
        lines.append("- constructions other than size-matched (blind-matched, deletion, family B): it learned "
                     "the three states as size-matched memories make them")
    if units:
        lines.append(f"- memories of more than {2 * units['max']} units (twice its largest training memory): "
                     "`memsafe score` warns on them")
    lines.append(f"- pairs longer than {encoder.get('max_length', '?')} tokens beyond their beginning")
    return "\n".join(lines) + "\n"


def write_card(gate_dir: str | Path, cfg: Mapping[str, Any]) -> Path:
    """Write ``card.md`` atomically into ``gate_dir``; returns its path."""
    path = Path(gate_dir) / CARD
    with atomic_open(path, "w") as fh:
        fh.write(render_card(cfg))
    return path
