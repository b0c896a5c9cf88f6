"""The concatenated cross-encoder: one encoder pass over (question, whole memory), 512 tokens.

The strongest baseline of Qiu et al. and the paper's test of whether a set model is needed
at all. The encoder is fine-tuned on the unsafe label of the serialised memory, starting from
Stage A's start (the paper's relevance-trained cross-encoder) or, for a start that ships
without a relevance head, from a Stage A fold encoder's weights (``start_file``), truncated to
``max_length`` tokens (the paper: 512, which cuts almost every MuSiQue memory). The integrity
state is read from the pooled representation by a linear head tuned with the encoder, its
cross-entropy added to the unsafe logit's binary cross-entropy (the paper's joint objectives),
so no training memory is encoded again after tuning.

Fine-tuning reuses :func:`memsafe_lib.encodings.finetune.finetune` (checkpoints, exact resume); the
tuned weights are saved under a content key and encodings are cached by weights and text,
so a re-run after a code change re-scores nothing it has scored before.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save
from torch import nn

from memsafe_lib.config import DEFAULT_SEED, FINETUNE_THREADS
from memsafe_lib.data.loader import hash_rank
from memsafe_lib.encodings.encoders import (
    PACKAGED_MINILM,
    CrossEncoder,
    EncoderConfig,
    EncodingCache,
    Pair,
    encode_pairs,
)
from memsafe_lib.encodings.finetune import FinetuneConfig, StateObjective, finetune, run_key
from memsafe_lib.estimators.controls import Predictions
from memsafe_lib.estimators.text import memory_text
from memsafe_lib.io import atomic_open
from memsafe_lib.threads import torch_threads_held
from memsafe_lib.variants.construction import Variant, states_of

STATE_HEAD = "state_head."
"""Prefix of the state head's weights in a tuned model's file (beside the encoder's own)."""


@dataclass(frozen=True)
class ConcatConfig:
    max_length: int = 512
    epochs: int = 2
    lr: float = 3e-5
    batch_size: int = 8
    max_train: int | None = None
    """Training memories (all variants of base questions taken in salted-hash order); None = all."""
    bf16: bool = True


def capped(train: Sequence[Variant], max_train: int | None) -> list[Variant]:
    """Whole base questions in salted-hash order until ``max_train`` memories, so the states
    stay balanced."""
    if max_train is None or len(train) <= max_train:
        return list(train)
    by_base: dict[str, list[Variant]] = {}
    for v in train:
        by_base.setdefault(v.base_id, []).append(v)
    out: list[Variant] = []
    for base in sorted(by_base, key=lambda b: hash_rank(b, "concat-cap")):
        if len(out) + len(by_base[base]) > max_train:
            break
        out += by_base[base]
    return out


def load_backbone(model: CrossEncoder, path: Path) -> None:
    """Put the encoder body saved in ``path`` (a fold encoder's state, keys ``backbone.*``) into
    ``model``; every body weight must be there, so a file of another architecture fails here."""
    prefix = "backbone."
    body = {k[len(prefix):]: t for k, t in load_file(path).items() if k.startswith(prefix)}
    if not body:
        raise ValueError(f"{path}: no '{prefix}*' weights; not a Stage A cross-encoder fold encoder")
    model.backbone.load_state_dict(body, strict=True)


def seeded_state_head(width: int, n_states: int, seed: int) -> nn.Linear:
    """A new linear state head, drawn as the encoder's own new head is (N(0, 0.02), zero bias),
    from the seed, so the same seed starts from the same head."""
    head = nn.Linear(width, n_states)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        head.weight.normal_(0.0, 0.02, generator=generator)
        head.bias.zero_()
    return head


def pair(v: Variant) -> Pair:
    return Pair(v.question, memory_text(v))


@dataclass
class ConcatCrossEncoder:
    seed: int = DEFAULT_SEED
    settings: ConcatConfig = ConcatConfig()
    encoder_model: str = PACKAGED_MINILM
    device: str = "cpu"
    cache_dir: Path | None = None
    start_file: Path | None = None
    """Encoder weights to start from (a Stage A fold encoder's safetensors; its ``backbone.``
    entries, the head stays this model's own seeded one); None: ``encoder_model`` as shipped.
    The fine-tuning cache is keyed by the weights, so a different start never reads another's."""
    name: str = "concat_ce"
    deterministic: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    _model: CrossEncoder | None = None
    _state_head: nn.Linear | None = None
    _states: tuple[str, ...] = ()

    def _encode(self, variants: Sequence[Variant]) -> tuple[np.ndarray, np.ndarray]:
        assert self._model is not None
        cache = EncodingCache(self.cache_dir / "concat_encodings.sqlite") if self.cache_dir else None
        try:
            return encode_pairs(self._model, [pair(v) for v in variants], cache, progress=True)
        finally:
            if cache is not None:
                cache.close()

    def _threads(self) -> Any:
        """One torch thread on CPU for fitting and scoring alike (:data:`FINETUNE_THREADS`): a
        fit then gives the same predictions in a worker process or here (encoding with two
        threads can differ from one in the last digits)."""
        return torch_threads_held(FINETUNE_THREADS) if torch.device(self.device).type == "cpu" else nullcontext()

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> ConcatCrossEncoder:
        with self._threads():
            return self._fit(train)

    def _fit(self, train: Sequence[Variant]) -> ConcatCrossEncoder:
        s = self.settings
        model = CrossEncoder(EncoderConfig(model=self.encoder_model, max_length=s.max_length, bf16=s.bf16,
                                           batch_size=16, device=self.device), seed=self.seed)
        if self.start_file is not None:
            load_backbone(model, self.start_file)
        subset = capped(train, s.max_train)
        pairs = [pair(v) for v in subset]
        labels = np.array([v.unsafe for v in subset], dtype=np.float32)
        ft = FinetuneConfig(epochs=s.epochs, lr=s.lr, batch_size=s.batch_size, bf16=s.bf16, include_bridge=False)
        self._states = states_of(subset)
        head = seeded_state_head(model.hidden_size, len(self._states), self.seed).to(self.device)
        states = StateObjective(head, np.array([self._states.index(v.state) for v in subset]))
        key = run_key(model, pairs, labels, ft, self.seed, states)
        final = self.cache_dir / f"concat-{key}.safetensors" if self.cache_dir else None
        if final is not None and final.exists():
            saved = load_file(final)
            model.load_state_dict({k: t for k, t in saved.items() if not k.startswith(STATE_HEAD)})
            head.load_state_dict({k[len(STATE_HEAD):]: t for k, t in saved.items() if k.startswith(STATE_HEAD)})
        else:
            finetune(model, pairs, labels, ft, seed=self.seed, checkpoint_dir=self.cache_dir, states=states)
            if final is not None:
                weights = {**model.state_dict(), **{STATE_HEAD + k: t for k, t in head.state_dict().items()}}
                with atomic_open(final, "wb") as fh:
                    fh.write(save({k: t.contiguous() for k, t in weights.items()}))
                (self.cache_dir / f"finetune-{key}.pt").unlink(missing_ok=True)  # type: ignore[operator]
        model.eval()
        head.eval()
        self._model, self._state_head = model, head
        self.config = {**asdict(s), "train_memories": len(subset), "encoder": self.encoder_model,
                       "start": "pretrained" if self.start_file is None else f"stage_a:{self.start_file.name}"}
        return self

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        if self._model is None:
            raise RuntimeError(f"{self.name}: call fit() first")
        assert self._state_head is not None
        with self._threads():
            reps, logits = self._encode(variants)
            with torch.no_grad():
                state_logits = self._state_head(torch.from_numpy(reps).float().to(self.device)).cpu().numpy()
        states = np.array(self._states, dtype=object)[state_logits.argmax(axis=1)]
        return Predictions(1.0 / (1.0 + np.exp(-logits.astype(float))), states)
