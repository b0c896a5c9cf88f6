"""The smoke notebooks that read no other notebook's outputs (01 and 07), in a module of their
own: ``make test`` gives each module to one worker (``--dist loadfile``), so they run beside
the chain 02-06 of ``test_notebooks.py`` instead of after it (the chain was the whole suite's
critical path: 23 of its 23.3 minutes on the Xeon)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_notebooks import SMOKE_APART, check_smoke_run


@pytest.mark.parametrize("name", SMOKE_APART)
def test_notebook_runs_at_smoke_scale_apart(real_data: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    check_smoke_run(name, monkeypatch)
