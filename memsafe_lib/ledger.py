"""The run ledger: one JSON line per run, with a fingerprint of code, data and settings.

Every number in ``artifacts/`` must be traceable to a ledger entry: the entry names the
raw files (sha256), the settings, the code (hash of every library and notebook source
file) and the outputs (sha256), so a reader can tell whether two tables came from the
same inputs. Steps that read other runs' artifacts rather than raw data (the summary, the
notebooks' tables) list those artifacts as ``inputs`` (sha256), and their data fingerprint
covers them. Entries are appended under an exclusive lock (two notebooks running at once
must not drop each other's entries); the file is rewritten atomically.
"""

from __future__ import annotations

import ast
import datetime as _dt
import importlib.metadata
import json
import platform
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from memsafe_lib import __version__, config, precision
from memsafe_lib.config import ScaleConfig
from memsafe_lib.data.records import RawFile
from memsafe_lib.io import atomic_open, canonical_json, file_lock, sha256_bytes, sha256_file


def code_fingerprint() -> str:
    """sha256 over the library's and notebooks' source files (path + content).

    Content, not the git commit, so uncommitted edits change the fingerprint too.
    """
    root = config.REPO_ROOT
    files = sorted([*root.joinpath("memsafe_lib").rglob("*.py"), *root.joinpath("memsafe_lib").rglob("*.json"),
                    *config.notebooks_dir().glob("*.py")])
    parts = [f"{p.relative_to(root).as_posix()}\x1f{sha256_file(p)}" for p in files]
    return sha256_bytes("\n".join(parts).encode())


def module_files(*modules: str) -> list[Path]:
    """The source files of ``modules`` and of every ``memsafe_lib`` module they import,
    transitively (static imports, read with :mod:`ast`; importing nothing)."""
    root = config.REPO_ROOT
    seen: dict[str, Path] = {}

    def visit(module: str) -> None:
        if module in seen or not module.startswith("memsafe_lib"):
            return
        base = root.joinpath(*module.split("."))
        path = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if not path.is_file():
            return  # a name imported from a module, not a module
        seen[module] = path
        if "." in module:
            visit(module.rsplit(".", 1)[0])  # importing a module runs its packages' __init__ too
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                visit(node.module)
                for alias in node.names:
                    visit(f"{node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    visit(alias.name)

    for module in modules:
        visit(module)
    return sorted(set(seen.values()))


def module_fingerprint(*modules: str) -> str:
    """sha256 over the source of ``modules`` and everything they import from the library:
    a cache keyed on it survives edits elsewhere (notebooks, reports, other estimators)."""
    root = config.REPO_ROOT
    parts = [f"{p.relative_to(root).as_posix()}\x1f{sha256_file(p)}" for p in module_files(*modules)]
    return sha256_bytes("\n".join(parts).encode())


def data_fingerprint(files: Iterable[RawFile]) -> str:
    return sha256_bytes("\n".join(sorted(f"{f.path}\x1f{f.sha256}" for f in files)).encode())


def settings_fingerprint(settings: Mapping[str, Any]) -> str:
    return sha256_bytes(canonical_json(settings).encode())


def fingerprint(files: Iterable[RawFile], settings: Mapping[str, Any],
                inputs: Mapping[str, str] | None = None) -> dict[str, str]:
    """``inputs`` (artifact path -> sha256) join the raw files in the data part."""
    data = data_fingerprint(list(files))
    if inputs:
        data = sha256_bytes(f"{data}\n{canonical_json(dict(inputs))}".encode())
    parts = {"code": code_fingerprint(), "data": data, "settings": settings_fingerprint(settings)}
    parts["run"] = sha256_bytes(canonical_json(parts).encode())[:16]
    return parts


def record_run(
    kind: str,
    scale: ScaleConfig,
    *,
    raw_files: Iterable[RawFile] = (),
    settings: Mapping[str, Any] | None = None,
    outputs: Iterable[str | Path] = (),
    metrics: Mapping[str, Any] | None = None,
    inputs: Iterable[str | Path] = (),
) -> dict[str, Any]:
    """Append one entry to the scale's ledger (``ScaleConfig.ledger_path``) and return it.

    ``inputs``: artifacts of earlier runs this step read (hashed like ``outputs``).
    """
    raw_files = list(raw_files)
    settings = dict(settings or {})
    settings.setdefault("scale", scale.name)
    input_hashes = artifact_hashes(inputs)
    entry = {
        "kind": kind,
        "time_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "fingerprint": fingerprint(raw_files, settings, input_hashes),
        "settings": settings,
        "raw_files": [{"path": f.path, "sha256": f.sha256, "records": f.records} for f in raw_files],
        **({"inputs": input_hashes} if input_hashes else {}),
        "outputs": artifact_hashes(outputs),
        "metrics": dict(metrics or {}),
        "environment": environment(),
    }
    append_entry(scale.ledger_path, entry)
    return entry


def append_entry(path: Path, entry: Mapping[str, Any]) -> None:
    """Append one line to ``path``: read, add, replace atomically, all while holding an
    exclusive lock on ``.<name>.lock`` beside it, so concurrent writers serialise instead of one
    replacing the file with a copy that lacks the other's entry."""
    with file_lock(path):
        previous = path.read_text(encoding="utf-8") if path.exists() else ""
        with atomic_open(path) as fh:
            fh.write(previous + json.dumps(entry, sort_keys=True) + "\n")


NUMERIC_PACKAGES = ("numpy", "scipy", "scikit-learn", "torch", "transformers", "pandas")
"""Packages whose builds can move a result in its last digits; their versions go in every entry."""


def cpu_model() -> str:
    """The CPU's model name (Linux ``/proc/cpuinfo``; the platform's processor string elsewhere)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="ignore").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def environment() -> dict[str, Any]:
    """Where a run happened, enough to explain a last-digit difference between two runs of the
    same code and data: versions of the numeric packages, the platform, the CPU model and the
    thread counts (torch reduces in a different order with a different count)."""
    versions = {}
    for name in NUMERIC_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    torch = sys.modules.get("torch")  # only read, never imported here (heavy)
    threads = {"fit": config.fit_threads(), "torch": torch.get_num_threads() if torch is not None else None}
    env = {"memsafe": __version__, "python": sys.version.split()[0], "platform": platform.platform(),
           "cpu": cpu_model(), "packages": versions, "threads": threads}
    if torch is not None:  # what the CPU offers torch, and so whether bf16 ran (memsafe_lib.precision)
        env["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        env["bf16"] = precision.signature("cpu")
    return env


def artifact_hashes(files: Iterable[str | Path]) -> dict[str, str]:
    """sha256 per file, keyed by its path relative to the artifacts directory when inside it."""
    base = config.artifacts_dir()
    hashes = {}
    for f in files:
        p = Path(f).resolve()
        hashes[p.relative_to(base).as_posix() if p.is_relative_to(base) else str(p)] = sha256_file(p)
    return hashes


def read_ledger(scale: ScaleConfig) -> list[dict[str, Any]]:
    path = scale.ledger_path
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
