"""Shared fixtures: the official-format QA fixtures, the real data (when present), and an
artifacts directory per test so tests never write into the repository's artifacts/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsafe_lib.threads import configure_threads


def pytest_configure(config: pytest.Config) -> None:
    """The suite runs with the library's thread setting, like the CLI and the notebooks."""
    configure_threads()

FIXTURES = Path(__file__).parent / "fixtures"
QA_FIXTURES = FIXTURES / "qa"


def real_data_dir() -> Path | None:
    value = os.environ.get("MEMSAFE_DATA_DIR")
    if not value:
        return None
    path = Path(value).resolve()
    return path if (path / "musique").is_dir() else None


requires_real_data = pytest.mark.skipif(real_data_dir() is None, reason="MEMSAFE_DATA_DIR with real data not set")


@pytest.fixture
def real_data() -> Path:
    path = real_data_dir()
    if path is None:
        pytest.skip("MEMSAFE_DATA_DIR with real data not set")
    return path


@pytest.fixture(autouse=True)
def isolated_artifacts(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path_factory.mktemp("artifacts")
    monkeypatch.setenv("MEMSAFE_ARTIFACTS_DIR", str(path))
    yield path


@pytest.fixture
def qa_fixtures(monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMSAFE_DATA_DIR", str(QA_FIXTURES))
    return QA_FIXTURES
