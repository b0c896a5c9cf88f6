"""Retire committed results that no current notebook writes, with a ledger entry that says so.

A result a notebook stops writing (a table the code no longer draws, the files of a
construction that was replaced) would otherwise stay in ``artifacts/<scale>/`` under the old
code's ledger entry: ``memsafe verify`` would then find results from two code versions, and a
reader would find a table no run of this code made. Deleting the file by hand breaks the
ledger instead (an output its entry lists is missing). Retiring does both honestly: one
``retire`` entry names every file with the sha256 it had and the reason, then the files go.
``memsafe verify`` reads a path whose latest entry retired it as one that must be absent.

    memsafe retire --scale cpu --record --reason "no QA learning curve at cpu" PATH...
    memsafe retire --scale cpu --stale      # list what the latest notebook run did not write
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig
from memsafe_lib.io import sha256_file
from memsafe_lib.ledger import append_entry, environment, fingerprint, read_ledger

RETIRE_KIND = "retire"
NOT_THE_RUN = (config.BENCH, config.GATES)
"""Folders measured or trained apart from the notebooks' run, each entry on its own code."""


@dataclass(frozen=True)
class Writer:
    """The latest ledger entry that wrote a path, or retired it (``digest`` None)."""

    digest: str | None
    entry: dict[str, Any]

    @property
    def code(self) -> str:
        return str(self.entry.get("fingerprint", {}).get("code", "?"))


def latest_writers(entries: Sequence[dict[str, Any]]) -> dict[str, Writer]:
    """artifact path (relative to ``artifacts/``) -> the latest entry that wrote or retired it."""
    latest: dict[str, Writer] = {}
    for e in entries:
        for path, digest in e.get("outputs", {}).items():
            latest[path] = Writer(digest, e)
        for path in e.get("retired", {}):
            latest[path] = Writer(None, e)
    return latest


def run_code(entries: Sequence[dict[str, Any]]) -> str | None:
    """Code fingerprint of the latest notebook execution in the ledger: the version of the run."""
    runs = [e for e in entries if str(e.get("kind", "")).startswith("notebook-run:")]
    return str(runs[-1]["fingerprint"]["code"]) if runs else None


def run_prefix(scale: ScaleConfig) -> str:
    """The run directory relative to ``artifacts/`` (``cpu``, or ``scratch/cpu`` when not
    recording): how the ledger names the run's files."""
    return scale.run_dir.relative_to(config.artifacts_dir()).as_posix()


def present_results(prefix: str, writers: dict[str, Writer]) -> Iterator[tuple[str, Writer]]:
    """(path, latest writer) of every result present under ``prefix`` that the notebooks' run
    wrote: ``bench/`` and ``gates/`` aside, retired paths aside."""
    for rel, writer in sorted(writers.items()):
        if not rel.startswith(f"{prefix}/") or writer.digest is None:
            continue
        if rel[len(prefix) + 1:].split("/")[0] in NOT_THE_RUN or not (config.artifacts_dir() / rel).exists():
            continue
        yield rel, writer


def stale_results(prefix: str, entries: Sequence[dict[str, Any]]) -> list[str]:
    """Present results under ``prefix`` last written by other code than the latest notebook
    execution: what a rerun on that code did not write again."""
    code = run_code(entries)
    if code is None:
        return []
    return [rel for rel, writer in present_results(prefix, latest_writers(entries)) if writer.code != code]


def retire(scale: ScaleConfig, paths: Sequence[str], reason: str) -> dict[str, Any]:
    """Record one ``retire`` entry for ``paths`` (relative to ``artifacts/``, each an output of
    an earlier entry of this scale's ledger), then delete them. A file already deleted (by hand,
    or by a clone's results brought in) is retired with the sha256 its entry recorded; a present
    file must still have it. All paths are checked before anything is written; a crash after
    the entry leaves files that verify names as present."""
    if not reason.strip():
        raise ValueError("retire: give the reason the files are no longer results (--reason)")
    if not paths:
        raise ValueError("retire: name at least one file")
    entries = read_ledger(scale)
    writers = latest_writers(entries)
    base, prefix = config.artifacts_dir(), run_prefix(scale)
    retired: dict[str, str] = {}
    for rel in paths:
        rel = Path(rel).as_posix()
        writer = writers.get(rel)
        if not rel.startswith(f"{prefix}/") or writer is None:
            raise ValueError(f"retire: {base / rel} is not an output of any entry in {scale.ledger_path}")
        if writer.digest is None:
            raise ValueError(f"retire: {base / rel} was already retired by an earlier entry")
        if (base / rel).is_file() and sha256_file(base / rel) != writer.digest:
            raise ValueError(f"retire: {base / rel} differs from what its ledger entry recorded; "
                             "an edited file is not a result to retire")
        retired[rel] = writer.digest
    settings = {"scale": scale.name, "reason": reason}
    entry = {
        "kind": RETIRE_KIND,
        "time_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "fingerprint": fingerprint([], settings, retired),
        "settings": settings,
        "raw_files": [],
        "outputs": {},
        "retired": retired,
        "metrics": {"files": len(retired)},
        "environment": environment(),
    }
    append_entry(scale.ledger_path, entry)
    for rel in retired:
        path = base / rel
        path.unlink(missing_ok=True)
        _remove_empty_parents(path.parent, scale.run_dir)
    return entry


def _remove_empty_parents(folder: Path, stop: Path) -> None:
    """Remove ``folder`` and its parents up to (not including) ``stop`` while they are empty
    (hidden caches count as content: a folder holding a ``.cache`` stays)."""
    while folder != stop and folder.is_relative_to(stop) and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent
