"""Dropout with cheap masks, for training on CPU.

torch's CPU dropout draws one Bernoulli variate per element from its Mersenne Twister, which
made dropout about a quarter of a Stage B training step and a third of a Stage A fine-tuning
step (the attention weights' dropout, batch x heads x tokens x tokens elements per layer).
Here one 64-bit draw of the same seeded generator gives four 16-bit slices, each compared with
a threshold: the drop rate is ``p`` rounded to a multiple of 1/65,536 (0.1 becomes 0.1000061)
and the kept elements are scaled by its inverse, as inverted dropout does.

:class:`MaskDropout` replaces ``nn.Dropout``; :func:`mask_dropout_while_training` switches a
Hugging Face encoder to it while it trains, the attention weights' dropout included (through
an attention function of its own, registered with transformers, that writes the attention
out only while training with dropout and otherwise calls transformers' SDPA attention).
``bench/bench_finetune.py`` measures the masks, ``bench/attention_chunk.py`` the attention; on
Stage B: ``artifacts/cpu/bench/stage_b_dropout_musique.csv``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

LEVELS = 65536
"""Equally likely values of a 16-bit slice."""

ATTENTION = "memsafe_mask_dropout"
"""The name the attention function is registered under in transformers."""


def uniform_slices(shape: torch.Size | tuple[int, ...], device: torch.device) -> torch.Tensor:
    """int16 values of ``shape``, each uniform on [-32768, 32767]: four per 64-bit draw of
    torch's seeded generator. An element is dropped where its slice is below
    ``dropped - LEVELS // 2`` (``dropped`` of the 65,536 levels)."""
    n = int(np.prod(shape))
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-2**63, None)
    return words.view(torch.int16)[:n].view(shape)


def mask_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """``x`` with a fraction ``p`` of its elements zeroed and the rest scaled by 1 / (1 - p)."""
    dropped = round(p * LEVELS)
    if dropped == 0:
        return x
    keep = (uniform_slices(x.shape, x.device) >= dropped - LEVELS // 2).to(x.dtype)
    return x * keep * (LEVELS / (LEVELS - dropped))


class MaskDropout(nn.Module):
    """``nn.Dropout`` with masks from :func:`mask_dropout` (identity in eval mode)."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return mask_dropout(x, self.p) if self.training else x

    def extra_repr(self) -> str:
        return f"p={self.p}"


def dropout_module(p: float, mask: bool) -> nn.Module:
    """:class:`MaskDropout` where ``mask``, else ``nn.Dropout``."""
    return MaskDropout(p) if mask else nn.Dropout(p)


ATTENTION_CHUNK = 1 << 22
"""Attention weights (elements) computed at once: a few batch items, about 16 MB in fp32."""


def attention_scores(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: torch.Tensor | None,
                     scaling: float, dropout: float) -> torch.Tensor:
    """Scaled dot-product attention written out, with :func:`mask_dropout` on its weights;
    (batch, heads, tokens, dim) in, (batch, tokens, heads, dim) out, as transformers expects.

    Computed a few batch items at a time (:data:`ATTENTION_CHUNK`): at 512 tokens a batch's
    weights are hundreds of MB, and the softmax, cast and mask passes over them, not the
    matmuls, set the pace unless each item's weights stay in cache (``bench/attention_chunk.py``).
    The masks are drawn once for the whole batch, so they are those of ``mask_dropout(weights)``;
    the 1 / (1 - p) scale is applied to the output instead of the weights: the same result, on
    ``dim`` numbers per query token instead of ``keys`` (32 against up to 512 for MiniLM)."""
    batch, heads, tokens, keys = query.shape[0], query.shape[1], query.shape[2], key.shape[2]
    per_item = heads * tokens * keys
    step = max(1, ATTENTION_CHUNK // per_item)
    dropped = round(dropout * LEVELS)
    slices = uniform_slices((batch, heads, tokens, keys), query.device) if dropped else None
    outputs = []
    for i in range(0, batch, step):
        weights = torch.matmul(query[i:i + step], key[i:i + step].transpose(2, 3)) * scaling
        if attention_mask is not None:
            weights = weights + (attention_mask[i:i + step] if attention_mask.shape[0] > 1 else attention_mask)
        weights = torch.softmax(weights, dim=-1, dtype=torch.float32).to(query.dtype)
        if slices is not None:
            weights = weights.masked_fill(slices[i:i + step] < dropped - LEVELS // 2, 0.0)
        outputs.append(torch.matmul(weights, value[i:i + step]))
    out = torch.cat(outputs) if len(outputs) > 1 else outputs[0]
    if dropped:
        out = out * (LEVELS / (LEVELS - dropped))
    return out.transpose(1, 2).contiguous()


def _attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
               **kwargs: Any) -> tuple[torch.Tensor, None]:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # lazy: heavy

    if not module.training or dropout == 0.0 or attention_mask is not None and attention_mask.dtype == torch.bool:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    scale = query.size(-1) ** -0.5 if scaling is None else scaling
    return attention_scores(query, key, value, attention_mask, scale, dropout), None


@contextmanager
def mask_dropout_while_training(model: nn.Module) -> Iterator[bool]:
    """Inside, every dropout of ``model`` is a :class:`MaskDropout` and, for a transformers
    model on SDPA attention, so is its attention weights' dropout; yields whether the attention
    was switched. On exit the model is as it was: transformers builds attention masks per
    implementation, and the switched model's encodings differ from SDPA's in the last bits."""
    swapped = []
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, MaskDropout(child.p))
                swapped.append((parent, name, child))
    switch = getattr(model, "set_attn_implementation", None)
    switched = switch is not None and getattr(getattr(model, "config", None), "_attn_implementation", None) == "sdpa"
    if switched:
        from transformers import AttentionInterface  # lazy: heavy

        AttentionInterface.register(ATTENTION, _attention)
        switch(ATTENTION)
    try:
        yield switched
    finally:
        if switched:
            switch("sdpa")
        for parent, name, child in swapped:
            setattr(parent, name, child)
