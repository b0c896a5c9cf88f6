"""Stage B fits side by side: the same results as one after another, errors surface, and a
Stage B fit runs on one torch thread whatever the process's setting."""

from __future__ import annotations

import operator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from memsafe_lib.config import FIT_WORKERS_ENV, SCALES, fit_workers
from memsafe_lib.encodings.encoders import EncodeStats
from memsafe_lib.encodings.stagea import StageAResult
from memsafe_lib.estimators import setmodel
from memsafe_lib.estimators.context import NeuralContext
from memsafe_lib.evaluation import runs
from memsafe_lib.parallel import side_by_side
from memsafe_lib.variants import construction as C

from .test_setmodel import _task, _variants_and_encodings


@pytest.mark.parametrize("workers", [1, 2])
def test_results_come_back_in_order_and_each_is_seen(workers: int) -> None:
    seen: list[tuple[int, int]] = []
    out = side_by_side(operator.mul, [1, 2, 3], 10, label="t", workers=workers,
                       on_result=lambda item, r: seen.append((item, r)))
    assert out == [10, 20, 30]
    assert sorted(seen) == [(1, 10), (2, 20), (3, 30)]


def test_a_worker_error_is_raised_here() -> None:
    with pytest.raises(ZeroDivisionError):
        side_by_side(operator.truediv, [1, 0, 2], 1, label="t", workers=2)


def test_fit_workers_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FIT_WORKERS_ENV, "3")
    assert fit_workers() == 3
    for bad in ("0", "two"):
        monkeypatch.setenv(FIT_WORKERS_ENV, bad)
        with pytest.raises(ValueError, match=FIT_WORKERS_ENV):
            fit_workers()


def test_stage_b_trains_and_predicts_on_one_thread_and_restores_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    units, prov, y = _task(64, 0)
    threads: list[int] = []
    loss = setmodel.loss_fn
    monkeypatch.setattr(setmodel, "loss_fn", lambda *a, **k: (threads.append(torch.get_num_threads()), loss(*a, **k))[1])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model, _ = setmodel.train_set_model(units, prov, y, setmodel.SetModelConfig(width=16, heads=2, epochs=1), 3)
        assert set(threads) == {1}
        assert torch.get_num_threads() == 2
        hooked: list[int] = []
        model.unit_in[0].register_forward_hook(lambda *_: hooked.append(torch.get_num_threads()))
        setmodel.predict_sets(model, units, prov)
        assert set(hooked) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_evaluate_side_by_side_equals_one_after_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    variants, enc = _variants_and_encodings(60)
    splits = ["train", "train", "validation", "test"]
    variants = [replace(v, split=splits[int(v.base_id[1:]) % 4]) for v in variants]
    result = C.ConstructionResult("synthetic", "size-matched", variants, [])
    stage_a = StageAResult(enc, (), None, EncodeStats(), (0, 0))  # type: ignore[arg-type]
    scale = replace(SCALES["smoke"], neural=replace(SCALES["smoke"].neural, encoder_seeds=(17,)))
    context = NeuralContext("synthetic", scale, {17: stage_a}, {"width": 16, "heads": 2, "epochs": 2})
    frames = []
    for workers in ("2", "1"):
        monkeypatch.setenv(FIT_WORKERS_ENV, workers)
        metrics, preds, _ = runs.evaluate(result, ["memsafe", "mean_pool"], [17, 29], progress=False,
                                          context=context, cache_dir=tmp_path / workers)
        assert len(list((tmp_path / workers).glob("*.pkl"))) == 4  # every fit cached as it finished
        frames.append((metrics.drop(columns="fit_seconds"), preds))
    pd.testing.assert_frame_equal(frames[0][0], frames[1][0])
    pd.testing.assert_frame_equal(frames[0][1], frames[1][1])
    assert np.isfinite(frames[0][1].unsafe_prob).all()


def test_grid_points_side_by_side_and_the_selection_rule() -> None:
    from memsafe_lib.estimators.selection import best_index
    from memsafe_lib.evaluation.neural import _grid_point

    variants, enc = _variants_and_encodings(40)
    by = C.by_split([replace(v, split=("train", "validation")[int(v.base_id[1:]) % 2]) for v in variants])
    base = setmodel.SetModelConfig(heads=2, epochs=2)
    points = [{"width": 16, "lr": 1e-3}, {"width": 8, "lr": 1e-3}]
    shared = (enc, by, 17, base, "cpu")
    apart = side_by_side(_grid_point, points, shared, label="grid", workers=2)
    assert apart == side_by_side(_grid_point, points, shared, label="grid", workers=1)
    assert [{k: r[k] for k in p} for r, p in zip(apart, points, strict=True)] == points
    # highest AUROC, then macro F1, then the earlier point
    scores = [{"validation_auroc": a, "validation_macro_f1": f} for a, f in [(0.7, 0.5), (0.8, 0.1), (0.8, 0.3),
                                                                            (0.8, 0.3)]]
    assert best_index(scores) == 2
    with pytest.raises(ValueError):
        best_index([])


def test_cross_encoder_fits_side_by_side_equal_those_in_process(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The concatenated cross-encoder's seeds in two workers: the same predictions as one after
    another here (it fits and scores with one thread in either place; scoring with two threads
    here once differed in the fourth decimal), and the workers share its cache without a lock error."""
    variants, enc = _variants_and_encodings(24)
    splits = ["train", "train", "validation", "test"]
    variants = [replace(v, split=splits[int(v.base_id[1:]) % 4]) for v in variants]
    result = C.ConstructionResult("synthetic", "size-matched", variants, [])
    stage_a = StageAResult(enc, (), None, EncodeStats(), (0, 0))  # type: ignore[arg-type]
    neural = replace(SCALES["smoke"].neural, encoder_seeds=(17,), concat_max_train=12, concat_max_length=48)
    frames = []
    for workers in ("2", "1"):
        monkeypatch.setenv(FIT_WORKERS_ENV, workers)
        scale = replace(SCALES["smoke"], name=f"smoke-w{workers}", neural=neural)  # separate model caches
        context = NeuralContext("synthetic", scale, {17: stage_a}, {"width": 16, "heads": 2, "epochs": 2})
        metrics, preds, _ = runs.evaluate(result, ["concat_ce"], [17, 29], progress=False, context=context,
                                          cache_dir=tmp_path / workers)
        frames.append((metrics.drop(columns=["fit_seconds", "config"]), preds))
    pd.testing.assert_frame_equal(frames[0][0], frames[1][0])
    pd.testing.assert_frame_equal(frames[0][1], frames[1][1])
