"""Stage A: the packaged MiniLM as a cross-encoder, the pair cache, and the bridge unit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from memsafe_lib.encodings import encoders as E
from memsafe_lib.variants import construction as C
from tests.synthetic import make_query

PAIRS = [
    E.Pair("who wrote hamlet?", "Hamlet: Hamlet is a tragedy written by William Shakespeare around 1600."),
    E.Pair("who wrote hamlet?", "Paris: Paris is the capital and most populous city of France."),
    E.Pair("when did the berlin wall fall?", "Berlin Wall: The wall fell on 9 November 1989 after weeks of unrest."),
    E.Pair("when did the berlin wall fall?", "Hamlet: Hamlet is a tragedy written by William Shakespeare around 1600.",
           bridge="Berlin Wall: The wall fell on 9 November 1989."),
]


@pytest.fixture(scope="module")
def fp32() -> E.CrossEncoder:
    return E.CrossEncoder(E.EncoderConfig(bf16=False, batch_size=2))


@pytest.fixture(scope="module")
def bi() -> E.BiEncoder:
    return E.BiEncoder()


def test_packaged_model_resolves_and_bad_paths_are_named(tmp_path: Path) -> None:
    assert (Path(E.resolve_model(E.PACKAGED_MINILM)) / "model.safetensors").exists()
    with pytest.raises(FileNotFoundError, match="no-such-dir"):
        E.resolve_model(str(tmp_path / "no-such-dir"))
    assert E.resolve_model("cross-encoder/ms-marco-MiniLM-L-6-v2") == "cross-encoder/ms-marco-MiniLM-L-6-v2"  # hub id


def test_cross_encoder_reads_pairs_jointly(fp32: E.CrossEncoder) -> None:
    """The pair input is [CLS] first [SEP] unit [SEP] with segment ids 0 then 1."""
    batch = fp32.tokenize(PAIRS[:1])
    ids = batch["input_ids"][0].tolist()
    sep = fp32.tokenizer.sep_token_id
    assert ids[0] == fp32.tokenizer.cls_token_id and ids.count(sep) == 2
    first_sep = ids.index(sep)
    assert set(batch["token_type_ids"][0, : first_sep + 1].tolist()) == {0}
    assert set(batch["token_type_ids"][0, first_sep + 1:].tolist()) == {1}


def test_mean_pooling_and_head_match_a_manual_computation(fp32: E.CrossEncoder) -> None:
    batch = fp32.tokenize(PAIRS[:2])
    with torch.no_grad():
        rep, logit = fp32(batch)
        hidden = fp32.backbone(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    manual = (hidden * mask).sum(1) / mask.sum(1)
    assert torch.allclose(rep, manual, atol=1e-6)
    assert torch.allclose(logit, manual @ fp32.head.weight[0] + fp32.head.bias[0], atol=1e-6)


def test_truncation_to_max_length() -> None:
    short = E.CrossEncoder(E.EncoderConfig(max_length=16, bf16=False))
    assert short.tokenize(PAIRS)["input_ids"].shape[1] == 16


def test_each_unique_pair_is_encoded_once_and_cached(fp32: E.CrossEncoder, tmp_path: Path) -> None:
    cache = E.EncodingCache(tmp_path / "enc.sqlite")
    stats = E.EncodeStats()
    reps, logits = E.encode_pairs(fp32, PAIRS * 3, cache, progress=False, stats=stats)
    assert (stats.requested, stats.unique, stats.encoded) == (12, 4, 4)
    assert np.array_equal(reps[:4], reps[4:8]) and len(cache) == 4
    again = E.EncodeStats()
    reps2, _ = E.encode_pairs(fp32, PAIRS, cache, progress=False, stats=again)
    assert again.encoded == 0 and again.from_cache == 4
    assert np.array_equal(reps2, reps[:4])
    cache.close()  # a closed cache reopens on use (transfer encodes with a finished run's ranker)
    after_close = E.EncodeStats()
    E.encode_pairs(fp32, PAIRS, cache, progress=False, stats=after_close)
    assert after_close.from_cache == 4


def test_encodings_do_not_depend_on_batching(fp32: E.CrossEncoder) -> None:
    """Length bucketing and dynamic padding must not change an fp32 encoding."""
    one_by_one = np.vstack([E.encode_pairs(fp32, [p], None, progress=False)[0] for p in PAIRS])
    batched, _ = E.encode_pairs(fp32, list(reversed(PAIRS)), None, progress=False)
    assert np.allclose(one_by_one, batched[::-1], atol=1e-5)


def test_bf16_stays_close_to_fp32(fp32: E.CrossEncoder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMSAFE_BF16", "1")  # bf16 even on a CPU without a fast bf16 path
    bf16 = E.CrossEncoder(E.EncoderConfig(bf16=True))
    assert bf16.bf16
    r32, l32 = E.encode_pairs(fp32, PAIRS, None, progress=False)
    r16, l16 = E.encode_pairs(bf16, PAIRS, None, progress=False)
    cos = (r32 * r16).sum(1) / np.linalg.norm(r32, axis=1) / np.linalg.norm(r16, axis=1)
    assert cos.min() > 0.99 and np.abs(l32 - l16).max() < 0.02
    assert bf16.fingerprint() != fp32.fingerprint()  # separate cache entries


def test_killed_run_resumes_with_only_the_missing_pairs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = E.CrossEncoder(E.EncoderConfig(bf16=False, batch_size=1))
    cache = E.EncodingCache(tmp_path / "enc.sqlite")
    reference, _ = E.encode_pairs(model, PAIRS, None, progress=False)
    real_forward = model.forward
    calls = {"n": 0}

    def dies_after_two(batch: dict) -> tuple:
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        return real_forward(batch)

    monkeypatch.setattr(model, "forward", dies_after_two)
    with pytest.raises(KeyboardInterrupt):
        E.encode_pairs(model, PAIRS, cache, progress=False)
    assert len(cache) == 2  # committed batches survive
    monkeypatch.setattr(model, "forward", real_forward)
    stats = E.EncodeStats()
    resumed, _ = E.encode_pairs(model, PAIRS, E.EncodingCache(tmp_path / "enc.sqlite"), progress=False, stats=stats)
    assert stats.encoded == 2 and stats.from_cache == 2
    assert np.allclose(resumed, reference, atol=1e-6)


def test_fingerprint_tracks_the_weights() -> None:
    a = E.CrossEncoder(E.EncoderConfig(bf16=False), seed=17)
    b = E.CrossEncoder(E.EncoderConfig(bf16=False), seed=17)
    c = E.CrossEncoder(E.EncoderConfig(bf16=False), seed=29)  # a different new head
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_a_frozen_encoder_hashes_its_weights_once_per_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """`memsafe score` asks for the fingerprint on every chunk it reads (0.1 s a time for MiniLM):
    a frozen encoder (a gate's) hashes once per window; an unfrozen one hashes on every call, so
    no change to its weights, however made, can leave a stale cache key."""
    hashed: list[str] = []
    real = E.weights_fingerprint
    monkeypatch.setattr(E, "weights_fingerprint", lambda module, settings="": hashed.append(settings) or real(module, settings))
    model = E.CrossEncoder(E.EncoderConfig(bf16=False), seed=17)
    first = model.fingerprint()
    with torch.no_grad():
        next(model.parameters()).data.add_(1.0)  # bumps no version counter: only a new hash sees it
    assert model.fingerprint() != first and len(hashed) == 2
    assert model.freeze() is model and not model.training
    pinned = model.fingerprint()
    assert [model.fingerprint() for _ in range(3)] == [pinned] * 3 and len(hashed) == 3
    wider = model.at_window(model.config.max_length * 2)
    assert wider.fingerprint() != pinned and wider.fingerprint() == wider.fingerprint() and len(hashed) == 4
    assert not any(p.requires_grad for p in model.parameters())  # training it now fails loudly


def test_bridge_unit_is_the_bi_encoder_top_unit(bi: E.BiEncoder) -> None:
    units = ["Paris is the capital of France.", "Hamlet is a tragedy written by William Shakespeare.",
             "The Berlin Wall fell in 1989."]
    assert bi.top_unit("Who wrote Hamlet?", units) == 1
    emb = bi.embed(units + ["Who wrote Hamlet?"])
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)


def test_encode_variants_shapes_and_bridge_pairs(fp32: E.CrossEncoder, bi: E.BiEncoder) -> None:
    variants = C.build_size_matched([make_query("v", 2, 3)]).variants
    stats = E.EncodeStats()
    encoded = E.encode_variants(fp32, variants, bi, progress=False, stats=stats)
    for v, enc in zip(variants, encoded, strict=True):
        assert enc.plain.shape == enc.bridge.shape == (len(v.units), fp32.hidden_size)
        assert enc.plain_logit.shape == (len(v.units),) and 0 <= enc.top_unit < len(v.units)
    # Variants share (q, u) pairs: fewer pairs are encoded than requested.
    assert stats.encoded < stats.requested



def test_loading_an_encoder_prints_no_weight_loading_bar(capfd: pytest.CaptureFixture[str]) -> None:
    """`memsafe train` loads the encoder six times (two folds, the ranker, the frozen rung):
    transformers' "Loading weights" bar said nothing each time."""
    capfd.readouterr()
    E.CrossEncoder(E.EncoderConfig(bf16=False))
    E.BiEncoder()
    assert "Loading weights" not in capfd.readouterr().err


def test_an_encoder_cut_to_its_first_layers_computes_what_those_layers_of_the_whole_encoder_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """Smoke's encoder is the packaged one cut to its first layer, made once as a local model
    directory. A cut's output must be the whole encoder's hidden state after those layers
    (transformers' own ``output_hidden_states``), quietly, and a second resolve makes nothing."""
    from transformers import AutoModel, AutoTokenizer

    from memsafe_lib.config import PACKAGED_ENCODER, SCALES, SMOKE_ENCODER

    monkeypatch.setenv("MEMSAFE_MODEL_DIR", str(tmp_path))
    assert SMOKE_ENCODER == E.first_layers(PACKAGED_ENCODER, 1) == SCALES["smoke"].neural.encoder
    E.resolve_model(SMOKE_ENCODER)
    cut = E.resolve_model(E.first_layers(PACKAGED_ENCODER, 2))
    assert "UNEXPECTED" not in capfd.readouterr().err  # the dropped layers are not reported as a problem
    assert E.resolve_model(E.first_layers(PACKAGED_ENCODER, 2)) == cut and len(list(tmp_path.iterdir())) == 2
    whole_path = E.resolve_model(PACKAGED_ENCODER)
    tokenizer = AutoTokenizer.from_pretrained(whole_path)
    batch = tokenizer(["who wrote the novel", "a unit of evidence about a river"], padding=True, return_tensors="pt")
    with torch.no_grad():
        whole = AutoModel.from_pretrained(whole_path)(**batch, output_hidden_states=True).hidden_states[2]
        two = AutoModel.from_pretrained(cut)(**batch).last_hidden_state
    assert E.load_hf_config(cut).num_hidden_layers == 2
    torch.testing.assert_close(two, whole, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="keeps them all"):
        E.resolve_model(E.first_layers(PACKAGED_ENCODER, 6))
