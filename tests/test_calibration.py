"""Temperature scaling, the question-cluster bootstrap of AUROC and a gate's answer/abstain summary,
each against an independent computation (scikit-learn, a brute-force optimum, a naive bootstrap,
hand counts)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from memsafe_lib.measures.calibration import (
    MIN_CALIBRATION_MEMORIES,
    choose_temperature,
    fit_binary_temperature,
    fit_state_temperature,
    scale_binary,
    scale_states,
)
from memsafe_lib.measures.inference import cluster_bootstrap_auroc
from memsafe_lib.measures.metrics import expected_calibration_error
from memsafe_lib.measures.risk_coverage import operating_point, selective_summary


def _overconfident(n: int = 4000, true_t: float = 2.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from sigmoid(z); the model reports sigmoid(true_t * z): over-confident by true_t."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.5, n)
    y = rng.random(n) < 1 / (1 + np.exp(-z))
    return y, 1 / (1 + np.exp(-true_t * z))


def test_binary_temperature_is_logistic_regression_on_the_logit_without_intercept() -> None:
    y, p = _overconfident()
    logit = np.log(p / (1 - p))
    lr = LogisticRegression(fit_intercept=False, C=np.inf, tol=1e-10, max_iter=1000).fit(logit[:, None], y)
    assert fit_binary_temperature(y, p) == pytest.approx(1 / lr.coef_[0, 0], rel=1e-3)
    assert fit_binary_temperature(y, p) == pytest.approx(2.5, rel=0.1)  # recovers the planted over-confidence


def test_temperature_scaling_keeps_the_ranking_and_lowers_the_ece_of_an_overconfident_model() -> None:
    y, p = _overconfident()
    chosen = choose_temperature(y, p)
    scaled = scale_binary(p, chosen.temperature)
    assert roc_auc_score(y, scaled) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert chosen.ece_before == pytest.approx(expected_calibration_error(y, p))
    assert chosen.ece_after == pytest.approx(expected_calibration_error(y, scaled))
    assert chosen.ece_after < chosen.ece_before / 2


def test_a_temperature_that_does_not_lower_the_validation_ece_is_not_kept() -> None:
    # two probabilities only: the log-loss optimum moves them off the bin means that make ECE zero
    y = np.array([0, 0, 0, 1] * 50 + [1, 1, 1, 0] * 50, dtype=bool)
    p = np.array([0.25] * 200 + [0.75] * 200)
    assert expected_calibration_error(y, p) == pytest.approx(0.0)
    chosen = choose_temperature(y, p)
    assert chosen.temperature == 1.0 and chosen.ece_after == chosen.ece_before


def test_state_temperature_is_the_brute_force_log_loss_optimum() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 2, (600, 3))
    true = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    states = [("a", "b", "c")[rng.choice(3, p=row)] for row in true]
    reported = scale_states(true, 0.5)  # sharpened: the fitted temperature undoes it
    grid = np.exp(np.linspace(-2, 2, 4001))
    index = np.array(["abc".index(s) for s in states])
    nll = [-np.mean(np.log(scale_states(reported, t)[np.arange(600), index])) for t in grid]
    fitted = fit_state_temperature(states, reported, ["a", "b", "c"])
    assert fitted == pytest.approx(grid[int(np.argmin(nll))], rel=2e-3)
    assert fitted == pytest.approx(2.0, rel=0.25)


def test_cluster_bootstrap_matches_a_naive_resampling_of_questions() -> None:
    rng = np.random.default_rng(3)
    groups = np.repeat([f"q{i}" for i in range(40)], 3)
    y = np.tile([False, True, True], 40)
    score = y * 0.3 + rng.random(120)
    lo, hi = cluster_bootstrap_auroc(y, score, groups, n_resamples=200, seed=5)
    draws = np.random.default_rng(5)
    names = np.unique(groups)
    naive = []
    while len(naive) < 200:
        drawn = names[draws.integers(0, 40, 40)]
        rows = np.concatenate([np.flatnonzero(groups == g) for g in drawn])
        naive.append(roc_auc_score(y[rows], score[rows]))
    assert (lo, hi) == pytest.approx(tuple(np.percentile(naive, [2.5, 97.5])), abs=1e-12)
    assert lo < roc_auc_score(y, score) < hi


def test_selective_summary_by_hand() -> None:
    unsafe = [True, True, False, False, False, True]
    answered = [True, False, True, True, False, False]
    out = selective_summary(unsafe, answered)
    # answered 3 of 6, one of them unsafe; complete abstained: 1 of 3; unsafe abstained: 2 of 3
    assert out == {"n": 6, "answered": 3, "coverage": 0.5, "risk": pytest.approx(1 / 3),
                   "false_abstention_rate": pytest.approx(1 / 3), "correct_abstention_rate": pytest.approx(2 / 3)}
    point = operating_point(unsafe, [0.2, 0.9, 0.1, 0.5, 0.51, 0.8], 0.5)
    assert point["threshold"] == 0.5 and point["coverage"] == 0.5 and point["risk"] == pytest.approx(1 / 3)
    assert operating_point(unsafe, [0.1] * 6, None)["risk"] is None


def test_too_few_validation_memories_fit_no_temperature() -> None:
    y, p = _overconfident(n=MIN_CALIBRATION_MEMORIES - 1)
    chosen = choose_temperature(y, p)
    assert chosen.temperature == 1.0 and chosen.n == MIN_CALIBRATION_MEMORIES - 1
    assert chosen.ece_after == chosen.ece_before == pytest.approx(expected_calibration_error(y, p))
    assert choose_temperature(*_overconfident(n=MIN_CALIBRATION_MEMORIES * 20)).temperature > 1.5
