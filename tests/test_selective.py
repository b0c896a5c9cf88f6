"""Selective prediction: risk–coverage curve, exact AURC, prevalence limits and the
validation-calibrated gate; hand examples, closed forms and brute-force checks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsafe_lib.measures.risk_coverage import (
    SelectiveResult,
    apply_threshold,
    aurc,
    aurc_min,
    coverage_ceiling,
    optimal_risk,
    risk_coverage_curve,
    selective_report,
    threshold_for_risk,
)

tied_rows = st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=1, max_size=60)


def _arrays(rows):
    y = np.array([a for a, _ in rows], dtype=bool)
    s = np.array([b for _, b in rows], dtype=float) / 5  # few distinct values: many ties
    return y, s


def _perfect_ranker(rng: np.random.Generator, n: int, n_unsafe: int) -> tuple[np.ndarray, np.ndarray]:
    y = np.zeros(n, dtype=bool)
    y[:n_unsafe] = True
    # complete rows in [0, .5), unsafe in [.5, 1], with ties inside each class
    s = np.where(y, 0.5 + rng.integers(0, 3, n) / 6, rng.integers(0, 3, n) / 6)
    perm = rng.permutation(n)
    return y[perm], s[perm]


# ---------------------------------------------------------------------------- curve


def test_risk_coverage_curve_hand_example() -> None:
    curve = risk_coverage_curve([0, 0, 1, 0, 1], [0.1, 0.2, 0.2, 0.3, 0.4])
    assert list(curve.columns) == ["threshold", "coverage", "risk", "accepted", "errors"]
    assert curve["threshold"].tolist() == [0.1, 0.2, 0.3, 0.4]
    assert curve["accepted"].tolist() == [1, 3, 4, 5]
    assert curve["errors"].tolist() == [0, 1, 1, 2]
    assert curve["coverage"].tolist() == pytest.approx([0.2, 0.6, 0.8, 1.0])
    assert curve["risk"].tolist() == pytest.approx([0.0, 1 / 3, 0.25, 0.4])


def test_curve_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="empty"):
        risk_coverage_curve([], [])
    with pytest.raises(ValueError, match="differ in length"):
        aurc([0, 1], [0.3])
    with pytest.raises(ValueError, match="finite"):
        aurc([0, 1], [0.3, float("nan")])


# ---------------------------------------------------------------------------- prevalence limits


def test_closed_forms_at_two_thirds_prevalence() -> None:
    assert round(coverage_ceiling(2 / 3, 0.05), 4) == 0.3509
    assert abs(aurc_min(2 / 3) - 0.30046) < 5e-6
    assert aurc_min(2 / 3) == pytest.approx(2 / 3 + math.log(1 / 3) / 3, abs=1e-15)


def test_limits_at_the_edges() -> None:
    assert aurc_min(0.0) == 0.0 and aurc_min(1.0) == 1.0
    assert aurc_min(1 - 1e-12) == pytest.approx(1.0, abs=1e-9)  # continuous at 1
    assert coverage_ceiling(0.0, 0.05) == 1.0 and coverage_ceiling(1.0, 0.05) == 0.0
    assert coverage_ceiling(0.5, 1.0) == 1.0
    assert coverage_ceiling(0.3, 0.3) == pytest.approx(1.0)
    assert optimal_risk(1.0, 0.25) == pytest.approx(0.25)
    assert optimal_risk(0.5, 0.25) == 0.0
    for bad in (-0.1, 1.1, float("nan")):
        with pytest.raises(ValueError):
            aurc_min(bad)
    with pytest.raises(ValueError, match="coverage"):
        optimal_risk(0.0, 0.5)


def test_optimal_risk_equals_curve_of_a_perfect_ranker() -> None:
    rng = np.random.default_rng(11)
    for n, k in [(10, 3), (25, 20), (7, 0), (9, 9), (200, 77)]:
        y, s = _perfect_ranker(rng, n, k)
        curve = risk_coverage_curve(y, s)
        for c, r in zip(curve["coverage"], curve["risk"], strict=True):
            assert r == pytest.approx(optimal_risk(c, k / n), abs=1e-12)
        # and the ceiling is the largest coverage within risk alpha on that curve
        alpha = 0.1
        within = curve.loc[curve["risk"] <= alpha, "coverage"]
        if k < n:
            assert within.max() <= coverage_ceiling(k / n, alpha) + 1e-12


# ---------------------------------------------------------------------------- AURC


def test_aurc_perfect_ranker_attains_aurc_min_exactly() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 400))
        k = int(rng.integers(0, n + 1))
        y, s = _perfect_ranker(rng, n, k)
        assert abs(aurc(y, s) - aurc_min(k / n)) < 1e-12


def test_aurc_constant_score_is_prevalence() -> None:
    rng = np.random.default_rng(1)
    for _ in range(100):
        n = int(rng.integers(1, 300))
        y = rng.random(n) < rng.random()
        assert aurc(y, np.full(n, 0.42)) == pytest.approx(y.mean(), abs=1e-15)


def test_aurc_hand_example_two_groups() -> None:
    # group 1 at .1: {safe, unsafe} (s=.5, coverage 0 -> .5) gives .5 * .5 = .25
    # group 2 at .9: {unsafe, unsafe} (s=1, E_a=.25, a=.5, b=1): (.25 - .5) ln 2 + .5
    expected = 0.25 + (0.25 - 0.5) * math.log(2) + 0.5
    assert aurc([0, 1, 1, 1], [0.1, 0.1, 0.9, 0.9]) == pytest.approx(expected, abs=1e-15)


def _numeric_aurc(y: np.ndarray, s: np.ndarray, grid: int = 200_000) -> float:
    """Midpoint rule on E(c)/c, E piecewise linear between the curve's points."""
    curve = risk_coverage_curve(y, s)
    xs = np.concatenate([[0.0], curve["coverage"].to_numpy()])
    es = np.concatenate([[0.0], curve["errors"].to_numpy() / len(y)])
    c = (np.arange(grid) + 0.5) / grid
    return float(np.mean(np.interp(c, xs, es) / c))


@settings(max_examples=60, deadline=None)
@given(tied_rows)
def test_aurc_equals_numerical_integration(rows) -> None:
    y, s = _arrays(rows)
    assert aurc(y, s) == pytest.approx(_numeric_aurc(y, s), abs=1e-3)


@settings(max_examples=150, deadline=None)
@given(tied_rows)
def test_aurc_between_floor_and_one(rows) -> None:
    y, s = _arrays(rows)
    value = aurc(y, s)
    assert aurc_min(y.mean()) - 1e-12 <= value <= 1.0 + 1e-12


def test_aurc_is_the_mean_discrete_risk_over_random_tie_breaking() -> None:
    # replicate a small tied sample m times (same continuous curve), break ties at random
    # and average the discrete mean risk (1/N) sum_k errors_k / k: it converges to aurc
    rng = np.random.default_rng(5)
    y0 = np.array([0, 1, 0, 1, 1, 0, 0, 1, 0, 0, 1, 0], dtype=bool)
    s0 = np.array([0.1, 0.1, 0.1, 0.4, 0.4, 0.4, 0.4, 0.7, 0.7, 0.2, 0.9, 0.9])
    m = 100
    y, s = np.tile(y0, m), np.tile(s0, m)
    assert aurc(y, s) == pytest.approx(aurc(y0, s0), abs=1e-12)
    k = np.arange(1, len(y) + 1)
    means = []
    for _ in range(200):
        order = np.lexsort((rng.random(len(y)), s))  # by score, ties in random order
        means.append(np.mean(np.cumsum(y[order]) / k))
    assert np.mean(means) == pytest.approx(aurc(y0, s0), abs=3e-3)
    # a step rule that ignores the tie structure (all-or-nothing) differs noticeably here
    curve = risk_coverage_curve(y0, s0)
    step = float(np.sum(np.diff(np.concatenate([[0.0], curve["coverage"]])) * curve["risk"]))
    assert abs(step - aurc(y0, s0)) > 1e-2


# ---------------------------------------------------------------------------- row order


@settings(max_examples=150, deadline=None)
@given(tied_rows, st.floats(0, 1), st.randoms(use_true_random=False))
def test_nothing_depends_on_row_order(rows, alpha, rnd) -> None:
    y, s = _arrays(rows)
    perm = list(range(len(y)))
    rnd.shuffle(perm)
    yp, sp = y[perm], s[perm]
    assert aurc(yp, sp) == aurc(y, s)
    pd.testing.assert_frame_equal(risk_coverage_curve(yp, sp), risk_coverage_curve(y, s))
    t = threshold_for_risk(y, s, alpha)
    assert threshold_for_risk(yp, sp, alpha) == t
    assert apply_threshold(yp, sp, t) == apply_threshold(y, s, t)


# ---------------------------------------------------------------------------- gate


def test_threshold_for_risk_hand_example() -> None:
    y = [0, 0, 1, 0, 1]
    s = [0.1, 0.2, 0.2, 0.3, 0.4]  # risks by threshold: 0, 1/3, 1/4, 2/5
    assert threshold_for_risk(y, s, 0.05) == 0.1
    assert threshold_for_risk(y, s, 0.3) == 0.3  # 0.2 fails but the larger 0.3 qualifies
    assert threshold_for_risk(y, s, 0.25) == 0.3  # risk exactly alpha qualifies
    assert threshold_for_risk(y, s, 0.4) == 0.4
    assert threshold_for_risk([0] * 71 + [1] * 29, list(range(100)), 0.29) == 99  # 29/100 vs 0.29 * 100


def test_threshold_for_risk_none_and_ties_all_or_nothing() -> None:
    assert threshold_for_risk([1, 0, 1], [0.1, 0.1, 0.5], 0.2) is None  # risks 1/2, 2/3
    # accepting only the safe row of the tie would meet alpha, but ties are all-or-nothing
    assert threshold_for_risk([0, 1], [0.1, 0.1], 0.1) is None
    assert threshold_for_risk([0, 1], [0.1, 0.2], 0.1) == 0.1


def test_apply_threshold() -> None:
    y = [0, 1, 0, 1, 0]
    s = [0.1, 0.2, 0.2, 0.5, 0.9]
    assert apply_threshold(y, s, 0.2) == SelectiveResult(threshold=0.2, coverage=0.6, realized_risk=1 / 3,
                                                         accepted=3, n=5)
    below = apply_threshold(y, s, 0.05)
    assert below.coverage == 0.0 and below.accepted == 0 and below.realized_risk is None
    none = apply_threshold(y, s, None)
    assert none.coverage == 0.0 and none.realized_risk is None and none.threshold is None
    assert apply_threshold(y, s, 1.0).realized_risk == pytest.approx(0.4)


def test_selective_report_combines_the_pieces() -> None:
    rng = np.random.default_rng(2)
    yv = rng.random(400) < 0.3
    sv = np.clip(np.where(yv, 0.6, 0.3) + rng.normal(0, 0.2, 400), 0, 1).round(2)
    yt = rng.random(300) < 0.3
    st_ = np.clip(np.where(yt, 0.6, 0.3) + rng.normal(0, 0.2, 300), 0, 1).round(2)
    rep = selective_report(yv, sv, yt, st_, alpha=0.1)
    t = threshold_for_risk(yv, sv, 0.1)
    res = apply_threshold(yt, st_, t)
    assert rep["alpha"] == 0.1 and rep["threshold"] == t and t is not None
    assert rep["coverage"] == res.coverage and rep["realized_risk"] == res.realized_risk
    assert rep["aurc"] == aurc(yt, st_)
    assert rep["pi"] == pytest.approx(yt.mean())
    assert rep["coverage_ceiling"] == coverage_ceiling(yt.mean(), 0.1)
    assert rep["aurc_min"] == aurc_min(yt.mean())
    assert rep["aurc"] >= rep["aurc_min"]
    # nothing qualifies: zero coverage, risk None
    rep = selective_report([1, 1], [0.1, 0.2], yt, st_, alpha=0.05)
    assert rep["threshold"] is None and rep["coverage"] == 0.0 and rep["realized_risk"] is None
