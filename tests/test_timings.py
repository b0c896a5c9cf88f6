"""The time table reads the progress lines of executed notebooks; checked on hand-made ones."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from memsafe_lib.reporting import timings as T


def _notebook(path: Path, lines: list[str]) -> Path:
    cells = [{"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1,
              "outputs": [{"output_type": "stream", "name": "stderr", "text": [f"{x}\n" for x in lines]}]}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


LINES = [
    "[memsafe 23:50:00 +1.0 s] Stage A musique fold 0 encoder (seed 17): fine-tune on 4,000 pairs ...",
    "[memsafe 23:52:00 +2.0 min] Stage A musique fold 0 encoder (seed 17): fine-tune on 4,000 pairs: done in 2.0 min",
    "[memsafe 23:55:00 +5.0 min] Stage A musique (seed 17): 100 pairs requested, 80 unique, 0 read from cache, "
    "80 encoded in 3.0 min",
    "[memsafe 23:55:00 +5.0 min] musique: memsafe seed 17: fit and predict ...",
    "[memsafe 23:56:00 +6.0 min] Stage A musique fold 1 encoder (seed 17): fine-tune on 10 pairs: done in 30.0 s",
    "[memsafe 00:01:00 +11.0 min] musique: memsafe seed 17: fit and predict: done in 6.0 min",
    "[memsafe 00:01:30 +11.5 min] musique: lexset seed 17: fit and predict: done in 30.0 s",
    "[memsafe 00:02:00 +12.0 min] loading data: done in 9.0 s",
    "[memsafe 01:40:00 +1.83 h] 4-shot judge qwen on 30 memories: done in 1.50 h",
    "plain stderr text that is not a progress line",
]


def test_steps_are_classed_nested_ones_counted_once_and_midnight_crossed(tmp_path: Path) -> None:
    steps = T.parse_steps(T.progress_lines(_notebook(tmp_path / "nb.ipynb", LINES)))
    assert [s.kind for s in steps] == ["stage_a_finetune", "stage_a_encode", "stage_a_finetune", "stage_b_fits",
                                       "other_estimators", None, "reader_and_judges"]
    assert steps[3].end == 11 * 60 and steps[3].seconds == 360  # 00:01:00 is after 23:50:00
    kept = T.outermost(steps)
    # the fold-1 fine-tune ran inside the MemSafe fit: counted there, not twice
    assert [s.what for s in kept if s.kind == "stage_a_finetune"] == [steps[0].what]


def test_time_table_by_hand(tmp_path: Path) -> None:
    _notebook(tmp_path / "02_training" / "02_training.ipynb", LINES)
    (tmp_path / "run_times.csv").write_text("notebook,scale,minutes,cores,fit_threads,torch_threads\n"
                                            "02_training,cpu,120.0,2,1,2\n")
    row = T.time_table(tmp_path).set_index("notebook").loc["02_training"]
    assert (row.stage_a_finetune, row.stage_a_encode, row.stage_b_fits) == (2.0, 3.0, 6.0)
    assert (row.other_estimators, row.reader_and_judges) == (0.5, 90.0)
    assert row.other == pytest.approx(120 - 2 - 3 - 6 - 0.5 - 90)  # loading data is not classed
    total = T.time_table(tmp_path).set_index("notebook").loc["total"]
    assert total.minutes == 120.0


def test_a_timed_notebook_without_its_executed_copy_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "run_times.csv").write_text("notebook,scale,minutes,cores,fit_threads,torch_threads\n"
                                            "03_ablations,cpu,1.0,2,1,2\n")
    with pytest.raises(FileNotFoundError, match="03_ablations"):
        T.time_table(tmp_path)


def test_side_by_side_fits_count_once_as_stage_b(tmp_path: Path) -> None:
    """Fits in worker processes overlap: only the batch's wall time counts, as Stage B fits."""
    lines = ["[memsafe 10:00:00 +1.0 s] musique: 2 Stage B fits side by side ...",
             "[memsafe 10:01:10 +1.2 min] musique: memsafe seed 17: fitted in a worker in 70.0 s",
             "[memsafe 10:01:12 +1.2 min] musique: mean_pool seed 17: fitted in a worker in 71.0 s",
             "[memsafe 10:01:12 +1.2 min] musique: 2 Stage B fits side by side: done in 72.0 s",
             "[memsafe 10:02:12 +2.2 min] hotpotqa: mean_pool seed 29: fit and predict: done in 60.0 s"]
    steps = T.parse_steps(T.progress_lines(_notebook(tmp_path / "nb.ipynb", lines)))
    assert [(s.kind, s.seconds) for s in steps] == [("stage_b_fits", 72.0), ("stage_b_fits", 60.0)]


def test_fold_encoders_side_by_side_count_once_as_fine_tuning(tmp_path: Path) -> None:
    lines = ["[memsafe 10:00:00 +1.0 s] Stage A musique (seed 17): fine-tune on 8,000 pairs, "
             "2 fold encoders side by side ...",
             "[memsafe 10:03:50 +3.8 min] Stage A musique fold 1 encoder (seed 17): fine-tuned in a worker",
             "[memsafe 10:04:00 +4.0 min] Stage A musique (seed 17): fine-tune on 8,000 pairs, "
             "2 fold encoders side by side: done in 4.0 min"]
    steps = T.parse_steps(T.progress_lines(_notebook(tmp_path / "nb.ipynb", lines)))
    assert [(s.kind, s.seconds) for s in steps] == [("stage_a_finetune", 240.0)]



def test_a_mixed_batch_with_the_cross_encoder_counts_as_stage_b_fits(tmp_path: Path) -> None:
    lines = ["[memsafe 10:00:00 +1.0 s] musique: 9 fits side by side (Stage B and the concatenated cross-encoder) ...",
             "[memsafe 10:05:00 +5.0 min] musique: concat_ce seed 17: fit and predict: done in 4.9 min",
             "[memsafe 10:09:00 +9.0 min] musique: 9 fits side by side (Stage B and the concatenated "
             "cross-encoder): done in 9.0 min"]
    steps = T.outermost(T.parse_steps(T.progress_lines(_notebook(tmp_path / "nb.ipynb", lines))))
    assert [(s.kind, s.seconds) for s in steps] == [("stage_b_fits", 540.0)]


def test_a_pooled_batch_of_several_runs_with_lexset_counts_as_stage_b_fits(tmp_path: Path) -> None:
    """Notebooks 03 and 07 pool several runs' fits, LexSet's seeds among them: one batch, one
    wall time, counted once as Stage B fits (its LexSet fits inside are not counted again)."""
    lines = ["[memsafe 10:00:00 +1.0 s] mimic-labs, mimic-omr (2 runs): 12 fits side by side (Stage B, LexSet) ...",
             "[memsafe 10:00:09 +9.0 s] mimic-omr: lexset seed 17: fit and predict: done in 8.0 s",
             "[memsafe 10:13:00 +13.0 min] mimic-labs, mimic-omr (2 runs): 12 fits side by side (Stage B, LexSet): "
             "done in 13.0 min"]
    steps = T.outermost(T.parse_steps(T.progress_lines(_notebook(tmp_path / "nb.ipynb", lines))))
    assert [(s.kind, s.seconds) for s in steps] == [("stage_b_fits", 780.0)]


def _command_entry(when: str, command: str, minutes: float, rc: int, cpu: str | None) -> dict:
    environment = {"cpu": cpu} if cpu is not None else {}
    return {"kind": "bench:command", "environment": environment, "fingerprint": {"code": "abcdef0123456789ff"},
            "metrics": {"last": {"finished_utc": when, "command": command, "minutes": minutes, "exit_code": rc}}}


def test_command_history_keeps_every_timing_of_a_command_oldest_first() -> None:
    entries = [_command_entry("2026-11-25T18:02:13+00:00", "make test", 48.3, 0, "AMD EPYC"),
               {"kind": "notebook:02_training", "metrics": {}},
               _command_entry("2026-11-24T02:22:00+00:00", "make test", 11.9, 0, None),
               _command_entry("2026-11-25T15:37:14+00:00", "make test", 59.8, 2, "AMD EPYC")]
    table = T.command_history(entries)
    assert table.minutes.tolist() == [11.9, 59.8, 48.3]  # both runs of the same label kept, by time
    assert table.finished_utc.tolist() == ["2026-11-24 02:22", "2026-11-25 15:37", "2026-11-25 18:02"]
    assert table.cpu.tolist() == ["", "AMD EPYC", "AMD EPYC"] and set(table.code) == {"abcdef012345"}
    assert table.commit.tolist() == ["", "", ""]  # rows recorded before the timed commit was
    assert T.command_history([]).columns.tolist() == T.COMMAND_HISTORY_COLUMNS


def test_encode_by_cpu_scales_the_reference_minutes_by_the_throughput_ratio() -> None:
    fast = {"cpu": "X", "bf16": True, "dataset": "musique", "pairs_unique": 10, "pairs_per_s": 100.0,
            "useful_tokens_per_s": 2000.0, "matmul_gflops": 1500.0}
    slow = {**fast, "cpu": "Y", "bf16": False, "pairs_per_s": 25.0}
    table = T.encode_by_cpu(fast, [slow], reference_encode_minutes=12.0)
    assert table.cpu.tolist() == ["X", "Y"]
    assert table.slowdown.tolist() == [1.0, 4.0]  # 100 / 25
    assert table.encode_minutes.tolist() == [12.0, 48.0]
    with pytest.raises(ValueError, match="encode different pairs"):
        T.encode_by_cpu(fast, [{**slow, "pairs_unique": 11}], reference_encode_minutes=12.0)


def test_time_table_names_the_cpu_and_its_bf16_units_per_notebook(tmp_path: Path) -> None:
    """A cold time is only comparable on the same CPU class (bf16 units or AVX2 only)."""
    for nb in ("01_construction_audit", "02_training"):
        _notebook(tmp_path / nb / f"{nb}.ipynb", LINES)
    (tmp_path / "run_times.csv").write_text(
        "notebook,scale,minutes,cores,fit_threads,torch_threads,cpu,bf16_units\n"
        "01_construction_audit,cpu,3.0,2,1,2,Intel Xeon,True\n"
        "02_training,cpu,120.0,2,1,2,AMD EPYC,False\n")
    table = T.time_table(tmp_path).set_index("notebook")
    assert table.loc["02_training", "cpu"] == "AMD EPYC" and not table.loc["02_training", "bf16_units"]
    assert table.loc["01_construction_audit", "bf16_units"]
    assert table.loc["total", "cpu"] == "mixed"  # a total over two CPU classes is no budget check


def test_a_notebook_run_records_the_cpu_model_and_bf16_units(isolated_artifacts: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from memsafe_lib import config, notebooks
    from memsafe_lib.ledger import cpu_model

    monkeypatch.setattr("memsafe_lib.precision.bf16_native", lambda device_type: True)
    scale = config.SCALES["smoke"]
    executed = scale.output_dir(config.NB05_SELECTIVE) / "05_selective.ipynb"
    executed.write_text("{}")
    notebooks._record_run_time("05_selective", scale, 90.0, executed)
    row = pd.read_csv(scale.run_dir / config.RUN_TIMES_FILE).iloc[0]
    assert row.cpu == cpu_model() and bool(row.bf16_units) and row.minutes == 1.5
