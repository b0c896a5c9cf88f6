"""Native thread pools follow one setting (MEMSAFE_THREADS), and LexSet's OpenMP boosters fit
under it even when the process around them allows more threads."""

from __future__ import annotations

import os

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from memsafe_lib import config, threads
from memsafe_lib.progress import elapsed, step


def _openmp_threads() -> set[int]:
    return {pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "openmp"}


def test_setting_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(config.THREADS_ENV, raising=False)
    assert config.native_threads() is None
    assert config.fit_threads() == 1 and config.torch_threads() == (os.cpu_count() or 1)
    monkeypatch.setenv(config.THREADS_ENV, "4")
    assert config.native_threads() == config.fit_threads() == config.torch_threads() == 4
    monkeypatch.setenv(config.THREADS_ENV, "0")
    assert config.native_threads() == 0
    for bad in ("two", "-1"):
        monkeypatch.setenv(config.THREADS_ENV, bad)
        with pytest.raises(ValueError, match="MEMSAFE_THREADS"):
            config.native_threads()


def test_configure_threads_limits_every_pool_and_child_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    import sklearn.ensemble  # noqa: F401  (loads scikit-learn's OpenMP runtime)
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", ""))  # restored after the test
    before = torch.get_num_threads()
    try:
        assert threads.configure_threads(1) == (1, 1)
        assert torch.get_num_threads() == 1
        assert {pool["num_threads"] for pool in threadpool_info()} == {1}
        assert os.environ["OMP_NUM_THREADS"] == "1"
        monkeypatch.delenv(config.THREADS_ENV, raising=False)  # the measured defaults: fits 1, torch one per core
        assert threads.configure_threads() == (1, os.cpu_count() or 1)
        assert torch.get_num_threads() == (os.cpu_count() or 1)
        assert _openmp_threads() <= {1, os.cpu_count() or 1}
    finally:
        monkeypatch.undo()  # the session's setting (under xdist, one thread a worker) back first
        threads.configure_threads()
        torch.set_num_threads(before)


def test_zero_leaves_the_libraries_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.THREADS_ENV, "0")
    with threadpool_limits(limits=2, user_api="openmp"):
        assert threads.configure_threads() == (0, 0)
        with threads.limited_threads() as n:
            assert n == 0 and _openmp_threads() == {2}


def test_lexset_fits_with_the_configured_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The boosters see one OpenMP thread although the process allows two."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    from memsafe_lib.estimators import lexset
    from memsafe_lib.variants.construction import build_size_matched

    from .test_finetune import query

    seen: list[set[int]] = []
    original = HistGradientBoostingClassifier.fit

    def spy(self: HistGradientBoostingClassifier, *args: object, **kwargs: object) -> object:
        seen.append(_openmp_threads())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(lexset.HistGradientBoostingClassifier, "fit", spy)
    monkeypatch.setenv(config.THREADS_ENV, "1")
    variants = build_size_matched([query(i) for i in range(40)]).variants
    train = [v for v in variants if v.split == "train"]
    val = [v for v in variants if v.split == "validation"]
    with threadpool_limits(limits=2, user_api="openmp"):
        lexset.LexSet(seed=17).fit(train, val)
        assert _openmp_threads() == {2}  # the caller's setting is restored afterwards
    assert seen and all(s == {1} for s in seen)


def test_step_logs_start_and_duration(capsys: pytest.CaptureFixture[str]) -> None:
    with step("Stage A musique"):
        pass
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("Stage A musique ...") and "Stage A musique: done in" in err[1]
    assert [elapsed(4.2), elapsed(150), elapsed(7200)] == ["4.2 s", "2.5 min", "2.00 h"]
