"""Comparing artifact trees: timing columns are ignored, any other change is reported."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from memsafe_lib.evaluation.compare import compare_trees


def _write(root: Path, frame: pd.DataFrame, name: str = "evaluate/m.csv") -> None:
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(root / name, index=False)


def test_timing_columns_are_ignored_and_metric_changes_are_not(tmp_path: Path) -> None:
    base = pd.DataFrame({"model": ["a", "b"], "unsafe_auroc": [0.61, 0.72], "fit_seconds": [1.0, 2.0],
                         "note": ["x", None]})
    _write(tmp_path / "before", base)
    _write(tmp_path / "same", base.assign(fit_seconds=[9.0, 8.0]))
    _write(tmp_path / "changed", base.assign(unsafe_auroc=[0.61, 0.7201]))
    _write(tmp_path / "before", base, "extra.csv")
    same = compare_trees(tmp_path / "before", tmp_path / "same").set_index("table")
    assert same.loc["evaluate/m.csv", "status"] == "identical"
    assert same.loc["extra.csv", "status"] == "missing"
    changed = compare_trees(tmp_path / "before", tmp_path / "changed").set_index("table")
    assert changed.loc["evaluate/m.csv", "status"] == "differs"
    assert "unsafe_auroc: max |diff| 0.0001" in changed.loc["evaluate/m.csv", "differences"]
