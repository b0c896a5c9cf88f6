"""The report's index of the paper's tables and figures: complete against the paper source,
pointing at notebook sections, report sections and artifacts that exist, and rendering its
numbers from the artifacts and the paper's reference values (never from the index itself)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd
import pytest

from memsafe_lib import config
from memsafe_lib.reporting import paper_index as P
from memsafe_lib.reporting.paper_report import REPORT, render, render_index

ROOT = Path(__file__).resolve().parent.parent


def test_every_table_and_figure_of_the_paper_has_an_entry() -> None:
    source = P.paper_source_dir()
    if not source.is_dir():
        pytest.skip(f"no paper source at {source}")
    labels = P.paper_labels(source)
    assert len(labels) >= 15  # the parser found the paper's labels, not nothing
    listed = {item.label for item in P.ITEMS}
    assert not set(labels) - listed, f"paper labels without an index entry: {sorted(set(labels) - listed)}"
    assert {lab for lab in listed if lab.startswith(("tab:", "fig:"))} <= set(labels), "an entry names no paper label"


def test_label_parser_on_a_hand_written_source(tmp_path: Path) -> None:
    (tmp_path / "a.tex").write_text("\\label{sec:x}\\label{tab:one} text \\label{fig:two}\\label{tab:one}")
    (tmp_path / "b.md").write_text("\\label{tab:ignored}")
    assert P.paper_labels(tmp_path) == ["tab:one", "fig:two"]


def test_named_notebook_sections_report_sections_and_artifacts_exist() -> None:
    report = REPORT.read_text(encoding="utf-8")
    numbered = set(re.findall(r"^## (\d+)\. ", report, re.M))
    for item in P.ITEMS:
        for notebook, section in item.sections:
            text = (config.notebooks_dir() / f"{notebook}.py").read_text(encoding="utf-8")
            assert f"# ## {section}\n" in text, f"{item.label}: no section {section!r} in {notebook}.py"
        for artifact in item.artifacts:
            assert (ROOT / "artifacts" / "cpu" / artifact).is_file(), f"{item.label}: {artifact} not committed"
        if item.report:
            assert item.report in numbered, f"{item.label}: REPORT has no section {item.report}"
        assert item.differs, f"{item.label}: say what differs (or why it is not regenerated)"
        if item.headline:  # its number is read from a committed table of the notebook named
            table = item.headline.ours.split()[0]
            assert table.split("/")[0] in {nb for nb, _ in item.sections}, f"{item.label}: {table} is elsewhere"
            assert (ROOT / "artifacts" / "cpu" / table).is_file(), f"{item.label}: {table} not committed"


def test_index_numbers_come_from_the_artifacts_and_the_reference_file(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cpu" / "nb").mkdir(parents=True)
    pd.DataFrame({"model": ["m", "n"], "auroc": [0.71234, 0.5], "paper_auroc": [0.9, 0.6]}).to_csv(
        tmp_path / "cpu" / "nb" / "t.csv", index=False)
    items = (P.PaperItem("tab:x", "x", (("nb", "1 · X"),), ("nb/t.csv",), "1",
                         P.Headline("ours vs column", "nb/t.csv model=m auroc", "col:paper_auroc", ".3f"), "d1"),
             P.PaperItem("tab:y", "y", (("nb", "1 · X"),), ("nb/t.csv",), "1",
                         P.Headline("ours vs reference", "nb/t.csv model=n auroc", "ref:table_main.unsafe_auroc."
                                    "musique.memsafe"), "d2"),
             P.PaperItem("fig:z", "z", differs="not regenerated"))
    monkeypatch.setattr(P, "ITEMS", items)
    out = render("<!-- memsafe:index cpu -->\nstale\n<!-- /memsafe:index -->\n", tmp_path)
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| `")]
    assert [r[6:8] for r in rows[:2]] == [["0.712", "0.900"], ["0.5000", f"{config.paper_reference()['table_main']['unsafe_auroc']['musique']['memsafe']:.4f}"]]
    assert rows[2][6:8] == ["–", "–"]
    assert render(out, tmp_path) == out  # idempotent
    monkeypatch.setattr(P, "ITEMS", (replace(items[1], headline=replace(items[1].headline, paper="ref:no.such")),))
    with pytest.raises(KeyError, match="no.such"):
        render(out, tmp_path)


def test_a_filter_value_that_is_itself_a_cell_may_hold_commas(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    pd.DataFrame({"gain": ["a, b", "a", "b"], "v": [1.0, 2.0, 3.0]}).to_csv(tmp_path / "cpu" / "g.csv", index=False)

    def value(spec: str) -> str:
        out = render(f"<!-- memsafe:value {spec} -->?<!-- /memsafe:value -->", tmp_path)
        return out.split("-->")[1].split("<!--")[0]

    assert value('cpu/g.csv "gain=a, b" v .1f') == "1.0"
    assert value("cpu/g.csv gain=a,b v agg=sum .1f") == "5.0"  # not a cell: a list, as before


def test_stage_a_setting_states_the_cpu_scale_as_configured(tmp_path: Path) -> None:
    """The index's "what differs" text for Stage A must say what the cpu run did: pooled fold
    encoders, the per-dataset pair cap, the token window and the seed counts of its config
    (where no run recorded its budget)."""
    scale = config.scale_config("cpu")
    neural = scale.neural
    text = P.stage_a_setting("cpu", tmp_path)  # no recorded run there: the config
    assert neural.stage_a_pool == config.FAMILY_A_DATASETS  # the premise of the wording below
    assert "pooled over the 3 multi-hop QA datasets" in text
    assert f"{neural.finetune_max_pairs:,} training pairs of each per fold" in text
    assert f"{neural.max_length} tokens" in text
    assert f"{len(neural.encoder_seeds)} Stage A seed" in text
    assert f"{len(scale.seeds)} Stage B seeds" in text


def test_stage_a_setting_states_the_budget_the_rendered_run_recorded(tmp_path: Path) -> None:
    """Beside committed results, the index says what those results were made with, not a
    budget changed since (the cpu window moved from 128 to 256 tokens before its rerun)."""
    recorded = tmp_path / "cpu" / "evaluate" / "musique" / "size-matched" / "neural.json"
    recorded.parent.mkdir(parents=True)
    budget = {**asdict(config.scale_config("cpu").neural), "max_length": 96, "finetune_max_pairs": 1234}
    recorded.write_text(json.dumps({"budget": budget}), encoding="utf-8")
    text = P.stage_a_setting("cpu", tmp_path)
    assert "at 96 tokens" in text and "1,234 training pairs of each per fold" in text
    committed = ROOT / "artifacts" / "cpu" / "evaluate" / "musique" / "size-matched" / "neural.json"
    window = json.loads(committed.read_text(encoding="utf-8"))["budget"]["max_length"]
    rendered = render_index("cpu", ROOT / "artifacts")
    assert f"at {window} tokens" in rendered and P.STAGE_A not in rendered
