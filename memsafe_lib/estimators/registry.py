"""Every estimator by name: surface controls, lexical baselines and the neural models.

A factory takes the seed, so seeded models (LexSet) and deterministic ones share one call.
Neural models also need a :class:`~memsafe_lib.estimators.context.NeuralContext` (Stage A encodings,
the selected Stage B configuration); :func:`make_model` says so when it is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memsafe_lib.config import PAPER_SEEDS
from memsafe_lib.estimators.baselines import FlatTfidf, RetrievalSimilarity, SufficientContextTfidf
from memsafe_lib.estimators.concat import ConcatConfig, ConcatCrossEncoder
from memsafe_lib.estimators.context import NeuralContext
from memsafe_lib.estimators.controls import CONTROLS, Estimator
from memsafe_lib.estimators.lexset import LexSet
from memsafe_lib.estimators.memsafe import MemSafe, RelevanceAggregation

MODELS: dict[str, Callable[[int], Estimator]] = {
    **{name: (lambda seed, f=factory: f()) for name, factory in CONTROLS.items()},
    "tfidf": lambda seed: FlatTfidf(),
    "sc_tfidf": lambda seed: SufficientContextTfidf(),
    "lexset": lambda seed: LexSet(seed=seed),
    "retrieval_sim": lambda seed: RetrievalSimilarity(),
}

NEURAL_MODELS: dict[str, Callable[[int, NeuralContext], Estimator]] = {
    "memsafe": lambda seed, ctx: MemSafe(ctx.encodings(seed), seed, ctx.set_config(), device=ctx.device),
    "mean_pool": lambda seed, ctx: MemSafe(ctx.encodings(seed), seed, ctx.set_config(attention=False),
                                           name="mean_pool", device=ctx.device),
    "relevance_agg": lambda seed, ctx: RelevanceAggregation(ctx.encodings(seed)),
    "concat_ce": lambda seed, ctx: ConcatCrossEncoder(
        seed, ConcatConfig(max_length=ctx.budget.concat_max_length, max_train=ctx.budget.concat_max_train),
        encoder_model=ctx.budget.encoder, device=ctx.device, cache_dir=ctx.cache_dir / "concat"),
}
"""Models that need the neural context: the first three read the same Stage A encodings at a
given seed; the concatenated cross-encoder tunes its own encoder (cached by content)."""

MODEL_SEEDS: dict[str, tuple[int, ...]] = {"concat_ce": PAPER_SEEDS[:3]}
"""Models the paper runs on fewer seeds: the concatenated cross-encoder uses the first three."""


def seeds_for(name: str, seeds: Sequence[int]) -> list[int]:
    allowed = MODEL_SEEDS.get(name)
    return [s for s in seeds if allowed is None or s in allowed] or list(seeds)


BASELINES: tuple[str, ...] = ("tfidf", "sc_tfidf", "lexset", "retrieval_sim")
ALL_BASELINES: tuple[str, ...] = (*BASELINES, *CONTROLS)
"""The non-neural rows of Table "main"."""
MAIN_NEURAL: tuple[str, ...] = tuple(NEURAL_MODELS)


MODEL_GROUPS: dict[str, tuple[str, ...]] = {
    "baselines": ALL_BASELINES, "neural": MAIN_NEURAL, "all": (*MAIN_NEURAL, *ALL_BASELINES)}


def model_group(name: str) -> tuple[str, ...]:
    """A group name expanded, or a single model name checked."""
    if name in MODEL_GROUPS:
        return MODEL_GROUPS[name]
    if name not in MODELS and name not in NEURAL_MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS) + sorted(NEURAL_MODELS)} "
                         f"or a group {sorted(MODEL_GROUPS)}")
    return (name,)


def is_neural(name: str) -> bool:
    return name in NEURAL_MODELS


def make_model(name: str, seed: int, context: NeuralContext | None = None) -> Estimator:
    if name in NEURAL_MODELS:
        if context is None:
            raise ValueError(f"model {name!r} needs Stage A encodings: build a NeuralContext "
                             "(memsafe_lib.evaluation.neural.build_context) and pass it")
        return NEURAL_MODELS[name](seed, context)
    try:
        return MODELS[name](seed)
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS) + sorted(NEURAL_MODELS)}") from None
