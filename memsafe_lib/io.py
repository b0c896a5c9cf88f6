"""Atomic writes (text, JSON, CSV), CSV reading and content hashes.

Every output is written to a temporary file in the same directory and renamed into
place, so an interrupted run never leaves a half-written file where a finished one
is expected.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from io import BytesIO
from pathlib import Path
from typing import IO, Any

import pandas as pd


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def canonical_json(obj: Any) -> str:
    """Key-sorted, compact JSON: equal content gives equal text (used for hashing)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path``; rename it over ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give outputs the usual permissions
    binary = "b" in mode
    try:
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Write a folder as ``<target>.partial-<pid>`` and rename it to ``target`` only on success:
    a killed write leaves a partial folder (replaced by the next try), never a half folder under
    the final name. If another process finished ``target`` first, its folder is kept."""
    import shutil  # lazy: only folder writers need it

    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    try:
        partial.rename(target)
    except OSError:
        if not target.is_dir():
            raise
        shutil.rmtree(partial)  # another process made it first: use its folder


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_text(path: str | Path, text: str) -> Path:
    with atomic_open(path, "w") as fh:
        fh.write(text)
    return Path(path)


def write_json(path: str | Path, obj: Any) -> Path:
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> Path:
    with atomic_open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    return Path(path)


def open_maybe_gzip(path: str | Path) -> IO[bytes]:
    """Binary handle on ``path``, transparently gunzipping ``*.gz`` files."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def write_csv(path: Path, frame: pd.DataFrame, float_format: str | None = "%.10g") -> Path:
    """Atomic CSV; ``.csv.gz`` is gzipped with a fixed mtime so equal data give equal bytes.
    Ten significant digits keep score ties as they are; ``float_format=None`` writes pandas'
    shortest round-trip form (the construction-audit tables)."""
    text = frame.to_csv(index=False, float_format=float_format)
    with atomic_open(path, "wb") as fh:
        if path.name.endswith(".gz"):
            with gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz:
                gz.write(text.encode())
        else:
            fh.write(text.encode())
    return path


def read_csv(path: Path) -> pd.DataFrame:
    with open(path, "rb") as fh:
        raw = fh.read()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    return pd.read_csv(BytesIO(raw))


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``.<name>.lock`` beside ``path`` inside the block, so processes
    that read, change and replace the same file (two notebooks finishing at once) take turns
    instead of one replacing the file with a copy that lacks the other's change."""
    import fcntl  # lazy: POSIX only, like the machines the runs are made on

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def replace_row(path: Path, row: dict[str, Any], key: str) -> pd.DataFrame:
    """The table at ``path`` (if any) with the row whose ``key`` equals ``row[key]`` replaced
    by ``row`` (or ``row`` appended): one row per notebook or command in the run-time tables."""
    old = read_csv(path) if path.exists() else pd.DataFrame(columns=list(row))
    return pd.concat([old[old[key] != row[key]], pd.DataFrame([row])], ignore_index=True)


class SQLiteStore:
    """A one-table SQLite cache whose connection opens on first use and again after
    ``close`` (a cache may outlive the run that filled it: transfer reuses Stage A's).
    Subclasses give the table's ``SCHEMA``; each write commits, so a kill loses nothing done."""

    SCHEMA = ""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db: sqlite3.Connection | None = None
        self.db.execute(self.SCHEMA)
        self.db.commit()

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            # worker processes fitting side by side may share a cache: wait for a writer's lock
            self._db = sqlite3.connect(self.path, timeout=120)
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
