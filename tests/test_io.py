"""Atomic writes of whole folders (model directories made once and kept)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memsafe_lib.io import atomic_dir


def _left_over(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


def test_a_folder_appears_whole_and_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with atomic_dir(target) as partial:
        (partial / "config.json").write_text("{}")
        assert not target.exists()  # nothing is visible under the final name while it is written
    assert (target / "config.json").read_text() == "{}"
    assert _left_over(tmp_path) == ["model"]


def test_a_failed_write_leaves_no_folder_behind(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with pytest.raises(RuntimeError), atomic_dir(target) as partial:
        (partial / "weights").write_text("half")
        raise RuntimeError("killed halfway")
    assert _left_over(tmp_path) == []


def test_a_folder_another_process_finished_first_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "model"
    with atomic_dir(target) as partial:
        (partial / "config.json").write_text("mine")
        target.mkdir()  # the other process renames its folder in between
        (target / "config.json").write_text("theirs")
    assert (target / "config.json").read_text() == "theirs"
    assert _left_over(tmp_path) == ["model"]


def test_a_stale_partial_folder_from_a_killed_write_is_replaced(tmp_path: Path) -> None:
    target = tmp_path / "model"
    stale = tmp_path / f"model.partial-{os.getpid()}"  # what a kill -9 of a process with this pid left
    stale.mkdir()
    (stale / "half.safetensors").write_text("half")
    with atomic_dir(target) as partial:
        assert list(partial.iterdir()) == []  # the write starts from an empty folder
        (partial / "config.json").write_text("{}")
    assert _left_over(tmp_path) == ["model"]
    assert _left_over(target) == ["config.json"]
