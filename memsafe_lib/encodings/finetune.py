"""Stage A fine-tuning: one epoch on the per-unit evidence objective, never the integrity label.

The paper tunes two encoders on two hash-defined folds of the training questions; each fold's
memories are then embedded by the encoder tuned on the *other* fold, so Stage B never trains
on embeddings of units its encoder was tuned on, while validation and test memories are
embedded by the average of both encoders.

Training checkpoints (weights, optimiser, schedule, step and RNG state) are written
atomically every ``checkpoint_every`` steps; a killed run resumes from the last one and ends
with the same weights as an uninterrupted run (CPU, same seed).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from memsafe_lib.config import DEFAULT_SEED, FINETUNE_THREADS
from memsafe_lib.data.loader import hash_rank
from memsafe_lib.encodings.encoders import (
    CrossEncoder,
    EncodeStats,
    EncodingCache,
    Pair,
    PretrainedRanker,
    VariantEncoding,
    encode_variants,
    variant_pairs,
)
from memsafe_lib.io import atomic_open
from memsafe_lib.maskdropout import mask_dropout_while_training
from memsafe_lib.precision import use_bf16
from memsafe_lib.progress import progress_bar
from memsafe_lib.threads import torch_threads_held
from memsafe_lib.variants.construction import train_fold


@dataclass(frozen=True)
class FinetuneConfig:
    epochs: int = 1
    lr: float = 2e-5
    batch_size: int = 16
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    bf16: bool = True
    include_bridge: bool = True
    """Train on (q || u_top, u) pairs too, so the encoder knows both input forms."""
    max_pairs: int | None = None
    """Cap on training pairs (a hash-ordered subset), for CPU budgets; None = all."""
    balanced_cap: bool = True
    """Under a cap, take evidence and non-evidence pairs in equal numbers (evidence is ~7% of
    MuSiQue pairs: a short run on the natural mix learns only the base rate)."""
    head_lr: float | None = 1e-3
    """Learning rate of the new relevance head (None: ``lr``); it starts from random weights."""
    checkpoint_every: int = 200
    train_layers: int | None = None
    """Fine-tune only the top ``train_layers`` transformer layers (and the head); the embeddings
    and lower layers stay frozen, which makes a step cheaper. None: every layer."""
    mask_dropout: bool = True
    """On CPU, every dropout of the encoder, its attention weights' included, draws its masks
    with :mod:`memsafe_lib.maskdropout` (a third of a step with torch's dropout; elsewhere
    torch's own kernels are kept)."""


@dataclass
class StateObjective:
    """A second head tuned with the encoder: cross-entropy of ``head(representation)`` against
    each pair's class, added to the relevance loss (the concatenated cross-encoder's integrity
    state, trained jointly with its unsafe logit as the paper trains its heads: losses summed)."""

    head: torch.nn.Linear
    labels: np.ndarray
    """Class index of each pair, in ``pairs`` order."""


def joint_loss(logit: torch.Tensor, target: torch.Tensor, state_logits: torch.Tensor | None = None,
               state: torch.Tensor | None = None) -> torch.Tensor:
    """Mean binary cross-entropy of the relevance (or unsafe) logit, plus, with a state head,
    the mean cross-entropy over its classes."""
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logit.float(), target)
    if state_logits is not None and state is not None:
        loss = loss + torch.nn.functional.cross_entropy(state_logits.float(), state)
    return loss


def _key_settings(config: FinetuneConfig) -> dict[str, object]:
    """The settings that enter a fine-tuning run's cache key; options at their defaults that
    were added later are left out, so existing fold encoders keep their keys."""
    settings = asdict(config)
    settings.pop("mask_dropout")  # keyed by run_key, where it applies (on CPU)
    if settings.get("train_layers") is None:
        settings.pop("train_layers", None)
    return settings


def freeze_lower_layers(model: CrossEncoder, train_layers: int | None) -> list[str]:
    """Stop gradients to the embeddings and all but the top ``train_layers`` layers of a
    BERT-style backbone; returns the frozen parameter names."""
    if train_layers is None:
        return []
    n_layers = int(model.backbone.config.num_hidden_layers)
    keep = {f"layer.{i}." for i in range(max(n_layers - train_layers, 0), n_layers)}
    frozen = []
    for name, param in model.named_parameters():
        if name.startswith("head.") or "classifier" in name or "pooler" in name:
            continue
        if "embeddings." in name or ("layer." in name and not any(k in name for k in keep)):
            param.requires_grad_(False)
            frozen.append(name)
    if not frozen:
        raise ValueError(f"{model.config.model}: no embeddings/layer.N parameters to freeze (not BERT-style)")
    return frozen


def training_pairs(variants: Sequence[object], bi: PretrainedRanker, include_bridge: bool = True,
                   max_pairs: int | None = None, balanced: bool = False) -> tuple[list[Pair], np.ndarray]:
    """Unique (pair, is_evidence) examples of ``variants``' units."""
    plain, bridge, _ = variant_pairs(variants, bi)
    labels = [u.is_evidence for v in variants for u in v.units]  # type: ignore[attr-defined]
    examples = dict(zip(plain, labels, strict=True))
    if include_bridge:
        examples.update(zip(bridge, labels, strict=True))
    pairs = list(examples)
    if max_pairs is not None and len(pairs) > max_pairs:
        pairs = sorted(pairs, key=lambda p: hash_rank(f"{p.query}\x1f{p.bridge}\x1f{p.unit}", "finetune-cap"))
        if balanced:
            pos = [p for p in pairs if examples[p]]
            neg = [p for p in pairs if not examples[p]]
            k = min(len(pos), max_pairs // 2)
            chosen = set(pos[:k] + neg[:max_pairs - k])
            pairs = [p for p in pairs if p in chosen]  # keep the hash order
        else:
            pairs = pairs[:max_pairs]
    return pairs, np.array([examples[p] for p in pairs], dtype=np.float32)


def _batches(pairs: Sequence[Pair], model: CrossEncoder, config: FinetuneConfig, seed: int) -> list[np.ndarray]:
    """Seeded shuffle, then length-sorted within chunks of 50 batches, then shuffled batches:
    random enough for SGD, little padding."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(pairs))
    lengths = model.token_lengths(pairs)
    chunk = config.batch_size * 50
    batches = []
    for i in range(0, len(order), chunk):
        part = order[i:i + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[j:j + config.batch_size] for j in range(0, len(part), config.batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def run_key(model: CrossEncoder, pairs: Sequence[Pair], labels: np.ndarray, config: FinetuneConfig, seed: int,
            states: StateObjective | None = None) -> str:
    """Content key of a fine-tuning run; on CPU it names the pinned thread count, because the
    tuned weights depend on it (an encoder tuned before the pin is not reused). A state head
    enters with its starting weights and every pair's class."""
    h = hashlib.sha256(model.fingerprint().encode())
    if states is not None:
        h.update(b"state-head")
        for t in states.head.state_dict().values():
            h.update(t.detach().cpu().float().numpy().tobytes())
        h.update(np.asarray(states.labels, dtype=np.int64).tobytes())
    settings = _key_settings(config)
    settings["bf16"] = use_bf16(config.bf16, model.config.device)
    if torch.device(model.config.device).type == "cpu":
        settings["torch_threads"] = FINETUNE_THREADS
        if config.mask_dropout:
            settings["dropout"] = "mask"
    h.update(json.dumps(settings, sort_keys=True).encode())
    h.update(str(seed).encode())
    for p, y in zip(pairs, labels, strict=True):
        h.update(f"{p.query}\x1f{p.bridge}\x1f{p.unit}\x1f{y}\n".encode())
    return h.hexdigest()[:20]


def finetune(model: CrossEncoder, pairs: Sequence[Pair], labels: np.ndarray, config: FinetuneConfig = FinetuneConfig(),
             seed: int = DEFAULT_SEED, checkpoint_dir: Path | None = None, progress: bool = True,
             on_step: Callable[[int, float], None] | None = None, states: StateObjective | None = None) -> list[float]:
    """Tune ``model`` in place with binary cross-entropy on its relevance logit (plus ``states``'
    cross-entropy, its head tuned alongside at the head learning rate); returns losses.
    On CPU with :data:`FINETUNE_THREADS` torch threads (restored after), so the tuned weights
    do not depend on the machine's core count."""
    if states is not None and len(states.labels) != len(pairs):
        raise ValueError(f"state objective: {len(states.labels)} classes for {len(pairs)} pairs")
    cpu = torch.device(model.config.device).type == "cpu"
    with (torch_threads_held(FINETUNE_THREADS) if cpu else nullcontext(),
          mask_dropout_while_training(model.backbone) if cpu and config.mask_dropout else nullcontext()):
        return _tune(model, pairs, labels, config, seed, checkpoint_dir, progress, on_step, states)


def _tune(model: CrossEncoder, pairs: Sequence[Pair], labels: np.ndarray, config: FinetuneConfig, seed: int,
          checkpoint_dir: Path | None, progress: bool, on_step: Callable[[int, float], None] | None,
          states: StateObjective | None) -> list[float]:
    torch.manual_seed(seed)
    key = run_key(model, pairs, labels, config, seed, states)
    batches = _batches(pairs, model, config, seed) * config.epochs
    total = len(batches)
    freeze_lower_layers(model, config.train_layers)
    state_head = list(states.head.parameters()) if states is not None else []
    head = [p for n, p in model.named_parameters() if n.startswith("head.") and p.requires_grad] + state_head
    trained = [p for p in model.parameters() if p.requires_grad] + state_head
    body = [p for n, p in model.named_parameters() if not n.startswith("head.") and p.requires_grad]
    optimizer = torch.optim.AdamW([{"params": body}, {"params": head, "lr": config.head_lr or config.lr}],
                                  lr=config.lr, weight_decay=config.weight_decay)
    warmup = max(1, int(config.warmup_fraction * total))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (total - s) / max(total - warmup, 1))))
    start, losses = 0, []
    ckpt = checkpoint_dir / f"finetune-{key}.pt" if checkpoint_dir is not None else None
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        if states is not None:
            states.head.load_state_dict(state["state_head"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["rng"])
        start, losses = state["step"], state["losses"]
    y_all = torch.from_numpy(labels)
    s_all = torch.from_numpy(np.asarray(states.labels, dtype=np.int64)) if states is not None else None
    model.train()
    device = model.config.device.split(":")[0]
    for step in progress_bar(range(start, total), initial=start, total=total, desc="fine-tune", disable=not progress,
                     leave=False):
        idx = batches[step]
        batch = model.tokenize([pairs[i] for i in idx])
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=use_bf16(config.bf16, device)):
            rep, logit = model(batch)
            state_logits = states.head(rep) if states is not None else None
        loss = joint_loss(logit, y_all[idx].to(logit.device), state_logits,
                          s_all[idx].to(logit.device) if s_all is not None else None)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if on_step is not None:
            on_step(step, losses[-1])
        done = step + 1
        if ckpt is not None and (done % config.checkpoint_every == 0 or done == total):
            saved = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "schedule": schedule.state_dict(), "rng": torch.get_rng_state(), "step": done, "losses": losses}
            if states is not None:
                saved["state_head"] = states.head.state_dict()
            with atomic_open(ckpt, "wb") as fh:
                torch.save(saved, fh)
    for param in model.parameters():
        param.requires_grad_(True)
    model.eval()
    return losses


def average(a: VariantEncoding, b: VariantEncoding) -> VariantEncoding:
    """Validation and test memories: the mean of the two fold encoders' outputs."""
    return VariantEncoding(a.variant_id, (a.plain + b.plain) / 2, (a.bridge + b.bridge) / 2,
                           (a.plain_logit + b.plain_logit) / 2, (a.bridge_logit + b.bridge_logit) / 2, a.top_unit)


def encode_with_folds(encoders: tuple[CrossEncoder, CrossEncoder], variants: Sequence[object], bi: PretrainedRanker,
                      cache: EncodingCache | None = None, *, progress: bool = True,
                      stats: EncodeStats | None = None) -> list[VariantEncoding]:
    """Training memories of fold k by the encoder tuned on fold 1 - k; all others by the average."""
    out: dict[str, VariantEncoding] = {}
    train = [v for v in variants if v.split == "train"]  # type: ignore[attr-defined]
    rest = [v for v in variants if v.split != "train"]  # type: ignore[attr-defined]
    for k in (0, 1):
        fold = [v for v in train if train_fold(v.base_id) == k]  # type: ignore[attr-defined]
        if not fold:
            continue
        for enc in encode_variants(encoders[1 - k], fold, bi, cache, progress=progress, stats=stats):
            out[enc.variant_id] = enc
    if rest:
        pairs = variant_pairs(rest, bi)  # ranked once for both encoders
        first = encode_variants(encoders[0], rest, bi, cache, progress=progress, stats=stats, pairs=pairs)
        second = encode_variants(encoders[1], rest, bi, cache, progress=progress, stats=stats, pairs=pairs)
        for a, b in zip(first, second, strict=True):
            out[a.variant_id] = average(a, b)
    return [out[v.variant_id] for v in variants]  # type: ignore[attr-defined]
