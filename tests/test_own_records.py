"""A user's own QA records in, memory variants out, through the same constructions as the datasets."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from memsafe_lib.cli import main
from memsafe_lib.data.own_records import NO_EVIDENCE, load_records

SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "records.schema.json"


def _record(i: int, split: str | None = None) -> dict:
    row = {"id": f"q{i}", "question": f"Where was the founder of company {i} born?", "answers": [f"town {i}"],
           "evidence": [{"title": f"Company {i}", "text": f"Company {i} was founded by person {i}."},
                        {"title": f"Person {i}", "text": f"Person {i} was born in town {i}."}],
           "distractors": [{"title": f"Other {i}-{k}", "text": f"Unrelated fact {k} about place {i}."}
                           for k in range(4)]}
    if split:
        row["split"] = split
    return row


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_records_build_size_matched_memories_with_their_own_splits(tmp_path: Path) -> None:
    rows = [_record(i, split=("train", "validation", "test")[i % 3]) for i in range(30)]
    rows += [{**_record(30), "evidence": []}]  # no evidence
    records = _write(tmp_path / "mine.jsonl", rows)
    out = tmp_path / "variants.jsonl"
    assert main(["construct", "--records", str(records), "--construction", "size-matched", "--out", str(out)]) == 0
    variants = [json.loads(line) for line in out.read_text().splitlines()]
    by_question = defaultdict(list)
    for v in variants:
        by_question[v["base_id"]].append(v)
    assert len(by_question) == 30
    for qid, vs in by_question.items():
        i = int(qid[1:])
        assert {v["state"] for v in vs} == {"complete", "missing", "relation_lost"}
        assert len({len(v["units"]) for v in vs}) == 1  # size-matched: every state holds |D| units
        assert {v["split"] for v in vs} == {("train", "validation", "test")[i % 3]}  # the file's split
        complete = next(v for v in vs if v["state"] == "complete")
        texts = {u["text"] for u in complete["units"]}
        assert {e["text"] for e in _record(i)["evidence"]} <= texts
    # positions are not the file's order (evidence first would give the state away)
    evidence_positions = Counter(u["source_position"] for v in variants for u in v["units"] if u["is_evidence"])
    assert set(evidence_positions) - {0, 1}
    exclusions = [json.loads(line) for line in (tmp_path / "variants.exclusions.jsonl").read_text().splitlines()]
    reasons = {(e["record_id"], e["reason"]) for e in exclusions}
    assert ("q30", NO_EVIDENCE) in reasons
    summary = json.loads((tmp_path / "variants.summary.json").read_text())
    assert summary["raw_records"] == len(rows) == summary["used_records"] + summary["excluded"]
    assert summary["base_questions"] == 30 and summary["excluded"] == 1


def test_records_without_split_take_the_hash_split_and_name_the_dataset(tmp_path: Path) -> None:
    loaded = load_records(_write(tmp_path / "team-qa.jsonl", [_record(i) for i in range(5)]))
    assert loaded.dataset == "team-qa" and all("split" not in q.meta for q in loaded.queries)
    assert loaded.queries[0].units[0].unit_id.startswith("q0:")


@pytest.mark.parametrize(("line", "field"), [
    ('{"id": "a", "evidence": [{"text": "x"}]}', "question"),
    ('{"question": "q", "evidence": [{"text": "x"}]}', "id"),
    ('{"id": "a", "question": "q", "evidence": [{"title": "t"}]}', "evidence[0]"),
    ('{"id": "a", "question": "q", "evidence": [{"text": "x"}], "split": "dev"}', "split"),
    ('{"id": "a", "question": "q", "evidence": "x"}', "evidence"),
    ('not json', None),
    ('{"id": "a", "question": " ", "evidence": [{"text": "x"}]}', "question"),
    (json.dumps(_record(0)), "id"),  # an id already read: two questions cannot share one
])
def test_a_bad_record_names_file_line_and_field_and_writes_nothing(tmp_path: Path, line: str, field: str | None,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    records = _write(tmp_path / "bad.jsonl", [_record(0), line])
    out = tmp_path / "v.jsonl"
    assert main(["construct", "--records", str(records), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl" in err and "line 2" in err and (field is None or field in err)
    assert not list(tmp_path.glob("v*"))


def test_records_refuse_a_construction_only_datasets_have(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = _write(tmp_path / "mine.jsonl", [_record(0)])
    assert main(["construct", "--records", str(records), "--construction", "family-b",
                 "--out", str(tmp_path / "v.jsonl")]) == 2
    assert "--construction family-b" in capsys.readouterr().err


def test_the_schema_documents_every_field_the_loader_reads() -> None:
    schema = json.loads(SCHEMA.read_text())
    assert set(schema["required"]) == {"id", "question", "evidence"}
    assert set(schema["properties"]) == {"id", "question", "answers", "evidence", "distractors", "split"}
    assert schema["properties"]["split"]["enum"] == ["train", "validation", "test"]
