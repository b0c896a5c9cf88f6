"""Stage A's bi-encoder scorer and pooled fold encoders (issue 33): the start's cosine kept,
each text embedded once, features as documented, pooled folds still cross-fitted."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from memsafe_lib.config import FAMILY_A_DATASETS, scale_config
from memsafe_lib.encodings import biencoder as B
from memsafe_lib.encodings import encoders as E
from memsafe_lib.encodings import finetune as F
from memsafe_lib.encodings import stagea as S
from memsafe_lib.estimators.neural_context import pool_training
from memsafe_lib.variants import construction as C
from memsafe_lib.variants.store import build
from memsafe_lib.variants.supervision import in_training_subset, training_subset, with_silver_training
from tests.synthetic import make_query

CONFIG = E.EncoderConfig(scorer="bi", bf16=False, max_length=64, batch_size=4)
PAIRS = [E.Pair("Where is the Eiffel tower?", "The Eiffel tower stands in Paris."),
         E.Pair("Where is the Eiffel tower?", "Bananas are rich in potassium."),
         E.Pair("Who wrote Hamlet?", "Hamlet is a tragedy by William Shakespeare."),
         E.Pair("Who wrote Hamlet?", "The Eiffel tower stands in Paris.", bridge="Hamlet is a play.")]


@pytest.fixture(scope="module")
def scorer() -> B.BiEncoderScorer:
    return B.BiEncoderScorer(CONFIG)


def reference_embeddings(texts: list[str]) -> np.ndarray:
    """all-MiniLM-L6-v2 as its authors use it (mean pooling, L2 norm), computed here directly."""
    from transformers import AutoModel, AutoTokenizer

    path = E.resolve_model(E.PACKAGED_MINILM)
    tok, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
    out = []
    for text in texts:  # one at a time: no padding can enter the mean
        batch = tok([text], truncation=True, max_length=64, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state[0]
        v = hidden.mean(0).numpy()
        out.append(v / np.linalg.norm(v))
    return np.stack(out)


def test_the_untrained_scorer_ranks_exactly_as_the_start_cosine(scorer: B.BiEncoderScorer) -> None:
    reps, logits = scorer.encode_pairs(PAIRS, progress=False)
    q = reference_embeddings([p.first() for p in PAIRS])
    u = reference_embeddings([p.unit for p in PAIRS])
    cos = (q * u).sum(1)
    np.testing.assert_allclose(logits, 20 * cos - 10, atol=1e-4)
    np.testing.assert_allclose(reps, q * u, atol=1e-5)  # "product": its sum is the cosine
    assert logits[0] > logits[1]  # the tower's own sentence outranks bananas


def test_each_distinct_text_is_embedded_once_and_then_read_from_the_cache(scorer: B.BiEncoderScorer,
                                                                          tmp_path: object) -> None:
    cache = E.EncodingCache(tmp_path / "enc.sqlite")  # type: ignore[operator]
    stats = E.EncodeStats()
    first = E.encode_pairs(scorer, PAIRS * 3, cache, progress=False, stats=stats)  # dispatches to the scorer
    texts = {p.first() for p in PAIRS} | {p.unit for p in PAIRS}
    assert stats.requested == 12 and stats.encoded == len(texts) == 6  # "Eiffel" unit twice: once
    again = E.EncodeStats()
    second = E.encode_pairs(scorer, PAIRS, cache, progress=False, stats=again)
    assert again.encoded == 0 and again.from_cache == 6
    np.testing.assert_array_equal(first[1][:4], second[1])


def test_unit_product_features_hand_stage_b_the_unit_embedding_too() -> None:
    wide = B.BiEncoderScorer(replace(CONFIG, features="unit_product"))
    reps, _ = wide.encode_pairs(PAIRS[:2], progress=False)
    u = reference_embeddings([p.unit for p in PAIRS[:2]])
    assert reps.shape == (2, 2 * 384) == (2, wide.hidden_size)
    np.testing.assert_allclose(reps[:, :384], u, atol=1e-5)
    with pytest.raises(ValueError, match="features"):
        B.BiEncoderScorer(replace(CONFIG, features="sum"))


def test_fine_tuning_moves_the_head_and_body_and_is_keyed_apart_from_the_cross_encoder() -> None:
    model = S.fold_encoder(CONFIG, 17)
    assert isinstance(model, B.BiEncoderScorer)
    labels = np.array([1, 0, 1, 0], np.float32)
    cross_key = F.run_key(S.fold_encoder(replace(CONFIG, scorer="cross"), 17), PAIRS, labels, F.FinetuneConfig(), 17)
    assert F.run_key(model, PAIRS, labels, F.FinetuneConfig(), 17) != cross_key
    before = {k: v.clone() for k, v in model.state_dict().items()}
    F.finetune(model, PAIRS * 4, np.tile(labels, 4), F.FinetuneConfig(lr=1e-4, head_lr=1e-2, batch_size=4),
               seed=17, progress=False)
    after = model.state_dict()
    assert float(after["head.scale"]) != 20.0 and float(after["head.bias"]) != -10.0
    assert not torch.equal(before["backbone.encoder.layer.0.attention.self.query.weight"],
                           after["backbone.encoder.layer.0.attention.self.query.weight"])
    with pytest.raises(ValueError, match="scorer"):
        S.fold_encoder(replace(CONFIG, scorer="late-interaction"), 17)


def _variants(dataset: str, n: int) -> list[C.Variant]:
    queries = [make_query(f"{dataset}-{i}", 2, 6, dataset=dataset) for i in range(n)]
    return [replace(v, split="train") for v in C.build_size_matched(queries).variants]


def test_a_pooled_fold_trains_on_that_fold_of_every_dataset_each_under_the_cap() -> None:
    a, b = _variants("alpha", 24), _variants("beta", 24)
    ranker = E.BiEncoder(replace(CONFIG, scorer="cross"))
    config = S.StageAConfig(CONFIG, F.FinetuneConfig(max_pairs=20, balanced_cap=True))
    for fold in (0, 1):
        job = S._fold_job(config, a + b, fold, ranker, 17)
        assert job.key == S._fold_job(config, b + a, fold, ranker, 17).key  # whichever dataset asks
        own = {ds: F.training_pairs([v for v in vs if C.train_fold(v.base_id) == fold], ranker, True, 20, True)[0]
               for ds, vs in (("alpha", a), ("beta", b))}
        assert job.pairs == own["alpha"] + own["beta"]  # dataset-name order, each capped at 20
        other_fold = {v.question for v in a + b if C.train_fold(v.base_id) != fold}
        assert not {p.query for p in job.pairs} & other_fold  # cross-fitting holds across the pool


def test_pooled_memories_are_derived_as_the_asking_result_was() -> None:
    scale = scale_config("smoke")
    pooled = replace(scale, neural=replace(scale.neural, stage_a_pool=FAMILY_A_DATASETS))
    result = training_subset(with_silver_training(build("musique", "size-matched", scale)[1]), 0.5)
    extra = pool_training(result, pooled)
    assert {v.dataset for v in extra} == {"hotpotqa", "2wikimultihopqa"}
    assert all(v.split == "train" and in_training_subset(v.base_id, 0.5) for v in extra)
    silver = {v.variant_id: v for d in ("hotpotqa", "2wikimultihopqa")
              for v in with_silver_training(build(d, "size-matched", scale)[1]).variants}
    assert all(v.units == silver[v.variant_id].units for v in extra)  # silver targets, as musique's
    unpooled = replace(scale, neural=replace(scale.neural, stage_a_pool=()))
    assert pool_training(result, unpooled) == []  # no pool: own pairs only
    assert pool_training(build("squad2", None, pooled)[1], pooled) == []  # never pools the transfer target


def test_a_bi_encoder_gate_scores_after_a_round_trip_as_it_did_in_memory(tmp_path: object) -> None:
    from memsafe_lib.estimators.memsafe import MemSafe
    from memsafe_lib.estimators.setmodel import SetModelConfig
    from memsafe_lib.gate import Gate
    from tests.test_finetune import query

    variants = C.build_size_matched([query(i) for i in range(40)]).variants
    config = S.StageAConfig(replace(CONFIG, max_length=48, batch_size=16),
                            F.FinetuneConfig(max_pairs=16, batch_size=8, bf16=False, head_lr=1e-2))
    result = S.run_stage_a(variants, config, seed=17, cache_dir=tmp_path / "a", progress=False)  # type: ignore[operator]
    assert result.stats.encoded < result.stats.requested  # texts, not pairs
    splits = C.by_split(variants)
    model = MemSafe(result.encodings, seed=17, base=SetModelConfig(width=32, heads=2, epochs=2))
    model.fit(splits["train"], splits["validation"])
    path = Gate.from_estimator(model, result.encoders, result.bi, {"dataset": "synthetic"}).save(tmp_path / "g")  # type: ignore[operator]
    gate = Gate.load(path)
    assert isinstance(gate.encoders[0], B.BiEncoderScorer) and gate.encoders[0].config.scorer == "bi"
    test = splits["test"]
    scored = [o.unsafe_prob for o in gate.score_variants(test)]
    np.testing.assert_allclose(scored, model.predict(test).unsafe_prob, atol=1e-5)


def test_blind_constructions_are_encoded_by_the_size_matched_stage_a(monkeypatch: pytest.MonkeyPatch) -> None:
    """One Stage A serves all three constructions: the fold encoders of blind-matched and
    blind-hard tune on the size-matched training memories (and the pool's), while the memories
    they encode stay the blind construction's own."""
    from memsafe_lib.estimators import neural_context as N

    calls: dict[str, dict] = {}

    def capture(variants, config, seed, cache_dir, progress=True, **kw):  # type: ignore[no-untyped-def]
        calls[variants[0].construction] = {"variants": list(variants), **kw}

    monkeypatch.setattr(N, "run_stage_a", capture)
    scale = scale_config("smoke")
    results = {c: build("musique", c, scale)[1] for c in ("size-matched", "blind-matched", C.BLIND_HARD)}
    for result in results.values():
        N.stage_a_for(result, scale, 17, progress=False)
    sized = calls["size-matched"]
    tuned = {v.variant_id for v in results["size-matched"].variants if v.split == "train"}
    assert {v.variant_id for v in sized["tune_on"]} == tuned
    for construction in ("blind-matched", C.BLIND_HARD):
        call = calls[construction]
        assert call["variants"] == results[construction].variants  # its own memories are encoded
        assert [v.variant_id for v in call["tune_on"]] == [v.variant_id for v in sized["tune_on"]]
        assert [v.variant_id for v in call["pool_train"]] == [v.variant_id for v in sized["pool_train"]]
        assert call["encoder_dir"] == sized["encoder_dir"]
    frozen = {}
    monkeypatch.setattr(N, "run_stage_a", lambda variants, *a, **kw: frozen.setdefault("kw", kw))
    N.stage_a_for(results["blind-matched"], scale, 17, progress=False, frozen=True)
    assert frozen["kw"]["pool_train"] == []  # a frozen Stage A tunes nothing


def test_fold_encoders_shared_by_a_pool_share_their_encodings(tmp_path: object) -> None:
    """A pool's datasets (and a joint gate) tune one pair of fold encoders; the pairs one of them
    encoded are read back by the next, not encoded again in a per-dataset file (a joint cpu gate
    once encoded MuSiQue's pairs twice: for itself and for the Stage B grid)."""
    from tests.test_finetune import query

    variants = C.build_size_matched([query(i) for i in range(30)]).variants
    config = S.StageAConfig(replace(CONFIG, scorer="cross", max_length=48, batch_size=16),
                            F.FinetuneConfig(max_pairs=16, batch_size=8, bf16=False))
    shared = tmp_path / "pooled"  # type: ignore[operator]
    first = S.run_stage_a(variants, config, 17, tmp_path / "joint", progress=False, encoder_dir=shared)  # type: ignore[operator]
    again = S.run_stage_a(variants, config, 17, tmp_path / "musique", progress=False, encoder_dir=shared)  # type: ignore[operator]
    assert first.stats.encoded > 0
    assert again.stats.encoded == 0 and again.stats.from_cache == again.stats.unique == first.stats.unique
    for variant_id, e in first.encodings.items():
        assert np.array_equal(e.plain, again.encodings[variant_id].plain)
