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


SMOKE_NOTEBOOKS = ("test_notebooks.py::test_notebook_runs_at_smoke_scale",
                   "test_notebooks_apart.py::test_notebook_runs_at_smoke_scale_apart")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The smoke notebooks first, for `--dist loadfile`.

    `make test` hands each test module whole to one worker (`--dist loadfile`; a module's
    fixtures are built once). Notebooks 02-06 must run on one worker, in order: 03-06 read what
    02 wrote. 01 and 07 read nothing another notebook writes, so they sit in a module of their
    own, which xdist's first round hands to the other worker: the two chains run side by side
    and every other module fills in after them (with `--no-loadscope-reorder`, xdist keeps this
    order). Each notebook finds its own entries in the smoke ledger, and run_times.csv and the
    hypotheses table are written under a file lock. `--dist loadgroup` with `xdist_group` marks
    did not group the chain: xdist 3.8 split the parametrized notebooks over both workers."""
    items.sort(key=lambda item: not any(n in item.nodeid for n in SMOKE_NOTEBOOKS))  # stable within each part


FIXTURES = Path(__file__).parent / "fixtures"
QA_FIXTURES = FIXTURES / "qa"


def real_data_dir() -> Path | None:
    if not os.environ.get("MEMSAFE_DATA_DIR"):
        return None
    path = config_module.data_dir()  # a relative value is read from the repository root, as the library reads it
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
