"""Every estimator by name: the surface controls and the lexical baselines.

A factory takes the seed, so seeded models (LexSet) and deterministic ones share one call.
"""

from __future__ import annotations

from collections.abc import Callable

from .baselines import FlatTfidf, RetrievalSimilarity, SufficientContextTfidf
from .controls import CONTROLS, Estimator
from .lexset import LexSet

MODELS: dict[str, Callable[[int], Estimator]] = {
    **{name: (lambda seed, f=factory: f()) for name, factory in CONTROLS.items()},
    "tfidf": lambda seed: FlatTfidf(),
    "sc_tfidf": lambda seed: SufficientContextTfidf(),
    "lexset": lambda seed: LexSet(seed=seed),
    "retrieval_sim": lambda seed: RetrievalSimilarity(),
}

BASELINES: tuple[str, ...] = ("tfidf", "sc_tfidf", "lexset", "retrieval_sim")
ALL_BASELINES: tuple[str, ...] = (*BASELINES, *CONTROLS)
"""The non-neural rows of Table "main"."""


def make_model(name: str, seed: int) -> Estimator:
    try:
        return MODELS[name](seed)
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS)}") from None
