"""bench/compare_runs.py: the verdict counts and both runs' identities, from two small trees."""

from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd
import pytest

from memsafe_lib import config


@pytest.fixture
def compare_runs(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench"))
    return importlib.import_module("compare_runs")


def _tree(root: Path, auroc: list[float], code: str, cpu: str) -> Path:
    (root / "evaluate").mkdir(parents=True)
    pd.DataFrame({"model": ["memsafe"] * 3, "seed": [17, 29, 43], "unsafe_auroc": auroc}).to_csv(
        root / "evaluate" / "m.csv", index=False)
    pd.DataFrame({"dataset": ["musique"], "raw_records": [659]}).to_csv(root / "counts.csv", index=False)
    pd.DataFrame({"notebook": ["01", "02"], "minutes": [1.0, 2.0], "code": [code, code],
                  "cpu": [cpu, cpu]}).to_csv(root / "run_times.csv", index=False)
    return root


def test_counts_per_verdict_and_both_runs_code_and_cpu(compare_runs, tmp_path: Path) -> None:
    ref = _tree(tmp_path / "ref", [0.70, 0.72, 0.74], "44ada4fb96ae", "Intel(R) Xeon(R) Processor")
    new = _tree(tmp_path / "new", [0.75, 0.72, 0.74], "656d1c0aaaaa", "AMD EPYC")  # 0.05 < 3 x 0.02
    (ref / "only_here.csv").write_text("a\n1\n")
    table, summary = compare_runs.verdicts(ref, new)
    assert dict(zip(table.table, table.status, strict=True)) == {
        "counts.csv": "identical", "evaluate/m.csv": "within tolerance", "only_here.csv": "missing",
        "run_times.csv": "identical"}
    assert (summary["tables"], summary["n_identical"], summary["n_within_tolerance"], summary["n_missing"],
            summary["n_outside_tolerance"], summary["n_differs"]) == (4, 2, 1, 1, 0, 0)
    assert (summary["reference_code"], summary["reference_cpu"]) == ("44ada4fb96ae", "Intel(R) Xeon(R) Processor")
    assert (summary["code"], summary["cpu"]) == ("656d1c0aaaaa", "AMD EPYC")


def test_models_moved_names_each_model_whose_metrics_changed_ignoring_wall_times(compare_runs, tmp_path: Path) -> None:
    def metrics(root: Path, blind: float, seconds: float) -> None:
        folder = root / "evaluate" / "musique" / "size-matched"
        folder.mkdir(parents=True)
        pd.DataFrame({"dataset": "musique", "model": ["memsafe", "memsafe", "blind_set", "blind_set"],
                      "seed": [17, 29, 17, 29], "split": "test", "unsafe_auroc": [0.80, 0.81, 0.50, blind],
                      "macro_f1": [0.6, 0.6, 0.4, 0.4], "fit_seconds": seconds, "deterministic": False}).to_csv(
            folder / "metrics.csv", index=False)
    metrics(tmp_path / "ref", 0.52, 10.0)
    metrics(tmp_path / "new", 0.47, 99.0)  # every fit took longer; only blind_set's seed 29 moved
    moved = compare_runs.models_moved(tmp_path / "ref", tmp_path / "new")
    assert moved.to_dict("records") == [{"table": "evaluate/musique/size-matched/metrics.csv", "model": "blind_set",
                                         "rows_moved": 1, "rows": 2, "columns": "unsafe_auroc",
                                         "max_abs_diff": pytest.approx(0.05)}]


def test_the_ledger_inputs_name_no_path_outside_the_checkout(compare_runs, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # the reference tree lies beside the checkout: an input there was keyed by this machine's path
    ref = _tree(tmp_path / "ref", [0.70, 0.72, 0.74], "44ada4fb96ae", "Intel(R) Xeon(R) Processor")
    saved: list[tuple[str, list[Path], dict]] = []
    monkeypatch.setattr(compare_runs, "save_report",
                        lambda kind, name, args, raw, summary, table=None, inputs=(): saved.append((kind, list(inputs), summary)))
    monkeypatch.setattr("sys.argv", ["compare_runs.py", "--reference", str(ref), "--scale", "smoke"])
    compare_runs.main()
    assert [kind for kind, _, _ in saved] == ["compare-runs", "compare-runs-models"]
    for _, inputs, _ in saved:
        assert all(Path(p).resolve().is_relative_to(config.REPO_ROOT) for p in inputs), inputs
    assert len(saved[0][2]["reference_run_times_sha256"]) == 64
