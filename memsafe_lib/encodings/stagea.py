"""Stage A end to end for one dataset and encoder seed: two fold encoders, then every memory.

1. Pick u_top of every memory with the pretrained ranker: the cross-encoder's own relevance
   head where the checkpoint has one, else the encoder read as a bi-encoder (cosine).
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

from memsafe_lib import config as config_mod
from memsafe_lib.config import NeuralBudget
from memsafe_lib.encodings.biencoder import BiEncoderScorer
from memsafe_lib.encodings.encoders import (
    CrossEncoder,
    EncoderConfig,
    EncodeStats,
    EncodingCache,
    Pair,
    PretrainedRanker,
    VariantEncoding,
    has_relevance_head,
    load_hf_config,
    make_ranker,
    resolve_model,
    variant_pairs,
)
from memsafe_lib.encodings.finetune import FinetuneConfig, encode_with_folds, finetune, run_key, training_pairs
from memsafe_lib.io import atomic_open
from memsafe_lib.parallel import side_by_side
from memsafe_lib.progress import elapsed, log, step
from memsafe_lib.variants.construction import Variant, train_fold

FINE_TUNED_RELEVANCE = "fine-tuned relevance head"

FoldEncoder = CrossEncoder | BiEncoderScorer
"""A fold encoder: a cross-encoder (joint pass) or a bi-encoder (cosine of two passes)."""


def fold_encoder(config: EncoderConfig, seed: int) -> FoldEncoder:
    """The fold encoder ``config.scorer`` names, at its start (a seeded new head where it needs one)."""
    if config.scorer == "cross":
        return CrossEncoder(config, seed=seed)
    if config.scorer == "bi":
        return BiEncoderScorer(config, seed=seed)
    raise ValueError(f"unknown Stage A scorer {config.scorer!r}; choose 'cross' or 'bi'")


@dataclass(frozen=True)
class StageAConfig:
    encoder: EncoderConfig = EncoderConfig()
    finetune: FinetuneConfig = FinetuneConfig()
    frozen: bool = False
    """Skip fine-tuning (the "frozen encoder" ablation): both folds use the pretrained encoder,
    and the relevance logits are the pretrained ranker's scores (a cross-encoder's own head,
    or bi-encoder cosine where the start has no trained head)."""
    relevance_only: bool = False
    """Frozen only: when the start has no trained head, compute the ranker's relevance scores
    and skip the pair encodings (empty representations). Why: relevance aggregation reads
    nothing else, and encoding every pair through the untrained cross-encoder for it cost
    minutes per dataset; a start with a head must encode the pairs for its scores anyway."""

    @classmethod
    def for_budget(cls, budget: NeuralBudget, device: str = "cpu") -> StageAConfig:
        pooling = budget.encoder_pooling
        if pooling is None:
            pooling = "cls" if has_relevance_head(load_hf_config(resolve_model(budget.encoder))) else "mean"
        encoder = EncoderConfig(model=budget.encoder, max_length=budget.max_length, pooling=pooling, device=device,
                                scorer=budget.stage_a_scorer, features=budget.stage_a_features)
        return cls(encoder, FinetuneConfig(lr=budget.finetune_lr, max_pairs=budget.finetune_max_pairs,
                                           head_lr=budget.finetune_head_lr))


@dataclass
class StageAResult:
    encodings: dict[str, VariantEncoding]
    encoders: tuple[FoldEncoder, FoldEncoder]
    bi: PretrainedRanker
    """Picks u_top (and scores relevance for a frozen encoder)."""
    stats: EncodeStats
    train_pairs: tuple[int, int]
    """Training pairs per fold encoder (after the budget cap)."""
    seconds: dict[str, float] = field(default_factory=dict)
    relevance: str = FINE_TUNED_RELEVANCE
    """What the per-unit relevance logits are (said in every summary, so a frozen bi-encoder
    start is never read as if it had a trained relevance head)."""
    pair_encodings: bool = True
    """False for a relevance-only frozen Stage A: ``plain`` and ``bridge`` are empty."""
    encoder_files: tuple[Path, ...] = ()
    """The fine-tuned fold encoders' weight files (safetensors, fold 0 then 1; none when frozen):
    what a worker process, which gets the encodings without the encoders, can start from
    (the concatenated cross-encoder's ``stage_a`` start)."""
    target_cache: EncodingCache | None = None
    """Where :meth:`encode` keeps target pairs, keyed by encoder weights and pair content:
    beside the (possibly shared) fold encoders, so every source that shares them, and a
    resumed run, reads a target pair encoded once."""

    def encode(self, variants: Sequence[Variant], progress: bool = True,
               max_length: int | None = None) -> list[VariantEncoding]:
        """More memories (a transfer target), encoded as this Stage A encoded its own: the
        folds' average, with the ranker's relevance scores where the run did so. ``max_length``
        reads the target's pairs (and the ranker's inputs) through another token window with
        the same weights (None: the training window); see ``NeuralBudget.transfer_max_length``."""
        bi = self.bi if max_length is None else self.bi.at_window(max_length)
        if not self.pair_encodings:
            return ranker_encodings(variants, bi, progress)
        encoders = self.encoders
        if max_length is not None:
            encoders = (encoders[0].at_window(max_length), encoders[1].at_window(max_length))
        encoded = encode_with_folds(encoders, variants, bi, self.target_cache, progress=progress)
        if self.target_cache is not None:
            self.target_cache.close()  # reopened on the next use (EncodingCache)
        if self.relevance != FINE_TUNED_RELEVANCE and not self.encoders[0].pretrained_head:
            encoded = with_ranker_logits(encoded, variants, bi, progress)
        return encoded

    def summary(self) -> dict[str, object]:
        s = self.stats
        return {"pairs_requested": s.requested, "pairs_unique": s.unique, "pairs_from_cache": s.from_cache,
                "pairs_encoded": s.encoded, "dedupe_ratio": round(s.dedupe_ratio, 4),
                "train_pairs_per_fold": list(self.train_pairs), "u_top_by": self.bi.description,
                "relevance_logit": self.relevance, "pair_encodings": self.pair_encodings,
                **{f"seconds_{k}": round(v, 1) for k, v in self.seconds.items()}}


@dataclass(frozen=True, eq=False)
class _FoldJob:
    """One fold encoder to fine-tune: its training pairs and where the finished weights go."""

    fold: int
    pairs: list[Pair]
    labels: np.ndarray
    key: str
    label: str


def _fold_job(config: StageAConfig, train: Sequence[Variant], fold: int, bi: PretrainedRanker, seed: int) -> _FoldJob:
    """Fold ``fold``'s training pairs: per dataset among ``train`` (one, or a pool), in dataset
    name order, each under the pair cap, so every dataset of a pool builds the same job."""
    datasets = sorted({v.dataset for v in train})
    pairs: list[Pair] = []
    labels: list[np.ndarray] = []
    for dataset in datasets:
        members = [v for v in train if v.dataset == dataset and train_fold(v.base_id) == fold]
        p, y = training_pairs(members, bi, config.finetune.include_bridge, config.finetune.max_pairs,
                              config.finetune.balanced_cap)
        pairs += p
        labels.append(y)
    joined = np.concatenate(labels) if labels else np.zeros(0, np.float32)
    key = run_key(fold_encoder(config.encoder, seed), pairs, joined, config.finetune, seed)
    label = f"Stage A {'+'.join(datasets)} fold {fold} encoder (seed {seed})"
    return _FoldJob(fold, pairs, joined, key, label)


def _final_path(cache_dir: Path, job: _FoldJob) -> Path:
    return cache_dir / f"encoder-fold{job.fold}-{job.key}.safetensors"


def _tune_fold(shared: tuple[StageAConfig, int, Path, bool], job: _FoldJob) -> int:
    """Fine-tune one fold encoder (one torch thread on CPU: :data:`memsafe_lib.config.FINETUNE_THREADS`)
    and save it (atomically) where :func:`run_stage_a` loads it; a module-level task, so it
    also runs in a worker process (:func:`memsafe_lib.parallel.side_by_side`)."""
    config, seed, cache_dir, progress = shared
    model = fold_encoder(config.encoder, seed)
    resumed = " (resuming from its checkpoint)" if (cache_dir / f"finetune-{job.key}.pt").exists() else ""
    with step(f"{job.label}: fine-tune on {len(job.pairs):,} pairs{resumed}"):
        finetune(model, job.pairs, job.labels, config.finetune, seed=seed, checkpoint_dir=cache_dir,
                 progress=progress)
    with atomic_open(_final_path(cache_dir, job), "wb") as fh:
        fh.write(save({k: v.contiguous() for k, v in model.state_dict().items()}))
    (cache_dir / f"finetune-{job.key}.pt").unlink(missing_ok=True)  # optimiser state no longer needed
    return len(job.pairs)


def _fold_encoders(config: StageAConfig, train: Sequence[Variant], bi: PretrainedRanker, seed: int,
                   cache_dir: Path, progress: bool) -> tuple[list[FoldEncoder], list[int], tuple[Path, ...]]:
    """Both fold encoders: loaded when finished before, else fine-tuned; two unfinished folds
    are tuned side by side on CPU (one thread each, so the weights are the same either way).
    Also their weight files (none for a frozen Stage A)."""
    if config.frozen:
        return [fold_encoder(config.encoder, seed) for _ in (0, 1)], [0, 0], ()
    jobs = [_fold_job(config, train, fold, bi, seed) for fold in (0, 1)]
    finished = [_final_path(cache_dir, job).exists() for job in jobs]
    for job in (job for job, done in zip(jobs, finished, strict=True) if done):
        log(f"{job.label}: resumed from cache")
    todo = [job for job, done in zip(jobs, finished, strict=True) if not done]
    shared = (config, seed, cache_dir, progress)
    workers = min(config_mod.fit_workers() if config.encoder.device == "cpu" else 1, len(todo))
    if workers >= 2:  # the workers' own steps overlap in time: this one step times both folds together
        dataset = "+".join(sorted({v.dataset for v in train}))
        with step(f"Stage A {dataset} (seed {seed}): fine-tune on {sum(len(j.pairs) for j in todo):,} pairs, "
                  f"{len(todo)} fold encoders side by side"):
            side_by_side(_tune_fold, todo, shared, label="Stage A fold encoders", workers=workers,
                         on_result=lambda job, _: log(f"{job.label}: fine-tuned in a worker"))
    else:
        for job in todo:
            _tune_fold(shared, job)
    models = []
    for job in jobs:
        model = fold_encoder(config.encoder, seed)
        model.load_state_dict(load_file(_final_path(cache_dir, job)))
        model.eval()
        models.append(model)
    return models, [len(job.pairs) for job in jobs], tuple(_final_path(cache_dir, job) for job in jobs)


def run_stage_a(variants: Sequence[Variant], config: StageAConfig, seed: int, cache_dir: Path,
                progress: bool = True, *, tune_on: Sequence[Variant] | None = None, pool_train: Sequence[Variant] = (),
                encoder_dir: Path | None = None, ranker_cache: Path | None = None) -> StageAResult:
    """Fold encoders and the encodings of every variant (train, validation and test).

    ``tune_on``: the training memories that tune the fold encoders (default: ``variants``'
    training split); another construction's memories of the same questions, so that one
    Stage A serves several constructions (:data:`~memsafe_lib.estimators.neural_context.STAGE_A_TUNED_ON`).

    ``pool_train``: training memories of other datasets that the fold encoders also train on
    (each fold on the same hash fold of every dataset, so a training memory is still encoded
    only by the encoder that never saw its question); their encoders are saved in
    ``encoder_dir`` (shared by the pool's datasets, which then tune them once), beside the
    encodings they compute (one cache for the pool: notebook 02's datasets and a joint gate
    encode a pair once between them).
    ``ranker_cache``: the SQLite file of the pretrained ranker's scores and embeddings (default:
    beside the pooled encoders, or in the encoding cache), which other runs may share: its keys
    hold the weights, window and text."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    encoder_dir = encoder_dir or cache_dir
    encoder_dir.mkdir(parents=True, exist_ok=True)
    # one encoding cache per set of fold encoders: the pooled datasets and a joint gate read the
    # same file, so a pair one of them encoded is read back by the others (its key holds the weights)
    cache = EncodingCache(encoder_dir / "encodings.sqlite")
    pool = [v for v in pool_train if v.split == "train"]
    # a pool's datasets rank each other's training memories (u_top of every training pair):
    # one ranker cache beside their shared encoders, so each unit is embedded once for all
    if ranker_cache is not None:
        ranker_cache.parent.mkdir(parents=True, exist_ok=True)
        ranker_store = EncodingCache(ranker_cache)
    else:
        ranker_store = EncodingCache(encoder_dir / "ranker.sqlite") if pool else cache
    timings: dict[str, float] = {}
    start = time.perf_counter()
    bi = make_ranker(config.encoder, ranker_store)
    train = [v for v in (variants if tune_on is None else tune_on) if v.split == "train"]
    encoders, sizes, files = _fold_encoders(config, train + pool, bi, seed, encoder_dir, progress)
    timings["finetune"] = time.perf_counter() - start
    stats = EncodeStats()
    start = time.perf_counter()
    pair = (encoders[0], encoders[1])
    dataset = variants[0].dataset if variants else ""
    relevance_only = config.frozen and config.relevance_only and not encoders[0].pretrained_head
    if relevance_only:
        encoded = ranker_encodings(variants, bi, progress)
        timings["encode"] = time.perf_counter() - start
        log(f"Stage A {dataset} (seed {seed}): frozen relevance scores only (no pairs requested: "
            f"{bi.description}), 0 encoded in {elapsed(timings['encode'])}")
    else:
        encoded = encode_with_folds(pair, variants, bi, cache, progress=progress, stats=stats)
        if config.frozen and not encoders[0].pretrained_head:  # an untrained head's logit is no relevance score
            encoded = with_ranker_logits(encoded, variants, bi, progress)
        timings["encode"] = time.perf_counter() - start
        log(f"Stage A {dataset} (seed {seed}): {stats.requested:,} pairs requested, "
            f"{stats.unique:,} unique, {stats.from_cache:,} read from cache, {stats.encoded:,} encoded "
            f"in {elapsed(timings['encode'])}")
    cache.close()
    ranker_store.close()
    relevance = bi.description if config.frozen else FINE_TUNED_RELEVANCE
    result = StageAResult({e.variant_id: e for e in encoded}, pair, bi, stats, (sizes[0], sizes[1]), timings,
                          relevance, pair_encodings=not relevance_only, encoder_files=files,
                          target_cache=EncodingCache(encoder_dir / "targets.sqlite"))
    with atomic_open(cache_dir / f"stage_a-{seed}.json", "w") as fh:
        json.dump({"config": asdict(config), "seed": seed, **result.summary()}, fh, indent=2, default=str)
    return result


def ranker_encodings(variants: Sequence[Variant], ranker: PretrainedRanker, progress: bool = False
                     ) -> list[VariantEncoding]:
    """Relevance-only encodings: the ranker's u_top and (q, u_i), (q || u_top, u_i) scores, no
    representations. u_top is picked over the same groups as :func:`encode_with_folds` (each
    training fold, then the rest), so it equals that path's choice."""
    train = [v for v in variants if v.split == "train"]
    groups = [[v for v in train if train_fold(v.base_id) == k] for k in (0, 1)]
    groups.append([v for v in variants if v.split != "train"])
    empty = np.zeros((0, 0), np.float32)
    bare = {}
    for group in groups:
        if group:
            _, _, tops = variant_pairs(group, ranker)
            for v, top in zip(group, tops, strict=True):
                k = len(v.units)
                bare[v.variant_id] = VariantEncoding(v.variant_id, empty.reshape(k, 0), empty.reshape(k, 0),
                                                     np.zeros(k, np.float32), np.zeros(k, np.float32), top)
    return with_ranker_logits([bare[v.variant_id] for v in variants], variants, ranker, progress)


def with_ranker_logits(encoded: Sequence[VariantEncoding], variants: Sequence[Variant], ranker: PretrainedRanker,
                       progress: bool = False) -> list[VariantEncoding]:
    """The same encodings with both relevance logits replaced by the ranker's scores of the
    (q, u_i) and (q || u_top, u_i) pairs (the frozen rung of a start without a trained head)."""
    by_id = {e.variant_id: e for e in encoded}
    ordered = [v for v in variants if v.variant_id in by_id]
    plain, bridge, _ = variant_pairs(ordered, ranker)
    scores = ranker.relevance(plain + bridge, progress=progress)
    n, start, out = len(plain), 0, {}
    for v in ordered:
        k = len(v.units)
        e = by_id[v.variant_id]
        out[v.variant_id] = replace(e, plain_logit=scores[start:start + k],
                                    bridge_logit=scores[n + start:n + start + k])
        start += k
    return [out[e.variant_id] for e in encoded]


def encoding_matrix(encodings: Sequence[VariantEncoding]) -> list[np.ndarray]:
    """Per memory, the Stage A part of each unit token: [plain, bridge, plain logit, bridge logit]."""
    return [np.column_stack([e.plain, e.bridge, e.plain_logit, e.bridge_logit]).astype(np.float32)
            for e in encodings]
