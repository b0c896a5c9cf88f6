"""A gate threshold with a finite-sample guarantee on its evidence risk (Learn-then-Test).

The plain validation threshold (:func:`~memsafe_lib.measures.risk_coverage.threshold_for_risk`)
picks the largest threshold whose *observed* validation risk is at most ``alpha``; on a
small validation split it often overshoots on test. Learn-then-Test (Angelopoulos, Bates,
Candès, Jordan and Lei, 2021) turns the choice into multiple testing: for each threshold
``t`` of a grid fixed before seeing data, test the null "the risk ``P(unsafe | score <= t)``
exceeds ``alpha``" with an exact binomial p-value (conditional on the number accepted, the
accepted errors are binomial), reject it when the p-value is at most ``delta / |grid|``
(Bonferroni: the family-wise error over the whole grid stays at most ``delta``) and answer
with the largest rejected threshold. Its risk is then at most ``alpha`` with probability at
least ``1 - delta`` over the draw of the validation set, for exchangeable validation and test
memories. (Fixed-sequence testing needs no correction but would stop at the strictest
thresholds, which accept no validation memory and so can never be rejected; the grid is
coarse, 101 points, to keep the correction mild.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from memsafe_lib.measures.metrics import _paired

GROUP_SALT = "memsafe-ltt-one-per-group-v1"
DEFAULT_GRID = np.round(np.linspace(0.0, 1.0, 101), 6)
"""Thresholds on the unsafe probability, fixed in advance (the guarantee needs a grid that
does not depend on the validation scores)."""


@dataclass(frozen=True)
class RiskControl:
    """The chosen threshold (None: no threshold passes; abstain on everything)."""

    threshold: float | None
    alpha: float
    delta: float
    n_calibration: int
    accepted: int
    """Validation memories the threshold accepts."""
    errors: int
    """Of those, unsafe ones."""
    p_value: float | None
    """The binomial p-value at the chosen threshold (None when no null is rejected)."""
    level: float = 0.0
    """The per-threshold test level, ``delta / |grid|``."""

    @property
    def guarantee(self) -> str:
        return (f"risk P(unsafe | answered) <= {self.alpha:g} with probability >= {1 - self.delta:g} "
                f"(Learn-then-Test, {self.n_calibration} validation memories)")


def binomial_p_value(errors: int, accepted: int, alpha: float) -> float:
    """P(Bin(accepted, alpha) <= errors): small when the observed error count is too low for
    a true risk above ``alpha``; 1 when nothing is accepted (no evidence)."""
    if accepted == 0:
        return 1.0
    return float(binom.cdf(errors, accepted, alpha))


def one_per_group(groups: Sequence[str]) -> np.ndarray:
    """Indices of one member per group, the first in salted-hash order of (group, position): the
    memories of one question (or patient) are not independent, one from each of them is."""
    chosen: dict[str, tuple[int, int]] = {}
    for i, g in enumerate(groups):
        rank = int.from_bytes(hashlib.sha256(f"{GROUP_SALT}\x1f{g}\x1f{i}".encode()).digest()[:8], "big")
        if g not in chosen or rank < chosen[g][0]:
            chosen[str(g)] = (rank, i)
    return np.array(sorted(i for _, i in chosen.values()), dtype=int)


def ltt_threshold(unsafe: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray, alpha: float,
                  delta: float = 0.1, grid: Sequence[float] | np.ndarray = DEFAULT_GRID,
                  groups: Sequence[str] | None = None) -> RiskControl:
    """The largest grid threshold whose null "risk > alpha" is rejected at ``delta / |grid|``.

    ``groups`` (a base question or patient per memory): the binomial test needs independent
    memories, and a question's three variants are not; given groups it tests one memory of each
    (:func:`one_per_group`), so the guarantee holds for clustered data at the cost of the rest.
    Without groups every memory counts as independent, which overstates the evidence."""
    if not 0 < alpha < 1 or not 0 < delta < 1:
        raise ValueError(f"alpha and delta must lie in (0, 1); got {alpha}, {delta}")
    y, s = _paired(unsafe, score, "unsafe", "score")
    if groups is not None:
        if len(groups) != y.size:
            raise ValueError(f"groups has {len(groups)} entries for {y.size} memories")
        keep = one_per_group(groups)
        y, s = y[keep], s[keep]
    thresholds = np.sort(np.asarray(grid, dtype=float))
    level = delta / len(thresholds)
    order = np.argsort(s, kind="stable")
    sorted_s, sorted_y = s[order], y[order].astype(int)
    cum_errors = np.concatenate([[0], np.cumsum(sorted_y)])
    chosen: tuple[float, int, int, float] | None = None
    for t in thresholds:
        k = int(np.searchsorted(sorted_s, t, side="right"))
        errors = int(cum_errors[k])
        p = binomial_p_value(errors, k, alpha)
        if p <= level:
            chosen = (float(t), k, errors, p)
    if chosen is None:
        return RiskControl(None, alpha, delta, int(s.size), 0, 0, None, level)
    t, k, errors, p = chosen
    return RiskControl(t, alpha, delta, int(s.size), k, errors, p, level)
