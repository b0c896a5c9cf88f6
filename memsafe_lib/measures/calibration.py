"""Temperature scaling: one number that makes a model's probabilities mean what they say.

A gate abstains when its unsafe probability passes a threshold, so the probability itself is
read, not only its rank. Temperature scaling (Guo et al., 2017) divides the logit by ``T``
fitted on validation by log loss: ``T > 1`` softens an over-confident model, ``T < 1``
sharpens a timid one, and the ranking (so every AUROC) is unchanged. The binary form acts on
``logit(p)``; the state form on ``log p`` of each state before a softmax.

A temperature is kept only when it lowers the validation ECE (:func:`choose_temperature`)
and is fitted only on :data:`MIN_CALIBRATION_MEMORIES` memories or more: a model already
calibrated, or one with too few validation memories to tell, keeps ``T = 1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import minimize_scalar

from memsafe_lib.measures.metrics import expected_calibration_error

EPS = 1e-7
MIN_CALIBRATION_MEMORIES = 30
"""Fewer validation memories than this fit no temperature: on a handful, the log-loss optimum runs
to a bound (a smoke gate's six memories gave T = e^4) and the ECE that would approve it is noise."""
LOG_T_BOUNDS = (-4.0, 4.0)
"""Temperatures between e^-4 (0.018) and e^4 (55): wide enough for any model we saw, bounded so
a validation set of one class cannot send it to infinity."""


def _logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), EPS, 1 - EPS)
    return np.log(p) - np.log1p(-p)


def scale_binary(prob: Sequence[float] | np.ndarray, temperature: float) -> np.ndarray:
    """``sigmoid(logit(p) / T)``."""
    return 1.0 / (1.0 + np.exp(-_logit(np.asarray(prob, dtype=float)) / float(temperature)))


def scale_states(prob: Sequence[Sequence[float]] | np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(log p / T)`` over the last axis."""
    z = np.log(np.clip(np.asarray(prob, dtype=float), EPS, 1.0)) / float(temperature)
    z -= z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _binary_nll(y: np.ndarray, prob: np.ndarray, temperature: float) -> float:
    q = np.clip(scale_binary(prob, temperature), EPS, 1 - EPS)
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log1p(-q)))


def _state_nll(index: np.ndarray, prob: np.ndarray, temperature: float) -> float:
    q = np.clip(scale_states(prob, temperature), EPS, 1.0)
    return float(-np.mean(np.log(q[np.arange(len(index)), index])))


def _fit(loss) -> float:  # type: ignore[no-untyped-def]
    res = minimize_scalar(lambda log_t: loss(float(np.exp(log_t))), bounds=LOG_T_BOUNDS, method="bounded",
                          options={"xatol": 1e-6})
    return float(np.exp(res.x))


def fit_binary_temperature(unsafe: Sequence[bool] | np.ndarray, prob: Sequence[float] | np.ndarray) -> float:
    """The ``T`` minimising the log loss of ``scale_binary(prob, T)`` against ``unsafe``."""
    y = np.asarray(unsafe, dtype=float)
    p = np.asarray(prob, dtype=float)
    if y.shape != p.shape or y.ndim != 1 or not len(y):
        raise ValueError(f"labels and probabilities must be 1-d of one non-zero length: {y.shape}, {p.shape}")
    return _fit(lambda t: _binary_nll(y, p, t))


def fit_state_temperature(states: Sequence[str], prob: Sequence[Sequence[float]] | np.ndarray,
                          labels: Sequence[str]) -> float:
    """The ``T`` minimising the log loss of ``scale_states(prob, T)``; ``prob``'s columns are ``labels``."""
    p = np.asarray(prob, dtype=float)
    position = {s: i for i, s in enumerate(labels)}
    unknown = sorted({s for s in states if s not in position})
    if unknown or p.ndim != 2 or p.shape != (len(states), len(labels)) or not len(states):
        raise ValueError(f"states {unknown or ''} and probabilities of shape {p.shape} do not match labels {labels}")
    index = np.array([position[s] for s in states])
    return _fit(lambda t: _state_nll(index, p, t))


@dataclass(frozen=True)
class Temperature:
    """A fitted binary temperature and the validation ECE it was chosen on."""

    temperature: float
    ece_before: float
    ece_after: float
    fitted: float
    """The log-loss optimum (1 when too few memories to fit); ``temperature`` is 1 when the
    optimum did not lower the ECE."""
    n: int = 0
    """Validation memories it was chosen on."""

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def choose_temperature(unsafe: Sequence[bool] | np.ndarray, prob: Sequence[float] | np.ndarray) -> Temperature:
    """Fit ``T`` by log loss and keep it when it lowers the validation ECE; otherwise (or with fewer
    than :data:`MIN_CALIBRATION_MEMORIES` memories) ``T = 1``."""
    before = expected_calibration_error(unsafe, np.clip(np.asarray(prob, dtype=float), 0.0, 1.0))
    n = len(np.asarray(prob))
    if n < MIN_CALIBRATION_MEMORIES:
        return Temperature(1.0, before, before, 1.0, n)
    fitted = fit_binary_temperature(unsafe, prob)
    scaled = expected_calibration_error(unsafe, scale_binary(prob, fitted))
    keep = scaled < before
    return Temperature(fitted if keep else 1.0, before, scaled if keep else before, fitted, n)
