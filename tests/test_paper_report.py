"""The report's generated tables come from artifact CSVs, and regenerating is idempotent."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from memsafe_lib.paper_report import BLOCK, GENERATED_DOCUMENTS, render


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
    """paper/REPORT.md and the README's time table show exactly what the committed artifacts say."""
    root = Path(__file__).resolve().parent.parent
    for document in GENERATED_DOCUMENTS:
        text = document.read_text()
        assert BLOCK.search(text), f"{document.name} has no generated tables"
        assert render(text, root / "artifacts") == text, f"{document.name} is stale: run `memsafe report --record`"
