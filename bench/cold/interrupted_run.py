"""Cold minutes of a notebook whose cold run was killed midway and resumed from its caches.

When the machine running a cold `make reproduce` is recycled in the middle of a notebook (once
or several times: a long notebook on a slow CPU can span several machine leases),
`memsafe notebook NB --record` resumes it from the caches the killed run wrote (Stage A,
fitted models, generations), and the notebook's row in ``run_times.csv`` counts only the
resumed part. The cold run's log says when the notebook started and when it last finished a
step before each kill, so the cold time is the sum of the parts. The step under way at the
kill is not counted before it (the log's last line is where useful work is known to have
ended) and is counted again, whole, in the resumed part; the resumed part also pays for
reading the caches back, so the sum errs high by that, a minute or so.

The log undercounts a step that caches its progress as it goes: notebook 06 prints one line
per phase and stores every generation as it ends, and Stage A's encoding stores every batch,
so the generations or batches finished after the last line are read back, not redone, and
their minutes belong to the cold time. With ``--busy`` (the busy-core sampler's file that
``bench/cold/cold_run.sh`` writes beside the run) a killed part ends at the sampler's last line
before the next execution started, when the machine was last seen working, if that is later
than the log's last line. That end errs high by the uncached work under way at the kill
(a generation, a batch, or a Stage B fit), which the resumed part repeats; the row keeps the
log's minutes too (``minutes_before_kill_logged``), so the cold time lies between the two.

Records (notebook, started, last step before the last kill, kills, minutes before the kills,
minutes resumed, their sum) in ``artifacts/<scale>/bench/interrupted_runs.csv``, and the cold run's
time table, one row per notebook with the killed part added and a last row ``all``, in
``artifacts/<scale>/bench/cold_run.csv``:

    cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python interrupted_run.py --log COLD_LOG --notebook 02_training \
        [--busy CLONE/artifacts/scratch/cpu_busy.txt]
    cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python interrupted_run.py   # the table alone, no kill to add
    cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python interrupted_run.py --log COLD_LOG   # and the run's parts

A part's untimed warm-up can also do a step that a one-piece run pays inside a notebook of that
part: the Stage B grid's Stage A ranks units with the pretrained encoder's unit embeddings, which
notebook 01 computes and caches in a one-piece run, so a part that warms the grid up before 01
leaves 01's row without them. ``--warm-up-step NOTEBOOK=REGEX`` moves such a step's minutes back
to its notebook: the step ends at the first line inside an untimed warm-up that matches REGEX and
began at the line before it with a stamp (a step that logs no line of its own, like the unit
embeddings, is the gap between two lines). Rows in ``artifacts/<scale>/bench/warm_up_steps.csv``;
the cold time table adds them in ``minutes_from_warm_up``:

    cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python interrupted_run.py --log COLD_LOG \
        --warm-up-step "01_construction_audit=Stage A .*: fine-tune on .* side by side [.]{3}$"
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path

import pandas as pd

from memsafe_lib import config
from memsafe_lib.io import replace_row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: report.py, the shared tail
from report import bench_parser, save_report  # noqa: E402

START_LINE = r"^{name} start (\S+?)Z?( \(resumed run.*\))?$"  # cold_lib.sh's line before a notebook runs
STAMP = re.compile(r"\[memsafe (\d\d):(\d\d):(\d\d) ")
SAMPLE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z? ", re.MULTILINE)  # bench/cold/cpu_busy.py's lines


def last_sample(samples: str, after: dt.datetime, before: dt.datetime) -> dt.datetime | None:
    """The sampler's last timestamp inside (``after``, ``before``): when the machine running a
    killed execution was last seen, ``None`` when it sampled nothing then."""
    times = [dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.UTC) for m in SAMPLE.finditer(samples)]
    inside = [t for t in times if after < t < before]
    return max(inside) if inside else None


def _restored_unfinished(log: str, notebook: str, before: re.Match, this: re.Match) -> bool:
    """Whether the start ``this`` opens a new machine's part (bench/cold/cold_parts.py's
    "cold_parts restore:" line right before it) and the execution ``before`` it never finished:
    the part goes on from the fits that save-midway carried, a resumed run though unmarked
    (cold_run.sh's parts before the mark came from the restored logs)."""
    preceding = log[:this.start()].rstrip("\n").rsplit("\n", 1)[-1]
    finished = re.search(rf"notebook {re.escape(notebook)} at scale \S+: done in ", log[before.end():this.start()])
    return preceding.startswith("cold_parts restore:") and finished is None


def killed_parts(log: str, notebook: str, samples: str | None = None) -> list[tuple[dt.datetime, dt.datetime]]:
    """(start, end) of every killed execution of ``notebook`` in ``log``, in order: the cold
    run's "NB start <UTC>" line, or a later one marked "(resumed run ...)", then the last
    ``[memsafe HH:MM:SS`` stamp before the next execution of that notebook starts, or, given
    the busy-core sampler's ``samples``, its last line before then where that is later. The
    last execution is the one that finished (its minutes are the ``run_times.csv`` row)."""
    starts = list(re.finditer(START_LINE.format(name=re.escape(notebook)), log, flags=re.MULTILINE))
    if not starts:
        raise SystemExit(f"no '{notebook} start' line in the log")
    if len(starts) == 1:
        raise SystemExit(f"{notebook} has no resumed execution in the log: its run_times row is already cold")
    for before, this in zip(starts, starts[1:], strict=False):
        if "(resumed run" not in this.group(0) and not _restored_unfinished(log, notebook, before, this):
            raise SystemExit(f"{notebook} started again without a '(resumed run)' mark: "
                             "its minutes are not one cold run")
    parts = []
    for this, following in zip(starts, starts[1:], strict=False):
        begun = dt.datetime.fromisoformat(this.group(1)).replace(tzinfo=dt.UTC)
        last = begun
        for h, m, s in STAMP.findall(log[this.end():following.start()]):
            # The log carries the time of day only, and workers side by side print slightly out
            # of order: take the day that puts the stamp nearest the latest one so far.
            stamp = last.replace(hour=int(h), minute=int(m), second=int(s))
            stamp = min((stamp + dt.timedelta(days=d) for d in (-1, 0, 1)), key=lambda t: abs(t - last))
            last = max(last, stamp)
        if samples is not None:
            resumed = dt.datetime.fromisoformat(following.group(1)).replace(tzinfo=dt.UTC)
            seen = last_sample(samples, begun, resumed)
            last = max(last, seen) if seen is not None else last
        parts.append((begun, last))
    return parts


def minutes_before_kill(log: str, notebook: str) -> tuple[dt.datetime, dt.datetime]:
    """(start, last logged step) of the first, killed execution of ``notebook`` in ``log``."""
    return killed_parts(log, notebook)[0]


WARM_UP = re.compile(r"^untimed warm-up of .*?$(.*?)^warm-up done: ", re.MULTILINE | re.DOTALL)


def warm_up_step(log: str, pattern: str) -> tuple[str, float]:
    """(the line that ends it, minutes) of the first step inside an untimed warm-up of ``log``
    whose ending line matches ``pattern``: from the stamp of the stamped line before it."""
    for section in WARM_UP.finditer(log):
        lines = [line for line in section.group(1).splitlines() if STAMP.match(line)]
        for before, line in zip(lines, lines[1:], strict=False):
            if re.search(pattern, line[STAMP.match(line).end():]):
                (h0, m0, s0), (h1, m1, s1) = STAMP.match(before).groups(), STAMP.match(line).groups()
                seconds = (int(h1) - int(h0)) * 3600 + (int(m1) - int(m0)) * 60 + int(s1) - int(s0)
                return line, (seconds % 86400) / 60  # a step that spans midnight
    raise SystemExit(f"no line matching {pattern!r} after a stamped line inside an untimed warm-up of the log")


RUN_PART = re.compile(r"^cold run (?:of|resumed at) ", re.MULTILINE)  # cold_run.sh's / cold_resume.sh's first line
NOTEBOOK_START = re.compile(START_LINE.format(name=r"\S+"), re.MULTILINE)


def parts_of_run(log: str) -> int:
    """How many parts (machine leases) the cold run in ``log`` took: one per
    ``bench/cold/cold_run.sh`` or ``bench/cold/cold_resume.sh`` header line, and one per notebook
    start marked "(resumed run" that does not directly follow a header (a part whose header went
    to another stdout still resumed a notebook in this log)."""
    if not RUN_PART.search(log):
        raise SystemExit("the log has no 'cold run of' line: it is not bench/cold/cold_run.sh's log")
    events = sorted([(m.start(), "header") for m in RUN_PART.finditer(log)]
                    + [(m.start(), "resumed" if m.group(2) else "start") for m in NOTEBOOK_START.finditer(log)])
    parts, after_header = 0, False
    for _, kind in events:
        if kind == "header":
            parts, after_header = parts + 1, True
            continue
        if kind == "resumed" and not after_header:
            parts += 1
        after_header = False
    return parts


def cold_table(run_times: pd.DataFrame, interrupted: pd.DataFrame,
               warm_ups: pd.DataFrame | None = None, parts: int | None = None) -> pd.DataFrame:
    """Cold minutes per notebook: its ``run_times.csv`` row, plus the minutes before the kill
    where that row is a resumed execution (and the interruption is of the same code), plus the
    minutes of its steps that an untimed warm-up did (same code), then the sum. ``parts``: how
    many machine leases the whole run took (from its log), on the ``all`` row; a notebook's
    row counts its executions (one plus its kills)."""
    killed = interrupted.set_index("notebook")
    warmed = (warm_ups[warm_ups.code.astype(str).isin(set(run_times.code.astype(str)))]
              .groupby("notebook").minutes.sum() if warm_ups is not None and len(warm_ups) else pd.Series(dtype=float))
    rows = []
    for r in run_times.itertuples(index=False):
        part = killed.loc[r.notebook] if r.notebook in killed.index else None
        if part is not None and (part["code"] != r.code or float(part["minutes_resumed"]) != float(r.minutes)):
            raise SystemExit(f"{r.notebook}: its interruption was recorded for another execution "
                             f"(code {part['code']}, {part['minutes_resumed']} min resumed; run_times: "
                             f"code {r.code}, {r.minutes} min); rerun interrupted_run.py for it")
        before = 0.0 if part is None else float(part["minutes_before_kill"])
        moved = float(warmed.get(r.notebook, 0.0))
        executions = 1 if part is None else 1 + int(part.get("kills", 1))
        rows.append({"notebook": r.notebook, "minutes": round(float(r.minutes) + before + moved, 1),
                     "minutes_from_warm_up": round(moved, 1),
                     "interrupted": part is not None, "notebooks": 1, "parts": executions, "cpu": r.cpu,
                     "bf16_units": r.bf16_units, "code": r.code})
    table = pd.DataFrame(rows)
    total = {"notebook": "all", "minutes": round(table.minutes.sum(), 1),
             "minutes_from_warm_up": round(table.minutes_from_warm_up.sum(), 1),
             "interrupted": bool(table.interrupted.any()), "notebooks": len(table),
             "parts": parts if parts is not None else pd.NA, "cpu": "; ".join(sorted(set(table.cpu))),
             "bf16_units": bool(table.bf16_units.all()), "code": "; ".join(sorted(set(table.code)))}
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)


def record_interruption(args: argparse.Namespace, log: str, samples: str | None, times: pd.DataFrame,
                        run_times: Path) -> None:
    """Add ``args.notebook``'s killed parts to ``interrupted_runs.csv`` (one row per notebook)."""
    logged = killed_parts(log, args.notebook)
    parts = killed_parts(log, args.notebook, samples=samples) if samples is not None else logged
    if args.notebook not in times.index:
        raise SystemExit(f"{args.notebook} has no row in run_times.csv (adopt the resumed run first)")
    resumed = times.loc[args.notebook]
    before = sum((last - start).total_seconds() for start, last in parts) / 60
    before_logged = sum((last - start).total_seconds() for start, last in logged) / 60
    row = {"notebook": args.notebook, "started_utc": parts[0][0].isoformat(timespec="seconds"),
           "last_step_before_kill_utc": parts[-1][1].isoformat(timespec="seconds"),
           "kill_end_from": "busy-core sampler" if parts != logged else "log",
           "kills": len(parts), "minutes_before_kill": round(before, 1),
           "minutes_before_kill_logged": round(before_logged, 1), "minutes_resumed": float(resumed["minutes"]),
           "minutes_total": round(before + float(resumed["minutes"]), 1), "code": str(resumed["code"]),
           "cpu": str(resumed["cpu"]), "bf16_units": bool(resumed["bf16_units"])}  # numpy scalars are not JSON
    scale = config.scale_config(args.scale)
    table = replace_row(scale.output_dir(config.BENCH) / "interrupted_runs.csv", row, key="notebook")
    table = table[table.code.astype(str) == row["code"]]  # an earlier run's kills are not this run's
    save_report("interrupted-run", "interrupted_runs", args, [], {"last": row}, table=table, inputs=[run_times])


def record_warm_up_step(args: argparse.Namespace, log: str, times: pd.DataFrame, run_times: Path) -> None:
    """Add the step ``args.warm_up_step`` names (``NOTEBOOK=REGEX``) to ``warm_up_steps.csv``."""
    notebook, _, pattern = args.warm_up_step.partition("=")
    if not pattern:
        raise SystemExit(f"--warm-up-step wants NOTEBOOK=REGEX, not {args.warm_up_step!r}")
    if notebook not in times.index:
        raise SystemExit(f"{notebook} has no row in run_times.csv (adopt its run first)")
    line, minutes = warm_up_step(log, pattern)
    timed = times.loc[notebook]
    row = {"notebook": notebook, "ends_at_line": line.strip()[:200], "minutes": round(minutes, 1),
           "code": str(timed["code"]), "cpu": str(timed["cpu"]), "bf16_units": bool(timed["bf16_units"])}
    scale = config.scale_config(args.scale)
    table = replace_row(scale.output_dir(config.BENCH) / "warm_up_steps.csv", row, key="notebook")
    table = table[table.code.astype(str) == row["code"]]
    save_report("warm-up-step", "warm_up_steps", args, [], {"last": row}, table=table, inputs=[run_times])


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--log", help="the cold run's log (bench/cold/cold_run.sh's output); needed with --notebook; "
                        "given alone, the table's last row counts the run's parts (machine leases) from it")
    parser.add_argument("--notebook", help="the killed and resumed notebook to add; without it, only the "
                        "cold time table is rewritten (a run with no kill needs it too)")
    parser.add_argument("--busy", type=Path, help="the busy-core sampler's file (bench/cold/cpu_busy.py sample): "
                        "a killed part ends when the machine was last seen working, if after the log's last line")
    parser.add_argument("--warm-up-step", help="NOTEBOOK=REGEX: a step of NOTEBOOK that an untimed warm-up "
                        "did, ending at the first warm-up line matching REGEX; its minutes go to NOTEBOOK's row")
    args = parser.parse_args()
    scale = config.scale_config(args.scale)
    run_times = scale.run_dir / config.RUN_TIMES_FILE
    times = pd.read_csv(run_times).set_index("notebook")
    if (args.notebook or args.warm_up_step) and not args.log:
        parser.error("--notebook and --warm-up-step need --log, the cold run's log")
    log = Path(args.log).read_text(errors="replace").replace("\r", "\n") if args.log else ""
    samples = args.busy.read_text() if args.busy else None
    args.log = Path(args.log).name if args.log else None  # the ledger names files without this machine's paths
    args.busy = args.busy.name if args.busy else None
    if args.notebook:
        record_interruption(args, log, samples, times, run_times)
    if args.warm_up_step:
        record_warm_up_step(args, log, times, run_times)
    killed = scale.output_dir(config.BENCH) / "interrupted_runs.csv"
    warm_path = scale.output_dir(config.BENCH) / "warm_up_steps.csv"
    warm_ups = pd.read_csv(warm_path) if warm_path.is_file() else None
    table = pd.read_csv(killed) if killed.is_file() else pd.DataFrame(columns=["notebook", "code"])
    table = table[table.code.astype(str).isin(set(times.code.astype(str)))]  # kills of the timed code only
    cold = cold_table(times.reset_index(), table, warm_ups, parts=parts_of_run(log) if log else None)
    save_report("cold-run", "cold_run", args, [], {"minutes": float(cold.minutes.iloc[-1])}, table=cold,
                inputs=[run_times, *([killed] if killed.is_file() else []),
                        *([warm_path] if warm_ups is not None else [])])


if __name__ == "__main__":
    main()
