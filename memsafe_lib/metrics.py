"""Metrics of the construction audit, implemented directly (tests compare with scikit-learn).

Unsafe AUROC is the probability that a random unsafe memory scores above a random
complete one, ties counting one half (the Mann-Whitney statistic with mid-ranks).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
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
