"""Error at coverage and Proposition 2 (issue 14), against hand counts and brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from memsafe_lib.measures.gating import error_at_coverage, expected_accepted_errors


def test_error_at_coverage_by_hand_without_ties() -> None:
    wrong = [0, 1, 1, 0, 1]
    score = [0.1, 0.2, 0.3, 0.4, 0.5]
    assert error_at_coverage(wrong, score, 0.2) == 0.0          # accepts the first only
    assert error_at_coverage(wrong, score, 0.6) == pytest.approx(2 / 3)
    assert error_at_coverage(wrong, score, 1.0) == pytest.approx(3 / 5)


def test_ties_are_the_average_over_every_order_of_the_tied_group() -> None:
    wrong = np.array([1, 0, 1, 0, 0, 1])
    score = np.array([0.5, 0.5, 0.5, 0.1, 0.9, 0.9])
    for k in range(1, 7):
        brute = []
        for order in itertools.permutations(range(6)):  # every tie-breaking, by brute force
            ranked = sorted(order, key=lambda i: (score[i], order.index(i)))
            brute.append(wrong[ranked[:k]].sum())
        assert expected_accepted_errors(wrong, score, k) == pytest.approx(np.mean(brute))


def test_fractional_coverage_interpolates_linearly() -> None:
    wrong, score = [1, 0], [0.1, 0.2]
    assert expected_accepted_errors(wrong, score, 0.5) == pytest.approx(0.5)
    assert error_at_coverage(wrong, score, 0.75) == pytest.approx(1 / 1.5)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="coverage"):
        error_at_coverage([0, 1], [0.1, 0.2], 0.0)
    with pytest.raises(ValueError, match="one length"):
        error_at_coverage([0, 1], [0.1], 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        error_at_coverage([0, 2], [0.1, 0.2], 0.5)


def test_proposition_2_binary_gate_loses_when_eta_varies_within_a_level_set() -> None:
    # Z = 0 (complete) for the first four memories; the reader's error probability eta
    # varies among them, and is constant among the Z = 1 memories.
    z = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=float)
    eta = np.array([0.1, 0.3, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9])
    coverages = np.arange(1, 9) / 8
    by_eta = [error_at_coverage(eta, eta, c) for c in coverages]
    by_z = [error_at_coverage(eta, z, c) for c in coverages]
    assert all(a <= b + 1e-12 for a, b in zip(by_eta, by_z, strict=True))  # eta is optimal at every coverage
    assert any(b > a + 1e-9 for a, b in zip(by_eta, by_z, strict=True))    # Z strictly worse somewhere
    assert by_z[0] == pytest.approx(np.mean(eta[:4]))  # inside Z's tie group: the group's mean error


def test_proposition_2_binary_gate_is_optimal_when_eta_is_constant_on_level_sets() -> None:
    z = np.array([0, 0, 0, 1, 1, 1, 1], dtype=float)
    eta = np.where(z == 0, 0.2, 0.7)
    for c in np.arange(1, 8) / 7:
        assert error_at_coverage(eta, z, c) == pytest.approx(error_at_coverage(eta, eta, c))
