"""The concatenated cross-encoder and the LLM judge: subsets, caching, scores in range, and
comparisons on the judged subset checked against scikit-learn."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score
from transformers import AutoTokenizer, ModernBertConfig, ModernBertForSequenceClassification

from memsafe_lib.config import PACKAGED_ENCODER, SCALES
from memsafe_lib.encodings.encoders import resolve_model
from memsafe_lib.estimators import concat as K
from memsafe_lib.estimators import judge as J
from memsafe_lib.estimators.registry import make_model, seeds_for
from memsafe_lib.evaluation import llm_judge
from memsafe_lib.variants import construction as C

from .test_finetune import query


@pytest.fixture(scope="module")
def variants() -> list[C.Variant]:
    return C.build_size_matched([query(i) for i in range(24)]).variants


def test_capped_keeps_whole_questions_deterministically(variants: list[C.Variant]) -> None:
    sub = K.capped(variants, 10)
    assert 0 < len(sub) <= 10
    assert {v.variant_id for v in sub} == {v.variant_id for v in K.capped(list(reversed(variants)), 10)}
    per_base = {b: sum(v.base_id == b for v in variants) for b in {v.base_id for v in sub}}
    assert all(sum(v.base_id == b for v in sub) == n for b, n in per_base.items())  # whole questions only
    assert K.capped(variants, None) == variants


def test_concat_seeds_follow_the_paper() -> None:
    assert seeds_for("concat_ce", [17, 29, 43, 71, 101]) == [17, 29, 43]
    assert seeds_for("memsafe", [17, 29, 43, 71, 101]) == [17, 29, 43, 71, 101]


def test_concat_cross_encoder_fits_predicts_and_reuses_its_weights(variants: list[C.Variant], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    settings = K.ConcatConfig(max_length=64, epochs=1, batch_size=4, max_train=12, bf16=False)
    train = [v for v in variants if v.split == "train"]
    model = K.ConcatCrossEncoder(17, settings, cache_dir=tmp_path).fit(train)
    preds = model.predict(variants[:6])
    assert preds.unsafe_prob.shape == (6,) and ((preds.unsafe_prob > 0) & (preds.unsafe_prob < 1)).all()
    assert set(preds.state) <= set(C.STATES)
    assert model.config["train_memories"] <= 12

    def no_training(*a: object, **k: object) -> None:
        raise AssertionError("fine-tuned again although the weights were saved")

    monkeypatch.setattr(K, "finetune", no_training)
    again = K.ConcatCrossEncoder(17, settings, cache_dir=tmp_path).fit(train).predict(variants[:6])
    np.testing.assert_allclose(again.unsafe_prob, preds.unsafe_prob, atol=1e-6)


def test_concat_trains_its_state_head_with_the_encoder(variants: list[C.Variant], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The integrity state comes from a head tuned jointly with the unsafe logit: fitting encodes
    no training memory after tuning, the head is saved with the encoder and read back, and the
    states predicted are the argmax of that head over the pooled representation."""
    settings = K.ConcatConfig(max_length=64, epochs=1, batch_size=4, max_train=12, bf16=False)
    train = [v for v in variants if v.split == "train"]
    calls: list[int] = []
    encode = K.encode_pairs
    monkeypatch.setattr(K, "encode_pairs", lambda model, pairs, *a, **k: calls.append(len(pairs)) or encode(
        model, pairs, *a, **k))
    model = K.ConcatCrossEncoder(17, settings, cache_dir=tmp_path).fit(train)
    assert calls == []  # on main: every training memory encoded again for a logistic head
    start = K.seeded_state_head(model._model.hidden_size, 3, 17)  # type: ignore[union-attr]
    assert not torch.equal(model._state_head.weight, start.weight)  # type: ignore[union-attr]
    held_out = variants[:6]
    preds = model.predict(held_out)
    reps, _ = encode(model._model, [K.pair(v) for v in held_out], None, progress=False)  # type: ignore[arg-type]
    by_hand = np.array(C.STATES)[(reps @ model._state_head.weight.detach().numpy().T  # type: ignore[union-attr]
                                  + model._state_head.bias.detach().numpy()).argmax(axis=1)]  # type: ignore[union-attr]
    assert list(preds.state) == list(by_hand)
    monkeypatch.setattr(K, "finetune", lambda *a, **k: pytest.fail("tuned again although the weights were saved"))
    again = K.ConcatCrossEncoder(17, settings, cache_dir=tmp_path).fit(train)
    assert torch.equal(again._state_head.weight, model._state_head.weight)  # type: ignore[union-attr]
    assert list(again.predict(held_out).state) == list(preds.state)


def _tiny_modernbert(path: Path) -> Path:
    """A 2-layer ModernBERT sequence classifier (one logit, 2,048 positions) with the packaged
    tokenizer: the shape of the paper's 8k reranker, small enough for a test."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(PACKAGED_ENCODER))
    config = ModernBertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64,
                              num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=2048, num_labels=1,
                              pad_token_id=tokenizer.pad_token_id, cls_token_id=tokenizer.cls_token_id,
                              sep_token_id=tokenizer.sep_token_id, bos_token_id=tokenizer.cls_token_id,
                              eos_token_id=tokenizer.sep_token_id)
    torch.manual_seed(0)
    ModernBertForSequenceClassification(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_the_joint_encoder_reads_a_long_context_checkpoint_past_512_tokens(variants: list[C.Variant],
                                                                          tmp_path: Path) -> None:
    """``joint_8k`` is the concatenated cross-encoder on the budget's long-context start and window:
    a memory of about 700 tokens is read whole at a 1,024-token window (512 would cut it)."""
    start = _tiny_modernbert(tmp_path / "modernbert")
    budget = replace(SCALES["smoke"].neural, joint_encoder=str(start), joint_max_length=1024, concat_max_train=12)
    context = SimpleNamespace(budget=budget, device="cpu", cache_dir=tmp_path / "cache")
    model = make_model("joint_8k", 17, context)  # type: ignore[arg-type]
    assert (model.name, model.settings.max_length, model.encoder_model) == ("joint_8k", 1024, str(start))
    assert seeds_for("joint_8k", [17, 29, 43, 71, 101]) == [17, 29, 43]
    train = [v for v in variants if v.split == "train"]
    preds = model.fit(train).predict(variants[:6])
    assert ((preds.unsafe_prob > 0) & (preds.unsafe_prob < 1)).all() and model.config["encoder"] == str(start)
    long = K.Pair("which page names the river?", " ".join(f"page {i} river" for i in range(230)))
    assert model._model.tokenize([long])["input_ids"].shape[1] > 512 and not model._model.truncated([long]).any()


def test_the_concatenated_cross_encoder_learns_a_separable_fixture(variants: list[C.Variant]) -> None:
    """Evidence units name the question's topic, distractors other topics: one epoch over the
    training memories separates held-out complete from unsafe memories (a constant 0.5, or a
    model that never trained, scores 0.5)."""
    settings = K.ConcatConfig(max_length=64, epochs=1, batch_size=4, bf16=False)
    train = [v for v in variants if v.split == "train"]
    held_out = [v for v in variants if v.split != "train"]
    scores = K.ConcatCrossEncoder(17, settings).fit(train).predict(held_out).unsafe_prob
    assert roc_auc_score([v.unsafe for v in held_out], scores) > 0.8


class ScriptedLM:
    """A language model whose next-token log-probabilities are given per prompt."""

    name, fingerprint, n_ctx = "scripted", "scripted-v1", 8192

    def __init__(self, top: dict[str, dict[str, float]]) -> None:
        self.top = top

    def next_token(self, messages: list[dict[str, str]], top_n: int) -> tuple[dict[str, float], int]:
        return self.top[messages[-1]["content"]], 100

    def generate(self, messages: list[dict[str, str]], max_tokens: int) -> object:
        raise AssertionError("the judge reads the next token only")


def test_the_judge_scores_unsafe_as_p_no_over_p_yes_plus_p_no(variants: list[C.Variant]) -> None:
    """Direction and arithmetic by hand: a memory the model calls sufficient (Yes 0.9, No 0.05 +
    0.03 over two spellings) scores 0.08 / 0.98; one it calls insufficient (Yes 0.1, No 0.7)
    scores 0.7 / 0.8; so its unsafe AUROC is 1 where the labels follow the model."""
    sample = variants[:9]
    judge = J.LLMJudge(lm=ScriptedLM({}))
    sufficient = {"Yes": math.log(0.9), " No": math.log(0.05), "no": math.log(0.03), "Maybe": math.log(0.02)}
    insufficient = {" yes": math.log(0.1), "No": math.log(0.7), "The": math.log(0.2)}
    judge.lm = ScriptedLM({judge.messages(v)[-1]["content"]: insufficient if v.unsafe else sufficient for v in sample})
    scores = judge.scores(sample, progress=False)
    expected = [0.7 / 0.8 if v.unsafe else 0.08 / 0.98 for v in sample]
    np.testing.assert_allclose(scores, expected, rtol=1e-12)
    assert roc_auc_score([v.unsafe for v in sample], scores) == 1.0


def test_judge_prompt_and_exemplars(variants: list[C.Variant]) -> None:
    v = variants[0]
    text = J.user_message(v)
    assert v.question in text and f"[{len(v.units)}] " in text and J.INSTRUCTION in text
    judge = J.LLMJudge(shots=4).fit(variants)
    assert [x.state == C.COMPLETE for x in judge.exemplars] == [True, False, True, False]


def test_judge_subset_is_whole_questions_in_hash_order(variants: list[C.Variant]) -> None:
    sub = llm_judge.judge_subset(variants, 3)
    assert len({v.base_id for v in sub}) == 3
    assert llm_judge.judge_subset(list(reversed(variants)), 3) == list(reversed(sub))


def test_resolve_llm_passes_paths_and_hub_ids_through() -> None:
    assert J.resolve_llm("Qwen/Qwen2.5-7B-Instruct") == ("transformers", "Qwen/Qwen2.5-7B-Instruct")
    backend, path = J.resolve_llm(J.PACKAGED_SMOLLM2)
    assert backend == "llama.cpp" and Path(path).is_file() and path.endswith(".gguf")


def test_yes_no_mass_sums_every_spelling_by_hand() -> None:
    top = {"Yes": math.log(0.2), " yes": math.log(0.1), " No": math.log(0.3), "Maybe": math.log(0.4)}
    p_yes, p_no = J.yes_no_mass(top)
    assert p_yes == pytest.approx(0.3) and p_no == pytest.approx(0.3)


def test_judge_scores_are_ratios_and_cached(variants: list[C.Variant], tmp_path: Path) -> None:
    judge = J.LLMJudge(cache_path=tmp_path / "judge.sqlite")
    scores = judge.scores(variants[:2], progress=False)
    assert ((scores > 0) & (scores < 1)).all()
    fresh = J.LLMJudge(cache_path=tmp_path / "judge.sqlite", lm=judge.lm)

    class MustNotRun:
        name, fingerprint, n_ctx = judge.lm.name, judge.lm.fingerprint, judge.lm.n_ctx

        def next_token(self, *args: object) -> None:
            raise AssertionError("a cached prompt was scored again")

    fresh.lm = MustNotRun()  # type: ignore[assignment]
    np.testing.assert_array_equal(fresh.scores(variants[:2], progress=False), scores)


def test_comparison_on_the_judged_subset_matches_sklearn(variants: list[C.Variant]) -> None:
    sub = variants[:9]
    rng = np.random.default_rng(0)
    judge_scores = rng.random(len(sub))
    rows = []
    for seed in (17, 29):
        for v, p in zip(variants, rng.random(len(variants)), strict=True):
            rows.append({"model": "memsafe", "seed": seed, "split": "test", "variant_id": v.variant_id,
                         "unsafe_prob": p})
    preds = pd.DataFrame(rows)
    out = {r["model"]: r for r in llm_judge.compare_on_subset(sub, judge_scores, preds, ["memsafe"])}
    y = [v.unsafe for v in sub]
    assert out["llm_judge"]["unsafe_auroc"] == pytest.approx(roc_auc_score(y, judge_scores))
    assert out["llm_judge"]["unsafe_auprc"] == pytest.approx(average_precision_score(y, judge_scores))
    ids = [v.variant_id for v in sub]
    expected = np.mean([roc_auc_score(y, preds[preds.seed == s].set_index("variant_id").loc[ids, "unsafe_prob"])
                        for s in (17, 29)])
    assert out["memsafe"]["unsafe_auroc"] == pytest.approx(expected) and out["memsafe"]["n_seeds"] == 2


def test_concat_starts_from_a_fold_encoders_body_with_its_own_head(variants: list[C.Variant], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``start_file``: the fold encoder's body (every ``backbone.*`` weight, read back from the file
    itself), the concatenated model's own seeded head, and its own fine-tuning cache entry."""
    from safetensors.torch import load_file, save_file

    from memsafe_lib.encodings.encoders import CrossEncoder, EncoderConfig

    fold = CrossEncoder(EncoderConfig(model=K.PACKAGED_MINILM, max_length=32, bf16=False), seed=3)
    with torch.no_grad():
        for p in fold.parameters():
            p.add_(0.01)  # a "tuned" body that differs from the shipped one everywhere
    start = tmp_path / "encoder-fold0-test.safetensors"
    save_file({k: t.contiguous() for k, t in fold.state_dict().items()}, start)
    tuned: list[K.CrossEncoder] = []
    monkeypatch.setattr(K, "finetune", lambda model, *a, **k: tuned.append(model))  # no steps: the start itself
    settings = K.ConcatConfig(max_length=64, epochs=1, batch_size=4, max_train=6, bf16=False)
    train = [v for v in variants if v.split == "train"]
    model = K.ConcatCrossEncoder(17, settings, cache_dir=tmp_path, start_file=start).fit(train)
    saved = load_file(start)
    body = {k: t for k, t in saved.items() if k.startswith("backbone.")}
    assert body and all(torch.equal(tuned[0].state_dict()[k], t) for k, t in body.items())
    fresh = CrossEncoder(EncoderConfig(model=K.PACKAGED_MINILM, max_length=64, bf16=False), seed=17)
    assert torch.equal(tuned[0].head.weight, fresh.head.weight)  # type: ignore[union-attr]
    assert not torch.equal(tuned[0].head.weight, saved["head.weight"])
    assert model.config["start"] == f"stage_a:{start.name}"
    K.ConcatCrossEncoder(17, settings, cache_dir=tmp_path).fit(train)  # shipped start: another cached run
    assert len(list(tmp_path.glob("concat-*.safetensors"))) == 2

    save_file({"head.weight": saved["head.weight"]}, tmp_path / "head-only.safetensors")
    with pytest.raises(ValueError, match="no 'backbone"):
        K.ConcatCrossEncoder(17, settings, cache_dir=tmp_path, start_file=tmp_path / "head-only.safetensors").fit(train)


def test_context_names_the_concat_start_by_encoder_seed(tmp_path: Path) -> None:
    from memsafe_lib.encodings.encoders import EncodeStats
    from memsafe_lib.encodings.stagea import StageAResult
    from memsafe_lib.estimators.context import NeuralContext

    files = (tmp_path / "fold0.safetensors", tmp_path / "fold1.safetensors")
    smoke = SCALES["smoke"]
    scale = replace(smoke, neural=replace(smoke.neural, encoder_seeds=(17, 29, 43), concat_start="stage_a"))
    result = StageAResult({}, (), None, EncodeStats(), (0, 0), encoder_files=files)  # type: ignore[arg-type]
    context = NeuralContext("synthetic", scale, {17: result, 29: replace(result, encoder_files=files[::-1]),
                                                 43: result})
    assert context.concat_start_file(17) == files[0]
    assert context.concat_start_file(29) == files[1]  # seed 29's own fold-0 file
    assert context.concat_start_file(71) == files[0]  # the paper's reuse: 71 -> 17, 101 -> 29, as Stage B
    assert context.concat_start_file(101) == files[1]
    shipped = replace(context, scale=replace(scale, neural=replace(scale.neural, concat_start="pretrained")))
    assert shipped.concat_start_file(17) is None
    with pytest.raises(ValueError, match="no fine-tuned fold encoders"):
        replace(context, stage_a={}).concat_start_file(17)
    with pytest.raises(ValueError, match="concat_start must be"):
        replace(context, scale=replace(scale, neural=replace(scale.neural, concat_start="bi"))).concat_start_file(17)
