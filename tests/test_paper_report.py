"""The report's generated tables come from artifact CSVs, and regenerating is idempotent."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from memsafe_lib.reporting.paper_report import BLOCK, GENERATED_DOCUMENTS, VALUE, markdown_table, render


def test_render_fills_filters_and_is_idempotent(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    pd.DataFrame({"dataset": ["a", "b"], "model": ["x", "y"], "auroc": [0.123456, 0.5]}).to_csv(
        tmp_path / "cpu" / "t.csv", index=False)
    text = "Prose stays.\n<!-- memsafe:table cpu/t.csv cols=dataset,auroc where=model:y -->\nstale\n<!-- /memsafe:table -->\nEnd.\n"
    once = render(text, tmp_path)
    assert once == ("Prose stays.\n<!-- memsafe:table cpu/t.csv cols=dataset,auroc where=model:y -->\n"
                    "| dataset | auroc |\n|---|---|\n| b | 0.5000 |\n<!-- /memsafe:table -->\nEnd.\n")
    assert render(once, tmp_path) == once
    quoted = '<!-- memsafe:table cpu/t.csv cols=auroc "where=model:y y,x" -->\n<!-- /memsafe:table -->\n'
    assert "| 0.1235 |" in render(quoted, tmp_path)  # a quoted value may hold spaces


def test_committed_report_tables_match_committed_artifacts() -> None:
    """paper/REPORT.md, the README and docs/running.md show exactly what the committed artifacts say."""
    root = Path(__file__).resolve().parent.parent
    for document in GENERATED_DOCUMENTS:
        text = document.read_text()
        assert BLOCK.search(text) or VALUE.search(text), f"{document.name} has no generated tables or values"
        assert render(text, root / "artifacts") == text, f"{document.name} is stale: run `memsafe report --record`"


def test_render_values_in_prose(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    pd.DataFrame({"dataset": ["a", "b", "c"], "model": ["x", "y", "y"], "auroc": [0.123456, 0.5, -0.25],
                  "n": [1500, 3, 4]}).to_csv(tmp_path / "cpu" / "t.csv", index=False)

    def value(spec: str) -> str:
        out = render(f"is <!-- memsafe:value {spec} -->old<!-- /memsafe:value -->.", tmp_path)
        assert render(out, tmp_path) == out  # idempotent
        return out.split("-->")[1].split("<!--")[0]

    assert value("cpu/t.csv dataset=a auroc .3f") == "0.123"
    assert value("cpu/t.csv dataset=a auroc") == "0.1235"  # default: four decimals, as the tables
    assert value("cpu/t.csv model=y auroc agg=min +.2f") == "-0.25"
    assert value("cpu/t.csv model=y auroc agg=max abs .2f") == "0.50"
    assert value("cpu/t.csv dataset=a n ,d") == "1,500"
    assert value("cpu/t.csv dataset=b,c n agg=sum d") == "7"
    assert value("cpu/t.csv dataset=a auroc .1%") == "12.3%"
    for bad in ("cpu/t.csv model=y auroc", "cpu/t.csv dataset=a", "cpu/t.csv nope=1 auroc", "cpu/t.csv auroc agg=x"):
        try:
            value(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} should be refused")


def test_a_value_whose_filter_holds_a_comparison_is_rendered(tmp_path: Path) -> None:
    """A quoted cell such as "blind-hard >= 0.03" holds '>': the marker is still found and filled."""
    (tmp_path / "cpu").mkdir()
    pd.DataFrame({"construction": ["blind-hard >= 0", "blind-hard >= 0.03"], "gap": [0.1, -0.2]}).to_csv(
        tmp_path / "cpu" / "t.csv", index=False)
    text = 'gap <!-- memsafe:value cpu/t.csv "construction=blind-hard >= 0.03" gap +.2f --><!-- /memsafe:value -->.'
    assert render(text, tmp_path) == text.replace("--><!--", "-->-0.20<!--")


def test_every_value_marker_of_the_committed_documents_is_filled() -> None:
    """No value marker is left out of the renderer's reach (it would keep whatever it held)."""
    for document in GENERATED_DOCUMENTS:
        text = document.read_text()
        opened = text.count("<!-- memsafe:value ")
        assert len(VALUE.findall(text)) == opened, f"{document.name}: a value marker the renderer does not match"
        assert not any(m.group("body") == "" for m in VALUE.finditer(text)), f"{document.name}: an empty value"


def test_a_value_may_come_from_a_run_summary_json(tmp_path: Path) -> None:
    import json

    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "summary.json").write_text(json.dumps({"truncated": 3, "seconds": 12.25, "list": [1, 2]}))
    out = render("<!-- memsafe:value cpu/summary.json truncated d -->x<!-- /memsafe:value --> and "
                 "<!-- memsafe:value cpu/summary.json seconds .1f -->x<!-- /memsafe:value -->", tmp_path)
    assert out.split("-->")[1].startswith("3<") and "-->12.2<" in out  # 12.25 rounds half to even


def test_a_value_may_come_from_a_key_of_a_summary_dict(tmp_path: Path) -> None:
    """``selected.dropout``: the grid's selected point, as stage_b_grid.json stores it."""
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "grid.json").write_text('{"selected": {"width": 256, "dropout": 0.2}, "seed": 17}')
    out = render("<!-- memsafe:value cpu/grid.json selected.dropout .1f -->x<!-- /memsafe:value -->", tmp_path)
    assert "-->0.2<" in out


def test_each_column_is_printed_in_the_format_its_unit_wants() -> None:
    """AUROC to four places, seconds and MB to one, counts with thousands separators (also
    when a gap made pandas read them as floats), rates and learning rates as written."""
    frame = pd.DataFrame({"unsafe_auroc": [0.97181, 0.5], "seconds": [1331.1, 4.0], "peak_rss_mb": [184.5, 20.0],
                          "train_variants": [12000, 5341], "patients": [34.0, None], "dropout": [0.1, 0.2],
                          "lr": [3e-4, 1e-5], "p_value": [1.5e-5, 0.25]}).convert_dtypes()
    table = markdown_table(frame).splitlines()
    assert table[2] == "| 0.9718 | 1,331.1 | 184.5 | 12,000 | 34 | 0.1 | 0.0003 | 1.50e-05 |"
    assert table[3] == "| 0.5000 | 4.0 | 20.0 | 5,341 | – | 0.2 | 1e-05 | 0.2500 |"
