"""A user's own QA data as records: one question per line of JSON Lines, built into memories by
the same constructions as the built-in datasets (``memsafe construct --records FILE``).

    {"id": "q1", "question": "...", "answers": ["..."], "split": "train",
     "evidence": [{"title": "...", "text": "..."}], "distractors": [{"title": "...", "text": "..."}]}

``answers`` and ``split`` (train, validation or test) are optional; without ``split`` a question
takes the project's salted-hash split. Evidence units that share a title are one fact, as for
the QA datasets. The JSON Schema is ``docs/records.schema.json``.

A unit's source position is not the order of the file (evidence first would give every memory's
state away through its positions): the units of a question are placed in a salted-hash order of
their text. Every bad line stops with the file, line, record id and field; a question without
evidence is excluded with its reason, never dropped; a second record with an id already read stops
(two questions under one id would share a split and a memory id: the file needs fixing).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memsafe_lib.data.loader import hash_rank
from memsafe_lib.data.records import BaseQuery, Exclusion, LoadResult, Provenance, RawFile, Unit
from memsafe_lib.errors import DataFormatError
from memsafe_lib.io import sha256_file

RECORD_SPLITS: tuple[str, ...] = ("train", "validation", "test")
POSITION_SALT = "memsafe-records-position-v1"
NO_EVIDENCE = "no evidence units"


def _units(row: dict[str, Any], key: str, path: Path, line: int, rid: str) -> list[tuple[str, str]]:
    value = row.get(key, [])
    if not isinstance(value, list):
        raise DataFormatError(path, "must be a list of units", line=line, record_id=rid, field=key)
    units = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or not item["text"].strip():
            raise DataFormatError(path, "each unit is a non-empty string or an object with a non-empty string "
                                  "'text' (and optionally 'title')", line=line, record_id=rid, field=f"{key}[{i}]")
        title = item.get("title", "")
        if not isinstance(title, str):
            raise DataFormatError(path, "must be a string", line=line, record_id=rid, field=f"{key}[{i}].title")
        units.append((title, item["text"]))
    return units


def _query(row: Any, path: Path, line: int, name: str, digest: str) -> BaseQuery | Exclusion:
    if not isinstance(row, dict):
        raise DataFormatError(path, "each line must be a JSON object", line=line)
    rid = row.get("id")
    if not isinstance(rid, str) or not rid:
        raise DataFormatError(path, "a non-empty string id is required", line=line, field="id")
    question = row.get("question")
    if not isinstance(question, str) or not question.strip():
        raise DataFormatError(path, "a non-empty string question is required", line=line, record_id=rid,
                              field="question")
    answers = row.get("answers", [])
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise DataFormatError(path, "must be a list of strings", line=line, record_id=rid, field="answers")
    split = row.get("split")
    if split is not None and split not in RECORD_SPLITS:
        raise DataFormatError(path, f"must be one of {list(RECORD_SPLITS)}, got {split!r}", line=line, record_id=rid,
                              field="split")
    evidence = _units(row, "evidence", path, line, rid)
    distractors = _units(row, "distractors", path, line, rid)
    if not evidence:
        return Exclusion(name, rid, NO_EVIDENCE, path.name, line - 1)
    tagged = [(t, x, True) for t, x in evidence] + [(t, x, False) for t, x in distractors]
    order = sorted(range(len(tagged)), key=lambda i: hash_rank(f"{rid}\x1f{tagged[i][1]}", POSITION_SALT))
    units = tuple(Unit(f"{rid}:{k}", tagged[i][0], tagged[i][1], tagged[i][2], k) for k, i in enumerate(order))
    meta = {"split": split} if split else {}
    return BaseQuery(rid, name, question, tuple(answers), units, True,
                     Provenance(path.name, line - 1, digest), meta)


def load_records(path: str | Path, name: str | None = None) -> LoadResult:
    """Every line of ``path`` as a question (or an exclusion with its reason); ``name`` (default:
    the file's stem) is the dataset name the variants carry."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--records {path}: no such file")
    name = name or path.name.removesuffix(".jsonl").removesuffix(".json")
    digest = sha256_file(path)
    queries: list[BaseQuery] = []
    exclusions: list[Exclusion] = []
    seen: set[str] = set()
    lines = 0
    with path.open(encoding="utf-8") as fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            lines += 1
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise DataFormatError(path, f"not JSON: {exc.msg}", line=line) from None
            parsed = _query(row, path, line, name, digest)
            if isinstance(parsed, BaseQuery) and parsed.id in seen:
                raise DataFormatError(path, "id already used on an earlier line", line=line, record_id=parsed.id,
                                      field="id")
            if isinstance(parsed, BaseQuery):
                seen.add(parsed.id)
                queries.append(parsed)
            else:
                exclusions.append(parsed)
    if not lines:
        raise DataFormatError(path, "no records: the file is empty")
    return LoadResult(name, [RawFile(path.name, digest, lines)], queries, exclusions)
