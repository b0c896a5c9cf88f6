"""Wall time of a whole command (``make test``, ``make reproduce SCALE=smoke``), measured and
ledgered so the README's and REPORT's time tables come from a run, not from memory.

The command runs in ``--cwd`` (e.g. a fresh clone, as CI does) with this environment; its
output goes to ``artifacts/scratch/`` (never committed: it holds this machine's paths). One
row per command label in ``artifacts/<scale>/bench/commands.csv`` (the latest measurement
replaces an older one).

The command gets an empty private cache of its own (``MEMSAFE_PRIVATE_CACHE``, removed
afterwards): this machine's ``~/.cache/memsafe`` keeps clinical Stage A encoders and encodings
across clones, so a fresh clone alone is not a cold run. The assembled and converted model
weights (``MEMSAFE_MODEL_DIR``) stay, as an installed package would; ``--keep-private-cache``
times with the machine's cache as it is.

    git clone -q . "$CLONE"
    MEMSAFE_RECORD=1 .venv/bin/python bench/time_command.py --label "make test (fresh clone)" \\
        --cwd "$CLONE" -- bash .ci/run

The row also holds the minutes of the heavy steps the command's progress lines report
(``stage_a_finetune_minutes``, ``stage_a_encode_minutes``, ...; see
``memsafe_lib/reporting/timings.py``); ``--steps-of LABEL`` adds them to a row timed before
these columns existed, from its log on this machine.

``--history`` times nothing: it lists every timed command in the ledger, oldest first, with its
CPU and code fingerprint (``commands.csv`` keeps only the latest per command), in
``artifacts/<scale>/bench/command_history.csv`` (the README's and REPORT's history of ``make
test`` and ``make reproduce`` times):

    MEMSAFE_RECORD=1 .venv/bin/python bench/time_command.py --history
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.io import replace_row
from memsafe_lib.ledger import cpu_model, read_ledger
from memsafe_lib.reporting.timings import LINE, command_history, outermost, parse_steps


def checkout_commit(cwd: Path) -> str:
    """The timed checkout's git commit (12 hex, ``-dirty`` with uncommitted tracked edits). The
    ledger's code fingerprint is of the checkout that records the row, which may differ."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=cwd, capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short=12", "HEAD")
    return f"{head}-dirty" if head and git("status", "--porcelain", "--untracked-files=no") else head


def step_minutes(log: Path) -> dict[str, float]:
    """Minutes of the heavy steps the command's progress lines report (Stage A fine-tuning and
    encoding, Stage B fits, ...: memsafe_lib/reporting/timings.py's kinds, outermost steps only),
    so a cold time says where it went; kinds the command never ran are left out."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    lines = [line for line in text.replace("\r", "\n").splitlines() if LINE.search(line)]
    spent: dict[str, float] = {}
    for step in outermost(parse_steps(lines)):
        spent[step.kind] = spent.get(step.kind, 0.0) + step.seconds / 60  # type: ignore[index]
    return {f"{kind}_minutes": round(minutes, 1) for kind, minutes in spent.items()}


def log_of(label: str) -> Path:
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    return config.artifacts_dir() / config.SCRATCH / "bench" / f"command-{slug}.log"


def add_steps(args: argparse.Namespace) -> None:
    """``--steps-of LABEL``: time nothing; add the step minutes of LABEL's last run (its log in
    artifacts/scratch/bench/) to its row, for a row timed before the columns existed."""
    scale = config.scale_config(args.scale)
    path = scale.output_dir(config.BENCH) / "commands.csv"
    table = pd.read_csv(path)
    if args.steps_of not in set(table.command):
        raise SystemExit(f"{path}: no row for {args.steps_of!r}")
    log = log_of(args.steps_of)
    if not log.is_file():
        raise SystemExit(f"{log}: no log of {args.steps_of!r} on this machine")
    row = {k: (v.item() if hasattr(v, "item") else v)  # plain values: the ledger holds JSON
           for k, v in table[table.command == args.steps_of].iloc[0].items() if pd.notna(v)}
    row.update(step_minutes(log))
    args.cwd = "this checkout"  # as a timed run records it: the ledger names no machine's paths
    if args.note:  # a condition learnt after the run (the CPU's units, work beside it)
        row["note"] = args.note
    table = replace_row(path, row, key="command")
    save_report("command", "commands", args, [], {"last": row}, table=table)


def record_history(args: argparse.Namespace) -> None:
    """``command_history.csv``: every timed run in the scale's ledger, oldest first; a run whose row
    ``--steps-of`` corrected has two ``bench:command`` entries and is listed once, as corrected."""
    table = command_history(read_ledger(config.scale_config(args.scale)))
    runs = list(zip(table["command"], table["finished_utc"], strict=True))
    first_at: dict[tuple[str, str], int] = {}
    for i, run in enumerate(runs):
        first_at.setdefault(run, i)
    latest = {run: i for i, run in enumerate(runs)}  # the correction, in the place of the run it corrects
    table = table.iloc[sorted(latest.values(), key=lambda i: first_at[runs[i]])].reset_index(drop=True)
    report = {"commands_timed": int(len(table)), "latest_utc": str(table.finished_utc.max()) if len(table) else ""}
    save_report("command-history", "command_history", argparse.Namespace(scale=args.scale), [], report, table=table)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--label", help="row name, e.g. 'make test (fresh clone)'")
    parser.add_argument("--cwd", default=str(config.REPO_ROOT))
    parser.add_argument("--note", default="", help="conditions worth stating (busy machine, warm caches, ...)")
    parser.add_argument("--keep-private-cache", action="store_true",
                        help="run with this machine's private cache instead of an empty one (not a cold run)")
    parser.add_argument("--history", action="store_true",
                        help="time nothing: write command_history.csv, every timed command in the ledger")
    parser.add_argument("--steps-of", metavar="LABEL",
                        help="time nothing: add the step minutes of LABEL's last run (its log here) to its row "
                             "(and replace its note with --note, if given)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.history:
        if command:
            parser.error("--history times nothing; give no command")
        record_history(args)
        return
    if args.steps_of:
        if command:
            parser.error("--steps-of times nothing; give no command")
        add_steps(args)
        return
    if not command or not args.label:
        parser.error("give --label and the command after --")
    log = log_of(args.label)
    log.parent.mkdir(parents=True, exist_ok=True)
    commit = checkout_commit(Path(args.cwd))  # before the run: what was timed, not what records it
    start = time.monotonic()
    # The command starts as from a fresh shell: this script's own --record and artifacts
    # location must not leak into it (MEMSAFE_DATA_DIR and MEMSAFE_THREADS do pass).
    env = {k: v for k, v in os.environ.items() if k not in {config.RECORD_ENV, "MEMSAFE_ARTIFACTS_DIR"}}
    private = None if args.keep_private_cache else Path(tempfile.mkdtemp(prefix="memsafe-private-"))
    cache_note = "this machine's private cache" if private is None else "an empty private cache"
    if private is not None:
        env["MEMSAFE_PRIVATE_CACHE"] = str(private)
    try:
        with open(log, "w") as fh:
            rc = subprocess.run(command, cwd=args.cwd, stdout=fh, stderr=subprocess.STDOUT, env=env).returncode
    finally:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
    seconds = time.monotonic() - start
    row = {"command": args.label, "argv": " ".join(command), "exit_code": rc, "minutes": round(seconds / 60, 1),
           "seconds": round(seconds, 1), "cores": os.cpu_count() or 1, "cpu": cpu_model(),
           "note": "; ".join(filter(None, [args.note, cache_note])), "commit": commit,
           "finished_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **step_minutes(log)}
    scale = config.scale_config(args.scale)
    table = replace_row(scale.output_dir(config.BENCH) / "commands.csv", row, key="command")
    args.command = command
    # The ledger names where it ran without this machine's paths.
    args.cwd = "this checkout" if Path(args.cwd).resolve() == config.REPO_ROOT else "another checkout"
    save_report("command", "commands", args, [], {"last": row}, table=table)
    if rc:
        raise SystemExit(f"{' '.join(command)} exited {rc}; see {log}")


if __name__ == "__main__":
    main()
