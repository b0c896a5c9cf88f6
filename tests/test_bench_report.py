"""bench/report.py records a benchmark's arguments in the ledger, which holds JSON only."""

from __future__ import annotations

import argparse
import importlib
import json

import pytest

from memsafe_lib import config


@pytest.fixture
def report(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench"))
    return importlib.import_module("report")


def test_path_arguments_are_recorded_as_json_without_this_machine_s_root(report) -> None:
    # bench/compare_runs.py takes --reference as a Path: the ledger entry once failed on it
    beside = config.REPO_ROOT.parent / "previous-cpu-run" / "artifacts" / "cpu"
    args = argparse.Namespace(reference=beside, scale="cpu", k=2.0, elsewhere=config.REPO_ROOT.parent.parent)
    settings = report.settings_of(args)
    assert json.loads(json.dumps(settings)) == {"reference": "previous-cpu-run/artifacts/cpu", "scale": "cpu",
                                                "k": 2.0, "elsewhere": config.REPO_ROOT.parent.parent.name}
