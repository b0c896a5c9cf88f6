"""Bring a cold-run clone's results into this checkout.

A whole cpu reproduction is timed in parts, each in a fresh clone with empty caches
(``bench/cold/cold_run.sh``), because it does not fit in one working session. Each part leaves its
executed notebooks, tables, ``run_times.csv`` rows and ledger entries in its clone; this module
moves them into the checkout that commits them, and refuses when the clone's runs came from
other code than the checkout's: the time table is worth something only if every part ran on
one code fingerprint, the one the committed artifacts claim.

Files the clone changed or added under ``artifacts/<scale>/`` (``git status`` of the clone)
are copied, files it deleted are deleted; the ledger and ``run_times.csv`` are merged, not
copied, because the checkout may have recorded entries (a timed command, a benchmark) since
the clone was made.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from memsafe_lib import config
from memsafe_lib.io import atomic_open, read_csv, write_csv

MERGED = (config.LEDGER_FILE, config.RUN_TIMES_FILE)
"""Files under ``artifacts/<scale>/`` merged entry by entry instead of copied."""


@dataclass(frozen=True)
class Adoption:
    copied: tuple[str, ...]
    deleted: tuple[str, ...]
    ledger_entries: int
    """Ledger lines of the clone that the checkout did not have."""
    notebooks: tuple[str, ...]
    """Notebooks whose ``run_times.csv`` row came from the clone."""


def merge_ledger_lines(ours: list[str], theirs: list[str]) -> list[str]:
    """Our lines, then the clone's lines we lack, in the clone's order (entries are
    append-only and carry their own time, so a line either exists in both or is new)."""
    known = set(ours)
    return [*ours, *(line for line in theirs if line not in known)]


def changed_files(clone: Path, scale: str) -> tuple[list[str], list[str]]:
    """(changed or new, deleted) paths under ``artifacts/<scale>/`` of the clone, relative to
    its root, from ``git status`` (ignored caches are not listed)."""
    status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain=v1", "-z", "-uall", "--",
                             f"artifacts/{scale}"], check=True, capture_output=True, text=True).stdout
    changed: list[str] = []
    deleted: list[str] = []
    for entry in filter(None, status.split("\0")):
        code, path = entry[:2], entry[3:]
        if Path(path).name in MERGED and Path(path).parent == Path("artifacts", scale):
            continue
        (deleted if "D" in code else changed).append(path)
    return sorted(changed), sorted(deleted)


def clone_run_times(clone: Path, checkout: Path, scale: str) -> pd.DataFrame:
    """The clone's ``run_times.csv`` rows that differ from the checkout's: the notebooks it ran."""
    theirs = read_csv(clone / "artifacts" / scale / config.RUN_TIMES_FILE)
    ours_path = checkout / "artifacts" / scale / config.RUN_TIMES_FILE
    if not ours_path.exists():
        return theirs
    ours = read_csv(ours_path)
    merged = theirs.merge(ours, how="left", indicator=True)
    return theirs[(merged["_merge"] == "left_only").to_numpy()]


def adopt(clone: Path, checkout: Path, scale: str, code: str) -> Adoption:
    """Copy and merge the clone's results into ``checkout``; ``code`` is the checkout's code
    fingerprint (its first 12 characters suffice), which every adopted notebook row must carry."""
    new_rows = clone_run_times(clone, checkout, scale)
    if new_rows.empty:
        raise ValueError(f"{clone / 'artifacts' / scale / config.RUN_TIMES_FILE}: no notebook run that "
                         f"{checkout} lacks; nothing to adopt")
    foreign = new_rows[new_rows["code"].astype(str) != code[:12]]
    if not foreign.empty:
        rows = ", ".join(f"{r.notebook} (code {r.code})" for r in foreign.itertuples())
        raise ValueError(f"{clone / 'artifacts' / scale / config.RUN_TIMES_FILE}: {rows} ran on other code "
                         f"than this checkout's {code[:12]}; a timed part must run on the code it is committed with")
    changed, deleted = changed_files(clone, scale)
    for path in changed:
        target = checkout / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(clone / path, "rb") as source, atomic_open(target, "wb") as fh:
            shutil.copyfileobj(source, fh)
    for path in deleted:
        (checkout / path).unlink(missing_ok=True)
    ledger = Path("artifacts", scale, config.LEDGER_FILE)
    ours = _lines(checkout / ledger)
    merged = merge_ledger_lines(ours, _lines(clone / ledger))
    with atomic_open(checkout / ledger, "w") as fh:
        fh.writelines(line + "\n" for line in merged)
    times = checkout / "artifacts" / scale / config.RUN_TIMES_FILE
    old = read_csv(times) if times.exists() else new_rows.iloc[:0]
    table = pd.concat([old[~old["notebook"].isin(new_rows["notebook"])], new_rows], ignore_index=True)
    write_csv(times, table.sort_values("notebook"))
    return Adoption(copied=tuple(changed), deleted=tuple(deleted), ledger_entries=len(merged) - len(ours),
                    notebooks=tuple(new_rows["notebook"]))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []
