"""Cached fits are keyed on everything they read: a model that reads Stage A is refitted when
the encoder (or its budget) changes and only loaded when it does not; Stage B budget fields
key the set models; models that read neither keep their key. Offline, with tiny random BERTs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memsafe_lib.config import FIT_WORKERS_ENV, SCALES, ScaleConfig
from memsafe_lib.encodings.encoders import EncodeStats, VariantEncoding
from memsafe_lib.encodings.stagea import StageAResult
from memsafe_lib.estimators import registry
from memsafe_lib.estimators.context import NeuralContext
from memsafe_lib.estimators.neural_context import build_context
from memsafe_lib.evaluation import runs as E
from memsafe_lib.evaluation import transfer as T
from memsafe_lib.variants import construction as C
from tests.synthetic import make_query
from tests.test_setmodel import _variants_and_encodings
from tests.test_stage_a_start import _tiny


@pytest.fixture(autouse=True)
def one_worker_one_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fit in this process, where the counter sees it; the code fingerprint held still
    (it hashes the working tree, which an edit elsewhere during the test would change)."""
    monkeypatch.setenv(FIT_WORKERS_ENV, "1")
    for module in (E, T):
        monkeypatch.setattr(module, "code_fingerprint", lambda: "code")


def counting(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[str]:
    """Replace ``module.make_model`` by one that records each model it builds (and builds it)."""
    fits: list[str] = []

    def make(name: str, seed: int, context: NeuralContext | None = None) -> Any:
        fits.append(name)
        return registry.make_model(name, seed, context)

    monkeypatch.setattr(module, "make_model", make)
    return fits


def tiny_scale(encoder: str) -> ScaleConfig:
    smoke = SCALES["smoke"]
    neural = replace(smoke.neural, encoder=encoder, encoder_pooling=None, encoder_seeds=(17,), max_length=32,
                     finetune_max_pairs=16, full_grid=False)
    return replace(smoke, neural=neural)


def test_two_encoders_two_fits_and_one_encoder_one_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's bug: ``--encoder X`` ran Stage A with X, then read the previous encoder's
    relevance aggregation from the cache. LexSet reads no encoding: one fit for both."""
    bare, cross = _tiny(tmp_path / "a", head=False), _tiny(tmp_path / "b", head=True)  # different weights
    splits = ("train", "train", "validation", "test")
    variants = [replace(v, split=splits[int(v.base_id[1:]) % 4])
                for v in C.build_size_matched([make_query(f"p{i}", 2, 3) for i in range(16)]).variants]
    result = C.ConstructionResult("synthetic", "size-matched", variants, [])
    fits = counting(monkeypatch, E)
    first = tiny_scale(str(bare))
    cache = tmp_path / "cache"

    def run(scale: ScaleConfig) -> None:
        context = build_context(result, scale, [17], device="cpu", progress=False)  # Stage A cached by content
        E.evaluate(result, ["relevance_agg", "lexset"], [17], cache_dir=cache, progress=False, context=context)

    run(first)
    assert fits == ["relevance_agg", "lexset"]
    run(first)  # the same encoder again (Stage A loaded, new objects): every fit from the cache
    assert fits == ["relevance_agg", "lexset"]
    run(first.with_encoder(str(cross)))  # another encoder: its own relevance fit, LexSet still cached
    assert fits == ["relevance_agg", "lexset", "relevance_agg"]
    assert len(list(cache.glob("relevance_agg-17-*.pkl"))) == 2 and len(list(cache.glob("lexset-17-*.pkl"))) == 1


FOLD_FILES = (Path("encoder-fold0-aaaa.safetensors"), Path("encoder-fold1-aaaa.safetensors"))


def hand_context(scale: ScaleConfig, encodings: dict[str, VariantEncoding], frozen: bool = False,
                 files: tuple[Path, ...] = FOLD_FILES) -> NeuralContext:
    """A context with Stage A encodings only (as worker processes get them: no fold encoders,
    only their weight files' names)."""
    stage_a = StageAResult(dict(encodings), (), None, EncodeStats(), (0, 0),  # type: ignore[arg-type]
                           encoder_files=files)
    other = {17: StageAResult(dict(encodings), (), None, EncodeStats(), (0, 0))} if frozen else {}  # type: ignore[arg-type]
    return NeuralContext("synthetic", scale, {17: stage_a}, {"width": 16, "heads": 2, "epochs": 2}, "cpu", other)


def shifted(encodings: dict[str, VariantEncoding]) -> dict[str, VariantEncoding]:
    """The same memories encoded differently (another encoder's output)."""
    return {k: replace(e, plain=e.plain + 1.0, plain_logit=e.plain_logit + 1.0) for k, e in encodings.items()}


def test_with_encoder_and_budgets_change_the_key_of_what_reads_them() -> None:
    variants, enc = _variants_and_encodings(12)
    result = C.ConstructionResult("synthetic", "size-matched", variants, [])
    scale = tiny_scale("encoder-a")

    def key(model: str, context: NeuralContext, seed: int = 17) -> str:
        return E._cache_key("synthetic", "size-matched", model, seed, result, context)

    base = hand_context(scale, enc, frozen=True)
    for model in ("memsafe", "mean_pool", "relevance_agg", "memsafe_frozen", "relevance_agg_frozen", "concat_ce"):
        assert key(model, base) == key(model, hand_context(scale, enc, frozen=True))  # deterministic
        assert key(model, base) != key(model, hand_context(scale.with_encoder("encoder-b"), enc, frozen=True))
    # models that read no context keep the key they had without one
    for model in ("lexset", "tfidf", "majority"):
        assert key(model, base) == E._cache_key("synthetic", "size-matched", model, 17, result)
        assert key(model, base) == key(model, hand_context(scale.with_encoder("encoder-b"), enc))
    # the encodings themselves (fine-tuned table only: the frozen models read the other one)
    moved = hand_context(scale, enc, frozen=True)
    moved.stage_a[17] = replace(moved.stage_a[17], encodings=shifted(enc))
    for model in ("memsafe", "relevance_agg"):
        assert key(model, moved) != key(model, base)
    for model in ("memsafe_frozen", "relevance_agg_frozen", "concat_ce"):
        assert key(model, moved) == key(model, base)

    def budget(**fields: Any) -> NeuralContext:
        return hand_context(replace(scale, neural=replace(scale.neural, **fields)), enc, frozen=True)

    for fields in ({"stage_b_epochs": 9}, {"stage_b_bf16": False}, {"stage_b_patience": 3}, {"full_grid": True}):
        assert key("memsafe", budget(**fields)) != key("memsafe", base), fields
        assert key("relevance_agg", budget(**fields)) == key("relevance_agg", base), fields  # no set model
    for fields in ({"max_length": 2 * scale.neural.max_length}, {"finetune_max_pairs": 8}, {"finetune_lr": 1e-3},
                   {"encoder_pooling": "cls"}):
        assert key("relevance_agg", budget(**fields)) != key("relevance_agg", base), fields
    for fields in ({"concat_max_train": 5}, {"concat_max_length": 2 * scale.neural.concat_max_length},
                   {"concat_epochs": 3}, {"concat_start": "pretrained"}):
        assert key("concat_ce", budget(**fields)) != key("concat_ce", base), fields
        assert key("memsafe", budget(**fields)) == key("memsafe", base), fields
    # the concatenated cross-encoder's start: another fold encoder is another fit; its encodings are not read
    other_start = hand_context(scale, enc, frozen=True, files=(Path("encoder-fold0-bbbb.safetensors"),) * 2)
    assert key("concat_ce", other_start) != key("concat_ce", base)
    assert key("memsafe", other_start) == key("memsafe", base)
    selected = hand_context(scale, enc, frozen=True)
    selected.stage_b = {**selected.stage_b, "width": 32}  # another Stage B grid point
    assert key("memsafe", selected) != key("memsafe", base)
    # a seed that reuses encoder 17 reads what seed 17 reads, but is its own fit
    assert key("relevance_agg", base, 43) != key("relevance_agg", base, 17)


def test_transfer_refits_for_another_encoder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    variants, enc = _variants_and_encodings(40)
    splits = ("train", "train", "validation", "test")
    source = [replace(v, split=splits[int(v.base_id[1:]) % 4]) for v in variants if int(v.base_id[1:]) < 32]
    target = [v for v in variants if int(v.base_id[1:]) >= 32]
    result = C.ConstructionResult("synthetic", "size-matched", source, [])
    fits = counting(monkeypatch, T)
    scale = tiny_scale("encoder-a")

    def run(context: NeuralContext) -> list[T.TransferResult]:
        return T.transfer(result, {"other": target}, ["relevance_agg", "tfidf"], [17], context, cache_dir=tmp_path)

    first = run(hand_context(scale, enc))
    assert fits == ["relevance_agg", "tfidf"]
    again = run(hand_context(scale, enc))
    assert fits == ["relevance_agg", "tfidf"]  # same encoder: loaded
    np.testing.assert_array_equal(first[0].predictions["other"].unsafe_prob, again[0].predictions["other"].unsafe_prob)
    run(hand_context(scale.with_encoder("encoder-b"), enc))
    assert fits == ["relevance_agg", "tfidf", "relevance_agg"]  # another encoder: refitted; tf-idf loaded
    run(hand_context(scale, shifted(enc)))
    assert fits == ["relevance_agg", "tfidf", "relevance_agg", "relevance_agg"]  # other encodings: refitted
