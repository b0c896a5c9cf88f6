"""Comparing artifact trees: timing columns are ignored, any other change is reported."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

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


def _seeded(auroc: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"model": ["memsafe"] * 3 + ["lexset"] * 3, "seed": [17, 29, 43] * 2, "unsafe_auroc": auroc,
                         "n_test": [61] * 6})


def test_a_reproduction_within_three_seed_sds_passes_and_a_planted_shift_does_not(tmp_path: Path) -> None:
    """Tolerance = 3 x the reference run's own seed SD, per (model) group; counts exact."""
    ref = [0.70, 0.72, 0.74, 0.60, 0.60, 0.60]  # memsafe SD 0.02 (hand: std of .70/.72/.74), lexset deterministic
    _write(tmp_path / "ref", _seeded(ref))
    _write(tmp_path / "near", _seeded([0.75, 0.70, 0.70, 0.60, 0.60, 0.60]))  # |diff| 0.05 < 3 x 0.02
    _write(tmp_path / "far", _seeded([0.70, 0.72, 0.81, 0.60, 0.60, 0.60]))  # 0.07 > 0.06
    _write(tmp_path / "det", _seeded([0.70, 0.72, 0.74, 0.60, 0.60, 0.61]))  # a deterministic model moved
    near = compare_trees(tmp_path / "ref", tmp_path / "near").iloc[0]
    assert near["status"] == "within tolerance" and "tolerance 0.06" in near["differences"]
    far = compare_trees(tmp_path / "ref", tmp_path / "far").iloc[0]
    assert far["status"] == "outside tolerance" and "max |diff| 0.07" in far["differences"]
    assert compare_trees(tmp_path / "ref", tmp_path / "det").iloc[0]["status"] == "outside tolerance"


def test_a_mean_with_its_sd_column_gets_k_sds_and_a_table_without_spread_must_match() -> None:
    from memsafe_lib.evaluation.compare import compare_table

    ref = pd.DataFrame({"model": ["a", "b"], "auroc": [0.70, 0.80], "auroc_sd": [0.01, 0.0]})
    assert compare_table(ref, ref.assign(auroc=[0.729, 0.80]))[0] == "within tolerance"
    assert compare_table(ref, ref.assign(auroc=[0.731, 0.80]))[0] == "outside tolerance"
    assert compare_table(ref, ref.assign(auroc=[0.70, 0.8001]))[0] == "outside tolerance"  # SD 0: exact
    assert compare_table(ref, ref.assign(auroc=[0.70, 0.8000004]))[0] == "identical"  # CSV round-off
    plain = pd.DataFrame({"dataset": ["x"], "raw_records": [659]})
    assert compare_table(plain, plain.assign(raw_records=[660]))[0] == "differs"  # no spread known


def test_memsafe_compare_exits_1_naming_the_table_outside_tolerance(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from memsafe_lib.cli import main

    _write(tmp_path / "ref", _seeded([0.70, 0.72, 0.74, 0.60, 0.60, 0.60]))
    _write(tmp_path / "ok", _seeded([0.71, 0.72, 0.74, 0.60, 0.60, 0.60]))
    _write(tmp_path / "bad", _seeded([0.90, 0.72, 0.74, 0.60, 0.60, 0.60]))
    assert main(["compare", str(tmp_path / "ref"), str(tmp_path / "ok")]) == 0
    assert "within tolerance" in capsys.readouterr().out
    assert main(["compare", str(tmp_path / "ref"), str(tmp_path / "bad")]) == 1
    out = capsys.readouterr().out
    assert "evaluate/m.csv" in out and "outside tolerance" in out
    assert main(["compare", str(tmp_path / "ref"), str(tmp_path / "nowhere")]) == 2


def test_where_a_run_happened_is_not_a_difference(tmp_path: Path) -> None:
    """run_times.csv names the CPU, its bf16 units and thread counts: another machine, same result."""
    times = pd.DataFrame({"notebook": ["02_training"], "scale": ["cpu"], "minutes": [70.0], "cores": [2],
                          "fit_threads": [1], "torch_threads": [2], "cpu": ["Intel Xeon"], "bf16_units": [True],
                          "bf16_mode": ["auto"]})
    _write(tmp_path / "before", times, "run_times.csv")
    _write(tmp_path / "after", times.assign(minutes=[350.0], cores=[16], fit_threads=[4], torch_threads=[8],
                                            cpu=["AMD EPYC"], bf16_units=[False], bf16_mode=["0"]), "run_times.csv")
    assert compare_trees(tmp_path / "before", tmp_path / "after").status.tolist() == ["identical"]


def test_an_empty_table_reads_as_empty_and_a_file_that_is_no_csv_is_named(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Notebook 02 writes hardening_joint.csv with no columns where the joint encoder does not run:
    two such files are the same table; a file pandas cannot read stops compare with its path."""
    from memsafe_lib.cli import main

    for side in ("ref", "other"):
        (tmp_path / side / "02_training").mkdir(parents=True)
        (tmp_path / side / "02_training" / "hardening_joint.csv").write_text("\n")
    _write(tmp_path / "ref", _seeded([0.70, 0.72, 0.74, 0.60, 0.60, 0.60]))
    _write(tmp_path / "other", _seeded([0.70, 0.72, 0.74, 0.60, 0.60, 0.60]))
    table = compare_trees(tmp_path / "ref", tmp_path / "other").set_index("table")
    assert table.loc["02_training/hardening_joint.csv", "status"] == "identical"
    broken = tmp_path / "other" / "evaluate" / "m.csv"
    broken.write_bytes(b'a,b\n"unterminated,1\n')
    with pytest.raises(ValueError, match=str(broken)):
        compare_trees(tmp_path / "ref", tmp_path / "other")
    assert main(["compare", str(tmp_path / "ref"), str(tmp_path / "other")]) == 2
    assert str(broken) in capsys.readouterr().err


def _with_config(auroc: list[float], best_epochs: list[int], width: int = 128,
                 leaves: tuple[int, ...] = (15, 15, 15)) -> pd.DataFrame:
    configs = [json.dumps({"width": width, "epochs": 30, "best_epoch": e}) for e in best_epochs]
    configs += [json.dumps({"learning_rate": 0.1, "max_leaf_nodes": n}) for n in leaves]
    return _seeded(auroc).assign(config=configs)


def test_what_a_fit_selected_does_not_split_seeds_but_a_changed_setting_differs(tmp_path: Path) -> None:
    """metrics.csv's config holds early stopping's best_epoch and the grid point validation chose,
    both different by seed: read as settings, they would give each seed a group of its own (SD 0,
    tolerance 1e-6), and any rerun would fail."""
    ref = [0.70, 0.72, 0.74, 0.60, 0.62, 0.64]  # SD 0.02 for each model (hand: std of .70/.72/.74)
    _write(tmp_path / "ref", _with_config(ref, [8, 6, 12], leaves=(15, 31, 15)))
    _write(tmp_path / "near", _with_config([0.75, 0.72, 0.74, 0.65, 0.62, 0.64], [9, 6, 3], leaves=(31, 31, 15)))
    near = compare_trees(tmp_path / "ref", tmp_path / "near").iloc[0]
    assert near["status"] == "within tolerance" and "tolerance 0.06" in near["differences"]
    assert "config" not in near["differences"]
    _write(tmp_path / "wider", _with_config(ref, [8, 6, 12], width=256, leaves=(15, 31, 15)))
    wider = compare_trees(tmp_path / "ref", tmp_path / "wider").iloc[0]
    assert wider["status"] == "differs" and "config: text or shape" in wider["differences"]


def test_the_selection_keys_cover_every_grid_a_fit_chooses_from() -> None:
    from memsafe_lib.estimators import baselines, lexset, memsafe
    from memsafe_lib.evaluation.compare import FIT_OUTCOME_KEYS

    grids = [lexset.GRID, lexset.LOGISTIC_GRID, baselines.C_GRID, memsafe.RelevanceAggregation.grid]
    assert {key for grid in grids for point in grid for key in point} | {"best_epoch"} <= FIT_OUTCOME_KEYS
