"""Stage A end to end for one dataset and encoder seed: two fold encoders, then every memory.

1. Pick u_top of every memory with the pretrained encoder read as a bi-encoder.
2. Fine-tune two copies of the encoder, one per hash-defined training fold, on the per-unit
   evidence objective (never the integrity label).
3. Embed training memories of fold k with the encoder tuned on fold 1 - k, validation and
   test memories with the average of both.

Everything is resumable: the bi-encoder embeddings and the pair encodings live in one
SQLite cache, fine-tuning checkpoints every few hundred steps, and a finished fold encoder
is saved as safetensors and loaded instead of re-trained.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
from safetensors.torch import load_file, save

from memsafe_lib.config import NeuralBudget
from memsafe_lib.encodings.encoders import (
    BiEncoder,
    CrossEncoder,
    EncoderConfig,
    EncodeStats,
    EncodingCache,
    VariantEncoding,
)
from memsafe_lib.encodings.finetune import FinetuneConfig, encode_with_folds, finetune, run_key, training_pairs
from memsafe_lib.io import atomic_open
from memsafe_lib.progress import elapsed, log, step
from memsafe_lib.variants.construction import Variant, train_fold


@dataclass(frozen=True)
class StageAConfig:
    encoder: EncoderConfig = EncoderConfig()
    finetune: FinetuneConfig = FinetuneConfig()
    frozen: bool = False
    """Skip fine-tuning (the "frozen encoder" ablation): both folds use the pretrained encoder."""

    @classmethod
    def for_budget(cls, budget: NeuralBudget, device: str = "cpu", model: str | None = None) -> StageAConfig:
        encoder = EncoderConfig(max_length=budget.max_length, device=device,
                                **({"model": model} if model else {}))
        return cls(encoder, FinetuneConfig(lr=budget.finetune_lr, max_pairs=budget.finetune_max_pairs))


@dataclass
class StageAResult:
    encodings: dict[str, VariantEncoding]
    encoders: tuple[CrossEncoder, CrossEncoder]
    bi: BiEncoder
    stats: EncodeStats
    train_pairs: tuple[int, int]
    """Training pairs per fold encoder (after the budget cap)."""
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        s = self.stats
        return {"pairs_requested": s.requested, "pairs_unique": s.unique, "pairs_from_cache": s.from_cache,
                "pairs_encoded": s.encoded, "dedupe_ratio": round(s.dedupe_ratio, 4),
                "train_pairs_per_fold": list(self.train_pairs), **{f"seconds_{k}": round(v, 1)
                                                                  for k, v in self.seconds.items()}}


def _fold_encoder(config: StageAConfig, train: Sequence[Variant], fold: int, bi: BiEncoder, seed: int,
                  cache_dir: Path, progress: bool) -> tuple[CrossEncoder, int]:
    """The encoder fine-tuned on training fold ``fold`` (loaded if it was finished before)."""
    model = CrossEncoder(config.encoder, seed=seed)
    if config.frozen:
        return model, 0
    members = [v for v in train if train_fold(v.base_id) == fold]
    pairs, labels = training_pairs(members, bi, config.finetune.include_bridge, config.finetune.max_pairs,
                                   config.finetune.balanced_cap)
    key = run_key(model, pairs, labels, config.finetune, seed)
    final = cache_dir / f"encoder-fold{fold}-{key}.safetensors"
    label = f"Stage A {train[0].dataset if train else ''} fold {fold} encoder (seed {seed})"
    if final.exists():
        log(f"{label}: resumed from cache")
        model.load_state_dict(load_file(final))
        model.eval()
        return model, len(pairs)
    resumed = " (resuming from its checkpoint)" if (cache_dir / f"finetune-{key}.pt").exists() else ""
    with step(f"{label}: fine-tune on {len(pairs):,} pairs{resumed}"):
        finetune(model, pairs, labels, config.finetune, seed=seed, checkpoint_dir=cache_dir, progress=progress)
    with atomic_open(final, "wb") as fh:
        fh.write(save({k: v.contiguous() for k, v in model.state_dict().items()}))
    (cache_dir / f"finetune-{key}.pt").unlink(missing_ok=True)  # optimiser state no longer needed
    return model, len(pairs)


def run_stage_a(variants: Sequence[Variant], config: StageAConfig, seed: int, cache_dir: Path,
                progress: bool = True) -> StageAResult:
    """Fold encoders and the encodings of every variant (train, validation and test)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache = EncodingCache(cache_dir / "encodings.sqlite")
    timings: dict[str, float] = {}
    start = time.perf_counter()
    bi = BiEncoder(replace(config.encoder, bf16=False), cache=cache)
    train = [v for v in variants if v.split == "train"]
    encoders, sizes = [], []
    for fold in (0, 1):
        model, n = _fold_encoder(config, train, fold, bi, seed, cache_dir, progress)
        encoders.append(model)
        sizes.append(n)
    timings["finetune"] = time.perf_counter() - start
    stats = EncodeStats()
    start = time.perf_counter()
    pair = (encoders[0], encoders[1])
    encoded = encode_with_folds(pair, variants, bi, cache, progress=progress, stats=stats)
    timings["encode"] = time.perf_counter() - start
    log(f"Stage A {variants[0].dataset if variants else ''} (seed {seed}): {stats.requested:,} pairs requested, "
        f"{stats.unique:,} unique, {stats.from_cache:,} read from cache, {stats.encoded:,} encoded "
        f"in {elapsed(timings['encode'])}")
    cache.close()
    result = StageAResult({e.variant_id: e for e in encoded}, pair, bi, stats, (sizes[0], sizes[1]), timings)
    with atomic_open(cache_dir / f"stage_a-{seed}.json", "w") as fh:
        json.dump({"config": asdict(config), "seed": seed, **result.summary()}, fh, indent=2, default=str)
    return result


def encoding_matrix(encodings: Sequence[VariantEncoding]) -> list[np.ndarray]:
    """Per memory, the Stage A part of each unit token: [plain, bridge, plain logit, bridge logit]."""
    return [np.column_stack([e.plain, e.bridge, e.plain_logit, e.bridge_logit]).astype(np.float32)
            for e in encodings]
