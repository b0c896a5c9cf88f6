"""Stage A as a bi-encoder: the start's own relevance scoring, fine-tuned on the evidence label.

all-MiniLM-L6-v2 (the offline start) was trained on a billion (query, passage) pairs as a
bi-encoder: mean-pooled, L2-normalised embeddings compared by cosine. Reading it as a
cross-encoder over ``[CLS] q [SEP] u [SEP]`` with a new head (:class:`CrossEncoder`) discards
that training; this scorer keeps it. The query (or ``q [SEP] u_top`` for a bridge pair) and
the unit are embedded separately and the relevance logit is ``s * cos(q, u) + b`` with a
learned scale and bias (started at 20 and -10, so the start ranks exactly as its cosine does).

What Stage B reads per pair (``features``):

- ``product``: ``q * u`` elementwise (its sum is the cosine), the analogue of a cross-encoder's
  pair representation;
- ``unit_product``: ``[u, q * u]``, which also hands Stage B the unit's own embedding.

Encoding is per unique *text*, not per pair: a memory's units and its query are embedded
once however many pairs they enter (cached on disk like pair encodings).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from memsafe_lib.config import DEFAULT_SEED
from memsafe_lib.encodings.encoders import (
    EncoderConfig,
    EncodeStats,
    EncodingCache,
    FoldEncoderBase,
    Pair,
    _digest,
    quiet_transformers,
    resolve_model,
)
from memsafe_lib.progress import progress_bar

FEATURES: tuple[str, ...] = ("product", "unit_product")
"""What Stage B reads of a bi-encoder pair (see the module docstring)."""
START_SCALE, START_BIAS = 20.0, -10.0
"""The cosine head's start: logit 0 at cosine 0.5, a slope that spreads [0, 1] over [-10, 10]."""


BI_CONFIG = EncoderConfig(scorer="bi")
"""The packaged start read as a bi-encoder, at the default window."""


class CosineHead(nn.Module):
    """logit = scale * cos + bias (parameters under ``head.``, so fine-tuning gives them the
    head learning rate)."""

    def __init__(self, scale: float = START_SCALE, bias: float = START_BIAS) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(float(scale)))
        self.bias = nn.Parameter(torch.tensor(float(bias)))

    def forward(self, cos: torch.Tensor) -> torch.Tensor:
        return self.scale * cos + self.bias


class BiEncoderScorer(FoldEncoderBase):
    """A fold encoder that embeds query and unit separately (same interface as
    :class:`~memsafe_lib.encodings.encoders.CrossEncoder`: ``tokenize``, ``forward`` returning
    ``(representation, logit)``, ``fingerprint``, ``at_window``, ``truncated``)."""

    pretrained_head = False
    separate_inputs = True
    """Read by :func:`~memsafe_lib.encodings.encoders.encode_pairs`: encode texts, not pairs."""

    def __init__(self, config: EncoderConfig = BI_CONFIG, seed: int = DEFAULT_SEED) -> None:
        super().__init__()
        from transformers import AutoModel, AutoTokenizer  # lazy: heavy, only when weights load

        if config.features not in FEATURES:
            raise ValueError(f"unknown bi-encoder features {config.features!r}; choose one of {FEATURES}")
        self.config = config
        path = resolve_model(config.model)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        with quiet_transformers():
            self.backbone = AutoModel.from_pretrained(path).float()  # fp32 storage, as CrossEncoder
        self.head = CosineHead()  # no random part: ``seed`` only keeps the CrossEncoder signature
        self.to(config.device)

    @property
    def hidden_size(self) -> int:
        width = int(self.backbone.config.hidden_size)
        return 2 * width if self.config.features == "unit_product" else width

    def fingerprint(self) -> str:
        """Weights, window and precision: what a text's embedding depends on. Not ``features``
        (derived from the embeddings at no cost), so both feature sets share one fine-tuning
        run and one text cache; models reading the features are keyed by the budget's
        ``stage_a_features`` (:func:`memsafe_lib.estimators.neural_context.fit_inputs`)."""
        return self.weights_hash(f"bi|{self.config.max_length}|{self.bf16}")

    # -- texts

    def _tokens(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(list(texts), truncation=True, max_length=self.config.max_length, padding=True,
                              return_tensors="pt")

    def embed_tokens(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean-pooled, L2-normalised embeddings (float32, whatever the autocast)."""
        batch = {k: v.to(self.config.device) for k, v in batch.items()}
        hidden = self.backbone(**batch).last_hidden_state.float()
        mask = batch["attention_mask"].unsqueeze(-1).float()
        return nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0), dim=-1)

    def truncated(self, pairs: Sequence[Pair]) -> np.ndarray:
        """Per pair: whether its query side or its unit is longer than the window."""
        if not pairs:
            return np.zeros(0, dtype=bool)
        firsts = self.tokenizer([p.first() for p in pairs], truncation=False, verbose=False)["input_ids"]
        units = self.tokenizer([p.unit for p in pairs], truncation=False, verbose=False)["input_ids"]
        return np.array([max(len(a), len(b)) > self.config.max_length for a, b in zip(firsts, units, strict=True)])

    # -- pairs (training)

    def tokenize(self, pairs: Sequence[Pair]) -> dict[str, object]:
        """A training batch: each distinct query side and unit tokenized once, with the index
        of every pair's two texts."""
        firsts = list(dict.fromkeys(p.first() for p in pairs))
        units = list(dict.fromkeys(p.unit for p in pairs))
        first_at = {t: i for i, t in enumerate(firsts)}
        unit_at = {t: i for i, t in enumerate(units)}
        return {"first": self._tokens(firsts), "unit": self._tokens(units),
                "first_index": torch.tensor([first_at[p.first()] for p in pairs]),
                "unit_index": torch.tensor([unit_at[p.unit] for p in pairs])}

    def pair_outputs(self, q: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(representation, logit) of pairs from their two embeddings."""
        product = q * u
        logit = self.head(product.sum(-1))
        rep = torch.cat([u, product], dim=-1) if self.config.features == "unit_product" else product
        return rep, logit

    def forward(self, batch: dict[str, object]) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.embed_tokens(batch["first"])[batch["first_index"].to(self.config.device)]  # type: ignore[index,union-attr]
        u = self.embed_tokens(batch["unit"])[batch["unit_index"].to(self.config.device)]  # type: ignore[index,union-attr]
        return self.pair_outputs(q, u)

    # -- pairs (encoding, cached by text)

    def embed(self, texts: Sequence[str], cache: EncodingCache | None = None, *, progress: bool = False,
              stats: EncodeStats | None = None) -> dict[str, np.ndarray]:
        """Embeddings of the distinct ``texts``, each embedded at most once (ever, with ``cache``),
        length-bucketed."""
        stats = stats if stats is not None else EncodeStats()
        fp = self.fingerprint()
        unique = list(dict.fromkeys(texts))
        keys = {t: _digest(fp, t) for t in unique}
        found_by_key = cache.get_many(list(keys.values())) if cache is not None else {}
        out = {t: found_by_key[k][0] for t, k in keys.items() if k in found_by_key}
        stats.unique += len(unique)
        stats.from_cache += len(out)
        todo = [t for t in unique if t not in out]
        if not todo:
            return out
        lengths = np.array([len(x) for x in self.tokenizer(todo, truncation=True,
                                                           max_length=self.config.max_length)["input_ids"]])
        order = np.argsort(lengths, kind="stable")
        self.eval()
        start = time.perf_counter()
        bar = progress_bar(total=len(todo), desc="bi-encoder texts", disable=not progress, leave=False)
        for i in range(0, len(order), self.config.batch_size):
            chunk = [todo[j] for j in order[i:i + self.config.batch_size]]
            batch = self._tokens(chunk)
            with torch.no_grad(), torch.autocast(device_type=self.config.device.split(":")[0],
                                                 dtype=torch.bfloat16, enabled=self.bf16):
                emb = self.embed_tokens(batch).cpu().numpy().astype(np.float32)
            if cache is not None:
                cache.put_many([(keys[t], e, 0.0) for t, e in zip(chunk, emb, strict=True)])
            out.update(zip(chunk, emb, strict=True))
            stats.encoded += len(chunk)
            stats.tokens += int(batch["attention_mask"].sum())
            stats.padded_tokens += int(batch["input_ids"].numel())
            stats.batches.append(len(chunk))
            bar.update(len(chunk))
        bar.close()
        stats.seconds += time.perf_counter() - start
        return out

    def encode_pairs(self, pairs: Sequence[Pair], cache: EncodingCache | None = None, *, progress: bool = True,
                     stats: EncodeStats | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Representations and relevance logits of ``pairs``, in order, from text embeddings."""
        stats = stats if stats is not None else EncodeStats()
        stats.requested += len(pairs)
        if not pairs:
            return np.zeros((0, self.hidden_size), np.float32), np.zeros(0, np.float32)
        emb = self.embed([p.first() for p in pairs] + [p.unit for p in pairs], cache, progress=progress, stats=stats)
        device = self.config.device
        q = torch.from_numpy(np.stack([emb[p.first()] for p in pairs])).to(device)
        u = torch.from_numpy(np.stack([emb[p.unit] for p in pairs])).to(device)
        with torch.no_grad():
            rep, logit = self.pair_outputs(q, u)
        return rep.float().cpu().numpy(), logit.float().cpu().numpy()
