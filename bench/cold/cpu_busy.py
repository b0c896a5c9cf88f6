"""How many cores a cold run kept busy, per notebook: where one core sat idle.

A 2-core cold run is only as fast as its busiest phases allow; a phase that runs on one
thread leaves half the machine idle, and the per-step time table cannot show it. This script
samples the whole machine's busy cores from ``/proc/stat`` (``sample``, started beside the
run by ``bench/cold/cold_run.sh``; one appended line per interval, so a killed run keeps what it
sampled) and then splits the samples by the cold run's "NB start" lines (``summarize``):

    .venv/bin/python bench/cold/cpu_busy.py sample --out CLONE/cpu_busy.txt --every 10 &
    cd bench/cold && MEMSAFE_RECORD=1 ../../.venv/bin/python cpu_busy.py summarize \
        --samples CLONE/cpu_busy.txt --log COLD_LOG

writes ``artifacts/<scale>/bench/cold_run_busy.csv``: per notebook, the sampled minutes, the
mean busy cores, the minutes with fewer than ``--idle-below`` cores busy, and the core-minutes
left idle. Samples taken outside any notebook (installing, between a kill and its resumed
run) are not counted; a gap longer than three intervals between samples is not counted either.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

START = re.compile(r"^(\S+) start (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z?", re.MULTILINE)
END = re.compile(r"^end (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z?", re.MULTILINE)


def cpu_times(stat: str) -> tuple[int, int]:
    """(busy, total) jiffies of the machine from ``/proc/stat``'s first line; iowait counts as idle."""
    fields = [int(x) for x in stat.splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])  # guest time is already inside user
    return total - idle, total


def busy_cores(before: tuple[int, int], after: tuple[int, int], cores: int) -> float:
    """Cores busy on average between two ``cpu_times`` readings."""
    d_total = after[1] - before[1]
    return 0.0 if d_total <= 0 else cores * (after[0] - before[0]) / d_total


def sample(out: Path, every: float) -> None:
    """Append "UTC busy_cores" every ``every`` seconds until killed."""
    cores = os.cpu_count() or 1
    last = cpu_times(Path("/proc/stat").read_text())
    while True:
        time.sleep(every)
        now = cpu_times(Path("/proc/stat").read_text())
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with open(out, "a") as fh:
            fh.write(f"{stamp} {busy_cores(last, now, cores):.3f}\n")
        last = now


def read_samples(lines: Iterable[str]) -> list[tuple[dt.datetime, float]]:
    """The sampler's lines as (UTC end of interval, busy cores); a torn last line is skipped."""
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            out.append((dt.datetime.fromisoformat(parts[0].rstrip("Z")).replace(tzinfo=dt.UTC), float(parts[1])))
        except ValueError:
            continue
    return out


def notebook_spans(log: str) -> list[tuple[str, dt.datetime, dt.datetime | None]]:
    """(notebook, start, end) of each execution in a cold run's log: it ends where the next one
    starts or at the "end" line (None: still running)."""
    marks = [(m.start(), m.group(1), m.group(2)) for m in START.finditer(log)]
    marks += [(m.start(), None, m.group(1)) for m in END.finditer(log)]
    marks.sort()
    spans = []
    for (_, name, start), (_, _, nxt) in zip(marks, [*marks[1:], (None, None, None)], strict=True):
        if name is None:
            continue
        when = dt.datetime.fromisoformat(start).replace(tzinfo=dt.UTC)
        spans.append((name, when, None if nxt is None else dt.datetime.fromisoformat(nxt).replace(tzinfo=dt.UTC)))
    return spans


def per_notebook(samples: Sequence[tuple[dt.datetime, float]],
                 spans: Sequence[tuple[str, dt.datetime, dt.datetime | None]],
                 cores: int, every: float, idle_below: float) -> pd.DataFrame:
    """One row per notebook (its executions together), then ``all``: each sample's interval is
    credited to the notebook whose span holds its end."""
    rows: dict[str, dict[str, float]] = {}
    for (t0, _), (t1, busy) in zip(samples, samples[1:], strict=False):
        seconds = (t1 - t0).total_seconds()
        if seconds <= 0 or seconds > 3 * every:
            continue
        name = next((n for n, s, e in spans if s < t1 and (e is None or t1 <= e)), None)
        if name is None:
            continue
        r = rows.setdefault(name, {"minutes": 0.0, "busy_core_minutes": 0.0, "minutes_below": 0.0})
        r["minutes"] += seconds / 60
        r["busy_core_minutes"] += busy * seconds / 60
        if busy < idle_below:
            r["minutes_below"] += seconds / 60
    order = list(dict.fromkeys(n for n, _, _ in spans))
    table = pd.DataFrame([{"notebook": n, **rows[n]} for n in order if n in rows])
    if table.empty:
        raise SystemExit("no samples fall inside any notebook's span of the log")
    total = {"notebook": "all", **table.drop(columns="notebook").sum().to_dict()}
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    table["mean_busy_cores"] = (table.busy_core_minutes / table.minutes).round(2)
    table["idle_core_minutes"] = (cores * table.minutes - table.busy_core_minutes).round(1)
    table[f"minutes_below_{idle_below:g}_cores"] = table.pop("minutes_below").round(1)
    table["minutes"] = table.minutes.round(1)
    table["cores"] = cores
    return table.drop(columns="busy_core_minutes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sample", help="append busy cores to --out every --every seconds until killed")
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--every", type=float, default=10.0)
    m = sub.add_parser("summarize", help="busy cores per notebook of a cold run")
    m.add_argument("--samples", type=Path, required=True)
    m.add_argument("--log", type=Path, required=True, help="the cold run's log (bench/cold/cold_run.sh's output)")
    m.add_argument("--every", type=float, default=10.0, help="the sampler's interval")
    m.add_argument("--idle-below", type=float, default=1.5, help="busy cores under which a core counts as idle")
    m.add_argument("--scale", default="cpu")
    args = parser.parse_args()
    if args.command == "sample":
        sample(args.out, args.every)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: report.py, the shared tail
    from report import save_report

    from memsafe_lib import precision
    from memsafe_lib.ledger import cpu_model
    table = per_notebook(read_samples(args.samples.read_text().splitlines()),
                         notebook_spans(args.log.read_text(errors="replace")),
                         os.cpu_count() or 1, args.every, args.idle_below)
    table["cpu"], table["bf16_units"] = cpu_model(), precision.bf16_native("cpu")
    args.samples, args.log = args.samples.name, args.log.name  # the ledger names them without this machine's paths
    total = table.set_index("notebook").loc["all"]
    save_report("cold-run-busy", "cold_run_busy", args, [],
                {"minutes": float(total.minutes), "mean_busy_cores": float(total.mean_busy_cores),
                 "idle_core_minutes": float(total.idle_core_minutes)}, table=table)


if __name__ == "__main__":
    sys.exit(main())
