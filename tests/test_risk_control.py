"""Learn-then-Test thresholds: the binomial p-value by hand, the guarantee by simulation
against the analytic risk of a known score distribution, and the edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from memsafe_lib.measures.risk_control import binomial_p_value, ltt_threshold

PI = 0.5  # unsafe prevalence; complete scores ~ U(0, 1), unsafe scores ~ sqrt(U(0, 1))
ALPHA = 0.2


def true_risk(t: float) -> float:
    """P(unsafe | score <= t) = PI t^2 / (PI t^2 + (1 - PI) t) = t / (1 + t) here: a risk that
    rises smoothly through ALPHA (at t = 0.25), where a threshold is easy to overshoot."""
    return t / (1 + t) if t > 0 else 0.0


def draw(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    unsafe = rng.random(n) < PI
    score = np.where(unsafe, np.sqrt(rng.random(n)), rng.random(n))
    return unsafe, score


def test_binomial_p_value_by_hand() -> None:
    assert binomial_p_value(0, 0, 0.05) == 1.0
    assert binomial_p_value(1, 40, 0.05) == pytest.approx(0.95**40 + 40 * 0.05 * 0.95**39)
    assert binomial_p_value(3, 100, 0.1) == pytest.approx(binom.cdf(3, 100, 0.1))


def test_the_guarantee_holds_over_repeated_validation_draws() -> None:
    """P(true risk of the chosen threshold > alpha) <= delta, counted over 300 draws."""
    delta, rng = 0.1, np.random.default_rng(0)
    violations, chosen = 0, 0
    for _ in range(300):
        result = ltt_threshold(*draw(2000, rng), alpha=ALPHA, delta=delta)
        if result.threshold is not None:
            chosen += 1
            violations += true_risk(result.threshold) > ALPHA
    assert chosen > 200  # the method does answer, it is not vacuous
    assert violations / 300 <= delta


def test_plain_validation_threshold_breaks_the_budget_far_more_often() -> None:
    """Why the guarantee matters: the largest threshold with observed risk <= alpha exceeds
    alpha in truth far more often than delta (the same draws)."""
    from memsafe_lib.measures.risk_coverage import threshold_for_risk

    rng = np.random.default_rng(0)
    plain = [threshold_for_risk(*draw(2000, rng), ALPHA) for _ in range(200)]
    assert np.mean([t is not None and true_risk(t) > ALPHA for t in plain]) > 0.3


def test_edge_cases() -> None:
    nothing_safe = ltt_threshold([True] * 50, np.linspace(0, 1, 50), alpha=0.05)
    assert nothing_safe.threshold is None and nothing_safe.accepted == 0
    separated = ltt_threshold([False] * 200 + [True] * 200, np.r_[np.full(200, 0.1), np.full(200, 0.9)], alpha=0.05)
    assert separated.threshold is not None and 0.1 <= separated.threshold < 0.9 and separated.errors == 0
    assert "probability >= 0.9" in separated.guarantee
    with pytest.raises(ValueError):
        ltt_threshold([True, False], [0.1, 0.2], alpha=0.0)
