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


def _synthetic_run() -> tuple[list[C.Variant], C.ConstructionResult, NeuralContext]:
    """60 synthetic questions split 2:1:1, their planted Stage A encodings and a one-encoder context."""
    variants, enc = _variants_and_encodings(60)
    splits = ["train", "train", "validation", "test"]
    variants = [replace(v, split=splits[int(v.base_id[1:]) % 4]) for v in variants]
    result = C.ConstructionResult("synthetic", "size-matched", variants, [])
    stage_a = StageAResult(enc, (), None, EncodeStats(), (0, 0))  # type: ignore[arg-type]
    scale = replace(SCALES["smoke"], neural=replace(SCALES["smoke"].neural, encoder_seeds=(17,)))
    return variants, result, NeuralContext("synthetic", scale, {17: stage_a}, {"width": 16, "heads": 2, "epochs": 2})


def test_evaluate_side_by_side_equals_one_after_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    variants, result, context = _synthetic_run()
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
    from memsafe_lib.estimators.neural_context import _grid_point
    from memsafe_lib.estimators.selection import best_index

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
    # starts from the shipped encoder: the test is about workers, not about Stage A's weight files
    neural = replace(SCALES["smoke"].neural, encoder_seeds=(17,), concat_max_train=12, concat_max_length=48,
                     concat_start="pretrained")
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


def test_fits_of_several_runs_pooled_in_one_batch_equal_each_run_alone(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Notebooks 03 and 07 pool the set-model fits of several runs (curve points, datasets) in
    one batch: each run's metrics and predictions equal those of the run fitted alone, one fit
    after another, and every pooled fit is cached in its own run's cache."""
    variants, enc = _variants_and_encodings(60)
    splits = ["train", "train", "validation", "test"]
    variants = [replace(v, split=splits[int(v.base_id[1:]) % 4]) for v in variants]
    small = [v for v in variants if v.split != "train" or int(v.base_id[1:]) % 3]  # fewer training questions
    results = [C.ConstructionResult("synthetic", "size-matched", variants, []),
               C.ConstructionResult("synthetic", "size-matched-small", small, [])]
    stage_a = StageAResult(enc, (), None, EncodeStats(), (0, 0))  # type: ignore[arg-type]
    scale = replace(SCALES["smoke"], neural=replace(SCALES["smoke"].neural, encoder_seeds=(17,)))
    context = NeuralContext("synthetic", scale, {17: stage_a}, {"width": 16, "heads": 2, "epochs": 2})
    models, seeds = ["memsafe", "lexset"], [17, 29, 43]
    jobs = [(m, s) for m in models for s in seeds]

    monkeypatch.setenv(FIT_WORKERS_ENV, "2")
    batches = [runs.pending_fits(r, jobs, C.by_split(r.variants), tmp_path / f"pooled{i}", context)
               for i, r in enumerate(results)]
    assert [len(b.todo) for b in batches] == [6, 6]  # type: ignore[union-attr]  # the set model's and LexSet's seeds
    fitted = runs.fit_batches(batches)
    assert [sorted(f) for f in fitted] == [sorted(jobs)] * 2
    for i in range(2):
        assert len(list((tmp_path / f"pooled{i}").glob("*.pkl"))) == 6
    pooled = [runs.evaluate(r, models, seeds, progress=False, context=context, cache_dir=tmp_path / f"pooled{i}",
                            prefitted=f) for i, (r, f) in enumerate(zip(results, fitted, strict=True))]

    monkeypatch.setenv(FIT_WORKERS_ENV, "1")
    for i, r in enumerate(results):
        metrics, preds, _ = runs.evaluate(r, models, seeds, progress=False, context=context,
                                          cache_dir=tmp_path / f"alone{i}")
        pd.testing.assert_frame_equal(pooled[i][0].drop(columns="fit_seconds"), metrics.drop(columns="fit_seconds"))
        pd.testing.assert_frame_equal(pooled[i][1], preds)
    assert runs.pending_fits(results[0], jobs, C.by_split(variants), tmp_path / "alone0", context) is None


def test_pooled_fits_start_longest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """The greedy schedule: the cross-encoder's fits first, then set-model fits by their run's
    training size, largest first, then LexSet's short fits; seeds keep their order."""
    order: list[tuple[int, str, int, str]] = []
    monkeypatch.setattr(runs, "side_by_side", lambda task, items, shared, **kw: order.extend(items) or [None] * len(items))
    variants, _ = _variants_and_encodings(8)
    small = runs.FitBatch("a", {"train": variants[:2]}, Path("."), None,  # type: ignore[arg-type]
                          (("lexset", 17, "k"), ("memsafe", 17, "k"), ("memsafe", 29, "k")))
    large = runs.FitBatch("b", {"train": variants}, Path("."), None,  # type: ignore[arg-type]
                          (("mean_pool", 17, "k"), ("concat_ce", 17, "k")))
    runs.fit_batches([small, None, large])
    assert [(i, m, s) for i, m, s, _ in order] == [(2, "concat_ce", 17), (2, "mean_pool", 17), (0, "memsafe", 17),
                                                   (0, "memsafe", 29), (0, "lexset", 17)]


def test_blind_controls_and_text_baselines_fit_side_by_side_as_one_after_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The question-blind controls and the TF-IDF baselines join the worker batch (fitted in this
    process, one after another, each left a core idle: 36 minutes of a cold cpu run). A
    deterministic one is queued once and serves every seed; the numbers equal those of the
    one-after-another path, and the question-blind set model reads its unit embeddings from the
    run's shared cache, filled here before the batch."""
    variants, result, context = _synthetic_run()
    models, seeds = ["tfidf", "blind_unit", "blind_set"], [17, 29]
    jobs = [(m, s) for m in models for s in seeds]

    monkeypatch.setenv(FIT_WORKERS_ENV, "2")
    batch = runs.pending_fits(result, jobs, C.by_split(variants), tmp_path / "2", context)
    assert batch is not None
    assert [(m, s) for m, s, _ in batch.todo] == [("tfidf", 17), ("blind_unit", 17), ("blind_set", 17),
                                                  ("blind_set", 29)]
    from memsafe_lib.estimators.blind import blind_set_config, embed_units

    n_texts = embed_units(variants, context.pretrained_embeddings, blind_set_config(context.scale), progress=False)
    frames = []
    for workers in ("2", "1"):
        monkeypatch.setenv(FIT_WORKERS_ENV, workers)
        metrics, preds, _ = runs.evaluate(result, models, seeds, progress=False, context=context,
                                          cache_dir=tmp_path / workers)
        assert len(list((tmp_path / workers).glob("*.pkl"))) == 4  # one fit per deterministic model
        frames.append((metrics.drop(columns="fit_seconds"), preds))
    pd.testing.assert_frame_equal(frames[0][0], frames[1][0])
    pd.testing.assert_frame_equal(frames[0][1], frames[1][1])
    tfidf = frames[0][1][frames[0][1].model == "tfidf"]
    assert (tfidf[tfidf.seed == 17].unsafe_prob.to_numpy() == tfidf[tfidf.seed == 29].unsafe_prob.to_numpy()).all()
    from memsafe_lib.encodings.encoders import EncodingCache

    assert len(EncodingCache(context.pretrained_embeddings)) == n_texts  # the workers embedded nothing new
