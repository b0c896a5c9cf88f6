"""Stored variants: read back equal to a fresh construction, rebuilt when a raw file changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from memsafe_lib.config import SCALES
from memsafe_lib.data import load_dataset
from memsafe_lib.variants.construction import accounting, construct
from memsafe_lib.variants.store import build, store_key

from .conftest import QA_FIXTURES

SMOKE = SCALES["smoke"]


@pytest.mark.parametrize(("dataset", "construction"), [("musique", "size-matched"), ("musique", "family-b"),
                                                        ("hotpotqa", "deletion"), ("squad2", "native")])
def test_stored_variants_equal_a_fresh_construction(dataset: str, construction: str, qa_fixtures: Path) -> None:
    fresh_load = load_dataset(dataset, max_base_queries=SMOKE.max_base_queries)
    fresh = construct(fresh_load, construction)
    built_load, built = build(dataset, construction, SMOKE)  # builds and stores
    read_load, read = build(dataset, construction, SMOKE)  # reads the store
    for load, result in ((built_load, built), (read_load, read)):
        assert result.variants == fresh.variants
        assert result.exclusions == fresh.exclusions and result.absent == fresh.absent
        assert load.files == fresh_load.files and load.warnings == fresh_load.warnings
        assert accounting(load, result) == accounting(fresh_load, fresh)


def test_a_changed_raw_file_changes_the_key_and_rebuilds(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(QA_FIXTURES / "hotpotqa", data / "hotpotqa")
    key = store_key("hotpotqa", "size-matched", SMOKE, data)
    _, before = build("hotpotqa", "size-matched", SMOKE, data)
    assert store_key("hotpotqa", "size-matched", SMOKE, data) == key  # stable
    assert store_key("hotpotqa", "deletion", SMOKE, data) != key
    assert store_key("hotpotqa", "size-matched", SCALES["cpu"], data) != key or SMOKE.max_base_queries is None
    raw = data / "hotpotqa" / "hotpot_dev_distractor_v1.json"
    text = raw.read_text()
    assert '"question":"' in text
    raw.write_text(text.replace('"question":"', '"question":"Changed: ', 1))
    assert store_key("hotpotqa", "size-matched", SMOKE, data) != key
    _, after = build("hotpotqa", "size-matched", SMOKE, data)
    assert [v.question for v in after.variants] != [v.question for v in before.variants]
    assert any(v.question.startswith("Changed: ") for v in after.variants)


def test_a_missing_dataset_names_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="memsafe data download --dataset musique"):
        build("musique", "size-matched", SMOKE, tmp_path)
