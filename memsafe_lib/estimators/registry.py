"""Every estimator by name: surface controls, lexical baselines and the neural models.

A factory takes the seed, so seeded models (LexSet) and deterministic ones share one call.
Neural models also need a :class:`~memsafe_lib.estimators.context.NeuralContext` (Stage A encodings,
the selected Stage B configuration); :func:`make_model` says so when it is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from memsafe_lib.config import PAPER_SEEDS
from memsafe_lib.estimators.baselines import FlatTfidf, RetrievalSimilarity, SufficientContextTfidf
from memsafe_lib.estimators.blind import (
    BLIND_CONTROLS,
    DEFAULT_BLIND_SET,
    BlindBagOfWords,
    BlindSet,
    BlindSetConfig,
    BlindUnitEvidence,
    QuestionOnly,
    blind_set_config,
)
from memsafe_lib.estimators.clinical import (
    ClinicalRule,
    clinical_set_features,
    clinical_unit_features,
    recency_control,
)
from memsafe_lib.estimators.concat import ConcatConfig, ConcatCrossEncoder
from memsafe_lib.estimators.context import NeuralContext
from memsafe_lib.estimators.controls import CONTROLS, Estimator
from memsafe_lib.estimators.lexset import NO_TITLE_SET_GROUPS, NO_TITLE_UNIT_GROUPS, LexSet
from memsafe_lib.estimators.memsafe import MemSafe, RelevanceAggregation
from memsafe_lib.estimators.shallow import SHALLOW_CONTROLS, QuestionUnitCosines, make_title_named
from memsafe_lib.variants.clinical import CLINICAL

MODELS: dict[str, Callable[[int], Estimator]] = {
    **{name: (lambda seed, f=factory: f()) for name, factory in CONTROLS.items()},
    "tfidf": lambda seed: FlatTfidf(),
    "sc_tfidf": lambda seed: SufficientContextTfidf(),
    "lexset": lambda seed: LexSet(seed=seed, construction_groups={
        CLINICAL: (clinical_unit_features, clinical_set_features)}),
    # Where LexSet's strength comes from (beyond the paper, which specifies no more than its name
    # and the features Stage B borrows): without the two title features, and with logistic heads.
    "lexset_no_title": lambda seed: LexSet(seed=seed, name="lexset_no_title", unit_groups=NO_TITLE_UNIT_GROUPS,
                                           set_groups=NO_TITLE_SET_GROUPS),
    "lexset_logistic": lambda seed: LexSet(seed=seed, name="lexset_logistic", head="logistic"),
    "clinical_rule": lambda seed: ClinicalRule(),
    "recency_only": lambda seed: recency_control(),
    "retrieval_sim": lambda seed: RetrievalSimilarity(),
    # Shallow question-aware controls (memsafe_lib/estimators/shallow.py): topic or title overlap only.
    "qu_tfidf": lambda seed: QuestionUnitCosines(),
    "title_named": lambda seed: make_title_named(),
    # Blind controls (memsafe_lib/estimators/blind.py): never the question; or only the question.
    "blind_bow": lambda seed: BlindBagOfWords(),
    "blind_unit": lambda seed: BlindUnitEvidence(),
    "blind_set": lambda seed: BlindSet(seed),
    "question_only": lambda seed: QuestionOnly(),
}

def _joint(seed: int, ctx: NeuralContext, name: str, encoder: str, window: int) -> ConcatCrossEncoder:
    """A joint encoder over (question, whole memory): the concatenated cross-encoder or the 8k one.
    Only the concatenated one may start from Stage A (``budget.concat_start``): the 8k encoder is
    another checkpoint."""
    cache = ctx.cache_dir / ("concat" if name == "concat_ce" else "joint")
    start = ctx.concat_start_file(seed) if name == "concat_ce" else None
    settings = ConcatConfig(max_length=window, max_train=ctx.budget.concat_max_train, epochs=ctx.budget.concat_epochs)
    return ConcatCrossEncoder(seed, settings, encoder_model=encoder, device=ctx.device, cache_dir=cache,
                              start_file=start, name=name)


NEURAL_MODELS: dict[str, Callable[[int, NeuralContext], Estimator]] = {
    "memsafe": lambda seed, ctx: MemSafe(ctx.encodings(seed), seed, ctx.set_config(), device=ctx.device),
    "mean_pool": lambda seed, ctx: MemSafe(ctx.encodings(seed), seed, ctx.set_config(attention=False),
                                           name="mean_pool", device=ctx.device),
    "relevance_agg": lambda seed, ctx: RelevanceAggregation(ctx.encodings(seed)),
    # The set models read without provenance (source positions and |M|/|H| dropped: query token = size),
    # beside the main rows: what MemSafe and mean pooling owe to which source slots a memory kept.
    "memsafe_no_provenance": lambda seed, ctx: MemSafe(ctx.encodings(seed), seed, ctx.set_config(), provenance=False,
                                                       name="memsafe_no_provenance", device=ctx.device),
    "mean_pool_no_provenance": lambda seed, ctx: MemSafe(ctx.encodings(seed), seed, ctx.set_config(attention=False),
                                                         provenance=False, name="mean_pool_no_provenance",
                                                         device=ctx.device),
    "concat_ce": lambda seed, ctx: _joint(seed, ctx, "concat_ce", ctx.budget.encoder, ctx.budget.concat_max_length),
    # The paper's 8k joint encoder: the concatenated cross-encoder's serialisation, objective and
    # training on a long-context sequence-classification checkpoint (budget.joint_encoder).
    "joint_8k": lambda seed, ctx: _joint(seed, ctx, "joint_8k", ctx.budget.joint_encoder, ctx.budget.joint_max_length),
    # Ablations (Table "ablation", figures "attribution" and "interaction"): one part removed each.
    "memsafe_frozen": lambda seed, ctx: MemSafe(ctx.encodings(seed, frozen=True), seed, ctx.set_config(),
                                                name="memsafe_frozen", device=ctx.device),
    "relevance_agg_frozen": lambda seed, ctx: RelevanceAggregation(ctx.encodings(seed, frozen=True),
                                                                   name="relevance_agg_frozen"),
    "memsafe_no_bridge": lambda seed, ctx: MemSafe(ctx.encodings(seed), seed, ctx.set_config(), bridge=False,
                                                   name="memsafe_no_bridge", device=ctx.device),
    "memsafe_no_lexical": lambda seed, ctx: MemSafe(ctx.encodings(seed), seed, ctx.set_config(use_lexical=False),
                                                    name="memsafe_no_lexical", device=ctx.device),
    "memsafe_no_localization": lambda seed, ctx: MemSafe(ctx.encodings(seed), seed,
                                                         ctx.set_config(localization_heads=False),
                                                         name="memsafe_no_localization", device=ctx.device),
}
"""Models that need the neural context. All but ``concat_ce`` read the same Stage A encodings
at a given seed (``*_frozen``: the pretrained encoder's, without fine-tuning); the
concatenated cross-encoder and the joint encoder tune their own encoders (cached by content)."""

SET_MODELS: frozenset[str] = frozenset({"memsafe", "mean_pool", "memsafe_frozen", "memsafe_no_bridge",
                                        "memsafe_no_lexical", "memsafe_no_localization", "memsafe_no_provenance",
                                        "mean_pool_no_provenance"})
"""Models that train a Stage B set model: seeded fits that evaluation runs side by side
(:mod:`memsafe_lib.parallel`)."""
FROZEN_MODELS: frozenset[str] = frozenset(n for n in NEURAL_MODELS if n.endswith("_frozen"))
"""Models that read the frozen Stage A: a context for them runs Stage A without fine-tuning."""
RELEVANCE_ONLY_MODELS: frozenset[str] = frozenset({"relevance_agg", "relevance_agg_frozen"})
"""Models that read only Stage A's relevance logits and u_top, never its representations."""

MODEL_SEEDS: dict[str, tuple[int, ...]] = {"concat_ce": PAPER_SEEDS[:3], "joint_8k": PAPER_SEEDS[:3]}
"""Models the paper runs on fewer seeds: the concatenated cross-encoder and the 8k joint encoder
use the first three."""


def seeds_for(name: str, seeds: Sequence[int]) -> list[int]:
    allowed = MODEL_SEEDS.get(name)
    return [s for s in seeds if allowed is None or s in allowed] or list(seeds)


BASELINES: tuple[str, ...] = ("tfidf", "sc_tfidf", "lexset", "retrieval_sim")
LEXSET_VARIANTS: tuple[str, ...] = ("lexset_no_title", "lexset_logistic")
"""LexSet with one part changed, to read H2 against (notebook 02, beside the registered verdict)."""
ALL_BASELINES: tuple[str, ...] = (*BASELINES, *CONTROLS)
"""The non-neural rows of Table "main"."""
MAIN_NEURAL: tuple[str, ...] = ("memsafe", "mean_pool", "relevance_agg", "concat_ce")
"""The neural rows of Table "main"."""
NO_PROVENANCE: tuple[str, ...] = ("memsafe_no_provenance", "mean_pool_no_provenance")
"""MemSafe and mean pooling read without provenance: shown beside the main rows (notebook 02)."""
ABLATIONS: tuple[str, ...] = ("memsafe", "memsafe_frozen", "memsafe_no_bridge", "mean_pool", "memsafe_no_lexical",
                              "memsafe_no_localization", "relevance_agg_frozen")
"""Table "ablation", in the paper's row order: the full model, then one part removed per row;
the last removes fine-tuning *and* the set model (a frozen encoder's relevance scores under a
logistic head)."""
INTERACTION: dict[tuple[str, str], str] = {
    ("frozen", "relevance aggregation"): "relevance_agg_frozen", ("frozen", "set model"): "memsafe_frozen",
    ("fine-tuned", "relevance aggregation"): "relevance_agg", ("fine-tuned", "set model"): "memsafe"}
"""Figure "interaction": encoder (frozen / fine-tuned) x aggregation (without / with the set model)."""
LADDER: tuple[str, ...] = ("lexset", "relevance_agg_frozen", "relevance_agg", "mean_pool", "memsafe")
"""Figure "attribution": from lexical features to the full model, one step at a time."""


BLIND: tuple[str, ...] = (*BLIND_CONTROLS, "question_only")
"""The blind controls: models that never read the question, and the one that reads nothing else."""

SHALLOW: tuple[str, ...] = SHALLOW_CONTROLS
"""The shallow question-aware controls: the question read only through topic or title overlap."""

MODEL_GROUPS: dict[str, tuple[str, ...]] = {
    "blind": BLIND, "shallow": SHALLOW, "baselines": ALL_BASELINES, "neural": MAIN_NEURAL,
    "all": (*MAIN_NEURAL, *ALL_BASELINES),
    "ablation": ABLATIONS, "ladder": LADDER}


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


def stage_a_kinds(models: Sequence[str]) -> tuple[bool, bool]:
    """(needs the fine-tuned Stage A, needs the frozen one) for a list of models."""
    neural = [m for m in models if is_neural(m)]
    return any(m not in FROZEN_MODELS for m in neural), any(m in FROZEN_MODELS for m in neural)


def frozen_representations(models: Sequence[str]) -> bool:
    """Whether a model in ``models`` reads the frozen Stage A's representations (not only its
    relevance logits): if none does, the frozen Stage A can skip the pair encodings."""
    return any(m in FROZEN_MODELS and m not in RELEVANCE_ONLY_MODELS for m in models)


def fitted_once(name: str) -> bool:
    """Whether one fit of this model serves every seed: a deterministic model that reads no Stage A
    encodings (those are fitted once per encoder seed, :func:`memsafe_lib.evaluation.runs.shared_fit`)."""
    return name in MODELS and bool(MODELS[name](PAPER_SEEDS[0]).deterministic)


def make_model(name: str, seed: int, context: NeuralContext | None = None, *,
               embedding_cache: Path | None = None, blind_config: BlindSetConfig | None = None) -> Estimator:
    """A fresh estimator. ``blind_set`` reads its unit embeddings from ``embedding_cache`` (default:
    the context's shared cache of pretrained embeddings, none without a context) and is built as
    ``blind_config`` says (default: the context's scale's, else :data:`DEFAULT_BLIND_SET`)."""
    if name == "blind_set":
        cache = embedding_cache or (context.pretrained_embeddings if context is not None else None)
        config = blind_config or (blind_set_config(context.scale) if context is not None else DEFAULT_BLIND_SET)
        return BlindSet(seed, embedding_cache=cache, model=config.model, max_length=config.max_length,
                        epochs=config.epochs, patience=config.patience)
    if name in NEURAL_MODELS:
        if context is None:
            raise ValueError(f"model {name!r} needs Stage A encodings: build a NeuralContext "
                             "(memsafe_lib.estimators.neural_context.build_context) and pass it")
        return NEURAL_MODELS[name](seed, context)
    try:
        return MODELS[name](seed)
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS) + sorted(NEURAL_MODELS)}") from None
