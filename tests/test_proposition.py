"""Proposition 1: exact size-only AUROC, the TV bound and the two-group refinement,
checked against the paper's closed-form numbers and against scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from memsafe_lib.measures.proposition import (
    counterexample_auroc,
    size_only_auroc,
    size_only_bound,
    total_variation,
    two_group_tv,
)


def expand(scores: list[float], n_u: list[int], n_c: list[int]) -> tuple[np.ndarray, np.ndarray]:
    y, s = [], []
    for f, u, c in zip(scores, n_u, n_c, strict=True):
        y += [1] * u + [0] * c
        s += [f] * (u + c)
    return np.array(y), np.array(s, dtype=float)


def test_equal_multiplicities_give_exactly_one_half() -> None:
    rng = np.random.default_rng(1)
    scores = rng.integers(0, 5, 40).astype(float)
    assert size_only_auroc(scores, [2] * 40, [1] * 40) == 0.5
    bound = size_only_bound([2] * 40, [1] * 40)
    assert bound.bound == 0.0 and bound.case == "equal"


def test_counterexample_exceeds_094() -> None:
    value = counterexample_auroc()
    assert value > 0.94
    assert value == pytest.approx(0.5 + 0.5 * (1000 / 1099 - 1 / 100))  # the paper's closed form


def test_musique_calculation() -> None:
    eps = 409 / 21902
    assert two_group_tv(eps) == pytest.approx(0.0092, abs=5e-5)
    # The same numbers from explicit multiplicities: 409 queries with one unsafe variant.
    n_u = [1] * 409 + [2] * (21902 - 409)
    n_c = [1] * 21902
    bound = size_only_bound(n_u, n_c)
    assert bound.total_variation == pytest.approx(two_group_tv(eps), rel=1e-12)
    assert bound.case == "two-group"
    assert bound.bound == pytest.approx(0.0046, abs=5e-5)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=25))
def test_random_size_only_scores_stay_within_the_bound(rows: list[tuple[int, int, int]]) -> None:
    n_u = [r[0] for r in rows]
    n_c = [r[1] for r in rows]
    scores = [float(r[2]) for r in rows]
    if sum(n_u) == 0 or sum(n_c) == 0:
        return
    exact = size_only_auroc(scores, n_u, n_c)
    y, s = expand(scores, n_u, n_c)
    assert exact == pytest.approx(roc_auc_score(y, s), abs=1e-12)  # the formula is the AUROC
    bound = size_only_bound(n_u, n_c)
    assert abs(exact - 0.5) <= bound.bound + 1e-12
    assert bound.bound <= total_variation(n_u, n_c) + 1e-15


@settings(max_examples=200, deadline=None)
@given(k=st.integers(1, 30), m=st.integers(1, 30), a=st.integers(1, 4), b=st.integers(1, 4), seed=st.integers(0, 999))
def test_two_group_bound_is_tight_enough_and_valid(k: int, m: int, a: int, b: int, seed: int) -> None:
    """Two multiplicity patterns: deviation <= TV/2 for any score, and scoring one group
    strictly above the other attains exactly TV/2."""
    n_u = [a] * k + [b] * m
    n_c = [1] * (k + m)
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 3, k + m).astype(float)
    bound = size_only_bound(n_u, n_c)
    assert abs(size_only_auroc(scores, n_u, n_c) - 0.5) <= bound.bound + 1e-12
    separated = [1.0] * k + [0.0] * m
    if a != b:
        assert abs(size_only_auroc(separated, n_u, n_c) - 0.5) == pytest.approx(bound.bound, abs=1e-12)


def test_inputs_are_validated() -> None:
    with pytest.raises(ValueError, match="unsafe and one complete"):
        total_variation([0, 0], [1, 1])
    with pytest.raises(ValueError, match="one score per base query"):
        size_only_auroc([1.0], [1, 1], [1, 1])
