"""Gating a reader: the error among answered questions at a fixed coverage.

A gate answers the ``k = c * n`` memories with the lowest unsafe scores. ``k`` need not be
an integer: the first ``floor(k)`` memories count fully and the next one counts with weight
``k - floor(k)``, and the error is the accepted errors over ``k`` (a linear interpolation
between whole memories, the same rule the AURC integrates).

Ties: with no ``tiebreak``, ties are broken as in our AURC (:mod:`memsafe_lib.measures.risk_coverage`):
inside a group of tied scores memories are accepted in random order, so the expected number of
accepted errors grows linearly through the group. With a ``tiebreak`` (a secondary sort key,
e.g. a salted-hash position of each memory) the tied memories are accepted in that fixed order
instead, as a deployed gate with a deterministic sort would; only memories equal on both keys
remain an expectation. ``error`` may be a 0/1 indicator (the reader was wrong) or a probability
of error (``eta``), which is how Proposition 2 is stated: at fixed coverage the expected error
is lowest when the gate ranks by ``eta``.
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


def _with_tiebreak(score: np.ndarray, tiebreak: Sequence[float] | np.ndarray) -> np.ndarray:
    """Dense ranks of (score, tiebreak) in lexicographic order: equal only where both are equal."""
    t = np.asarray(tiebreak)
    if t.shape != score.shape:
        raise ValueError(f"tiebreak and score must be of one length, got {t.shape} and {score.shape}")
    order = np.lexsort((t, score))
    s_sorted, t_sorted = score[order], t[order]
    new_group = np.concatenate([[True], (s_sorted[1:] != s_sorted[:-1]) | (t_sorted[1:] != t_sorted[:-1])])
    ranks = np.empty(score.size, dtype=float)
    ranks[order] = np.cumsum(new_group) - 1
    return ranks


def expected_accepted_errors(error: Sequence[float] | np.ndarray, score: Sequence[float] | np.ndarray,
                             k: float, tiebreak: Sequence[float] | np.ndarray | None = None) -> float:
    """Expected errors among the ``k`` lowest-scored memories: ties in ``tiebreak`` order when
    one is given, otherwise accepted in random order."""
    e, s = _arrays(error, score)
    if tiebreak is not None:
        s = _with_tiebreak(s, tiebreak)
    if not 0 <= k <= e.size:
        raise ValueError(f"k must lie in [0, {e.size}], got {k}")
    uniq, inverse = np.unique(s, return_inverse=True)
    size = np.bincount(inverse, minlength=uniq.size).astype(float)
    errors = np.bincount(inverse, weights=e, minlength=uniq.size)
    before = np.concatenate([[0.0], np.cumsum(size)[:-1]])
    taken = np.clip(k - before, 0.0, size)  # how much of each tie group is accepted
    return float((errors * taken / size).sum())


def error_at_coverage(error: Sequence[float] | np.ndarray, score: Sequence[float] | np.ndarray,
                      coverage: float, tiebreak: Sequence[float] | np.ndarray | None = None) -> float:
    """Error rate among answered memories when the gate answers a fraction ``coverage``
    (``k = coverage * n`` memories, the last one in part when ``k`` is fractional)."""
    if not 0 < coverage <= 1:
        raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
    n = len(np.asarray(score))
    return expected_accepted_errors(error, score, coverage * n, tiebreak) / (coverage * n)


def error_coverage_table(error: Sequence[float] | np.ndarray, score: Sequence[float] | np.ndarray,
                         coverages: Sequence[float], tiebreak: Sequence[float] | np.ndarray | None = None
                         ) -> dict[float, float]:
    return {float(c): error_at_coverage(error, score, c, tiebreak) for c in coverages}
