"""Stage A's start: a real cross-encoder keeps its trained head (its logits are the relevance
score and pick u_top), a bare encoder gets a new head and bi-encoder cosine instead, and a
model that cannot be loaded offline says what to download. Offline, with tiny random BERTs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel

from memsafe_lib.config import FIT_WORKERS_ENV, PACKAGED_ENCODER, SCALES
from memsafe_lib.encodings import encoders as E
from memsafe_lib.encodings import stagea
from memsafe_lib.encodings.biencoder import BiEncoderScorer
from memsafe_lib.encodings.finetune import FinetuneConfig
from memsafe_lib.encodings.stagea import StageAConfig, run_stage_a, with_ranker_logits
from memsafe_lib.variants import construction as C
from tests.synthetic import make_query


def _tiny(tmp: Path, head: bool) -> Path:
    """A 2-layer BERT saved with the packaged MiniLM tokenizer; ``head``: a trained-looking
    one-logit classifier (random weights, but *saved*, so loading must keep them)."""
    tokenizer = AutoTokenizer.from_pretrained(E.resolve_model(PACKAGED_ENCODER))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=1)
    torch.manual_seed(0)
    model = BertForSequenceClassification(config) if head else BertModel(config)
    if head:
        with torch.no_grad():  # a head that is certainly not a fresh N(0, 0.02) initialisation
            model.classifier.weight.uniform_(-1.0, 1.0)
            model.classifier.bias.fill_(0.5)
    path = tmp / ("cross" if head else "bare")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def cross_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny(tmp_path_factory.mktemp("enc"), head=True)


@pytest.fixture(scope="module")
def bare_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny(tmp_path_factory.mktemp("enc"), head=False)


PAIRS = [E.Pair("Who built the bridge?", "The bridge was built by Anna."), E.Pair("Who built it?", "Cats sleep."),
         E.Pair("Where is Alpha?", "Alpha is a place.", bridge="Alpha: a town")]


def _reference_logits(path: Path, pairs: list[E.Pair]) -> np.ndarray:
    tok = AutoTokenizer.from_pretrained(path)
    model = BertForSequenceClassification.from_pretrained(path).eval()
    batch = tok([p.first() for p in pairs], [p.unit for p in pairs], truncation="longest_first", max_length=64,
                padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**batch).logits[:, 0].numpy()


def test_a_cross_encoder_keeps_its_trained_head(cross_path: Path) -> None:
    model = E.CrossEncoder(E.EncoderConfig(model=str(cross_path), max_length=64, bf16=False, pooling="cls"))
    assert model.pretrained_head and model.head is None
    _, logits = E.encode_pairs(model, PAIRS, progress=False)
    np.testing.assert_allclose(logits, _reference_logits(cross_path, PAIRS), rtol=1e-4, atol=1e-5)
    other_seed = E.CrossEncoder(E.EncoderConfig(model=str(cross_path), max_length=64, bf16=False), seed=99)
    np.testing.assert_allclose(E.encode_pairs(other_seed, PAIRS, progress=False)[1], logits, rtol=1e-4, atol=1e-5)


def test_u_top_follows_the_pretrained_head(cross_path: Path) -> None:
    ranker = E.make_ranker(E.EncoderConfig(model=str(cross_path), max_length=64))
    assert isinstance(ranker, E.CrossEncoderRanker)
    units = ["Alpha is a place.", "The bridge was built by Anna.", "Cats sleep.", "Anna was an engineer."]
    queries = ["Who built the bridge?", "Where is Alpha?"]
    expected = [int(np.argmax(_reference_logits(cross_path, [E.Pair(q, u) for u in units]))) for q in queries]
    assert ranker.top_units(queries, [units, units]) == expected
    assert "cross-encoder" in ranker.description


def test_a_bare_encoder_gets_a_new_head_and_cosine_instead(bare_path: Path) -> None:
    config = E.EncoderConfig(model=str(bare_path), max_length=64, bf16=False)
    model = E.CrossEncoder(config)
    assert not model.pretrained_head and model.head is not None
    ranker = E.make_ranker(config)
    assert isinstance(ranker, E.BiEncoder) and "no trained relevance head" in ranker.description
    emb = ranker.embed([p.first() for p in PAIRS] + [p.unit for p in PAIRS])
    n = len(PAIRS)
    np.testing.assert_allclose(ranker.relevance(PAIRS), np.einsum("ij,ij->i", emb[:n], emb[n:]), rtol=1e-5)


def test_the_frozen_rung_of_a_bare_start_reads_cosine_not_its_random_head(bare_path: Path, tmp_path: Path) -> None:
    variants = C.build_size_matched([make_query(f"f{i}", 2, 3) for i in range(6)]).variants
    config = replace(StageAConfig(E.EncoderConfig(model=str(bare_path), max_length=48, bf16=False, batch_size=8)),
                     frozen=True)
    result = run_stage_a(variants, config, seed=17, cache_dir=tmp_path, progress=False)
    assert result.summary()["relevance_logit"] == result.bi.description
    plain, bridge, _ = E.variant_pairs(variants, result.bi)
    cosine = result.bi.relevance(plain + bridge)
    got = np.concatenate([result.encodings[v.variant_id].plain_logit for v in variants])
    np.testing.assert_allclose(got, cosine[:len(plain)], rtol=1e-5)
    again = with_ranker_logits(list(result.encodings.values()), variants, result.bi)
    assert all(np.array_equal(a.bridge_logit, result.encodings[a.variant_id].bridge_logit) for a in again)


def test_the_paper_scale_starts_from_the_ms_marco_cross_encoder() -> None:
    assert SCALES["paper"].neural.encoder == "cross-encoder/ms-marco-MiniLM-L-6-v2"
    assert SCALES["cpu"].neural.encoder == PACKAGED_ENCODER
    assert SCALES["smoke"].neural.encoder == E.first_layers(PACKAGED_ENCODER, 1)  # the same weights, one layer
    assert SCALES["cpu"].with_encoder("some/dir").neural.encoder == "some/dir"
    assert SCALES["cpu"].with_encoder(None) is SCALES["cpu"]


@pytest.mark.parametrize("scale", ["smoke", "cpu"])
def test_cpu_and_smoke_pool_the_cross_encoder_over_the_three_qa_datasets(scale: str) -> None:
    """The Stage A study's decision (REPORT, "The Stage A study"), adopted by both CPU scales so
    CI runs the path the cpu results take: one cross-encoder pair per fold serves MuSiQue,
    HotpotQA and 2Wiki; never the transfer target or clinical data."""
    neural = SCALES[scale].neural
    assert neural.stage_a_scorer == "cross"
    assert sorted(neural.stage_a_pool) == ["2wikimultihopqa", "hotpotqa", "musique"]
    assert not {"squad2", "mimic-omr", "mimic-labs"} & set(neural.stage_a_pool)


def test_cpu_keeps_its_pair_cap_and_paper_keeps_its_recipe() -> None:
    assert SCALES["cpu"].neural.finetune_max_pairs == 4000  # per dataset per fold, as before pooling
    assert SCALES["paper"].neural.stage_a_pool == ()


def test_budget_pooling_follows_the_checkpoint(cross_path: Path, bare_path: Path) -> None:
    cpu = SCALES["cpu"]
    assert StageAConfig.for_budget(cpu.with_encoder(str(cross_path)).neural).encoder.pooling == "cls"
    assert StageAConfig.for_budget(cpu.with_encoder(str(bare_path)).neural).encoder.pooling == "mean"
    assert StageAConfig.for_budget(cpu.neural).encoder == E.EncoderConfig(max_length=256)  # the paper's window


def test_an_encoder_that_cannot_load_offline_says_what_to_download(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the hub reads the variable once, at import: without this it retries the network for ~20 s
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(E.EncoderUnavailableError, match="huggingface-cli download no-such-org/no-such-model"):
        E.load_hf_config("no-such-org/no-such-model")


def test_the_paper_dry_run_keeps_every_paper_setting_but_size_and_models() -> None:
    """What `--scale paper-dry` changes against `--scale paper`: the number of questions, the
    training-set caps and the three downloaded models, nothing else that picks a code path."""
    paper, dry = SCALES["paper"], SCALES["paper-dry"]
    assert dry.seeds == paper.seeds == (17, 29, 43, 71, 101)
    assert dry.neural.encoder_seeds == paper.neural.encoder_seeds and len(dry.neural.encoder_seeds) == 3
    same = ("max_length", "finetune_lr", "stage_b_epochs", "full_grid", "concat_max_length", "encoder_pooling")
    assert all(getattr(dry.neural, f) == getattr(paper.neural, f) for f in same)
    assert dry.neural.full_grid and dry.neural.max_length == 256
    # training sets capped (hash subsets: the capped code path cpu scale also takes)
    assert dry.neural.finetune_max_pairs and dry.neural.concat_max_train
    assert dry.max_base_queries is not None and paper.max_base_queries is None
    assert dry.base_query_cap("musique") == dry.max_base_queries
    assert dry.base_query_cap("squad2") > dry.max_base_queries  # enough one-paragraph questions for a test split
    assert SCALES["cpu"].base_query_cap("squad2") is None
    assert set(dry.notebook_parameters) == set(paper.notebook_parameters)
    assert set(dry.notebook_parameters["06_reader_gating"]) == set(paper.notebook_parameters["06_reader_gating"])


def test_fold_encoders_tuned_side_by_side_equal_those_tuned_in_process(bare_path: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two worker processes, or one after another here: the same weights and encodings
    (fine-tuning is pinned to one torch thread), and a finished fold is loaded, not re-tuned."""
    variants = C.build_size_matched([make_query(f"p{i}", 2, 3) for i in range(12)]).variants
    config = StageAConfig(E.EncoderConfig(model=str(bare_path), max_length=48, bf16=False, batch_size=8),
                          FinetuneConfig(max_pairs=24, batch_size=4, lr=1e-3))
    results = {}
    for workers in ("1", "2"):
        monkeypatch.setenv(FIT_WORKERS_ENV, workers)
        results[workers] = run_stage_a(variants, config, seed=17, cache_dir=tmp_path / workers, progress=False)
    one, two = results["1"], results["2"]
    assert one.train_pairs == two.train_pairs and min(one.train_pairs) > 0
    for v in variants:
        a, b = one.encodings[v.variant_id], two.encodings[v.variant_id]
        np.testing.assert_array_equal(a.plain, b.plain)
        np.testing.assert_array_equal(a.bridge_logit, b.bridge_logit)
    pretrained = run_stage_a(variants, replace(config, frozen=True), seed=17, cache_dir=tmp_path / "f", progress=False)
    assert any(not np.array_equal(one.encodings[v.variant_id].plain, pretrained.encodings[v.variant_id].plain)
               for v in variants)  # fine-tuning did change the encoder
    monkeypatch.setattr(stagea, "finetune", lambda *a, **k: pytest.fail("a finished fold was tuned again"))
    again = run_stage_a(variants, config, seed=17, cache_dir=tmp_path / "1", progress=False)
    assert again.train_pairs == one.train_pairs



def test_a_relevance_only_frozen_stage_a_equals_the_full_one_without_encoding_pairs(bare_path: Path,
                                                                                   tmp_path: Path) -> None:
    """When only relevance aggregation reads the frozen Stage A (notebook 03's ladder on
    HotpotQA and 2Wiki), a bare start skips the pair encodings: the same relevance logits and
    u_top as the full frozen run, no pair encoded, empty representations; a transfer target is
    encoded the same way."""
    variants = C.build_size_matched([make_query(f"r{i}", 2, 3) for i in range(8)]).variants
    variants = [replace(v, split=("train", "train", "test")[int(v.base_id[1:]) % 3]) for v in variants]
    config = replace(StageAConfig(E.EncoderConfig(model=str(bare_path), max_length=48, bf16=False, batch_size=8)),
                     frozen=True)
    full = run_stage_a(variants, config, seed=17, cache_dir=tmp_path / "full", progress=False)
    only = run_stage_a(variants, replace(config, relevance_only=True), seed=17, cache_dir=tmp_path / "only",
                       progress=False)
    assert full.stats.encoded > 0 and only.stats.requested == only.stats.encoded == 0
    assert only.summary()["pair_encodings"] is False and full.summary()["pair_encodings"] is True
    for v in variants:
        a, b = full.encodings[v.variant_id], only.encodings[v.variant_id]
        assert a.top_unit == b.top_unit and b.plain.shape == (len(v.units), 0)
        np.testing.assert_allclose(b.plain_logit, a.plain_logit, rtol=1e-6)
        np.testing.assert_allclose(b.bridge_logit, a.bridge_logit, rtol=1e-6)
    targets = C.build_size_matched([make_query(f"t{i}", 2, 3) for i in range(3)]).variants
    targets = [replace(v, split="test") for v in targets]
    for a, b in zip(full.encode(targets), only.encode(targets), strict=True):
        np.testing.assert_allclose(b.plain_logit, a.plain_logit, rtol=1e-6)
        assert a.top_unit == b.top_unit and a.plain.shape[1] > 0 and b.plain.shape[1] == 0


def test_a_start_with_a_head_still_encodes_pairs_for_its_frozen_relevance(cross_path: Path, tmp_path: Path) -> None:
    variants = C.build_size_matched([make_query(f"h{i}", 2, 3) for i in range(4)]).variants
    config = replace(StageAConfig(E.EncoderConfig(model=str(cross_path), max_length=48, bf16=False, batch_size=8,
                                                  pooling="cls")), frozen=True, relevance_only=True)
    result = run_stage_a(variants, config, seed=17, cache_dir=tmp_path, progress=False)
    assert result.summary()["pair_encodings"] is True and result.stats.requested > 0


def test_only_models_that_read_frozen_representations_ask_for_them() -> None:
    from memsafe_lib.estimators.registry import LADDER, frozen_representations

    assert not frozen_representations(LADDER)  # relevance_agg_frozen reads logits only
    assert frozen_representations(["memsafe_frozen", "relevance_agg_frozen"])
    assert not frozen_representations(["memsafe", "mean_pool"])


def test_cpu_runs_no_qa_learning_curve_but_smoke_and_paper_do() -> None:
    """The paper has no QA curve; at cpu its pooled fold encoders per fraction cost ~50 min."""
    from memsafe_lib import config

    assert config.SCALES["cpu"].notebook_parameters[config.NB03_ABLATIONS]["curve_datasets"] == []
    assert config.SCALES["paper"].notebook_parameters[config.NB03_ABLATIONS]["curve_datasets"] == ["musique", "hotpotqa"]
    assert config.NB03_ABLATIONS not in config.SCALES["smoke"].notebook_parameters  # the notebook's own: one curve point


def test_a_checkpoint_saved_in_half_precision_loads_and_trains_in_fp32(tmp_path: Path) -> None:
    """Checkpoints are often shipped in fp16 (half the download). transformers then takes the
    dtype from the saved config, and a CPU encoder in fp16 stops with "mixed dtype (CPU)";
    Stage A must hold its weights in fp32 (bf16 is autocast, never storage) wherever they come from."""
    path = _tiny(tmp_path, head=False)
    BertModel.from_pretrained(path).half().save_pretrained(path)
    config = E.EncoderConfig(model=str(path), bf16=False)
    for model in (E.CrossEncoder(config), E.BiEncoder(config).model, BiEncoderScorer(config)):
        assert {p.dtype for p in model.parameters()} == {torch.float32}
    reps, logits = E.encode_pairs(E.CrossEncoder(E.EncoderConfig(model=str(path), bf16=False)), PAIRS, progress=False)
    assert reps.dtype == np.float32 and np.isfinite(logits).all()


def test_transfer_targets_are_encoded_once_for_every_source_sharing_the_encoders(bare_path: Path, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Pooled Stage A serves the three QA sources with one fold-encoder pair, and notebook 04
    encodes SQuAD 2.0 through each source's context: the pairs are keyed by weights and content
    beside the shared encoders, so the second source (and a resumed run) reads them back."""
    variants = C.build_size_matched([make_query(f"s{i}", 2, 3) for i in range(8)]).variants
    pool = [replace(v, variant_id="pool:" + v.variant_id, dataset="other") for v in variants if v.split == "train"]
    config = StageAConfig(E.EncoderConfig(model=str(bare_path), max_length=48, bf16=False, batch_size=8),
                          FinetuneConfig(max_pairs=16, batch_size=4, lr=1e-3))
    shared = tmp_path / "encoders"
    first = run_stage_a(variants, config, 17, tmp_path / "a", progress=False, pool_train=pool, encoder_dir=shared)
    second = run_stage_a(variants, config, 17, tmp_path / "b", progress=False, pool_train=pool, encoder_dir=shared)
    targets = [replace(v, split="test") for v in C.build_size_matched([make_query(f"t{i}", 2, 3)
                                                                       for i in range(3)]).variants]
    encoded = first.encode(targets, progress=False)
    monkeypatch.setattr(E, "_buckets", lambda *a, **k: pytest.fail("a target pair was encoded twice"))
    again = second.encode(targets, progress=False)
    for a, b in zip(encoded, again, strict=True):
        np.testing.assert_array_equal(a.plain, b.plain)
        np.testing.assert_array_equal(a.bridge_logit, b.bridge_logit)
