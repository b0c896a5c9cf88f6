"""Metrics of the construction audit, implemented directly (tests compare with scikit-learn).

Unsafe AUROC is the probability that a random unsafe memory scores above a random
complete one, ties counting one half (the Mann-Whitney statistic with mid-ranks).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.stats import rankdata


def unsafe_auroc(unsafe: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray) -> float:
    """AUROC of ``score`` for the positive class ``unsafe``; ties count one half.

    Raises ``ValueError`` when only one class is present: the AUROC is undefined there
    and must not be silently reported as 0.5 or NaN.
    """
    y = np.asarray(unsafe, dtype=bool)
    s = np.asarray(score, dtype=float)
    if y.shape != s.shape:
        raise ValueError(f"labels and scores differ in shape: {y.shape} vs {s.shape}")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"AUROC needs both classes (unsafe={n_pos}, complete={n_neg})")
    ranks = rankdata(s)  # mid-ranks: ties get the mean rank, i.e. count one half
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def state_auroc(states: Sequence[str], score: Sequence[float] | np.ndarray, state: str,
                reference: str = "complete") -> float | None:
    """Unsafe AUROC on the memories in ``state`` and ``reference`` only (``state`` positive):
    complete vs missing, or complete vs relation-lost. None where either is absent, so a
    construction without a state shows a gap, not a number."""
    kept = np.isin(np.asarray(states, dtype=object), [state, reference])
    y = np.asarray(states, dtype=object)[kept] == state
    if y.all() or not y.any():
        return None
    return unsafe_auroc(y, np.asarray(score, dtype=float)[kept])


def macro_f1(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str] | None = None) -> float:
    """Unweighted mean of per-class F1 over ``labels`` (default: classes in ``y_true``).

    A class that is never predicted and never true does not occur when ``labels`` comes
    from ``y_true``; a class with no true and no predicted members scores 0, as in
    scikit-learn's ``zero_division=0``.
    """
    t = np.asarray(y_true, dtype=object)
    p = np.asarray(y_pred, dtype=object)
    if t.shape != p.shape:
        raise ValueError(f"y_true and y_pred differ in shape: {t.shape} vs {p.shape}")
    classes = list(labels) if labels is not None else sorted(set(t.tolist()))
    scores = []
    for c in classes:
        tp = float(np.sum((t == c) & (p == c)))
        fp = float(np.sum((t != c) & (p == c)))
        fn = float(np.sum((t == c) & (p != c)))
        denom = 2 * tp + fp + fn
        scores.append(0.0 if denom == 0 else 2 * tp / denom)
    return float(np.mean(scores))


# ---------------------------------------------------------------------------
# Calibration, evidence retrieval, missing-count and error-taxonomy metrics.
# ---------------------------------------------------------------------------

STATES: tuple[str, ...] = ("complete", "missing", "relation_lost")
"""The predicted integrity states; every state other than ``"complete"`` is unsafe."""

_COMPLETE = "complete"


def _binary_labels(values: Sequence[bool] | np.ndarray, name: str) -> np.ndarray:
    """Labels as a 1-d bool array; reject anything but booleans or 0/1 so that, e.g.,
    state strings are not silently read as "all true"."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.dtype != bool:
        if arr.size and (arr.dtype.kind not in "biuf" or not np.isin(arr, (0, 1)).all()):
            raise ValueError(f"{name} must hold booleans or 0/1 values")
        arr = arr.astype(bool)
    return arr


def _float_array(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite (no NaN or infinity)")
    return arr


def _paired(
    labels: Sequence[bool] | np.ndarray, values: Sequence[float] | np.ndarray, label_name: str, value_name: str
) -> tuple[np.ndarray, np.ndarray]:
    y = _binary_labels(labels, label_name)
    v = _float_array(values, value_name)
    if y.shape != v.shape:
        raise ValueError(f"{label_name} and {value_name} differ in length: {y.shape[0]} vs {v.shape[0]}")
    if y.size == 0:
        raise ValueError(f"{label_name} and {value_name} are empty")
    return y, v


def expected_calibration_error(
    unsafe: Sequence[bool] | np.ndarray, prob: Sequence[float] | np.ndarray, n_bins: int = 15
) -> float:
    """Binary expected calibration error of the unsafe probability ``prob``.

    An estimator that abstains on ``r > t`` needs ``r`` to mean what it says, which
    AUROC (rank only) cannot show. Convention: ``n_bins`` equal-width bins on [0, 1];
    bin ``k`` holds ``p`` in ``[k/n_bins, (k+1)/n_bins)`` and the last bin also holds
    ``1.0`` (edges are the floats ``k / n_bins``). Then

        ECE = sum over non-empty bins B of (|B| / n) * |mean(unsafe in B) - mean(p in B)|.

    Raises ``ValueError`` for empty input, unequal lengths, probabilities outside
    [0, 1] (NaN included) or ``n_bins < 1``.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    y = _binary_labels(unsafe, "unsafe")
    p = np.asarray(prob, dtype=float)
    if p.ndim != 1:
        raise ValueError(f"prob must be one-dimensional, got shape {p.shape}")
    if y.shape != p.shape:
        raise ValueError(f"unsafe and prob differ in length: {y.shape[0]} vs {p.shape[0]}")
    if y.size == 0:
        raise ValueError("unsafe and prob are empty")
    if not ((p >= 0.0) & (p <= 1.0)).all():  # NaN fails both comparisons
        raise ValueError("prob must lie in [0, 1] (no NaN)")
    inner_edges = np.arange(1, n_bins) / n_bins  # the floats k/n, k = 1..n-1
    bins = np.searchsorted(inner_edges, p, side="right")  # #edges <= p: [k/n, (k+1)/n), 1.0 -> last bin
    count = np.bincount(bins, minlength=n_bins).astype(float)
    sum_y = np.bincount(bins, weights=y.astype(float), minlength=n_bins)
    sum_p = np.bincount(bins, weights=p, minlength=n_bins)
    nonempty = count > 0
    gap = np.abs(sum_y[nonempty] - sum_p[nonempty]) / count[nonempty]
    return float(np.sum(count[nonempty] / y.size * gap))


def brier_score(unsafe: Sequence[bool] | np.ndarray, prob: Sequence[float] | np.ndarray) -> float:
    """Mean squared error of the unsafe probability against the 0/1 label."""
    y, p = _paired(unsafe, prob, "unsafe", "prob")
    return float(np.mean((p - y.astype(float)) ** 2))


def average_precision(labels: Sequence[bool] | np.ndarray, scores: Sequence[float] | np.ndarray) -> float:
    """Average precision as scikit-learn's ``average_precision_score`` defines it.

    ``AP = sum_n (R_n - R_{n-1}) P_n`` over the distinct score thresholds, descending,
    with tied scores entering together (no interpolation, unlike the 11-point or
    trapezoidal variants that overstate AP). Raises ``ValueError`` when there are no
    positives: AP is undefined there and must not be reported as 0.
    """
    y, s = _paired(labels, scores, "labels", "scores")
    n_pos = int(y.sum())
    if n_pos == 0:
        raise ValueError("average precision needs at least one positive label")
    uniq, inverse = np.unique(-s, return_inverse=True)  # ascending in -s: descending score
    tp = np.cumsum(np.bincount(inverse, weights=y.astype(float), minlength=uniq.size))
    predicted = np.cumsum(np.bincount(inverse, minlength=uniq.size)).astype(float)
    precision = tp / predicted
    recall = tp / n_pos
    return float(np.sum(np.diff(recall, prepend=0.0) * precision))


def evidence_auprc(unit_labels: Sequence[Sequence[bool]], unit_scores: Sequence[Sequence[float]]) -> float:
    """Per-unit evidence AUPRC: average precision over all units of all variants, pooled.

    Pooling weights every memory unit equally (the unit is what retrieval scores), so
    variants with more units count more. Each variant's label and score lists must have
    equal lengths; a mismatch names the variant index so it can be found in the data.
    """
    if len(unit_labels) != len(unit_scores):
        raise ValueError(
            f"unit_labels and unit_scores differ in number of variants: {len(unit_labels)} vs {len(unit_scores)}"
        )
    flat_labels: list[bool] = []
    flat_scores: list[float] = []
    for i, (lab, sc) in enumerate(zip(unit_labels, unit_scores, strict=True)):
        if len(lab) != len(sc):
            raise ValueError(f"variant {i}: {len(lab)} unit labels but {len(sc)} unit scores")
        flat_labels.extend(lab)
        flat_scores.extend(sc)
    if not flat_labels:
        raise ValueError("no memory units to score")
    return average_precision(flat_labels, flat_scores)


def missing_count_mae(
    true_counts: Sequence[float] | np.ndarray, estimated_counts: Sequence[float] | np.ndarray
) -> float:
    """Mean absolute error of the estimated number of missing evidence units ``g``.

    In units of evidence units, so "0.4" reads as "off by 0.4 units on average".
    """
    t = _float_array(true_counts, "true_counts")
    e = _float_array(estimated_counts, "estimated_counts")
    if t.shape != e.shape:
        raise ValueError(f"true_counts and estimated_counts differ in length: {t.shape[0]} vs {e.shape[0]}")
    if t.size == 0:
        raise ValueError("true_counts and estimated_counts are empty")
    return float(np.mean(np.abs(t - e)))


def _states(y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(list(y_true), dtype=object)
    p = np.asarray(list(y_pred), dtype=object)
    if t.shape != p.shape:
        raise ValueError(f"y_true and y_pred differ in length: {t.shape[0]} vs {p.shape[0]}")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels contain duplicates: {list(labels)}")
    known = set(labels)
    unknown = sorted({str(v) for v in (*t.tolist(), *p.tolist()) if v not in known})
    if unknown:
        # Dropping rows with unlisted states (scikit-learn's behaviour) would hide errors.
        raise ValueError(f"states not in labels {list(labels)}: {unknown}")
    return t, p


def state_confusion(
    y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str] = STATES
) -> pd.DataFrame:
    """Confusion counts: rows are true states, columns predicted states, in ``labels`` order.

    Every state must be listed in ``labels`` (``ValueError`` otherwise), so no row is
    silently left out of the table.
    """
    labels = list(labels)
    t, p = _states(y_true, y_pred, labels)
    index = {lab: i for i, lab in enumerate(labels)}
    counts = np.zeros((len(labels), len(labels)), dtype=np.int64)
    for a, b in zip(t.tolist(), p.tolist(), strict=True):
        counts[index[a], index[b]] += 1
    return pd.DataFrame(
        counts,
        index=pd.Index(labels, name="true"),
        columns=pd.Index(labels, name="predicted"),
    )


def error_taxonomy(
    y_true: Sequence[str],
    y_pred: Sequence[str],
    surviving_evidence: Sequence[int],
    labels: Sequence[str] = STATES,
) -> dict:
    """Where the state predictions go wrong, and in which (safety-relevant) direction.

    Returns a dict with

    - ``n``, ``n_errors`` and ``error_rate``: the fraction of variants misclassified;
    - ``error_share``: ``"true->pred"`` -> share of all errors, for every off-diagonal
      pair of ``labels`` (zeros included, values sum to 1); an empty dict when there are
      no errors, since shares of zero errors are undefined;
    - ``unsafe_accepted_rate``: fraction of truly unsafe variants (state != complete)
      predicted complete, the direction that lets a model answer on insufficient
      evidence; ``None`` when no variant is truly unsafe;
    - ``complete_rejected_rate``: fraction of complete variants predicted unsafe (a
      needless abstention); ``None`` when no variant is complete;
    - ``error_rate_by_surviving``: ``k`` -> error rate among variants with ``k``
      surviving evidence units, only for the ``k`` that occur (empty groups omitted).

    Raises ``ValueError`` for empty or unequal-length input, a state not in ``labels``
    or ``labels`` without ``"complete"``.
    """
    labels = list(labels)
    if _COMPLETE not in labels:
        raise ValueError(f"labels must contain {_COMPLETE!r}: {labels}")
    t, p = _states(y_true, y_pred, labels)
    k = np.asarray(list(surviving_evidence))
    if k.shape != t.shape:
        raise ValueError(f"surviving_evidence and y_true differ in length: {k.shape[0]} vs {t.shape[0]}")
    if t.size == 0:
        raise ValueError("y_true and y_pred are empty")
    if k.dtype.kind not in "iu":
        if k.dtype.kind != "f" or not np.all(np.isfinite(k)) or not np.all(k == np.round(k)):
            raise ValueError("surviving_evidence must hold integer counts")
        k = k.astype(np.int64)

    wrong = t != p
    n, n_errors = int(t.size), int(wrong.sum())
    share: dict[str, float] = {}
    if n_errors:
        for a in labels:
            for b in labels:
                if a != b:
                    share[f"{a}->{b}"] = float(np.sum((t == a) & (p == b))) / n_errors

    true_unsafe = t != _COMPLETE
    pred_complete = p == _COMPLETE
    n_unsafe, n_complete = int(true_unsafe.sum()), int((~true_unsafe).sum())
    by_k = {int(v): float(wrong[k == v].mean()) for v in np.unique(k)}
    return {
        "n": n,
        "n_errors": n_errors,
        "error_rate": n_errors / n,
        "error_share": share,
        "unsafe_accepted_rate": (float(np.sum(true_unsafe & pred_complete)) / n_unsafe) if n_unsafe else None,
        "complete_rejected_rate": (
            (float(np.sum(~true_unsafe & ~pred_complete)) / n_complete) if n_complete else None
        ),
        "error_rate_by_surviving": by_k,
    }
