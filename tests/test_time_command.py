"""bench/time_command.py says where a cold command's minutes went: the outermost heavy steps of
its progress lines per kind, summed by hand here; a step inside another is not counted twice."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from memsafe_lib import config


@pytest.fixture
def time_command(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench"))
    return importlib.import_module("time_command")


def test_step_minutes_sum_outermost_steps_per_kind(time_command, tmp_path: Path) -> None:
    log = tmp_path / "command.log"
    log.write_text(
        "[memsafe 23:50:00 +0 s] musique/size-matched: 1811 variants\n"
        "fine-tune:  10%|# | 75/750\r[memsafe 00:12:00 +22.0 min] Stage A fold 0 encoder (seed 17): fine-tune on"
        " 12,000 pairs: done in 21.5 min\n"
        "[memsafe 00:12:06 +22.1 min] Stage A a+b (seed 17): fine-tune on 24,000 pairs, 2 fold encoders side by side:"
        " done in 22.0 min\n"
        "[memsafe 01:00:06 +48.0 min] Stage A a+b (seed 17): 90,000 pairs requested, 60,000 unique, 0 read from cache,"
        " 60,000 encoded in 48.0 min\n"
        "[memsafe 01:03:06 +3.0 min] joint: memsafe seed 17: fit and predict: done in 3.0 min\n"
        "[memsafe 01:04:00 +1 s] calibration: done in 30.0 s\n")
    assert time_command.step_minutes(log) == {"stage_a_finetune_minutes": 22.0, "stage_a_encode_minutes": 48.0,
                                              "stage_b_fits_minutes": 3.0}
    assert time_command.step_minutes(tmp_path / "absent.log") == {}
