"""Memories a gate reads from files: unlabelled ones to score (``memsafe score``, streamed) and
labelled ones to judge it on (``memsafe evaluate --gate``).

Every bad line stops with the file, line, record id and field, before a model loads and before
anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memsafe_lib.errors import DataFormatError
from memsafe_lib.gate.model import memory_variant, unit_of
from memsafe_lib.variants.construction import ALL_STATES, COMPLETE, MISSING, Variant


def json_objects(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line of a JSON Lines file; a line that is not a JSON
    object stops with the file and line."""
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise DataFormatError(path, f"not valid JSON ({exc}); memsafe reads JSON Lines, one memory object "
                                      "per line (not a JSON array or a pretty-printed object)", line=n) from None
            if not isinstance(row, dict):
                raise DataFormatError(path, "each line must be a JSON object", line=n)
            yield n, row


def iter_memories(path: str | Path) -> Iterator[dict[str, Any]]:
    """JSON Lines of ``{"id"?, "query": str, "units": [str | {"title", "text"}], "source_positions"?,
    "source_units"?}``, one validated memory at a time (nothing is held: a file of any length
    streams); any other shape stops with file, line and field named."""
    seen = 0
    for n, row in json_objects(path):
        rid = str(row.get("id")) if "id" in row else None
        if not isinstance(row.get("query"), str) or not row["query"].strip():
            raise DataFormatError(path, "missing or empty string", line=n, record_id=rid, field="query")
        units = row.get("units")
        if not isinstance(units, list) or not units:
            raise DataFormatError(path, "must be a non-empty list", line=n, record_id=rid, field="units")
        for i, u in enumerate(units):
            try:
                unit_of(u, i)
            except TypeError as exc:
                raise DataFormatError(path, str(exc), line=n, record_id=rid, field=f"units[{i}]") from None
        pos = row.get("source_positions")
        if pos is not None and (not isinstance(pos, list) or len(pos) != len(units)
                                or not all(isinstance(p, int) and p >= 0 for p in pos)):
            raise DataFormatError(path, "must be a list of non-negative integers, one per unit", line=n,
                                  record_id=rid, field="source_positions")
        size = row.get("source_units")
        if size is not None and (not isinstance(size, int) or size < len(units)):
            raise DataFormatError(path, "must be an integer >= the number of units", line=n, record_id=rid,
                                  field="source_units")
        seen += 1
        yield row
    if not seen:
        raise DataFormatError(path, "no memories in the file")


def read_memories(path: str | Path) -> list[dict[str, Any]]:
    """Every memory of ``path`` (:func:`iter_memories`), held in a list."""
    return list(iter_memories(path))


@dataclass(frozen=True)
class MemoryScan:
    """What ``memsafe score`` learns from validating a file before it loads the gate."""

    memories: int
    with_provenance: int
    """Memories that carry ``source_positions`` (scored, and risk-controlled, in that form)."""


def scan_memories(path: str | Path) -> MemoryScan:
    """Validate every line of ``path`` (the first bad one stops with its file, line and field)
    and count memories in each form, holding none of them."""
    total = provenance = 0
    for row in iter_memories(path):
        total += 1
        provenance += "source_positions" in row
    return MemoryScan(total, provenance)


def batched(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """Consecutive chunks of at most ``size`` rows."""
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ---------------------------------------------------------------- labelled memories


@dataclass(frozen=True)
class LabelledMemories:
    """What ``memsafe evaluate --gate`` judges a gate on."""

    variants: list[Variant]
    """In file order; ``state`` is the given state, or ``missing``/``complete`` from ``unsafe``."""
    groups: list[str]
    """Per memory, its question (``base_id`` or ``group``; else its own id): the bootstrap's cluster."""
    has_states: bool
    """Every line gave a ``state`` (so macro F1 is defined)."""


def _labels(row: dict[str, Any], path: Path, line: int, rid: str) -> tuple[str, bool]:
    state, unsafe = row.get("state"), row.get("unsafe")
    if state is not None:
        if state not in ALL_STATES:
            raise DataFormatError(path, f"must be one of {list(ALL_STATES)}, got {state!r}", line=line,
                                  record_id=rid, field="state")
        if isinstance(unsafe, bool) and unsafe != (state != COMPLETE):
            raise DataFormatError(path, f"unsafe={unsafe} contradicts state {state!r}", line=line, record_id=rid,
                                  field="unsafe")
        return str(state), True
    if isinstance(unsafe, bool):
        return (MISSING if unsafe else COMPLETE), False
    raise DataFormatError(path, "no label: evaluating a gate needs 'unsafe' (true/false) or 'state' on every "
                          "memory (to score memories without labels, use `memsafe score`)", line=line,
                          record_id=rid, field="unsafe")


def read_labelled(path: str | Path, provenance: bool = True, split: str | None = None) -> LabelledMemories:
    """JSON Lines of ``{"id", "query", "units", "unsafe" | "state", "base_id"?}`` or what ``memsafe
    construct`` writes (``variant_id``, ``question``, ``state``, units with ``source_position``).
    Provenance (``source_positions`` or the units' ``source_position``, and ``source_units``) is
    read where the file gives it, unless ``provenance`` is false. ``split``: only the lines whose
    ``split`` is that (what ``memsafe construct`` writes carries every split, training included)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--input {path}: no such file")
    variants: list[Variant] = []
    groups: list[str] = []
    with_states = splits_seen = 0
    seen: set[str] = set()
    for line, row in json_objects(path):
        splits_seen += "split" in row
        if split is not None and row.get("split") != split:
            continue
        rid = str(row.get("id", row.get("variant_id", f"line{line}")))
        if rid in seen:
            raise DataFormatError(path, "id already used on an earlier line", line=line, record_id=rid, field="id")
        seen.add(rid)
        query = row.get("query", row.get("question"))
        if not isinstance(query, str) or not query.strip():
            raise DataFormatError(path, "missing or empty string", line=line, record_id=rid, field="query")
        units = row.get("units")
        if not isinstance(units, list) or not units:
            raise DataFormatError(path, "must be a non-empty list", line=line, record_id=rid, field="units")
        try:
            parsed = [unit_of(u, i) for i, u in enumerate(units)]
        except TypeError as exc:
            raise DataFormatError(path, str(exc), line=line, record_id=rid, field="units") from None
        positions = row.get("source_positions")
        if positions is None and all(isinstance(u, dict) and "source_position" in u for u in units):
            positions = [u["source_position"] for u in units]
        size = row.get("source_units")
        if positions is not None and (not isinstance(positions, list) or len(positions) != len(units)
                                      or not all(isinstance(p, int) and p >= 0 for p in positions)):
            raise DataFormatError(path, "must be a list of non-negative integers, one per unit", line=line,
                                  record_id=rid, field="source_positions")
        if size is not None and (not isinstance(size, int) or size < len(units)
                                 or (positions and size <= max(positions))):
            raise DataFormatError(path, "must be an integer larger than every source position and >= the "
                                  "number of units", line=line, record_id=rid, field="source_units")
        state, given = _labels(row, path, line, rid)
        with_states += given
        memory = memory_variant(query, [{"title": t, "text": x} for t, x in parsed],
                                positions if provenance else None, size if provenance else None, rid)
        variants.append(replace(memory, state=state))
        groups.append(str(row.get("base_id", row.get("group", rid))))
    if split is not None and not splits_seen:
        raise DataFormatError(path, f"--split {split}: no line has a 'split' field", field="split")
    if not variants:
        raise DataFormatError(path, "no memories in the file" + (f" with split {split!r}" if split else ""))
    return LabelledMemories(variants, groups, with_states == len(variants))
