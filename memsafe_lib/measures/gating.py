"""Gating a reader: the error among answered questions at a fixed coverage.

A gate answers the ``k = c * n`` memories with the lowest unsafe scores. Ties are broken as
in our AURC (:mod:`memsafe_lib.measures.risk_coverage`): inside a group of tied scores
memories are accepted in random order, so the expected number of accepted errors grows
linearly through the group, and ``k`` may be fractional. ``error`` may be a 0/1 indicator
(the reader was wrong) or a probability of error (``eta``), which is how Proposition 2 is
stated: at fixed coverage the expected error is lowest when the gate ranks by ``eta``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _arrays(error: Sequence[float] | np.ndarray, score: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    e, s = np.asarray(error, dtype=float), np.asarray(score, dtype=float)
    if e.shape != s.shape or e.ndim != 1 or e.size == 0:
        raise ValueError(f"error and score must be non-empty 1-d arrays of one length, got {e.shape} and {s.shape}")
    if np.isnan(s).any() or np.isnan(e).any() or (e < 0).any() or (e > 1).any():
        raise ValueError("error must lie in [0, 1] and neither array may hold NaN")
    return e, s


def expected_accepted_errors(error: Sequence[float] | np.ndarray, score: Sequence[float] | np.ndarray,
                             k: float) -> float:
    """Expected errors among the ``k`` lowest-scored memories, ties accepted in random order."""
    e, s = _arrays(error, score)
    if not 0 <= k <= e.size:
        raise ValueError(f"k must lie in [0, {e.size}], got {k}")
    uniq, inverse = np.unique(s, return_inverse=True)
    size = np.bincount(inverse, minlength=uniq.size).astype(float)
    errors = np.bincount(inverse, weights=e, minlength=uniq.size)
    before = np.concatenate([[0.0], np.cumsum(size)[:-1]])
    taken = np.clip(k - before, 0.0, size)  # how much of each tie group is accepted
    return float((errors * taken / size).sum())


def error_at_coverage(error: Sequence[float] | np.ndarray, score: Sequence[float] | np.ndarray,
                      coverage: float) -> float:
    """Error rate among answered memories when the gate answers a fraction ``coverage``."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
    n = len(np.asarray(score))
    return expected_accepted_errors(error, score, coverage * n) / (coverage * n)


def error_coverage_table(error: Sequence[float] | np.ndarray, score: Sequence[float] | np.ndarray,
                         coverages: Sequence[float]) -> dict[float, float]:
    return {float(c): error_at_coverage(error, score, c) for c in coverages}
