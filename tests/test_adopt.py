"""Adopting a cold-run clone: checked on two hand-made git repositories, the expected files
written out by hand."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest

from memsafe_lib.reporting.adopt import adopt, merge_ledger_lines

HEADER = "notebook,scale,minutes,code\n"


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def checkout_and_clone(tmp_path: Path) -> tuple[Path, Path]:
    checkout = tmp_path / "main"
    _write(checkout, "artifacts/cpu/ledger.jsonl", '{"n": 1}\n{"n": 2}\n')
    _write(checkout, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,60,old\n")
    _write(checkout, "artifacts/cpu/01_a/table.csv", "x\n1\n")
    _write(checkout, "artifacts/cpu/02_b/stale.csv", "y\n1\n")
    _write(checkout, "artifacts/cpu/02_b/same.csv", "z\n1\n")
    _git("init", "-q", cwd=checkout)
    _git("add", ".", cwd=checkout)
    _git("commit", "-qm", "start", cwd=checkout)
    clone = tmp_path / "cold"
    _git("clone", "-q", str(checkout), str(clone), cwd=tmp_path)
    # the clone runs notebook 02 on code "new": one table rewritten, one added, one removed
    _write(clone, "artifacts/cpu/02_b/table.csv", "y\n2\n")
    _write(clone, "artifacts/cpu/02_b/figs/f.png", "png")
    (clone / "artifacts/cpu/02_b/stale.csv").unlink()
    _write(clone, "artifacts/cpu/ledger.jsonl", '{"n": 1}\n{"n": 2}\n{"n": "nb02"}\n')
    _write(clone, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n")
    # meanwhile the checkout recorded a timed command
    _write(checkout, "artifacts/cpu/ledger.jsonl", '{"n": 1}\n{"n": 2}\n{"n": "bench"}\n')
    return checkout, clone


def test_clone_results_are_copied_and_ledger_and_times_merged(checkout_and_clone: tuple[Path, Path]) -> None:
    checkout, clone = checkout_and_clone
    done = adopt(clone, checkout, "cpu", code="new")
    assert done.notebooks == ("02_b",)
    assert set(done.copied) == {"artifacts/cpu/02_b/table.csv", "artifacts/cpu/02_b/figs/f.png"}
    assert done.deleted == ("artifacts/cpu/02_b/stale.csv",)
    assert (checkout / "artifacts/cpu/02_b/table.csv").read_text() == "y\n2\n"
    assert (checkout / "artifacts/cpu/02_b/figs/f.png").read_text() == "png"
    assert not (checkout / "artifacts/cpu/02_b/stale.csv").exists()
    assert (checkout / "artifacts/cpu/01_a/table.csv").read_text() == "x\n1\n"
    assert (checkout / "artifacts/cpu/ledger.jsonl").read_text() == '{"n": 1}\n{"n": 2}\n{"n": "bench"}\n{"n": "nb02"}\n'
    assert done.ledger_entries == 1
    times = pd.read_csv(checkout / "artifacts/cpu/run_times.csv")
    assert times.to_dict("records") == [{"notebook": "01_a", "scale": "cpu", "minutes": 3, "code": "old"},
                                        {"notebook": "02_b", "scale": "cpu", "minutes": 50, "code": "new"}]


def test_runs_on_other_code_are_refused_and_nothing_is_written(checkout_and_clone: tuple[Path, Path]) -> None:
    checkout, clone = checkout_and_clone
    before = {p: p.read_bytes() for p in (checkout / "artifacts").rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"run_times\.csv: 02_b \(code new\) ran on other code than this checkout's"):
        adopt(clone, checkout, "cpu", code="edited")
    assert {p: p.read_bytes() for p in (checkout / "artifacts").rglob("*") if p.is_file()} == before


def test_a_clone_that_ran_nothing_is_refused(tmp_path: Path, checkout_and_clone: tuple[Path, Path]) -> None:
    checkout, clone = checkout_and_clone
    _write(clone, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,60,old\n")
    with pytest.raises(ValueError, match="nothing to adopt"):
        adopt(clone, checkout, "cpu", code="old")


def test_ledger_merge_keeps_ours_then_their_new_lines_in_their_order() -> None:
    assert merge_ledger_lines(["a", "b", "x"], ["a", "c", "b", "d"]) == ["a", "b", "x", "c", "d"]
