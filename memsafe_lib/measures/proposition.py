"""Proposition 1 (size invariance) as code.

A score that depends on the memory only through its size gives every variant of a base
query the same value. Its unsafe AUROC is then fixed by the per-query multiplicities
(n_u unsafe and n_c complete examples of query b) and the ordering of the per-query
scores; :func:`size_only_auroc` computes it exactly, :func:`size_only_bound` bounds it
for *every* such score.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def _distributions(n_unsafe: Sequence[int], n_complete: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    nu = np.asarray(n_unsafe, dtype=float)
    nc = np.asarray(n_complete, dtype=float)
    if nu.shape != nc.shape or nu.ndim != 1:
        raise ValueError("n_unsafe and n_complete must be 1-D and of equal length")
    if (nu < 0).any() or (nc < 0).any():
        raise ValueError("multiplicities must be non-negative")
    if nu.sum() == 0 or nc.sum() == 0:
        raise ValueError("need at least one unsafe and one complete example")
    return nu / nu.sum(), nc / nc.sum()


def size_only_auroc(scores: Sequence[float], n_unsafe: Sequence[int], n_complete: Sequence[int]) -> float:
    """Exact AUROC = sum_{b,b'} P_u(b) P_c(b') K(b,b'), K = 1{f_b > f_b'} + 1/2 1{f_b = f_b'}.

    Computed in integers (twice the numerator over 2 N_u N_c) after sorting, so equal
    multiplicities give exactly 1/2 and large datasets need no |B| x |B| matrix.
    """
    _distributions(n_unsafe, n_complete)  # validation
    f = np.asarray(scores, dtype=float)
    if f.shape != (len(n_unsafe),):
        raise ValueError("one score per base query is required")
    complete_at: dict[float, int] = {}
    for value, c in zip(f.tolist(), n_complete, strict=True):
        complete_at[value] = complete_at.get(value, 0) + int(c)
    below: dict[float, int] = {}
    running = 0
    for value in sorted(complete_at):
        below[value] = running
        running += complete_at[value]
    twice = sum(int(u) * (2 * below[v] + complete_at[v]) for v, u in zip(f.tolist(), n_unsafe, strict=True))
    return twice / (2 * sum(int(u) for u in n_unsafe) * running)


def total_variation(n_unsafe: Sequence[int], n_complete: Sequence[int]) -> float:
    """TV(P_u, P_c) = 1/2 sum_b |P_u(b) - P_c(b)|."""
    pu, pc = _distributions(n_unsafe, n_complete)
    return float(0.5 * np.abs(pu - pc).sum())


@dataclass(frozen=True)
class SizeOnlyBound:
    """The bound on |AUROC - 1/2| for any size-only score, and which case gave it."""

    bound: float
    total_variation: float
    case: str
    """``equal`` (one multiplicity pattern: exactly 0), ``two-group`` (TV/2) or ``tv``."""
    patterns: dict[tuple[int, int], int]
    """Number of base queries per (n_unsafe, n_complete) pattern."""


def size_only_bound(n_unsafe: Sequence[int], n_complete: Sequence[int]) -> SizeOnlyBound:
    """Bound |AUROC(f) - 1/2| over all size-only scores f.

    Queries with the same (n_u, n_c) pattern have P_u proportional to P_c among them, so
    only comparisons between pattern groups can deviate from one half. With one pattern
    the AUROC is exactly 1/2; with two, writing d for the unsafe mass the first group
    loses, AUROC - 1/2 = d (1/2 - K_AB) with K_AB in [0, 1], so the deviation is at
    most TV/2; otherwise the proposition's TV bound applies.
    """
    tv = total_variation(n_unsafe, n_complete)
    patterns = Counter(zip((int(x) for x in n_unsafe), (int(x) for x in n_complete), strict=True))
    if len(patterns) == 1:
        return SizeOnlyBound(0.0, tv, "equal", dict(patterns))
    if len(patterns) == 2:
        return SizeOnlyBound(tv / 2, tv, "two-group", dict(patterns))
    return SizeOnlyBound(tv, tv, "tv", dict(patterns))


def two_group_tv(eps: float) -> float:
    """Closed form of the paper's MuSiQue case: P_c uniform, a fraction eps of queries has
    one unsafe example and the rest two, so TV = eps (1 - eps) / (2 - eps)."""
    return eps * (1 - eps) / (2 - eps)


def counterexample_auroc(n_regular: int = 99, n_unsafe_exceptional: int = 1000) -> float:
    """The paper's counterexample: ``n_regular`` queries with one complete and one unsafe
    example, one query with one complete and ``n_unsafe_exceptional`` unsafe ones, and a
    size-only score that is larger on the exceptional query."""
    n_u = [1] * n_regular + [n_unsafe_exceptional]
    n_c = [1] * (n_regular + 1)
    scores = [0.0] * n_regular + [1.0]
    return size_only_auroc(scores, n_u, n_c)
