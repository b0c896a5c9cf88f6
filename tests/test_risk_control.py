"""Learn-then-Test thresholds: the binomial p-value by hand, the guarantee by simulation
against the analytic risk of a known score distribution, and the edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from memsafe_lib.measures.risk_control import binomial_p_value, ltt_threshold, one_per_group

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


def test_the_rule_is_the_largest_threshold_whose_corrected_p_value_is_at_most_delta() -> None:
    """A hand example whose p-values come from scipy: at alpha 0.2 and delta 0.1 over a grid of
    five, the per-threshold level is 0.02. t = 0.2 and 0.4 are rejected (p 0.0012 and 0.0015),
    t = 0.6 is not (p 0.048: it would be without the Bonferroni correction), t = 0.8 and 1.0
    are far from it. So the rule answers 0.4; taking the smallest rejected threshold would
    answer 0.2, dropping the correction 0.6."""
    groups = [(0.1, 30, 0), (0.3, 10, 1), (0.5, 10, 4), (0.7, 10, 8), (0.9, 10, 10)]  # (score, memories, unsafe)
    score = np.concatenate([np.full(n, s) for s, n, _ in groups])
    unsafe = np.concatenate([np.arange(n) < u for _, n, u in groups])
    grid, alpha, delta = [0.2, 0.4, 0.6, 0.8, 1.0], 0.2, 0.1
    p = {t: binom.cdf(unsafe[score <= t].sum(), (score <= t).sum(), alpha) for t in grid}
    assert p[0.2] <= delta / 5 and p[0.4] <= delta / 5 < p[0.6] <= delta < p[0.8]  # the example is what it says
    result = ltt_threshold(unsafe, score, alpha=alpha, delta=delta, grid=grid)
    assert result.threshold == 0.4 and (result.accepted, result.errors) == (40, 1)
    assert result.p_value == pytest.approx(p[0.4]) and result.level == pytest.approx(delta / 5)


def test_the_guarantee_holds_over_repeated_validation_draws() -> None:
    """P(true risk of the chosen threshold > alpha) <= delta, counted over 300 draws; and the
    method has power: the chosen thresholds sit near where the true risk crosses alpha (0.25),
    not at the strictest thresholds that any rule could certify (a rule taking the smallest
    rejected threshold averages about 0.05 here, the largest about 0.12)."""
    delta, rng = 0.1, np.random.default_rng(0)
    violations, chosen = 0, []
    for _ in range(300):
        result = ltt_threshold(*draw(2000, rng), alpha=ALPHA, delta=delta)
        if result.threshold is not None:
            chosen.append(result.threshold)
            violations += true_risk(result.threshold) > ALPHA
    assert len(chosen) > 200  # the method does answer, it is not vacuous
    assert violations / 300 <= delta
    assert 0.10 <= np.mean(chosen) < 0.25


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


def test_clustered_memories_count_once_per_group() -> None:
    """Three copies of each of 200 memories (a question's variants, as dependent as can be): as
    600 independent memories the binomial test would certify a 5% risk that 200 cannot."""
    rng = np.random.default_rng(3)
    unsafe = rng.random(200) < 0.02
    score = np.where(unsafe, 0.9, rng.random(200) * 0.5)
    y, s, g = np.repeat(unsafe, 3), np.repeat(score, 3), np.repeat([f"q{i}" for i in range(200)], 3)
    pooled = ltt_threshold(y, s, 0.05, 0.1)
    grouped = ltt_threshold(y, s, 0.05, 0.1, groups=g.tolist())
    alone = ltt_threshold(unsafe, score, 0.05, 0.1)
    assert grouped.n_calibration == 200 and pooled.n_calibration == 600
    assert (grouped.threshold, grouped.accepted, grouped.errors) == (alone.threshold, alone.accepted, alone.errors)
    assert pooled.accepted > grouped.accepted  # what treating copies as independent buys, and should not
    kept = one_per_group(g.tolist())
    assert len(kept) == 200 and len({g[i] for i in kept}) == 200 and list(kept) == list(one_per_group(g.tolist()))
    with pytest.raises(ValueError, match="groups has 3 entries"):
        ltt_threshold(y, s, 0.05, 0.1, groups=["a", "b", "c"])
