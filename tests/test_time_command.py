"""bench/time_command.py: what the timed command starts from, and where its minutes went."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pandas as pd
import pytest

from memsafe_lib import config


def test_the_timed_command_starts_from_an_empty_private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh clone is not a cold run when this machine's private cache (``~/.cache/memsafe``:
    clinical Stage A encoders and encodings) survives from an earlier one: a `make test` timed
    so once reused notebook 07's Stage A and read 2.5 minutes short. The command gets an empty
    private cache of its own, removed afterwards, and the row says so."""
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench"))
    time_command = importlib.import_module("time_command")
    warm = tmp_path / "warm"
    (warm / "smoke").mkdir(parents=True)
    (warm / "smoke" / "stage_a.sqlite").write_text("kept from an earlier run")
    monkeypatch.setenv("MEMSAFE_PRIVATE_CACHE", str(warm))
    seen = tmp_path / "seen.txt"
    script = ("import os, pathlib; p = pathlib.Path(os.environ['MEMSAFE_PRIVATE_CACHE']); "
              f"pathlib.Path({str(seen)!r}).write_text(f'{{p}}\\n{{len(list(p.iterdir()))}}')")
    monkeypatch.setattr(sys, "argv", ["time_command.py", "--label", "probe", "--scale", "smoke", "--cwd", str(tmp_path),
                                      "--", sys.executable, "-c", script])
    time_command.main()
    path, entries = seen.read_text().splitlines()
    assert Path(path) != warm and entries == "0"
    assert not Path(path).exists()  # removed after the run
    assert (warm / "smoke" / "stage_a.sqlite").exists()  # the machine's own cache untouched
    row = (config.scale_config("smoke").output_dir(config.BENCH) / "commands.csv").read_text()
    assert "empty private cache" in row


def test_history_lists_every_timed_command_and_times_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--history`` (once bench/command_history.py) writes command_history.csv from the ledger:
    two timed commands give two rows, oldest first (a run whose row was corrected by ``--steps-of``
    is one row), and no third command is run."""
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench"))
    time_command = importlib.import_module("time_command")
    for label in ("first", "second"):
        monkeypatch.setattr(sys, "argv", ["time_command.py", "--label", label, "--scale", "smoke", "--cwd", str(tmp_path),
                                          "--", sys.executable, "-c", "pass"])
        time_command.main()
    monkeypatch.setattr(sys, "argv", ["time_command.py", "--steps-of", "first", "--note", "corrected", "--scale",
                                      "smoke"])
    time_command.main()  # a correction of first's row is a second ledger entry of the same run
    monkeypatch.setattr(sys, "argv", ["time_command.py", "--history", "--scale", "smoke"])
    time_command.main()
    table = pd.read_csv(config.scale_config("smoke").output_dir(config.BENCH) / "command_history.csv")
    assert table.command.tolist() == ["first", "second"]  # one row per run, the corrected one
    monkeypatch.setattr(sys, "argv", ["time_command.py", "--history", "--scale", "smoke", "--", "true"])
    with pytest.raises(SystemExit):
        time_command.main()


def test_step_minutes_sum_outermost_steps_per_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cold command's heavy steps per kind, summed by hand here; a step inside another (a fold
    encoder inside the side-by-side pair) is not counted twice, and the clock may pass midnight."""
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench"))
    time_command = importlib.import_module("time_command")
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
