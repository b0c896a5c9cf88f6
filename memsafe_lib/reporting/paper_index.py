"""Where each of the paper's tables and figures comes from in this project.

One entry per ``\\label{tab:...}`` / ``\\label{fig:...}`` of the paper: the notebook section
that regenerates it, the artifacts that section writes, the report section that discusses
it, one headline number (ours beside the paper's) and, in a few words, what differs. The
report's index block (``<!-- memsafe:index SCALE -->``) is rendered from this list by
:func:`memsafe_lib.reporting.paper_report.render_index`, so the numbers come from the
artifacts, never from here; a test checks every label of the paper source has an entry,
every notebook section and report section exists, and every artifact is committed.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memsafe_lib import config


@dataclass(frozen=True)
class Headline:
    """One number of an item: ``ours`` is a report value spec relative to ``artifacts/<scale>/``
    (``file filters column [format]``, as in ``memsafe:value`` markers); ``paper`` is either a
    column of the same row (``col:<name>``) or a path into ``paper/reference_values.json``
    (``ref:clinical.rows.1.delta_auroc``)."""

    what: str
    ours: str
    paper: str | None = None
    fmt: str = ".4f"
    """Python format spec for both numbers."""


@dataclass(frozen=True)
class PaperItem:
    label: str
    """The paper's LaTeX label (``tab:main``); a figure in two panels has one entry per panel."""
    shows: str
    sections: tuple[tuple[str, str], ...] = ()
    """(notebook, section heading without its ``# ##``): the cells that regenerate it."""
    artifacts: tuple[str, ...] = ()
    """Files under ``artifacts/<scale>/`` those cells write."""
    report: str | None = None
    """Number of the REPORT section that discusses it."""
    headline: Headline | None = None
    differs: str = ""


def _h(what: str, ours: str, paper: str | None = None, fmt: str = ".4f") -> Headline:
    return Headline(what, ours, paper, fmt)


DATA = "partial local copies of the releases (Table data)"


def stage_a_setting(scale: str = "cpu", artifacts: Path | None = None) -> str:
    """How a scale's Stage A differs from the paper's, read off the budget its committed run
    recorded (``evaluate/musique/size-matched/neural.json`` under ``artifacts``), else off its
    config: the index describes the results it sits beside, not a budget changed since their
    run (the cpu window moved from 128 to 256 tokens before its rerun), and cannot fall behind
    a run either (it once said "4k pairs per fold" after the fold encoders were pooled)."""
    run = config.scale_config(scale)
    recorded = (artifacts or config.artifacts_dir()) / scale / config.EVALUATE / "musique" / "size-matched"
    recorded /= "neural.json"
    neural: dict[str, Any] = asdict(run.neural)
    if recorded.is_file():
        neural.update(json.loads(recorded.read_text(encoding="utf-8")).get("budget", {}))
    pairs = "all" if neural["finetune_max_pairs"] is None else f"{neural['finetune_max_pairs']:,}"
    pool = neural["stage_a_pool"]
    pooled = (f"one fold-encoder pair pooled over the {len(pool)} multi-hop QA datasets "
              f"({pairs} training pairs of each per fold)" if pool else f"{pairs} training pairs per fold")
    return (f"bi-encoder start (all-MiniLM-L6-v2) read as a cross-encoder, {pooled} at {neural['max_length']} "
            f"tokens; {_count(len(neural['encoder_seeds']), 'Stage A seed')}, {_count(len(run.seeds), 'Stage B seed')}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


STAGE_A = "{stage_a}"
"""Where an entry's ``differs`` names Stage A: :func:`stage_a_setting` of the rendered run fills it in."""

ITEMS: tuple[PaperItem, ...] = (
    PaperItem("fig:overview", "the pipeline, construction to gate (a drawing)",
              differs="a schematic with no data; not regenerated"),
    PaperItem("fig:shortcut", "surface controls under deletion vs size matching",
              (("01_construction_audit", "2 · Surface controls under deletion and under size matching"),),
              ("01_construction_audit/fig_shortcut.png", "01_construction_audit/controls_test.csv"), "1",
              _h("MuSiQue paragraph count, deletion, unsafe AUROC",
                 "01_construction_audit/controls_test.csv dataset=musique construction=deletion "
                 "model=paragraph_count unsafe_auroc", "col:paper_unsafe_auroc"),
              DATA),
    PaperItem("prop:size", "Proposition 1: bound vs observed deviation (not a table; listed for completeness)",
              (("01_construction_audit", "3 · Proposition 1: bound vs observed deviation"),),
              ("01_construction_audit/fig_proposition1.png", "01_construction_audit/proposition1_closed_form.csv"),
              "1", _h("MuSiQue two-group bound TV/2",
                      "01_construction_audit/proposition1_closed_form.csv \"quantity=two-group bound TV/2\" "
                      "memsafe", "col:paper"),
              "the same closed form on the local records"),
    PaperItem("tab:main", "MemSafe, comparators, baselines and controls (test)",
              (("02_training", "3 · Table \"main\": test unsafe AUROC and macro F1"),),
              ("02_training/main_table.csv", "02_training/main_auroc.png"), "2",
              _h("MuSiQue MemSafe unsafe AUROC", "02_training/main_table.csv model=memsafe musique_auroc",
                 "col:musique_paper_auroc"),
              f"{STAGE_A}; {DATA}"),
    PaperItem("tab:seedvar", "seed standard deviations of Table main",
              (("02_training", "5 · Seed variability, localisation and calibration"),),
              ("02_training/seed_variability.csv",), "2",
              _h("MuSiQue MemSafe seed SD of unsafe AUROC", "02_training/seed_variability.csv model=memsafe musique_sd",
                 "col:musique_paper_sd"),
              "3 Stage B seeds sharing one encoder (paper: 5 seeds, 3 encoders); small test splits"),
    PaperItem("tab:ablation", "one component removed at a time (MuSiQue)",
              (("03_ablations", "3 · Table \"ablation\""),), ("03_ablations/ablation.csv",), "3",
              _h("change from freezing the encoder", "03_ablations/ablation.csv dataset=musique model=memsafe_frozen "
                 "delta_unsafe_auroc", "col:paper_delta_unsafe_auroc", "+.4f"),
              f"{STAGE_A}; {DATA}"),
    PaperItem("fig:attribution", "the ladder from LexSet to MemSafe",
              (("03_ablations", "4 · Figure \"attribution\": the ladder from LexSet to MemSafe"),),
              ("03_ablations/fig_attribution.png", "03_ablations/ladder.csv"), "3",
              _h("MuSiQue frozen encoder + relevance aggregation", "03_ablations/ladder.csv dataset=musique "
                 "model=relevance_agg_frozen unsafe_auroc", "col:paper_unsafe_auroc"),
              "frozen start is a bi-encoder, not the MS MARCO cross-encoder"),
    PaperItem("fig:interaction", "fine-tuning x set model (MuSiQue)",
              (("03_ablations", "5 · Figure \"interaction\": fine-tuning × set model"),),
              ("03_ablations/fig_interaction.png", "03_ablations/interaction_gains.csv"), "3",
              _h("gain of the set model on a frozen encoder", "03_ablations/interaction_gains.csv "
                 "\"gain=set model, frozen encoder\" unsafe_auroc", "col:paper", "+.4f"),
              f"{STAGE_A}; {DATA}"),
    PaperItem("fig:transfer", "family A to B transfer, and the memorization audit",
              (("04_transfer", "2 · Family A → B and H3"), ("04_transfer", "4 · Memorization audit")),
              ("04_transfer/fig_transfer.png", "04_transfer/memorization.csv",
               "04_transfer/memorization_restricted.csv"), "4",
              _h("MuSiQue test paragraphs also in training", "04_transfer/memorization.csv dataset=musique "
                 "fraction_in_training", "col:paper_fraction_in_training", ".3f"),
              "family B has no test variants (the local MuSiQue copy holds no answerable/unanswerable twins), "
              "so the A-to-B panel is empty and H3 untested; only the memorization audit is evaluated, on a "
              "sample of the releases, so paragraph overlap across splits differs"),
    PaperItem("fig:hardening-external", "MuSiQue-trained scores on SQuAD 2.0 dev",
              (("04_transfer", "3 · SQuAD 2.0: a construction we did not build"),),
              ("04_transfer/fig_hardening_external.png", "04_transfer/squad.csv"), "4",
              _h("MemSafe unsafe AUROC on SQuAD 2.0", "04_transfer/squad.csv model=memsafe unsafe_auroc",
                 "col:paper_unsafe_auroc"),
              "complete SQuAD 2.0 dev, as in the paper; the source model is trained on the local MuSiQue copy"),
    PaperItem("fig:hardening-joint", "an 8k-token ModernBERT joint encoder",
              (("02_training", "3 · Table \"main\": test unsafe AUROC and macro F1"),), report="3",
              differs="`joint_8k`: the concatenated cross-encoder on a long-context checkpoint, run at `paper` "
                      "(ModernBERT-base reranker, 8,192 tokens) and at smoke and the paper dry run with the packaged "
                      "MiniLM at its longest window (512); not at `cpu`, where that stand-in at 512 tokens is the "
                      "concatenated cross-encoder itself (Table main's row)"),
    PaperItem("tab:selective", "coverage at a 5% evidence risk, AURC",
              (("05_selective", "1 · Table \"selective\""),), ("05_selective/selective.csv",), "4",
              _h("MuSiQue MemSafe coverage at 5% risk", "05_selective/selective.csv dataset=musique model=memsafe "
                 "coverage", "col:paper_coverage", ".3f"),
              f"thresholds chosen on small validation splits; {STAGE_A}"),
    PaperItem("fig:riskcoverage", "risk-coverage curves",
              (("05_selective", "2 · Figure \"riskcoverage\""),), ("05_selective/fig_riskcoverage.png",), "4",
              _h("MuSiQue MemSafe AURC", "05_selective/selective.csv dataset=musique model=memsafe aurc",
                 "col:paper_aurc"),
              "as Table selective"),
    PaperItem("tab:reader", "reader error when answering the gate's most confident share",
              (("06_reader_gating", "2 · Table \"reader\""),), ("06_reader_gating/reader.csv",), "5",
              _h("error at 25% coverage, MemSafe gate", "06_reader_gating/reader.csv gate=memsafe error_at_0.25",
                 "col:paper_error_at_0.25"),
              "a 1.5B Q4 GGUF reader (paper: 7B) on the first MuSiQue test questions (cpu parameter "
              "reader_questions; paper: 1,000); the paper's second reader (Qwen2.5-1.5B-Instruct, 1,500 "
              "questions, reader_second.csv) runs at `paper` and, by its packaged stand-in, in the dry run"),
    PaperItem("fig:clinicalreader", "right panel: reader error against coverage",
              (("06_reader_gating", "2 · Table \"reader\""),), ("06_reader_gating/fig_reader_coverage.png",), "5",
              _h("error answering everything", "06_reader_gating/reader.csv gate=answer_all error_at_0.05",
                 "col:paper_error_at_0.05"),
              "as Table reader"),
    PaperItem("fig:prevalence", "reader gating at lower unsafe prevalence",
              (("06_reader_gating", "4 · Figure \"prevalence\""),),
              ("06_reader_gating/fig_prevalence.png", "06_reader_gating/prevalence.csv"), "5",
              _h("MemSafe gate's error at 5% coverage, 20% unsafe prevalence",
                 "06_reader_gating/prevalence.csv prevalence=0.2 gate=memsafe coverage=0.05 error",
                 "ref:prevalence.p20.memsafe", ".3f"),
              differs="as Table reader; one estimator seed (17), as the paper's; the paper's appendix gives "
                      "the 5%-coverage points in its text, and REPORT section 5 sets them beside ours"),
    PaperItem("tab:clinical", "MemSafe, LexSet and the recency rule on clinical memories",
              (("07_clinical", "4 · Table \"clinical\": MemSafe, LexSet and the recency rule"),),
              ("07_clinical/clinical.csv",), "6",
              # laboratory events: one setting at every scale (OMR has two, as in the paper)
              _h("laboratory events: MemSafe minus LexSet unsafe AUROC", "07_clinical/clinical.csv "
                 "dataset=mimic-labs delta_auroc", "ref:clinical.rows.2.delta_auroc", "+.4f"),
              "the MIMIC-IV demo (paper: credentialed MIMIC-IV) with our own clinical construction"),
    PaperItem("tab:clinical_curve", "the clinical learning curve (question cap varies)",
              (("07_clinical", "5 · Table \"clinical_curve\": vary only the question cap"),),
              ("07_clinical/clinical_curve.csv",), "6",
              _h("MemSafe minus LexSet at the smallest cap", "07_clinical/clinical_curve.csv cap=250 "
                 "dataset=mimic-omr delta_auroc", "ref:clinical_curve.rows.0.delta_auroc", "+.4f"),
              "question caps from ClinicalBudget.curve_caps on the demo (paper: 1k-20k)"),
    PaperItem("fig:clinicalreader", "left panel: the clinical learning curve",
              (("07_clinical", "5 · Table \"clinical_curve\": vary only the question cap"),),
              ("07_clinical/fig_clinical_curve.png",), "6",
              _h("training variants where MemSafe first leads", "07_clinical/clinical_crossing.csv "
                 "dataset=mimic-omr memsafe_leads_from_train_variants", "ref:clinical_curve.rows.1.train_variants",
                 ",d"),
              "as Table clinical_curve"),
    PaperItem("tab:data", "raw records, exclusions and variants per dataset",
              (("01_construction_audit", "1 · From raw files to memory variants"),),
              ("01_construction_audit/data_table.csv",), "8",
              _h("MuSiQue raw records", "01_construction_audit/data_table.csv dataset=musique "
                 "construction=size-matched raw_records", "col:paper_raw_records", ",d"),
              DATA),
    PaperItem("tab:notation", "symbols used in the paper", differs="notation, no results; not regenerated"),
)
"""In the order the labels appear in the paper (appendix tables last)."""

LABEL = re.compile(r"\\label\{((?:tab|fig):[^}]+)\}")


def paper_source_dir() -> Path:
    """The paper's LaTeX source beside the checkout (``../shared/paper``), where it exists."""
    return config.REPO_ROOT.parent / "shared" / "paper"


def paper_labels(source: Path | None = None) -> list[str]:
    """Every table and figure label of the paper source, in order of appearance."""
    source = source or paper_source_dir()
    labels: list[str] = []
    for path in sorted(p for p in source.iterdir() if p.suffix in {".tex", ".txt"}):
        labels += LABEL.findall(path.read_text(encoding="utf-8"))
    return list(dict.fromkeys(labels))


@functools.cache
def _reference() -> dict[str, Any]:
    return json.loads(config.paper_reference_file().read_text(encoding="utf-8"))


def reference_value(path: str) -> Any:
    """``paper/reference_values.json`` at a dotted path (list items by index)."""
    node: Any = _reference()
    for key in path.split("."):
        try:
            node = node[int(key)] if isinstance(node, list) else node[key]
        except (KeyError, IndexError, ValueError):
            raise KeyError(f"{config.paper_reference_file()}: no value at {path!r} (stuck at {key!r})") from None
    return node
