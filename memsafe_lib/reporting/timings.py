"""Where a run's time goes: minutes per notebook and per heavy step.

Read from what the runs already leave behind, so no run has to be repeated to profile it:
each executed notebook's progress lines (:func:`memsafe_lib.progress.step` writes
``<what>: done in <t>``; Stage A writes ``... <n> encoded in <t>``) and ``run_times.csv``
(the notebook's wall time and thread counts). Steps are classed by what they do; a step that
ran inside another logged step is counted once, under the outer one. ``other`` is the
notebook's wall time minus its classed steps (data loading, construction, tables, figures).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

LINE = re.compile(r"\[memsafe (?P<clock>\d\d:\d\d:\d\d) \+[^\]]*\] (?P<message>.*)$")
DONE = re.compile(r"^(?P<what>.*): done in (?P<value>[\d.]+) (?P<unit>s|min|h)$")
ENCODED = re.compile(r"^(?P<what>Stage A .*) encoded in (?P<value>[\d.]+) (?P<unit>s|min|h)$")
UNIT_SECONDS = {"s": 1.0, "min": 60.0, "h": 3600.0}

KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("stage_a_finetune", re.compile(r"^Stage A .*: fine-tune on")),
    ("stage_a_encode", re.compile(r"^Stage A .*pairs requested")),
    ("stage_b_grid", re.compile(r"^Stage B grid: \d+ points")),
    ("stage_b_fits", re.compile(r"(: | )(memsafe\w*|mean_pool) seed \d+(: fit and predict)?$"
                                r"|Stage B fits side by side$"
                                r"|fits side by side \(Stage B[^)]*\)$")),
    ("reader_and_judges", re.compile(r"^reader |judge ")),
    ("other_estimators", re.compile(r"seed \d+: fit and predict$|^transfer |fits side by side \(")),
)
"""(column, what a step's text matches); the first match wins. A worker batch that mixes Stage B
fits with other seeded fits (the concatenated cross-encoder's, LexSet's; the message names
them, e.g. "fits side by side (Stage B, LexSet)") counts as Stage B fits: its wall time cannot
be split, and Stage B fits are most of it."""
STEP_COLUMNS = tuple(kind for kind, _ in KINDS)


@dataclass(frozen=True)
class Step:
    what: str
    kind: str | None
    end: float
    """Seconds since the first progress line of the notebook (the clock is read modulo a day)."""
    seconds: float

    @property
    def start(self) -> float:
        return self.end - self.seconds


def classify(what: str) -> str | None:
    return next((kind for kind, pattern in KINDS if pattern.search(what)), None)


def progress_lines(notebook: Path) -> list[str]:
    """The progress lines of an executed notebook, in order: from its log beside it
    (``<name>.log``, where the runner moves stderr) and from any stream outputs it still holds
    (notebooks executed before the log existed)."""
    cells = json.loads(notebook.read_text(encoding="utf-8")).get("cells", [])
    log = notebook.with_suffix(".log")
    lines: list[str] = log.read_text(encoding="utf-8").splitlines() if log.is_file() else []
    for cell in cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                text = output.get("text", "")
                lines += ("".join(text) if isinstance(text, list) else text).splitlines()
    return [line for line in lines if LINE.search(line)]


def parse_steps(lines: Iterable[str]) -> list[Step]:
    """Every finished step, with its end time on a clock that keeps counting past midnight."""
    steps, day, last, origin = [], 0.0, None, None
    for line in lines:
        m = LINE.search(line)
        if m is None:
            continue
        h, mi, s = (int(x) for x in m["clock"].split(":"))
        clock = h * 3600 + mi * 60 + s + day
        if last is not None and clock < last - 1:  # past midnight
            day += 86400
            clock += 86400
        last = clock
        origin = clock if origin is None else origin
        done = DONE.match(m["message"]) or ENCODED.match(m["message"])
        if done:
            seconds = float(done["value"]) * UNIT_SECONDS[done["unit"]]
            steps.append(Step(done["what"], classify(done["what"]), clock - origin, seconds))
    return steps


def outermost(steps: list[Step], tolerance: float = 2.0) -> list[Step]:
    """Classed steps not inside another classed step (times are logged to the second)."""
    classed = [s for s in steps if s.kind is not None]
    return [s for s in classed if not any(o is not s and o.seconds > s.seconds and o.start - tolerance <= s.start
                                          and s.end <= o.end + tolerance for o in classed)]


def notebook_profile(notebook: Path, minutes: float) -> dict[str, float]:
    """Minutes per step kind and ``other`` for one executed notebook of ``minutes`` wall time."""
    spent = dict.fromkeys(STEP_COLUMNS, 0.0)
    for s in outermost(parse_steps(progress_lines(notebook))):
        spent[s.kind] += s.seconds / 60  # type: ignore[index]
    row = {k: round(v, 1) for k, v in spent.items()}
    row["other"] = round(max(0.0, minutes - sum(spent.values())), 1)
    return row


def time_table(run_dir: Path) -> pd.DataFrame:
    """One row per notebook of ``run_times.csv`` under ``run_dir`` (minutes, threads, steps, the
    CPU and whether it has bf16 units) and a total row (its CPU "mixed" when the notebooks ran
    on more than one)."""
    times = pd.read_csv(run_dir / "run_times.csv")
    for column, unknown in (("cpu", ""), ("bf16_units", None)):  # rows from before they were recorded
        times[column] = times[column].astype(object).where(times[column].notna(), unknown) \
            if column in times else unknown
    rows = []
    for t in times.itertuples(index=False):
        notebook = run_dir / t.notebook / f"{t.notebook}.ipynb"
        if not notebook.is_file():
            raise FileNotFoundError(f"{run_dir / 'run_times.csv'}: notebook {t.notebook} has a time but no "
                                    f"executed notebook at {notebook}")
        rows.append({"notebook": t.notebook, "minutes": float(t.minutes), "torch_threads": int(t.torch_threads),
                     "cpu": t.cpu, "bf16_units": t.bf16_units, **notebook_profile(notebook, float(t.minutes))})
    table = pd.DataFrame(rows)
    classes = {(c, b) for c, b in zip(table.cpu, table.bf16_units, strict=True)}
    (cpu, bf16), mixed = (next(iter(classes)), False) if len(classes) == 1 else (("mixed", None), True)
    total = {"notebook": "total", "minutes": round(table.minutes.sum(), 1), "torch_threads": None,
             "cpu": cpu, "bf16_units": None if mixed else bf16,
             **{c: round(table[c].sum(), 1) for c in (*STEP_COLUMNS, "other")}}
    return pd.concat([table, pd.DataFrame([total])], ignore_index=True)


COMMAND_HISTORY_COLUMNS = ["finished_utc", "command", "minutes", "exit_code", "cpu", "commit", "code"]


def command_history(entries: Iterable[dict]) -> pd.DataFrame:
    """Every whole-command timing in a ledger (``bench:command`` entries), oldest first.

    ``commands.csv`` keeps only the latest row per command; the ledger keeps every run, so
    this table shows how a command's time moved with the code and the machine (``cpu``: empty
    where the ledger predates it). ``commit``: the timed checkout's git commit (empty before
    ``bench/time_command.py`` recorded it); ``code``: the first 12 hex of the code fingerprint
    of the checkout that *recorded* the row, which is not the timed one when that was a clone
    of other code."""
    rows = []
    for entry in entries:
        if entry.get("kind") != "bench:command":
            continue
        last = entry["metrics"]["last"]
        rows.append({"finished_utc": last["finished_utc"][:16].replace("T", " "), "command": last["command"],
                     "minutes": float(last["minutes"]), "exit_code": int(last["exit_code"]),
                     "cpu": entry.get("environment", {}).get("cpu") or "", "commit": last.get("commit", ""),
                     "code": entry["fingerprint"]["code"][:12]})
    return pd.DataFrame(rows, columns=COMMAND_HISTORY_COLUMNS).sort_values("finished_utc", kind="stable",
                                                                          ignore_index=True)


ENCODE_BY_CPU_COLUMNS = ("cpu", "bf16", "pairs_per_s", "useful_tokens_per_s", "matmul_gflops", "slowdown",
                         "encode_minutes")


def encode_by_cpu(reference: dict, others: Iterable[dict], reference_encode_minutes: float) -> pd.DataFrame:
    """Stage A encoding throughput per CPU (``bench/bench_encoder.py`` reports on the same
    pairs) and what the cpu run's encoding would take on each: ``reference`` is the machine
    that made the committed run, whose encoding took ``reference_encode_minutes``;
    ``slowdown`` = its pairs/s over the row's. Encoding is the one heavy step whose time
    scales with throughput alone (a fixed set of pairs, no early stop), so the scaled minutes
    are an estimate of that step only, not of a whole run."""
    rows = []
    for report in (reference, *others):
        if report["pairs_unique"] != reference["pairs_unique"] or report["dataset"] != reference["dataset"]:
            raise ValueError(f"encoder reports on {report['cpu']} and {reference['cpu']} encode different pairs "
                             f"({report['dataset']}: {report['pairs_unique']} vs {reference['pairs_unique']}); "
                             "rerun bench/bench_encoder.py with the same --dataset and --base-queries")
        slowdown = reference["pairs_per_s"] / report["pairs_per_s"]
        rows.append({"cpu": report["cpu"], "bf16": bool(report["bf16"]), "pairs_per_s": report["pairs_per_s"],
                     "useful_tokens_per_s": report["useful_tokens_per_s"], "matmul_gflops": report["matmul_gflops"],
                     "slowdown": slowdown, "encode_minutes": reference_encode_minutes * slowdown})
    return pd.DataFrame(rows, columns=ENCODE_BY_CPU_COLUMNS)
