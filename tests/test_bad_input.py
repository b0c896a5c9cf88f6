"""Every kind of bad input gives a clear error naming file, line/record and field, a
non-zero exit from the command line, and no output file."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from memsafe_lib.cli import main
from memsafe_lib.data import load_dataset
from memsafe_lib.errors import DataFormatError

GOOD_MUSIQUE = {
    "id": "2hop__9_9", "question": "q?", "answer": "a", "answer_aliases": [], "answerable": True,
    "question_decomposition": [],
    "paragraphs": [{"idx": i, "title": f"T{i}", "paragraph_text": "text", "is_supporting": i < 2} for i in range(6)],
}
GOOD_HOTPOT = {"_id": "h", "answer": "a", "question": "q", "supporting_facts": [["T0", 0], ["T1", 0]],
               "context": [[f"T{i}", ["s."]] for i in range(6)]}


def write(root: Path, dataset: str, name: str, content: bytes) -> Path:
    path = root / dataset / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def jsonl(*records: object) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def second_record_with(**changes: object) -> dict:
    rec = json.loads(json.dumps(GOOD_MUSIQUE))
    rec["id"] = "2hop__8_8"
    rec.update(changes)
    return rec


def musique_bad_paragraph_type() -> dict:
    rec = second_record_with()
    rec["paragraphs"][3]["is_supporting"] = "yes"
    return rec


# (dataset, file name, content, expected location fragments in the message)
CASES = {
    "truncated_json_array": ("hotpotqa", "dev.json", json.dumps([GOOD_HOTPOT, GOOD_HOTPOT]).encode()[:-40],
                             ["dev.json", "line 1", "truncated JSON"]),
    "line_not_json": ("musique", "m.jsonl", jsonl(GOOD_MUSIQUE) + b"{not json}\n", ["m.jsonl", "line 2", "not valid JSON"]),
    "missing_field": ("musique", "m.jsonl", jsonl(GOOD_MUSIQUE, {k: v for k, v in second_record_with().items() if k != "question"}),
                      ["m.jsonl", "line 2", "'2hop__8_8'", "field 'question'", "missing required field"]),
    "wrong_type": ("musique", "m.jsonl", jsonl(GOOD_MUSIQUE, musique_bad_paragraph_type()),
                   ["line 2", "field 'paragraphs[3].is_supporting'", "expected boolean"]),
    "wrong_type_top_level": ("musique", "m.jsonl", jsonl(second_record_with(answerable="true")),
                             ["line 1", "field 'answerable'", "expected boolean"]),
    "duplicate_id_different_content": ("musique", "m.jsonl", jsonl(GOOD_MUSIQUE, {**GOOD_MUSIQUE, "answer": "other"}),
                                       ["m.jsonl", "line 2", "'2hop__9_9'", "field 'id'", "duplicate id with different content"]),
    "empty_file": ("hotpotqa", "dev.json", b"", ["dev.json", "file is empty"]),
    "whitespace_only_file": ("musique", "m.jsonl", b"\n \n", ["m.jsonl", "file is empty"]),
    "non_utf8": ("musique", "m.jsonl", jsonl(GOOD_MUSIQUE) + b'{"id": "caf\xe9"}\n', ["m.jsonl", "line 2", "UTF-8"]),
    "non_utf8_json_array": ("hotpotqa", "dev.json", b'[\n{"_id": "\xff"}\n]', ["dev.json", "line 2", "UTF-8"]),
    "array_record_not_object": ("hotpotqa", "dev.json", json.dumps([GOOD_HOTPOT, 5]).encode(),
                                ["dev.json", "record 1", "expected a JSON object"]),
    "squad_nested_field": ("squad2", "dev-v2.0.json",
                           json.dumps({"data": [{"title": "T", "paragraphs": [{"context": "c", "qas": [
                               {"id": "q", "question": 3, "answers": []}]}]}]}).encode(),
                           ["record 0", "field 'data[0].paragraphs[0].qas[0].question'", "expected string"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_loader_error_names_the_place(tmp_path: Path, case: str) -> None:
    dataset, name, content, fragments = CASES[case]
    write(tmp_path, dataset, name, content)
    with pytest.raises(DataFormatError) as info:
        load_dataset(dataset, tmp_path)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_truncated_gzip_is_reported(tmp_path: Path) -> None:
    data = gzip.compress(jsonl(GOOD_MUSIQUE) * 50)
    write(tmp_path, "musique", "m.jsonl.gz", data[: len(data) // 2])
    with pytest.raises(DataFormatError, match=r"m\.jsonl\.gz.*(corrupt|truncated)"):
        load_dataset("musique", tmp_path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_exits_nonzero_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str], case: str) -> None:
    dataset, name, content, fragments = CASES[case]
    data_dir = tmp_path / "data"
    write(data_dir, dataset, name, content)
    # A good second file makes sure a failure mid-dataset does not leave partial output.
    if dataset == "musique" and name != "a.jsonl":
        write(data_dir, dataset, "a.jsonl", jsonl({**GOOD_MUSIQUE, "id": "2hop__0_0"}))
    monkeypatch.setenv("MEMSAFE_DATA_DIR", str(data_dir))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    construction = "native" if dataset == "squad2" else "size-matched"
    code = main(["construct", "--dataset", dataset, "--construction", construction,
                 "--out", str(out_dir / "variants.jsonl"), "--scale", "cpu"])
    assert code != 0
    err = capsys.readouterr().err
    assert err.startswith("memsafe: bad input: ") and fragments[0] in err
    assert list(out_dir.iterdir()) == []


def test_cli_missing_data_dir_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MEMSAFE_DATA_DIR", str(tmp_path))
    assert main(["audit", "--dataset", "hotpotqa"]) == 2
    assert "memsafe data download --dataset hotpotqa" in capsys.readouterr().err


def test_good_file_after_fix_loads(tmp_path: Path) -> None:
    """The same directory loads once the bad record is repaired (errors are not sticky)."""
    write(tmp_path, "musique", "m.jsonl", jsonl(GOOD_MUSIQUE, second_record_with()))
    assert len(load_dataset("musique", tmp_path).queries) == 2
    shutil.rmtree(tmp_path / "musique")
