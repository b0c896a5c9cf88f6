"""Loaders on official-format fixtures and, when present, on the real shared data."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from memsafe_lib.data import load_dataset
from memsafe_lib.data.formats import DUPLICATE, NO_SUPPORTING, TITLE_NOT_IN_CONTEXT, join_sentences
from memsafe_lib.io import sha256_file


def test_musique_fixture_records_and_evidence(qa_fixtures: Path) -> None:
    loaded = load_dataset("musique", qa_fixtures)
    assert loaded.raw_records == 11 == len(loaded.queries) + len(loaded.exclusions)
    assert [e.reason for e in loaded.exclusions] == [DUPLICATE]
    q = next(q for q in loaded.queries if q.id == "2hop__1_1" and q.answerable)
    assert [u.title for u in q.evidence] == ["Town A", "Founder A"]
    assert len(q.distractors) == 4
    assert q.provenance.file == "musique/musique_ans_v1.0_dev.jsonl"  # the first copy read is the one cited
    # The unanswerable twin shares the id but is a separate record.
    assert sum(1 for q in loaded.queries if q.id == "2hop__1_1") == 2


def test_raw_file_hashes_are_recorded(qa_fixtures: Path) -> None:
    loaded = load_dataset("hotpotqa", qa_fixtures)
    (f,) = loaded.files
    assert f.sha256 == sha256_file(qa_fixtures / f.path)
    assert f.records == 4


def test_hotpot_supporting_facts_map_to_paragraphs(qa_fixtures: Path) -> None:
    loaded = load_dataset("hotpotqa", qa_fixtures)
    reasons = Counter(e.reason for e in loaded.exclusions)
    assert reasons == {TITLE_NOT_IN_CONTEXT: 1}
    h1 = next(q for q in loaded.queries if q.id == "h1")
    assert sorted(u.title for u in h1.evidence) == ["Alpha", "Beta"]
    assert h1.units[-1].title == "Alpha" and h1.units[-1].is_evidence  # position is the source order
    # A sentence index past the end keeps the record, with a recorded warning.
    assert any("h4" in w and "points past" in w for w in loaded.warnings)
    assert any(q.id == "h4" for q in loaded.queries)


def test_2wiki_test_split_without_supporting_facts_is_excluded(qa_fixtures: Path) -> None:
    loaded = load_dataset("2wikimultihopqa", qa_fixtures)
    assert [(e.record_id, e.reason) for e in loaded.exclusions] == [("w3", NO_SUPPORTING)]
    w2 = next(q for q in loaded.queries if q.id == "w2")
    assert len(w2.evidence) == 4 and len(w2.distractors) == 6


def test_squad_unanswerable_has_no_evidence(qa_fixtures: Path) -> None:
    loaded = load_dataset("squad2", qa_fixtures)
    by_id = {q.id: q for q in loaded.queries}
    assert by_id["q1"].answerable and by_id["q1"].units[0].is_evidence and by_id["q1"].answers == ("Normandy",)
    assert not by_id["q2"].answerable and not by_id["q2"].units[0].is_evidence


def test_join_sentences_handles_both_spacing_conventions() -> None:
    assert join_sentences(["A b.", " C d."]) == "A b. C d."  # HotpotQA keeps leading spaces
    assert join_sentences(["A b.", "C d."]) == "A b. C d."  # 2Wiki does not


def test_identical_duplicate_across_files_is_excluded_with_reference(tmp_path: Path) -> None:
    d = tmp_path / "hotpotqa"
    (d / "subsets").mkdir(parents=True)
    rec = {"_id": "x", "answer": "a", "question": "q", "supporting_facts": [["T", 0], ["U", 0]],
           "context": [["T", ["t."]], ["U", ["u."]], ["V", ["v."]], ["W", ["w."]]]}
    (d / "full.json").write_text(json.dumps([rec]))
    (d / "subsets" / "part.json").write_text(json.dumps([rec]))
    loaded = load_dataset("hotpotqa", tmp_path)
    assert len(loaded.queries) == 1 and loaded.queries[0].provenance.file == "hotpotqa/full.json"
    (ex,) = loaded.exclusions
    assert ex.reason == DUPLICATE and ex.file == "hotpotqa/subsets/part.json" and "hotpotqa/full.json" in ex.detail


def test_scale_cap_excludes_with_reason_and_is_deterministic(qa_fixtures: Path) -> None:
    a = load_dataset("musique", qa_fixtures, max_base_queries=2)
    b = load_dataset("musique", qa_fixtures, max_base_queries=2)
    assert [q.id for q in a.queries] == [q.id for q in b.queries]
    assert len({q.id for q in a.queries}) == 2
    assert a.raw_records == len(a.queries) + len(a.exclusions)


def test_missing_dataset_dir_names_the_download_command(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="memsafe data download --dataset musique"):
        load_dataset("musique", tmp_path)


# ---------------------------------------------------------------- real shared data

EXPECTED_RAW = {"musique": 659, "hotpotqa": 1572, "2wikimultihopqa": 1162, "squad2": 11873 + 706}
"""Record counts stated in shared/data/PROVENANCE.md (an independent source); the SQuAD
explorer reconstruction repeats the 706 Normans/Rhine questions of the staged subset."""


@pytest.mark.parametrize("dataset", sorted(EXPECTED_RAW))
def test_real_data_accounts_for_every_record(real_data: Path, dataset: str) -> None:
    loaded = load_dataset(dataset, real_data)
    assert loaded.raw_records == EXPECTED_RAW[dataset]
    assert loaded.raw_records == len(loaded.queries) + len(loaded.exclusions)
    assert all(e.reason for e in loaded.exclusions)


def test_real_squad_matches_official_answerability_counts(real_data: Path) -> None:
    loaded = load_dataset("squad2", real_data)
    counts = Counter(q.answerable for q in loaded.queries)
    assert counts == {True: 5928, False: 5945}  # official SQuAD 2.0 dev totals
    assert Counter(e.reason for e in loaded.exclusions) == {DUPLICATE: 706}


def test_real_musique_unanswerables_are_kept_for_family_b(real_data: Path) -> None:
    loaded = load_dataset("musique", real_data)
    assert Counter(q.answerable for q in loaded.queries) == {True: 609, False: 50}


def test_a_relative_data_dir_is_read_from_the_repository_root_wherever_the_process_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A JupyterLab kernel runs in notebooks/: a relative MEMSAFE_DATA_DIR (as CI sets it) must
    name the same folder there as for the command line run from the root; and the error when a
    dataset is missing names the folder it looked in and the value it read."""
    import os

    from memsafe_lib import config
    from memsafe_lib.data.loader import require_files

    root = tmp_path / "shared" / "data"
    root.mkdir(parents=True)
    relative = os.path.relpath(root, config.REPO_ROOT)
    monkeypatch.setenv("MEMSAFE_DATA_DIR", relative)
    for cwd in (config.REPO_ROOT, config.REPO_ROOT / "notebooks", tmp_path):
        monkeypatch.chdir(cwd)
        assert config.data_dir() == root.resolve()
    with pytest.raises(FileNotFoundError) as error:
        require_files("musique", config.data_dir())
    message = str(error.value)
    assert str(root.resolve() / "musique") in message and repr(relative) in message
    assert "repository root" in message
    monkeypatch.delenv("MEMSAFE_DATA_DIR")
    assert config.data_dir() == config.REPO_ROOT / "data"
