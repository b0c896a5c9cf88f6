"""Carry a cold run's finished notebooks from one machine to the next, through the repository.

A whole cpu reproduction is longer than the time a machine is held, and a new machine starts
from a fresh checkout of what was committed: the clone of a run in progress (its executed
notebooks, tables, ledger entries, run_times rows, log and busy-core samples) is gone with the
old one. ``save`` copies what the run's clone changed under ``artifacts/<scale>/`` (as
``memsafe_lib/reporting/adopt.py`` finds it: ``git status`` of the clone), the ledger lines and
``run_times.csv`` rows the checkout lacks, the log and the sampler's file into
``bench/cold/parts/<scale>/``, which is committed; the committed tree and its verdicts stay
those of the run being replaced, so ``memsafe verify`` keeps passing meanwhile. ``restore``
writes them into the fresh clone of the next part, before its notebooks run, so that the
clone holds every finished notebook and ``bench/cold/adopt_cold_run.py`` takes them all at the end:

    touch ../cold/artifacts/scratch/pause                       # the part stops before its next notebook
    bench/cold/cold_parts.py save ../cold --log ../cold.log          # once the log says "paused before"
    PARTS=1 bench/cold/cold_run.sh ../cold 01_construction_audit 03_ablations > ../cold.log 2>&1

on the next machine: ``PARTS=1`` restores them after the install, and the new log starts with
the parts' logs (``restore`` prints them).

A notebook longer than one machine's lease (notebook 02 at cpu: Stage A, then the concatenated
cross-encoder on every training memory at 512 tokens, three seeds a dataset) runs alone in its
part, and before the machine goes, ``save-midway`` carries its cached fits and its log so far
(nothing of its half-written tables):

    bench/cold/cold_parts.py save-midway ../cold --log ../cold.log     # while 02 runs; commit
    PARTS=1 WARM_EMBEDDINGS=1 bench/cold/cold_run.sh ../cold 02_training > ../cold.log 2>&1   # next machine

The next machine's 02 is marked resumed, loads every carried fit whose key it rebuilds (the
concatenated cross-encoder's: keyed by its start's fine-tuning settings, not its weights, so on
any machine of the same precision) and redoes the rest, Stage A included; interrupted_run.py adds
the first part's minutes, so the row counts what both machines spent, the redone Stage A too.
A plain ``save`` of the finished notebook drops the carried fits.

The next part starts with empty caches, as the first did; a notebook that reads an earlier
notebook's caches pays for them again (say so beside the minutes). Every saved notebook must
carry the code fingerprint of the checkout that restores it, or ``restore`` refuses: a part
on other code cannot join the run. ``drop`` removes the folder once the run is adopted.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from memsafe_lib import config
from memsafe_lib.io import atomic_open, read_csv, write_csv
from memsafe_lib.ledger import code_fingerprint
from memsafe_lib.reporting.adopt import changed_files, clone_run_times, merge_ledger_lines

MANIFEST = "manifest.json"
SAMPLES = Path("artifacts", "scratch", "cpu_busy.txt")
"""Where ``bench/cold/cold_lib.sh``'s busy-core sampler writes in a clone (it appends)."""


def parts_dir(checkout: Path, scale: str) -> Path:
    return checkout / "bench" / "cold" / "parts" / scale


def checkout_root(script: Path, library: Path) -> Path:
    """The checkout whose ``bench/cold/parts/`` this script reads and writes: its own repository.
    Refuses when the imported ``memsafe_lib`` is another tree's (a clone's venv runs the clone's
    library, whose fingerprint and folders are the clone's), rather than saving into the wrong one."""
    checkout, library = script.resolve().parents[2], library.resolve()  # bench/cold/cold_parts.py
    if checkout != library:
        raise ValueError(f"this script is {checkout}'s but memsafe_lib is imported from {library}: run it with "
                         f"{checkout}'s python (or PYTHONPATH={checkout})")
    return checkout


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as fh, atomic_open(target, "wb") as out:
        shutil.copyfileobj(fh, out)


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w") as fh:
        fh.write(text)


def running_notebook(log_text: str) -> str | None:
    """The notebook the log last started that has not finished, been paused before or ended
    since (bench/cold/cold_lib.sh's lines): its files in the clone are partial."""
    starts = list(re.finditer(r"^(\S+) start \S+", log_text, flags=re.M))
    if not starts:
        return None
    notebook, after = starts[-1].group(1), log_text[starts[-1].end():]
    finished = re.search(rf"notebook {re.escape(notebook)} at scale \S+: done in|^end |^paused before ", after,
                         flags=re.M)
    return None if finished else notebook


def portable(text: str, clone: Path) -> str:
    """A log as it is committed: the clone, the folder beside it (where data and caches
    usually sit), temporary files and the home folder named by placeholders."""
    for prefix, name in ((clone, "<clone>"), (clone.parent, "<beside the clone>"),
                         (Path(tempfile.gettempdir()), "<tmp>"), (Path.home(), "~")):
        text = text.replace(f"{prefix.resolve()}/", f"{name}/").replace(f"{prefix}/", f"{name}/")
    return text


def _cut_restored(log_text: str, restored: str) -> str:
    """The log without the earlier parts' logs that restore printed into it: their saved text,
    or, where that was re-saved since (placeholders for paths), the block of as many lines just
    before restore's summary line, which must start as a cold run's log does. A part saved from
    this same log (paused, saved, resumed) ends with its stamped 'paused before' line: what
    follows that line is the new part."""
    if not restored or restored in log_text:
        return log_text.replace(restored, "", 1)
    lines, n = log_text.splitlines(keepends=True), len(restored.splitlines())
    last = restored.splitlines(keepends=True)[-1]
    if last.startswith("paused before ") and last in lines:  # saved from this very log, which went on
        return "".join(lines[lines.index(last) + 1:])  # the line is stamped: it occurs once
    at = next((i for i, line in enumerate(lines) if line.startswith("cold_parts restore: ")), None)
    if at is None or at < n or not lines[at - n].startswith("cold run of "):
        raise ValueError("the log holds neither the saved parts' logs nor a block of theirs before "
                         "'cold_parts restore:'; cut them out by hand")
    return "".join(lines[:at - n] + lines[at:])


def own_log_and_samples(clone: Path, dest: Path, logs: list[dict], log_text: str) -> tuple[str, str]:
    """This part's own log (portable) and busy-core samples: each part keeps its own, so what
    restore put into this clone from the saved ``logs`` is cut out of both."""
    own_log = portable(_cut_restored(log_text, "".join((dest / p["log"]).read_text(encoding="utf-8") for p in logs)),
                       clone)
    samples = clone / SAMPLES
    sample_text = samples.read_text(encoding="utf-8") if samples.exists() else ""
    restored = "".join((dest / p["samples"]).read_text(encoding="utf-8") for p in logs)
    return own_log, sample_text[len(restored):] if sample_text.startswith(restored) else sample_text


def save(clone: Path, checkout: Path, scale: str, log: Path) -> dict:
    """Replace ``bench/cold/parts/<scale>/`` by the clone's finished notebooks (every part it
    holds, restored ones included) and add its log and samples as the newest part. Refuses while
    a notebook runs (or was killed midway): pause the part between notebooks first."""
    dest = parts_dir(checkout, scale)
    running = running_notebook(log.read_text(encoding="utf-8"))
    if running:
        raise ValueError(f"{log}: {running} is still running (or was killed midway) in {clone}, and its files "
                         f"there are partial; touch {clone / 'artifacts/scratch/pause'} and save once the log "
                         "says it paused")
    old = json.loads((dest / MANIFEST).read_text()) if (dest / MANIFEST).exists() else {"logs": []}
    rows = clone_run_times(clone, checkout, scale)
    if rows.empty:
        raise ValueError(f"{clone / 'artifacts' / scale / config.RUN_TIMES_FILE}: no finished notebook that "
                         f"{checkout} lacks; nothing to save")
    saved = {r["notebook"] for r in old.get("run_times", [])}
    if saved - set(rows["notebook"]):
        lacking = saved - set(rows["notebook"])
        raise ValueError(f"{clone}: lacks the saved {', '.join(sorted(lacking))}; restore the saved parts into it "
                         "before its notebooks run (PARTS=1 bench/cold/cold_run.sh)")
    if not set(rows["notebook"]) - saved:
        raise ValueError(f"{clone}: no notebook finished since the last save ({', '.join(sorted(saved))})")
    changed, deleted = changed_files(clone, scale)
    ledger = Path("artifacts", scale, config.LEDGER_FILE)
    known = set(_lines(checkout / ledger))
    new_lines = [line for line in _lines(clone / ledger) if line not in known]
    logs = list(old["logs"])
    log_text, sample_text = own_log_and_samples(clone, dest, logs, log.read_text(encoding="utf-8"))
    staged = dest.with_name(dest.name + ".new")
    shutil.rmtree(staged, ignore_errors=True)
    for path in changed:
        _copy(clone / path, staged / "files" / path)
    for p in logs:
        _copy(dest / p["log"], staged / p["log"])
        _copy(dest / p["samples"], staged / p["samples"])
    n = len(logs) + 1
    part = {"log": f"part-{n}.log", "samples": f"part-{n}.busy", "notebooks": sorted(set(rows["notebook"]) - saved)}
    _write_text(staged / part["log"], log_text)
    _write_text(staged / part["samples"], sample_text)
    manifest = {"scale": scale, "code": sorted(set(rows["code"].astype(str))), "changed": changed,
                "deleted": deleted, "ledger_lines": new_lines, "run_times": rows.to_dict("records"),
                "logs": [*logs, part]}
    _write_text(staged / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staged.rename(dest)
    return manifest


def fit_caches(clone: Path, scale: str) -> list[str]:
    """The clone's cached (model, seed) fits (``artifacts/<scale>/evaluate/**/.cache/*.pkl``,
    :func:`memsafe_lib.evaluation.runs.fit_and_predict`'s), relative to its root: each holds one
    fit's predictions under a key of the code, precision, data and what the model read, so a
    resumed notebook on another machine reuses exactly those whose inputs it rebuilds alike."""
    root = clone / "artifacts" / scale / config.EVALUATE
    return sorted(p.relative_to(clone).as_posix() for p in root.glob("**/.cache/*.pkl"))


def save_midway(clone: Path, checkout: Path, scale: str, log: Path, code: str) -> dict:
    """Carry a notebook that cannot finish on this machine: add the clone's cached fits and its
    log so far (a part with no finished notebook) to ``bench/cold/parts/<scale>/``. The next
    machine restores them; its run of the notebook is marked resumed, reuses every carried fit
    whose key it rebuilds (a fit that reads no Stage A weights, such as the concatenated
    cross-encoder's, keyed by its start's fine-tuning settings, on any machine of the same
    precision; the set models' fits where Stage A's weights come out the same) and redoes the
    rest, and bench/cold/interrupted_run.py adds this part's minutes to its row. Nothing of the
    running notebook's partial tables is carried, so the long notebook must run alone in its
    part: every notebook the clone finished must be saved already (:func:`save`)."""
    dest = parts_dir(checkout, scale)
    log_text = log.read_text(encoding="utf-8")
    running = running_notebook(log_text)
    if running is None:
        raise ValueError(f"{log}: no notebook is running in {clone}; save finished notebooks with 'save'")
    old = (json.loads((dest / MANIFEST).read_text()) if (dest / MANIFEST).exists() else
           {"scale": scale, "code": [code[:12]], "changed": [], "deleted": [], "ledger_lines": [], "run_times": [],
            "logs": []})
    if old["code"] != [code[:12]]:
        raise ValueError(f"{dest / MANIFEST}: the saved parts ran on code {', '.join(old['code'])}, this checkout's "
                         f"is {code[:12]}; a part on other code cannot join the run")
    unsaved = set(clone_run_times(clone, checkout, scale)["notebook"]) - {r["notebook"] for r in old["run_times"]}
    if unsaved:
        raise ValueError(f"{clone}: {', '.join(sorted(unsaved))} finished there but is not saved, and only "
                         f"{running}'s fits would be; run a notebook that needs more than one machine alone in its "
                         "part (bench/cold/cold_run.sh CLONE NOTEBOOK)")
    fits = fit_caches(clone, scale)
    if not fits:
        raise ValueError(f"{clone}: {running} has no finished fit yet; nothing to carry")
    staged = dest.with_name(dest.name + ".new")
    shutil.rmtree(staged, ignore_errors=True)
    if dest.exists():
        shutil.copytree(dest, staged)
    for path in fits:
        if not (staged / "files" / path).exists():  # content-keyed: a saved one is the same fit
            _copy(clone / path, staged / "files" / path)
    logs = list(old["logs"])
    own_log, sample_text = own_log_and_samples(clone, dest, logs, log_text)
    n = len(logs) + 1
    part = {"log": f"part-{n}.log", "samples": f"part-{n}.busy", "notebooks": [], "midway": running}
    _write_text(staged / part["log"], own_log)
    _write_text(staged / part["samples"], sample_text)
    manifest = {**old, "fits": sorted(set(old.get("fits", [])) | set(fits)), "logs": [*logs, part]}
    _write_text(staged / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staged.rename(dest)
    return manifest


def restore(checkout: Path, clone: Path, scale: str, code: str) -> tuple[dict, str]:
    """Write the saved parts into a fresh clone of ``checkout`` (files, ledger lines, run_times
    rows, the parts' busy-core samples into the clone's sampler file) and return the manifest
    and the parts' logs, concatenated, for the new part's log to start with."""
    dest = parts_dir(checkout, scale)
    if not (dest / MANIFEST).exists():
        raise FileNotFoundError(f"{dest / MANIFEST}: no saved part to restore")
    manifest = json.loads((dest / MANIFEST).read_text())
    if manifest["code"] != [code[:12]]:
        raise ValueError(f"{dest / MANIFEST}: the saved notebooks ran on code {', '.join(manifest['code'])}, "
                         f"this checkout's is {code[:12]}; a part on other code cannot join the run")
    for path in [*manifest["changed"], *manifest.get("fits", [])]:  # fits: a notebook saved midway
        _copy(dest / "files" / path, clone / path)
    for path in manifest["deleted"]:
        (clone / path).unlink(missing_ok=True)
    ledger = clone / "artifacts" / scale / config.LEDGER_FILE
    merged = merge_ledger_lines(_lines(ledger), manifest["ledger_lines"])
    _write_text(ledger, "".join(line + "\n" for line in merged))
    times = clone / "artifacts" / scale / config.RUN_TIMES_FILE
    if manifest["run_times"]:  # none when the only part is a notebook saved midway
        rows = pd.DataFrame(manifest["run_times"])
        old = read_csv(times) if times.exists() else rows.iloc[:0]
        write_csv(times, pd.concat([old[~old["notebook"].isin(rows["notebook"])], rows],
                                   ignore_index=True).sort_values("notebook"))
    _write_text(clone / SAMPLES, "".join((dest / p["samples"]).read_text(encoding="utf-8")
                                         for p in manifest["logs"]))
    return manifest, "".join((dest / p["log"]).read_text(encoding="utf-8") for p in manifest["logs"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("save", "save-midway", "restore", "drop"))
    parser.add_argument("clone", type=Path, nargs="?", help="the run's clone (not for drop)")
    parser.add_argument("--log", type=Path, help="save: the run's log (restore prints the saved parts' logs)")
    parser.add_argument("--scale", default="cpu")
    args = parser.parse_args()
    try:
        checkout = checkout_root(Path(__file__), config.REPO_ROOT)
        if args.action == "drop":
            shutil.rmtree(parts_dir(checkout, args.scale), ignore_errors=True)
            print(f"removed {parts_dir(checkout, args.scale)}")
            return 0
        saving = args.action in ("save", "save-midway")
        if args.clone is None or (saving and args.log is None):
            parser.error(f"{args.action} needs CLONE{' and --log' if saving else ''}")
        if args.action == "save":
            done = save(args.clone.resolve(), checkout, args.scale, args.log)
        elif args.action == "save-midway":
            done = save_midway(args.clone.resolve(), checkout, args.scale, args.log, code_fingerprint())
            print(f"cold_parts save-midway: {done['logs'][-1]['midway']} so far, {len(done['fits'])} cached fits, "
                  f"{len(done['logs'])} logs")
            return 0
        else:
            done, logs = restore(checkout, args.clone.resolve(), args.scale, code_fingerprint())
            sys.stdout.write(logs)
    except (ValueError, FileNotFoundError) as error:
        print(f"cold_parts: {error}", file=sys.stderr)
        return 2
    print(f"cold_parts {args.action}: {', '.join(r['notebook'] for r in done['run_times'])} "
          f"({len(done['changed'])} files, {len(done['ledger_lines'])} ledger lines, {len(done['logs'])} logs)",
          file=sys.stderr if args.action == "restore" else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
