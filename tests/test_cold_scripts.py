"""bench/cold/cold_lib.sh, shared by bench/cold/cold_run.sh and bench/cold/cold_resume.sh, writes the
log lines bench/cold/interrupted_run.py reads: a notebook the log already saw start is marked resumed."""

from __future__ import annotations

import importlib
import re
import stat
import subprocess
from pathlib import Path

import pytest

from memsafe_lib import config

COLD = config.REPO_ROOT / "bench" / "cold"
LIB = COLD / "cold_lib.sh"


def _stub(path: Path, body: str) -> None:
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run_notebooks(clone: Path, log: Path | str, *notebooks: str) -> str:
    """run_cold_notebooks in a clone whose python (the busy-core sampler) and memsafe are stubs."""
    (clone / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    _stub(clone / ".venv" / "bin" / "python", "exit 0")
    _stub(clone / ".venv" / "bin" / "memsafe", 'echo "[memsafe 12:00:00 +1.0 s] ran $*"')
    script = f'set -euo pipefail; source "{LIB}"; cd "{clone}"; run_cold_notebooks cpu "{log}" "AMD EPYC" {" ".join(notebooks)}'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    return done.stdout


def test_a_notebook_the_log_saw_start_is_marked_resumed_and_interrupted_run_reads_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "cold.log"
    first = ("cold run of 01_construction_audit 02_training 03_ablations at cpu on abc, data x\n"
             "01_construction_audit start 2026-11-29T10:00:00Z\n"
             "[memsafe 10:30:00 +30.0 min] notebook 01_construction_audit at scale cpu: done in 30.0 min\n"
             "02_training start 2026-11-29T10:30:01Z\n"
             "[memsafe 11:10:01 +40.0 min] Stage A fine-tuning: done in 40.0 min\n")
    log.write_text(first)
    out = _run_notebooks(tmp_path / "clone", log, "02_training", "03_ablations")
    lines = out.splitlines()
    assert lines[0].startswith("02_training start ") and lines[0].endswith("Z (resumed run on AMD EPYC)")
    assert lines[1] == "[memsafe 12:00:00 +1.0 s] ran notebook 02_training --scale cpu --record"
    assert lines[2].startswith("03_ablations start ") and lines[2].endswith("Z")  # never started before
    assert lines[-1].startswith("end ")

    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench" / "cold"))
    interrupted_run = importlib.import_module("interrupted_run")
    [(start, last)] = interrupted_run.killed_parts(first + out, "02_training")
    assert (last - start).total_seconds() == 40 * 60


def test_without_a_log_every_notebook_starts_plainly(tmp_path: Path) -> None:
    out = _run_notebooks(tmp_path / "clone", "", "01_construction_audit")
    assert out.splitlines()[0].endswith("Z")
    assert "resumed" not in out


def test_both_cold_scripts_use_the_shared_loop_and_adoption() -> None:
    for name in ("cold_run.sh", "cold_resume.sh"):
        text = (COLD / name).read_text()
        assert 'source "$repo/bench/cold/cold_lib.sh"' in text
        assert "run_cold_notebooks " in text and "adopt_cold_run " in text
        assert ".venv/bin/memsafe notebook" not in text  # the loop lives in cold_lib.sh only


def test_the_cold_scripts_are_read_whole_before_they_run() -> None:
    # bash reads a plain script as it runs; a commit touching it during a run of hours once made
    # the running cold_run.sh execute a line of the new text ("=cpu: command not found")
    for name in ("cold_run.sh", "cold_resume.sh"):
        lines = (COLD / name).read_text().splitlines()
        start = lines.index("main() {")
        assert [line for line in lines[:start] if line and not line.startswith("#")] == ["set -euo pipefail"]
        assert lines[-2:] == ["}", 'main "$@"; exit']
        subprocess.run(["bash", "-n", str(COLD / name)], check=True)


def test_a_later_part_restores_the_saved_parts_after_the_install_and_before_its_notebooks() -> None:
    text = (COLD / "cold_run.sh").read_text()
    install, restore = text.index("make install readers"), text.index("bench/cold/cold_parts.py restore")
    assert install < restore < text.index('run_cold_notebooks "$scale"')
    assert 'if [ "${PARTS:-0}" = 1 ]' in text[install:restore]
    # the restored logs are the loop's log: a notebook saved midway starts again marked resumed
    assert "tee artifacts/scratch/restored_parts.log" in text[restore:]
    assert 'run_cold_notebooks "$scale" "$restored" "$cpu"' in text


def test_adoption_keeps_the_replaced_run_compares_it_and_checks_the_prose(tmp_path: Path) -> None:
    """adopt_cold_run keeps the checkout's committed run as a worktree before adopting, then runs
    compare_runs.py against it and the claims test; a failing claim is named, not fatal."""
    repo = tmp_path / "repo"
    (repo / "bench" / "cold").mkdir(parents=True)
    (repo / "artifacts" / "cpu").mkdir(parents=True)
    (repo / "artifacts" / "cpu" / "run_times.csv").write_text("notebook,code\n01,old\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "old run"], check=True)
    calls = tmp_path / "calls.txt"
    (repo / ".venv" / "bin").mkdir(parents=True)
    _stub(repo / ".venv" / "bin" / "python",
          f'echo "python $*" >> "{calls}"; case "$*" in *test_report_claims*) exit 1;; esac; exit 0')
    _stub(repo / ".venv" / "bin" / "memsafe", f'echo "memsafe $*" >> "{calls}"')
    script = f'set -euo pipefail; source "{LIB}"; adopt_cold_run "{repo}" /clone cpu'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    previous = tmp_path / "previous-cpu-run"
    assert (previous / "artifacts" / "cpu" / "run_times.csv").read_text() == "notebook,code\n01,old\n"
    made = [line.split()[1] if line.startswith("python") else line for line in calls.read_text().splitlines()]
    # the replaced run's time table is kept before adopting; the new run's table is rewritten
    # even when no notebook was killed (cold_run.csv was left the replaced run's before), then kept
    assert made == ["cold_run_history.py", "bench/cold/adopt_cold_run.py", "interrupted_run.py", "cold_run_history.py",
                    "notebook_steps.py", "memsafe report --record",
                    "memsafe verify --scale cpu", "compare_runs.py", "-m"]
    assert f"--reference {previous}/artifacts/cpu" in calls.read_text()
    assert "no longer hold on the new run" in done.stdout


def test_the_untimed_warm_ups_name_what_the_library_has() -> None:
    """The Python that cold_run.sh runs before a part's notebooks (WARM_GRID, WARM_STAGE_A) is
    text inside the script: a renamed function would only fail hours into a cold run."""
    text = (COLD / "cold_run.sh").read_text()
    [prelude] = re.findall(r'\.venv/bin/python -c "\n(.*?)\$2"\n', text, flags=re.S)
    snippets = [prelude + body for body in re.findall(r'warm_up "[^"]*" "\n(.*?)"\n', text, flags=re.S)]
    assert len(snippets) >= 2
    for snippet in snippets:
        code = snippet.replace("$scale", "smoke")
        compile(code, "cold_run.sh", "exec")
        namespace: dict = {}
        exec("\n".join(x for x in code.splitlines() if x.startswith(("from ", "import "))), namespace)
        for dotted in re.findall(r"\b(config\.[A-Z_]+)\b", code):
            assert getattr(namespace["config"], dotted.split(".")[1])
    assert config.scale_config("smoke").neural.encoder_seeds


def test_a_pause_file_stops_the_loop_before_the_next_notebook(tmp_path: Path) -> None:
    """A part ends between notebooks, so bench/cold/cold_parts.py can save finished ones only: the
    loop checks for artifacts/scratch/pause before each notebook, stops there, and removes it."""
    clone = tmp_path / "clone"
    (clone / "artifacts" / "scratch").mkdir(parents=True)
    (clone / "artifacts" / "scratch" / "pause").touch()
    out = _run_notebooks(clone, "", "02_training", "03_ablations")
    assert "ran notebook" not in out
    assert out.splitlines()[-1].startswith("paused before 02_training ")
    assert not (clone / "artifacts" / "scratch" / "pause").exists()
    out = _run_notebooks(clone, "", "02_training")
    assert "ran notebook 02_training" in out and out.splitlines()[-1].startswith("end ")
