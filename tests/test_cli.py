"""The command line on the official-format fixtures (and the real data when present)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from memsafe_lib.cli import main
from memsafe_lib.config import SCALES
from memsafe_lib.io import sha256_file
from memsafe_lib.ledger import read_ledger
from memsafe_lib.variants.construction import Variant


def test_data_check_accounts_for_every_record(qa_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "check", "--scale", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "raw=11 used=5 excluded=6  (adds up)" in out
    assert "excluded      1  supporting-fact title not in context" in out
    assert "relation-lost impossible" in out
    (entry,) = read_ledger(SCALES["cpu"])
    assert entry["kind"] == "data-check"
    assert {f["path"] for f in entry["raw_files"]} >= {"musique/musique_full_v1.0_train.jsonl", "squad2/dev-v2.0.json"}


def test_construct_writes_variants_exclusions_and_ledger(qa_fixtures: Path, tmp_path: Path) -> None:
    out = tmp_path / "hp.jsonl"
    assert main(["construct", "--dataset", "hotpotqa", "--construction", "size-matched", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6
    required = {"variant_id", "base_id", "dataset", "construction", "state", "split", "missing_count", "units"}
    assert all(required <= set(r) for r in rows)
    assert all({"unit_id", "title", "text", "is_evidence", "position"} <= set(u) for r in rows for u in r["units"])
    assert Variant.from_dict(rows[0]).variant_id == rows[0]["variant_id"]
    exclusions = [json.loads(line) for line in (tmp_path / "hp.exclusions.jsonl").read_text().splitlines()]
    assert {e["reason"] for e in exclusions} == {"supporting-fact title not in context", "too few distractors (|D| < |S|)"}
    entry = read_ledger(SCALES["cpu"])[-1]
    assert entry["kind"] == "construct"
    assert entry["outputs"][str(out.resolve())] == sha256_file(out)
    assert set(entry["fingerprint"]) == {"code", "data", "settings", "run"}


def test_construct_is_deterministic(qa_fixtures: Path, tmp_path: Path) -> None:
    for name in ("a", "b"):
        assert main(["construct", "--dataset", "musique", "--out", str(tmp_path / f"{name}.jsonl")]) == 0
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_audit_too_small_is_a_clear_error(qa_fixtures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Two SQuAD questions cannot fill both classes in train and test: a message, not a traceback.
    assert main(["audit", "--dataset", "squad2", "--construction", "native"]) == 2
    assert "needs both unsafe and complete" in capsys.readouterr().err


@pytest.mark.parametrize("dataset", ["musique", "hotpotqa", "2wikimultihopqa", "squad2"])
def test_audit_on_real_data_via_console_script(real_data: Path, dataset: str) -> None:
    """Every control on one dataset; the cheap ones (not the set model's encoder) on the others."""
    controls = [] if dataset == "musique" else ["--controls", "surface,blind_bow,blind_unit,question_only"]
    proc = subprocess.run([sys.executable, "-m", "memsafe_lib.cli", "audit", "--dataset", dataset, "--scale", "smoke",
                           *controls], capture_output=True, text=True, check=True)
    report = json.loads(proc.stdout)
    blind = {"blind_bow", "blind_unit", "question_only"} | ({"blind_set"} if dataset == "musique" else set())
    shallow = {"qu_tfidf", "title_named", "retrieval_sim"} if dataset == "musique" else set()
    assert set(report["test_auroc"]) == {"majority", "paragraph_count", "text_length", "provenance_only", *blind,
                                         *shallow}
    assert report["test_auroc"]["majority"] == 0.5


@pytest.mark.parametrize("construction", ["size-matched", "deletion"])
def test_construct_on_real_data(real_data: Path, tmp_path: Path, construction: str) -> None:
    out = tmp_path / "v.jsonl"
    assert main(["construct", "--dataset", "2wikimultihopqa", "--construction", construction,
                 "--out", str(out), "--scale", "cpu"]) == 0
    assert sum(1 for _ in out.open()) == 3 * 1162


def test_outputs_get_ordinary_permissions(tmp_path: Path) -> None:
    import os
    import stat

    from memsafe_lib.io import write_text

    old = os.umask(0o022)
    try:
        path = write_text(tmp_path / "x.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_exploring_writes_scratch_and_record_writes_the_committed_ledger(
        qa_fixtures: Path, isolated_artifacts: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memsafe_lib import config

    monkeypatch.delenv(config.RECORD_ENV, raising=False)
    assert main(["data", "check", "--scale", "cpu"]) == 0
    assert (isolated_artifacts / "scratch" / "cpu" / "ledger.jsonl").exists()
    assert not (isolated_artifacts / "cpu" / "ledger.jsonl").exists()
    assert main(["data", "check", "--scale", "cpu", "--record"]) == 0
    (entry,) = [json.loads(x) for x in (isolated_artifacts / "cpu" / "ledger.jsonl").read_text().splitlines()]
    assert entry["kind"] == "data-check"


def _git_status() -> str | None:
    from memsafe_lib import config

    try:
        proc = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=config.REPO_ROOT,
                              capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return proc.stdout


def test_cli_verbs_leave_a_clone_clean(real_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the exploratory verbs against the repository's own artifacts directory, as a user
    would: nothing git tracks (or would pick up) changes."""
    from memsafe_lib import config

    before = _git_status()
    if before is None:
        pytest.skip("not a git checkout")
    monkeypatch.setenv("MEMSAFE_ARTIFACTS_DIR", str(config.REPO_ROOT / "artifacts"))
    monkeypatch.delenv(config.RECORD_ENV, raising=False)
    for argv in (["data", "check", "--dataset", "2wikimultihopqa"],
                 ["audit", "--dataset", "2wikimultihopqa", "--scale", "smoke"],  # cpu: two minutes of fits
                 ["construct", "--dataset", "2wikimultihopqa", "--out", str(tmp_path / "v.jsonl"), "--scale", "smoke"],
                 ["evaluate", "--dataset", "2wikimultihopqa", "--models", "majority,text_length", "--scale", "smoke"],
                 ["summarize", "--scale", "smoke", "--resamples", "10"],
                 ["report"]):
        assert main(argv) == 0, argv
    assert _git_status() == before


def _options(parser: argparse.ArgumentParser, verb: tuple[str, ...] = ()) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _options(sub, (*verb, name))
        elif action.option_strings and action.dest != "help":
            found.append((" ".join(verb), action))
    return found


def test_every_option_says_what_it_does_and_its_default() -> None:
    """`memsafe VERB --help` explains each option; one with a default value names it."""
    from memsafe_lib.cli import build_parser

    options = _options(build_parser())
    assert len(options) > 30
    silent = [f"{verb} {a.option_strings[0]}" for verb, a in options if not a.help]
    assert silent == []
    undated = [f"{verb} {a.option_strings[0]}" for verb, a in options
               if a.default not in (None, False) and "default" not in a.help]
    assert undated == []
    report = dict((verb, a) for verb, a in options if verb == "report")
    assert "<scale>" not in report["report"].help  # report reads every scale's artifacts: it takes none


def test_score_names_the_option_behind_a_bad_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file or an impossible level names the option, not an errno or a variable of the code."""
    gate = tmp_path / "gate"
    gate.mkdir()
    memories = tmp_path / "m.jsonl"
    memories.write_text('{"query": "q", "units": ["u"]}\n')
    cases = ((["--input", str(tmp_path / "none.jsonl")], "--input"),
             (["--input", str(memories), "--risk", "2"], "--risk must lie strictly between 0 and 1"),
             (["--input", str(memories), "--risk", "0.05", "--delta", "0"], "--delta must lie"))
    for extra, expected in cases:
        assert main(["score", "--gate", str(gate), *extra]) == 2
        err = capsys.readouterr().err
        assert expected in err and "Errno" not in err and "alpha" not in err
    assert main(["score", "--gate", str(tmp_path / "nogate"), "--input", str(memories)]) == 2
    assert "--gate" in capsys.readouterr().err


def test_train_says_first_when_stage_a_reads_more_than_the_gates_datasets() -> None:
    """At cpu (and smoke) Stage A is pooled over the three QA datasets: a one-dataset gate says so
    in its first line; the joint gate, and a scale without pooling, say nothing."""
    from dataclasses import replace

    from memsafe_lib.cli import stage_a_notice

    cpu = SCALES["cpu"]
    notice = stage_a_notice(("musique",), cpu)
    assert notice is not None and all(d in notice for d in ("musique", "hotpotqa", "2wikimultihopqa"))
    assert stage_a_notice(("musique", "hotpotqa", "2wikimultihopqa"), cpu) is None
    assert stage_a_notice(("musique",), replace(cpu, neural=replace(cpu.neural, stage_a_pool=()))) is None
