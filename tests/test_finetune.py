"""Stage A fine-tuning: evidence objective only, two folds, exact resume after a kill."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from memsafe_lib.config import FINETUNE_THREADS
from memsafe_lib.data.records import BaseQuery, Provenance, Unit
from memsafe_lib.encodings import encoders as E
from memsafe_lib.encodings import finetune as F
from memsafe_lib.variants import construction as C

TOPICS = ["volcano eruption lava", "violin orchestra concert", "glacier ice melting", "harbor ship cargo",
          "comet orbit telescope", "orchid flower garden"]


def query(i: int) -> BaseQuery:
    """Evidence units talk about the question's topic; distractors about other topics."""
    rng = np.random.default_rng(i)
    topic = TOPICS[i % len(TOPICS)]
    units = []
    for pos in range(5):
        is_ev = pos < 2
        words = topic if is_ev else TOPICS[(i + 1 + pos) % len(TOPICS)]
        units.append(Unit(f"f{i}:{pos}", f"Page {i}-{pos}", f"This page is about {words} number {rng.integers(99)}.",
                          is_ev, pos))
    return BaseQuery(f"f{i}", "synthetic", f"What do we know about the {topic}?", ("x",), tuple(units), True,
                     Provenance("synthetic", i, "0" * 64))


@pytest.fixture(scope="module")
def variants() -> list[C.Variant]:
    return C.build_size_matched([query(i) for i in range(12)]).variants


@pytest.fixture(scope="module")
def bi() -> E.BiEncoder:
    return E.BiEncoder()


def small_model(seed: int = 17) -> E.CrossEncoder:
    return E.CrossEncoder(E.EncoderConfig(bf16=False, max_length=48), seed=seed)


def test_folds_are_shared_and_balanced() -> None:
    folds = Counter(C.train_fold(f"q{i}") for i in range(4000))
    assert abs(folds[0] - 2000) < 150
    assert C.train_fold("q7") == C.train_fold("q7")


def test_training_pairs_are_unique_and_labelled_by_evidence(variants: list[C.Variant], bi: E.BiEncoder) -> None:
    pairs, labels = F.training_pairs(variants, bi)
    assert len(pairs) == len(set(pairs))
    plain = {(v.question, E.unit_string(u.title, u.text)): u.is_evidence for v in variants for u in v.units}
    for p, y in zip(pairs, labels, strict=True):
        assert y == plain[(p.query, p.unit)]
    capped, _ = F.training_pairs(variants, bi, max_pairs=10)
    assert len(capped) == 10 and capped == F.training_pairs(variants, bi, max_pairs=10)[0]


def test_balanced_cap_takes_evidence_and_distractors_equally(variants: list[C.Variant], bi: E.BiEncoder) -> None:
    pairs, labels = F.training_pairs(variants, bi)
    assert labels.mean() < 0.45  # the natural mix is unbalanced
    n_pos = int(labels.sum())
    for cap in (10, 2 * n_pos + 6):
        capped, y = F.training_pairs(variants, bi, max_pairs=cap, balanced=True)
        assert len(capped) == cap and len(set(capped)) == cap
        assert int(y.sum()) == min(n_pos, cap // 2)  # half evidence, or every evidence pair there is
        assert set(capped) <= set(pairs)


def test_one_epoch_learns_the_evidence_signal(variants: list[C.Variant], bi: E.BiEncoder) -> None:
    pairs, labels = F.training_pairs(variants, bi, include_bridge=False)
    model = small_model()
    before = E.encode_pairs(model, pairs, None, progress=False)[1]
    F.finetune(model, pairs, labels, F.FinetuneConfig(epochs=3, lr=1e-4, batch_size=8, bf16=False), progress=False)
    after = E.encode_pairs(model, pairs, None, progress=False)[1]
    assert roc_auc_score(labels, after) > max(0.9, roc_auc_score(labels, before))


def test_killed_training_resumes_to_identical_weights(variants: list[C.Variant], bi: E.BiEncoder,
                                                      tmp_path: Path) -> None:
    pairs, labels = F.training_pairs(variants, bi, include_bridge=False)
    assert len(pairs) > 3 * 8  # enough steps to be killed in the middle
    config = F.FinetuneConfig(lr=5e-5, batch_size=8, bf16=False, checkpoint_every=1)
    reference = small_model()
    F.finetune(reference, pairs, labels, config, checkpoint_dir=None, progress=False)

    def killed_at_step_two(step: int, loss: float) -> None:
        if step == 2:
            raise KeyboardInterrupt

    model = small_model()
    with pytest.raises(KeyboardInterrupt):
        F.finetune(model, pairs, labels, config, checkpoint_dir=tmp_path, progress=False, on_step=killed_at_step_two)
    assert len(list(tmp_path.glob("finetune-*.pt"))) == 1
    resumed = small_model()
    F.finetune(resumed, pairs, labels, config, checkpoint_dir=tmp_path, progress=False)
    for (name, a), (_, b) in zip(reference.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_fold_encoding_uses_the_other_fold_and_averages_the_rest(variants: list[C.Variant], bi: E.BiEncoder) -> None:
    enc0, enc1 = small_model(17), small_model(29)  # two different heads stand in for two tuned encoders
    encoded = {e.variant_id: e for e in F.encode_with_folds((enc0, enc1), variants, bi, progress=False)}
    for v in variants:
        by0 = E.encode_variants(enc0, [v], bi, progress=False)[0]
        by1 = E.encode_variants(enc1, [v], bi, progress=False)[0]
        got = encoded[v.variant_id]
        if v.split == "train":
            expected = by1 if C.train_fold(v.base_id) == 0 else by0
            assert np.allclose(got.plain_logit, expected.plain_logit)
        else:
            assert np.allclose(got.plain_logit, (by0.plain_logit + by1.plain_logit) / 2, atol=1e-6)
            assert np.allclose(got.bridge, (by0.bridge + by1.bridge) / 2, atol=1e-6)


def test_training_only_the_top_layers_leaves_the_rest_untouched(variants: list[C.Variant], bi: E.BiEncoder) -> None:
    pairs, labels = F.training_pairs(variants, bi, include_bridge=False)
    model = small_model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    n_layers = model.backbone.config.num_hidden_layers
    F.finetune(model, pairs[:32], labels[:32], F.FinetuneConfig(lr=1e-3, batch_size=8, bf16=False, train_layers=1),
               progress=False)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any(f"layer.{n_layers - 1}." in n for n in changed) and any(n.startswith("head.") for n in changed)
    assert not any("embeddings." in n or f"layer.{n_layers - 2}." in n for n in changed)
    assert all(p.requires_grad for p in model.parameters())  # frozen only while training
    default = F.FinetuneConfig()
    assert "train_layers" not in F._key_settings(default)  # existing fold encoders keep their cache keys
    assert F.run_key(model, pairs, labels, default, 17) != F.run_key(
        model, pairs, labels, F.FinetuneConfig(train_layers=2), 17)


def test_fine_tuning_runs_on_the_pinned_thread_count_and_restores_the_setting(monkeypatch: pytest.MonkeyPatch
                                                                             ) -> None:
    """The weights of a CPU fine-tune do not depend on the core count: it holds one thread."""
    seen: list[int] = []
    step = torch.optim.AdamW.step
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: (seen.append(torch.get_num_threads()),
                                                                          step(self, *a, **k))[1])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        model = E.CrossEncoder(E.EncoderConfig(max_length=32, bf16=False))
        pairs = [E.Pair("q", "unit a"), E.Pair("q", "unit b")]
        F.finetune(model, pairs, np.array([1.0, 0.0], dtype=np.float32), F.FinetuneConfig(batch_size=2),
                   progress=False)
        assert seen and set(seen) == {FINETUNE_THREADS}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_joint_loss_sums_binary_and_multiclass_cross_entropy() -> None:
    """Against scikit-learn's log loss: mean BCE of the logit plus mean CE over the state classes."""
    from scipy.special import expit, softmax
    from sklearn.metrics import log_loss

    logit = torch.tensor([2.0, -1.0, 0.3])
    target = torch.tensor([1.0, 0.0, 0.0])
    state_logits = torch.tensor([[1.0, 0.0, -1.0], [0.2, 2.0, 0.1], [0.0, 0.0, 3.0]])
    state = torch.tensor([0, 2, 2])
    bce = log_loss(target.numpy(), expit(logit.numpy()), labels=[0, 1])
    ce = log_loss(state.numpy(), softmax(state_logits.numpy(), axis=1), labels=[0, 1, 2])
    assert float(F.joint_loss(logit, target)) == pytest.approx(bce, rel=1e-6)
    assert float(F.joint_loss(logit, target, state_logits, state)) == pytest.approx(bce + ce, rel=1e-6)


def test_a_state_head_trains_with_the_encoder_and_resumes_exactly(variants: list[C.Variant], bi: E.BiEncoder,
                                                                   tmp_path: Path) -> None:
    """The state head moves, its classes enter the run's key, and a run killed midway ends with
    the same encoder and state head as one that was not."""
    pairs, labels = F.training_pairs(variants, bi, include_bridge=False)
    classes = np.arange(len(pairs)) % 3
    config = F.FinetuneConfig(lr=5e-5, batch_size=8, bf16=False, checkpoint_every=1)

    def objective() -> F.StateObjective:
        torch.manual_seed(5)
        return F.StateObjective(torch.nn.Linear(small_model().hidden_size, 3), classes)

    reference, ref_states = small_model(), objective()
    start = ref_states.head.weight.detach().clone()
    assert F.run_key(reference, pairs, labels, config, 17, ref_states) != F.run_key(reference, pairs, labels, config, 17)
    shuffled = F.StateObjective(ref_states.head, classes[::-1].copy())
    assert F.run_key(reference, pairs, labels, config, 17, shuffled) != F.run_key(reference, pairs, labels, config, 17,
                                                                                  ref_states)
    F.finetune(reference, pairs, labels, config, progress=False, states=ref_states)
    assert not torch.equal(ref_states.head.weight, start)

    def killed_at_step_two(step: int, loss: float) -> None:
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        F.finetune(small_model(), pairs, labels, config, checkpoint_dir=tmp_path, progress=False,
                   on_step=killed_at_step_two, states=objective())
    resumed, states = small_model(), objective()
    F.finetune(resumed, pairs, labels, config, checkpoint_dir=tmp_path, progress=False, states=states)
    assert torch.equal(states.head.weight, ref_states.head.weight)
    for (name, a), (_, b) in zip(reference.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    with pytest.raises(ValueError, match="2 classes for"):
        F.finetune(small_model(), pairs, labels, config, progress=False, states=F.StateObjective(states.head, classes[:2]))
