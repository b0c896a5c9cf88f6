"""Every snippet in the README runs as written (at smoke scale), and the command synopsis
names only options the CLI has.

Code blocks are run in order from the repository root: ``bash`` blocks with ``bash -e``,
``python`` blocks with this interpreter. A block may opt out only with a
``<!-- readme-snippet: not run ... -->`` line right above it, saying why; ``text`` blocks are
synopses and layouts, checked against ``--help`` where they name commands.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memsafe_lib import config

README = config.REPO_ROOT / "README.md"
FENCE = re.compile(r"(?P<before>(?:[^\n]*\n){0,2})```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
SKIP = "<!-- readme-snippet: not run"


def blocks() -> list[tuple[str, str, bool]]:
    """(language, code, runs) per fenced block, in README order."""
    return [(m["lang"], m["body"], SKIP not in m["before"]) for m in FENCE.finditer(README.read_text())]


def test_only_the_make_commands_are_exempt() -> None:
    exempt = [body for lang, body, runs in blocks() if lang in {"bash", "python"} and not runs]
    commands = [line.split("#")[0].strip() for body in exempt for line in body.strip().splitlines()]
    # only `make` lines (install, the lab server, the reproduction, the test suite) escape execution here
    assert commands and all(c.startswith("make ") or c == "make" for c in commands), commands
    assert {"make install", "make reproduce", "make test", "make lab"} <= set(commands)
    assert all(lang in {"bash", "python", "text"} for lang, _, _ in blocks()), "unknown block language"


def _help(verb: list[str]) -> str:
    """``memsafe <verb> --help`` from the CLI's own parser, in-process: the same text as the
    console script prints, without starting a Python per verb (two minutes on two cores)."""
    from memsafe_lib.cli import build_parser

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*verb, "--help"])
    assert exit_info.value.code == 0, f"memsafe {' '.join(verb)} --help exited {exit_info.value.code}"
    return out.getvalue()


def test_synopsis_options_exist() -> None:
    synopsis = [line for lang, body, _ in blocks() if lang == "text"
                for line in body.splitlines() if line.startswith("memsafe ")]
    assert len(synopsis) >= 10
    for line in synopsis:
        words = line.split()
        verb = [w for w in words[1:3] if re.fullmatch(r"[a-z]+", w) and w not in {"all"}]
        if words[1] != "data":
            verb = verb[:1]
        help_text = _help(verb)
        for option in re.findall(r"--[a-z][a-z-]*", line):
            assert option in help_text, f"{line!r}: {option} is not an option of memsafe {' '.join(verb)}"


def _git_status() -> str | None:
    try:
        return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=config.REPO_ROOT,
                               capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None


def test_readme_snippets_run_as_written(real_data: Path) -> None:
    if not (config.REPO_ROOT / ".venv" / "bin" / "activate").exists():
        pytest.skip("the snippets activate .venv, which `make install` creates")
    env = {k: v for k, v in os.environ.items() if k not in {config.RECORD_ENV, "MEMSAFE_ARTIFACTS_DIR"}}
    env["MEMSAFE_DATA_DIR"] = str(real_data)
    before = _git_status()
    ran = 0
    for lang, body, runs in blocks():
        if not runs or lang not in {"bash", "python"}:
            continue
        cmd = ["bash", "-eo", "pipefail", "-c", body] if lang == "bash" else [sys.executable, "-c", body]
        proc = subprocess.run(cmd, cwd=config.REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, f"README {lang} block failed:\n{body}\n--- stderr:\n{proc.stderr[-3000:]}"
        assert proc.stdout.strip(), f"README {lang} block printed nothing:\n{body}"
        ran += 1
    assert ran >= 2
    scores = (config.REPO_ROOT / "artifacts" / "gates" / "scores.jsonl").read_text().splitlines()
    assert len(scores) == 3  # one line per example memory
    assert before is None or _git_status() == before, "a README snippet changed what git tracks"
