"""Dropout with cheap masks: the rate, scale, seed and gradient of the masks, the attention
written out against torch's own, and encoders switched to it only while they train on CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from memsafe_lib import maskdropout
from memsafe_lib.encodings import encoders as E
from memsafe_lib.encodings import finetune as F
from memsafe_lib.maskdropout import ATTENTION, MaskDropout, attention_scores, mask_dropout_while_training

from .test_finetune import bi, small_model, variants  # noqa: F401  (fixtures)


def test_mask_dropout_keeps_one_minus_p_scales_by_its_inverse_and_is_seeded() -> None:
    """The independent account: a Bernoulli(1 - p) keep mask scaled by 1 / (1 - p), drawn from
    torch's seeded generator, gradient = the same mask; identity in eval mode."""
    p = 0.1
    drop = MaskDropout(p)
    x = torch.ones(1_000_003, requires_grad=True)
    torch.manual_seed(3)
    y = drop(x)
    kept = y.detach() > 0
    rate = kept.double().mean().item()
    assert abs(rate - (1 - p)) < 4 * (p * (1 - p) / x.numel()) ** 0.5  # binomial, 4 s.d.
    assert torch.allclose(y.detach()[kept], torch.full((int(kept.sum()),), 1 / (1 - p)))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d(x * m / (1 - p)) / dx = m / (1 - p)
    torch.manual_seed(3)
    assert torch.equal(drop(torch.ones(1_000_003)), y.detach())
    for dtype in (torch.bfloat16, torch.float32):
        z = torch.randn(7, 5, dtype=dtype)
        assert drop(z).dtype == dtype
        assert torch.equal(drop.eval()(z), z)
        drop.train()
    assert torch.equal(MaskDropout(0.0)(z), z)



def test_attention_written_out_equals_torch_sdpa_without_dropout_and_is_seeded_with_it() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 7, 4, generator=gen) for _ in range(3))
    additive = torch.zeros(2, 1, 1, 7)
    additive[1, ..., 5:] = torch.finfo(torch.float32).min  # the second item has two padded keys
    ours = attention_scores(q, k, v, additive, 0.5, 0.0)
    theirs = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=additive, scale=0.5).transpose(1, 2)
    assert torch.allclose(ours, theirs, atol=1e-6)
    torch.manual_seed(5)
    dropped = attention_scores(q, k, v, additive, 0.5, 0.3)
    torch.manual_seed(5)
    assert torch.equal(attention_scores(q, k, v, additive, 0.5, 0.3), dropped)
    assert not torch.allclose(dropped, ours)


def test_attention_is_computed_a_few_items_at_a_time_with_the_masks_of_the_whole_batch(monkeypatch) -> None:
    """At 512 tokens a batch's attention weights are hundreds of MB and the elementwise steps on
    them, not the matmuls, set the pace; computed item by item they stay in cache. The result
    must be the written-out definition: mask_dropout drawn once over the whole batch's weights."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(5, 3, 6, 4, generator=gen) for _ in range(3))
    additive = torch.zeros(5, 1, 1, 6)
    additive[2, ..., 4:] = torch.finfo(torch.float32).min
    torch.manual_seed(9)
    weights = torch.softmax(q @ k.transpose(2, 3) * 0.5 + additive, dim=-1)
    reference = (maskdropout.mask_dropout(weights, 0.3) @ v).transpose(1, 2)
    softmax_sizes: list[int] = []
    real_softmax = torch.softmax
    monkeypatch.setattr(torch, "softmax", lambda x, *a, **kw: softmax_sizes.append(x.numel()) or real_softmax(x, *a, **kw))
    monkeypatch.setattr(maskdropout, "ATTENTION_CHUNK", 2 * 3 * 6 * 6)  # two items at a time
    torch.manual_seed(9)
    ours = attention_scores(q, k, v, additive, 0.5, 0.3)
    assert torch.allclose(ours, reference, atol=1e-6)
    assert softmax_sizes == [2 * 108, 2 * 108, 108]


def test_an_encoder_trains_on_mask_dropout_and_then_encodes_exactly_as_before(monkeypatch) -> None:
    model = small_model()
    pairs = [E.Pair("where is the harbor?", "The harbor ship cargo."), E.Pair("a comet?", "Comet orbit.")]
    before = E.encode_pairs(model, pairs, None, progress=False)
    calls = []
    monkeypatch.setattr(maskdropout, "attention_scores", lambda *a: calls.append(a[-1]) or attention_scores(*a))
    with mask_dropout_while_training(model.backbone) as switched:
        assert switched and model.backbone.config._attn_implementation == ATTENTION
        assert not any(type(m) is nn.Dropout for m in model.modules())
        model.train()
        model(model.tokenize(pairs))
        assert calls and set(calls) == {model.backbone.config.attention_probs_dropout_prob}
        model.eval()
    assert model.backbone.config._attn_implementation == "sdpa"
    assert not any(isinstance(m, MaskDropout) for m in model.modules())
    after = E.encode_pairs(model, pairs, None, progress=False)
    assert all(torch.equal(torch.from_numpy(a), torch.from_numpy(b)) for a, b in zip(before, after, strict=True))


def test_fine_tuning_on_cpu_draws_every_dropout_with_mask_dropout_and_is_keyed_apart(variants, bi) -> None:  # noqa: F811
    pairs, labels = F.training_pairs(variants, bi, include_bridge=False)
    pairs, labels = pairs[:16], labels[:16]
    seen: list[tuple[str, bool]] = []

    def look(model: E.CrossEncoder) -> None:
        seen.append((model.backbone.config._attn_implementation, any(type(m) is nn.Dropout for m in model.modules())))

    model = small_model()
    F.finetune(model, pairs, labels, F.FinetuneConfig(batch_size=8, bf16=False), progress=False,
               on_step=lambda step, loss: look(model))
    assert set(seen) == {(ATTENTION, False)}
    seen.clear()
    legacy = small_model()
    F.finetune(legacy, pairs, labels, F.FinetuneConfig(batch_size=8, bf16=False, mask_dropout=False), progress=False,
               on_step=lambda step, loss: look(legacy))
    assert set(seen) == {("sdpa", True)}
    keys = {F.run_key(small_model(), pairs, labels, F.FinetuneConfig(mask_dropout=m), 17) for m in (True, False)}
    assert len(keys) == 2


def test_a_dropout_rate_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="dropout rate"):
        MaskDropout(1.0)
