"""Metrics against scikit-learn on randomized inputs, ties included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import f1_score, roc_auc_score

from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6)), min_size=2, max_size=60))
def test_auroc_matches_sklearn_with_ties(pairs: list[tuple[bool, int]]) -> None:
    y = np.array([p[0] for p in pairs])
    s = np.array([p[1] for p in pairs], dtype=float)  # few distinct values: many ties
    if y.all() or not y.any():
        with pytest.raises(ValueError, match="both classes"):
            unsafe_auroc(y, s)
        return
    assert unsafe_auroc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)


def test_auroc_hand_computed() -> None:
    # unsafe scores {0.9, 0.5}, complete {0.5, 0.1}: pairs (0.9>0.5)=1, (0.9>0.1)=1, (0.5=0.5)=0.5, (0.5>0.1)=1
    assert unsafe_auroc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(3.5 / 4)
    assert unsafe_auroc([1, 0], [0.3, 0.3]) == 0.5


def test_auroc_is_invariant_to_row_order() -> None:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500).astype(bool)
    s = rng.integers(0, 10, 500).astype(float)
    perm = rng.permutation(500)
    assert unsafe_auroc(y, s) == unsafe_auroc(y[perm], s[perm])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("abcd")), min_size=1, max_size=50))
def test_macro_f1_matches_sklearn(pairs: list[tuple[str, str]]) -> None:
    t = [p[0] for p in pairs]
    p = [p[1] for p in pairs]
    labels = sorted(set(t))
    expected = f1_score(t, p, labels=labels, average="macro", zero_division=0)
    assert macro_f1(t, p) == pytest.approx(expected, abs=1e-12)
    assert macro_f1(t, p, ["a", "b", "c"]) == pytest.approx(
        f1_score(t, p, labels=["a", "b", "c"], average="macro", zero_division=0), abs=1e-12)


def test_majority_macro_f1_on_balanced_three_states_is_one_sixth() -> None:
    t = ["complete", "missing", "relation_lost"] * 10
    assert macro_f1(t, ["missing"] * 30) == pytest.approx(1 / 6)  # the paper's 0.1667 for majority
