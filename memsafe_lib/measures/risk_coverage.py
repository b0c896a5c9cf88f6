"""Selective prediction at a risk budget: answer only when the unsafe score is low.

A gate answers on a memory when its unsafe probability ``r`` is at most a threshold
``t``. Its coverage is ``C(t) = P(r <= t)`` and its evidence risk is
``R(t) = P(unsafe | r <= t)``, the rate of answering on insufficient evidence.

Ties are all-or-nothing for a gate: a threshold accepts every row with ``r <= t``, so
the risk–coverage curve has one point per distinct score. For the area under the
curve (AURC) we read the curve between those points as the expectation over random
tie-breaking: inside a group of tied scores rows are accepted in random order, so the
expected number of accepted errors grows linearly with coverage. This makes AURC
independent of row order and exact for a perfect ranker (``aurc_min``) and for a
constant score (the prevalence ``pi``).

The prevalence ``pi`` alone bounds what any ranker can do: at coverage ``c`` at least
``c - (1 - pi)`` of the mass accepted must be unsafe, hence ``optimal_risk``,
``coverage_ceiling`` and ``aurc_min``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from memsafe_lib.measures.metrics import _binary_labels, _paired


def _check_unit(value: float, name: str) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:  # NaN fails too
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
    return value


def _groups(unsafe: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray) -> tuple[np.ndarray, ...]:
    """Distinct scores ascending, with the size and number of unsafe rows of each tie group."""
    y, s = _paired(unsafe, score, "unsafe", "score")
    uniq, inverse = np.unique(s, return_inverse=True)
    size = np.bincount(inverse, minlength=uniq.size).astype(np.int64)
    errors = np.bincount(inverse, weights=y.astype(float), minlength=uniq.size).round().astype(np.int64)
    return uniq, size, errors


def risk_coverage_curve(unsafe: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray) -> pd.DataFrame:
    """The gate's operating points, one per distinct score, sorted by threshold ascending.

    Columns: ``threshold`` (a distinct score ``t``), ``accepted`` (#rows with score <= t),
    ``errors`` (#unsafe among them), ``coverage`` = accepted / n and ``risk`` =
    errors / accepted. Tied rows are accepted together, so row order never matters.
    """
    uniq, size, errors = _groups(unsafe, score)
    accepted = np.cumsum(size)
    cum_errors = np.cumsum(errors)
    n = int(accepted[-1])
    return pd.DataFrame(
        {
            "threshold": uniq,
            "coverage": accepted / n,
            "risk": cum_errors / accepted,
            "accepted": accepted,
            "errors": cum_errors,
        }
    )


def aurc(unsafe: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray) -> float:
    """Exact area under the risk–coverage curve, ``∫_0^1 R(c) dc``.

    Inside a tie group rows are accepted in random order, so the expected accepted
    errors ``E(c)`` (as a fraction of n) grow linearly with slope ``s`` = the group's
    unsafe fraction and ``R(c) = E(c) / c``. On a segment ``[a, b]`` with
    ``E(c) = E_a + s (c - a)`` the integral is in closed form,

        ∫_a^b (E_a - s a)/c + s dc = (E_a - s a) ln(b / a) + s (b - a),

    and the first segment (``a = 0``, ``E_a = 0``) gives ``s b``. No trapezoid or
    step rule, so a perfect ranker gives exactly ``aurc_min(pi)`` and a constant score
    exactly ``pi``.
    """
    _, size, errors = _groups(unsafe, score)
    n = float(size.sum())
    cum = np.cumsum(size)
    prev = (cum - size).astype(float)  # rows accepted before the group
    prev_err = (np.cumsum(errors) - errors).astype(float)
    slope = errors / size
    a, b = prev / n, cum / n
    area = slope * (b - a)
    later = prev > 0
    # (E_a - s a) with E_a = prev_err / n and a = prev / n; ln(b/a) = ln(cum / prev)
    area[later] += (prev_err[later] - slope[later] * prev[later]) / n * np.log(cum[later] / prev[later])
    return float(np.sum(area))


def optimal_risk(c: float, pi: float) -> float:
    """Lowest risk any ranker can have at coverage ``c`` in (0, 1] when a fraction ``pi``
    is unsafe: ``max(0, 1 - (1 - pi) / c)`` (accept all complete rows first)."""
    c = float(c)
    if not 0.0 < c <= 1.0:
        raise ValueError(f"coverage must lie in (0, 1], got {c!r}")
    pi = _check_unit(pi, "pi")
    return max(0.0, 1.0 - (1.0 - pi) / c)


def coverage_ceiling(pi: float, alpha: float) -> float:
    """Highest coverage any ranker can reach at risk <= ``alpha``: ``min(1, (1 - pi)/(1 - alpha))``.

    With ``alpha = 1`` every coverage is allowed, so the ceiling is 1.
    """
    pi = _check_unit(pi, "pi")
    alpha = _check_unit(alpha, "alpha")
    if alpha == 1.0:
        return 1.0
    return min(1.0, (1.0 - pi) / (1.0 - alpha))


def aurc_min(pi: float) -> float:
    """AURC of a perfect ranker, ``pi + (1 - pi) ln(1 - pi)``: the floor of ``aurc``.

    Limits are explicit: ``pi = 0`` gives 0 and ``pi = 1`` gives 1 (``(1-pi) ln(1-pi) -> 0``).
    """
    pi = _check_unit(pi, "pi")
    if pi == 0.0:
        return 0.0
    if pi == 1.0:
        return 1.0
    return pi + (1.0 - pi) * math.log1p(-pi)


def threshold_for_risk(
    unsafe_val: Sequence[bool] | np.ndarray, score_val: Sequence[float] | np.ndarray, alpha: float
) -> float | None:
    """The largest distinct validation score ``t`` whose validation risk ``R(t) <= alpha``.

    The gate accepts every row with score <= t, so ties are all-or-nothing: a tie group
    is never split even if accepting part of it would keep the risk within ``alpha``.
    The risk curve need not be monotone, so the largest qualifying ``t`` may lie above
    thresholds that do not qualify. Returns ``None`` when no threshold qualifies
    (coverage 0: abstain on everything).
    """
    alpha = _check_unit(alpha, "alpha")
    curve = risk_coverage_curve(unsafe_val, score_val)
    # Compare in counts, errors <= alpha * accepted, with a relative slack far below one
    # error so that R(t) == alpha qualifies despite rounding (0.29 * 100 = 28.999...).
    accepted = curve["accepted"].to_numpy()
    ok = curve["errors"].to_numpy() <= alpha * accepted * (1.0 + 1e-9)
    if not ok.any():
        return None
    return float(curve["threshold"].to_numpy()[ok][-1])


@dataclass(frozen=True)
class SelectiveResult:
    """A threshold applied to a (test) set.

    ``realized_risk`` is ``None`` when nothing is accepted: the risk of an empty set is
    undefined and must not read as 0 (perfectly safe) or NaN.
    """

    threshold: float | None
    coverage: float
    realized_risk: float | None
    accepted: int
    n: int


def apply_threshold(
    unsafe_test: Sequence[bool] | np.ndarray, score_test: Sequence[float] | np.ndarray, t: float | None
) -> SelectiveResult:
    """Accept the rows with score <= ``t`` and report coverage and realized risk.

    ``t = None`` (no qualifying threshold) accepts nothing.
    """
    y, s = _paired(unsafe_test, score_test, "unsafe_test", "score_test")
    if t is not None and math.isnan(float(t)):
        raise ValueError("threshold must not be NaN")
    accepted = np.zeros(s.shape, dtype=bool) if t is None else s <= float(t)
    k, n = int(accepted.sum()), int(s.size)
    risk = float(y[accepted].sum()) / k if k else None
    threshold = None if t is None else float(t)
    return SelectiveResult(threshold=threshold, coverage=k / n, realized_risk=risk, accepted=k, n=n)


def selective_report(
    unsafe_val: Sequence[bool] | np.ndarray,
    score_val: Sequence[float] | np.ndarray,
    unsafe_test: Sequence[bool] | np.ndarray,
    score_test: Sequence[float] | np.ndarray,
    alpha: float = 0.05,
) -> dict:
    """Calibrate the gate on validation at risk budget ``alpha``, evaluate it on test.

    Returns ``alpha``, ``threshold`` (``None`` if none qualifies), the test ``coverage``,
    ``realized_risk`` (``None`` at zero coverage), ``accepted``, ``n``, the test
    ``aurc``, the test prevalence ``pi``, and the prevalence limits
    ``coverage_ceiling`` = coverage_ceiling(pi, alpha) and ``aurc_min`` = aurc_min(pi),
    so the reached coverage and AURC can be read against what any ranker could reach.
    """
    alpha = _check_unit(alpha, "alpha")
    t = threshold_for_risk(unsafe_val, score_val, alpha)
    result = apply_threshold(unsafe_test, score_test, t)
    y, _ = _paired(unsafe_test, score_test, "unsafe_test", "score_test")
    pi = float(y.mean())
    out = {"alpha": alpha, **asdict(result)}
    out.update(
        aurc=aurc(unsafe_test, score_test),
        pi=pi,
        coverage_ceiling=coverage_ceiling(pi, alpha),
        aurc_min=aurc_min(pi),
    )
    return out



def selective_summary(unsafe: Sequence[bool] | np.ndarray, answered: Sequence[bool] | np.ndarray) -> dict[str, Any]:
    """A gate's answer/abstain decisions read four ways: ``coverage`` (share answered), ``risk``
    (unsafe share of the answered; None when none is), ``false_abstention_rate`` (complete
    memories it abstains on, over all complete ones) and ``correct_abstention_rate`` (unsafe
    memories it abstains on, over all unsafe ones); None where the class is absent."""
    y = _binary_labels(unsafe, "unsafe")
    a = _binary_labels(answered, "answered")
    if y.shape != a.shape or not y.size:
        raise ValueError(f"unsafe and answered must be of one non-zero length: {y.shape}, {a.shape}")
    return {"n": int(y.size), "answered": int(a.sum()), "coverage": float(a.mean()),
            "risk": float(y[a].mean()) if a.any() else None,
            "false_abstention_rate": float((~a & ~y).sum() / (~y).sum()) if (~y).any() else None,
            "correct_abstention_rate": float((~a & y).sum() / y.sum()) if y.any() else None}


def operating_point(unsafe: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray,
                    t: float | None) -> dict[str, Any]:
    """:func:`selective_summary` of answering where ``score <= t`` (nothing when ``t`` is None)."""
    y, s = _paired(unsafe, score, "unsafe", "score")
    answered = np.zeros(s.shape, dtype=bool) if t is None else s <= float(t)
    return {"threshold": None if t is None else float(t), **selective_summary(y, answered)}
