"""Variant files a user brings (``memsafe audit --blind FILE.jsonl``): JSON Lines, one memory
variant per line, in the format ``memsafe construct`` writes (:meth:`Variant.to_dict`).

A user's own benchmark may lack what only our constructions know, so only what an audit needs
is required: ``base_id``, ``state`` (or ``unsafe``), ``split``, ``question`` and ``units`` (each a
string or an object with ``text``, and optionally ``title``, ``is_evidence``,
``source_position``). Every problem names the file, the line, the record id and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memsafe_lib.errors import DataFormatError
from memsafe_lib.variants.construction import ALL_STATES, COMPLETE, MISSING, SPLITS, MemoryUnit, Variant


def _state(row: dict[str, Any], path: Path, n: int, rid: str) -> str:
    if "state" in row:
        if row["state"] not in ALL_STATES:
            raise DataFormatError(path, f"must be one of {list(ALL_STATES)}, got {row['state']!r}", line=n,
                                  record_id=rid, field="state")
        return str(row["state"])
    if isinstance(row.get("unsafe"), bool):
        return MISSING if row["unsafe"] else COMPLETE
    raise DataFormatError(path, "a state (one of complete, missing, relation_lost, stale) or a boolean 'unsafe' "
                          "is required", line=n, record_id=rid, field="state")


def _unit(item: Any, i: int, path: Path, n: int, rid: str) -> MemoryUnit:
    where = {"line": n, "record_id": rid, "field": f"units[{i}]"}
    if isinstance(item, str):
        item = {"text": item}
    if not isinstance(item, dict) or not isinstance(item.get("text"), str):
        raise DataFormatError(path, "each unit is a string or an object with a string 'text'", **where)
    title = item.get("title", "")
    evidence = item.get("is_evidence", False)
    position = item.get("source_position", i)
    if not isinstance(title, str) or not isinstance(evidence, bool) or not isinstance(position, int) or position < 0:
        raise DataFormatError(path, "'title' must be a string, 'is_evidence' a boolean and 'source_position' a "
                              "non-negative integer", **where)
    return MemoryUnit(str(item.get("unit_id", f"{rid}:{i}")), title, item["text"], evidence, i, position)


def read_variant_file(path: str | Path) -> list[Variant]:
    """Every variant of ``path``, validated; raises :class:`DataFormatError` at the first problem."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    variants: list[Variant] = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFormatError(path, f"not valid JSON ({exc.msg})", line=n) from None
            if not isinstance(row, dict):
                raise DataFormatError(path, "each line must be a JSON object (one memory variant)", line=n)
            rid = str(row.get("variant_id", row.get("base_id", f"line {n}")))
            for key in ("base_id", "question"):
                if not isinstance(row.get(key), str) or not row[key]:
                    raise DataFormatError(path, "missing or empty string", line=n, record_id=rid, field=key)
            if row.get("split") not in SPLITS:
                raise DataFormatError(path, f"must be one of {list(SPLITS)}, got {row.get('split')!r}", line=n,
                                      record_id=rid, field="split")
            if not isinstance(row.get("units"), list) or not row["units"]:
                raise DataFormatError(path, "must be a non-empty list", line=n, record_id=rid, field="units")
            units = tuple(_unit(u, i, path, n, rid) for i, u in enumerate(row["units"]))
            state = _state(row, path, n, rid)
            n_evidence = sum(u.is_evidence for u in units)
            variants.append(Variant(
                rid, row["base_id"], str(row.get("dataset", path.stem)), str(row.get("construction", "file")), state,
                row["split"], int(row.get("missing_count", 0 if state == COMPLETE else 1)), row["question"],
                tuple(row.get("answers", ())), units, int(row.get("n_evidence", n_evidence)),
                int(row.get("source_units", len(units)))))
    if not variants:
        raise DataFormatError(path, "no variants in the file")
    return variants
