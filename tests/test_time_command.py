"""bench/time_command.py: what the timed command starts from."""

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
    two timed commands give two rows, oldest first, and no third command is run."""
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench"))
    time_command = importlib.import_module("time_command")
    for label in ("first", "second"):
        monkeypatch.setattr(sys, "argv", ["time_command.py", "--label", label, "--scale", "smoke", "--cwd", str(tmp_path),
                                          "--", sys.executable, "-c", "pass"])
        time_command.main()
    monkeypatch.setattr(sys, "argv", ["time_command.py", "--history", "--scale", "smoke"])
    time_command.main()
    table = pd.read_csv(config.scale_config("smoke").output_dir(config.BENCH) / "command_history.csv")
    assert table.command.tolist() == ["first", "second"]
    monkeypatch.setattr(sys, "argv", ["time_command.py", "--history", "--scale", "smoke", "--", "true"])
    with pytest.raises(SystemExit):
        time_command.main()
