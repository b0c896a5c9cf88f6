"""Shared fixtures: the official-format QA fixtures, the real data (when present), and an
artifacts directory per test so tests never write into the repository's artifacts/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from memsafe_lib import config as config_module
from memsafe_lib.threads import configure_threads


def pytest_configure(config: pytest.Config) -> None:
    """The suite runs with the library's thread setting, like the CLI and the notebooks. Under
    pytest-xdist (`make test` runs two workers) each worker, and every notebook kernel or fit
    process it starts, holds one thread per native pool: two workers of one thread fill two
    cores, where two of two would spin against each other (memsafe_lib/threads.py)."""
    if os.environ.get("PYTEST_XDIST_WORKER") and config_module.native_threads() is None:
        os.environ[config_module.THREADS_ENV] = "1"
    configure_threads()


SMOKE_NOTEBOOKS = "test_notebooks.py::test_notebook_runs_at_smoke_scale"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The smoke notebooks first, for `--dist loadfile`.

    `make test` hands each test module whole to one worker (`--dist loadfile`; a module's
    fixtures are built once). The seven smoke notebooks must run on one worker, in order: each
    appends to the smoke ledger and run_times.csv and checks its own last entries there, and
    notebooks 04-06 read what 02 wrote. They are about two thirds of the suite, so their module
    starts first and the other worker takes every other module beside it (with
    `--no-loadscope-reorder`, xdist keeps this order). `--dist loadgroup` with `xdist_group`
    marks added here did not group them: xdist 3.8 split the parametrized notebooks over both
    workers, and 02 and 03 interleaved their ledger entries."""
    items.sort(key=lambda item: SMOKE_NOTEBOOKS not in item.nodeid)  # stable: order kept within each part


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
