"""A combined reader gate: MemSafe's unsafe score, the LLM judge and the reader's confidence
in one logistic model of answer error (the paper leaves combining them open).

The paper-style fit is on validation memories the reader has answered (``fit``). When only
test memories were read (our cpu budget reads a few test questions), the gate is
**cross-fitted**: base questions are split into folds by salted hash, and each memory is
scored by a model fitted on the other folds only, so no memory's own answer enters its
score. Scores from different folds come from different fits; ranking them together is the
usual cross-fitting approximation, and the notebook says which of the two was used.

One combined column per MemSafe seed (``gate:combined:<seed>``), so its seed spread is
reported like MemSafe's own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from memsafe_lib.data.loader import hash_rank

COMBINED = "combined"
"""The combined gate's name in ``gate:<name>:<seed>`` columns."""
INPUTS = ("memsafe", "llm_judge", "confidence")
"""The gates it combines: MemSafe (one seed at a time), the judge, the reader's negated confidence."""
FOLDS = 5


def _features(frame: pd.DataFrame, memsafe_column: str) -> np.ndarray:
    missing = [c for c in (memsafe_column, "gate:llm_judge", "gate:confidence") if c not in frame]
    if missing:
        raise ValueError(f"combined gate needs the columns {missing}; score the judge and MemSafe first")
    return frame[[memsafe_column, "gate:llm_judge", "gate:confidence"]].to_numpy(float)


def _model(seed: int) -> object:
    return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, random_state=seed))


def _fit_score(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, seed: int) -> np.ndarray:
    """P(error) from a fit on ``train``; a constant (the training error rate) when training
    holds one class only, so the gate then ties everything instead of guessing."""
    if len(np.unique(train_y)) < 2:
        return np.full(len(test_x), float(train_y.mean()) if len(train_y) else 0.5)
    model = _model(seed).fit(train_x, train_y)
    return model.predict_proba(test_x)[:, 1]


def folds_of(base_ids: Sequence[str], folds: int = FOLDS) -> np.ndarray:
    """Fold of each row: every variant of a base question in the same fold (salted hash)."""
    return np.array([hash_rank(str(b), "combined-gate-fold") % folds for b in base_ids])


def memsafe_columns(frame: pd.DataFrame) -> list[str]:
    cols = [c for c in frame.columns if c.startswith("gate:memsafe:")]
    if not cols:
        raise ValueError("combined gate needs gate:memsafe:<seed> columns (add_model_gates with 'memsafe')")
    return cols


def add_combined_gate(frame: pd.DataFrame, fit: pd.DataFrame | None = None, folds: int = FOLDS) -> pd.DataFrame:
    """Add ``gate:combined:<seed>`` for each MemSafe seed column: fitted on ``fit`` (read
    validation memories with the same gate columns) when given, else cross-fitted on
    ``frame`` by base-question folds."""
    out = frame.copy()
    for col in memsafe_columns(frame):
        seed = int(col.rsplit(":", 1)[1])
        x = _features(frame, col)
        if fit is not None:
            scores = _fit_score(_features(fit, col), fit["wrong"].to_numpy(int), x, seed)
        else:
            y = frame["wrong"].to_numpy(int)
            fold = folds_of(frame["base_id"].tolist(), folds)
            scores = np.empty(len(frame))
            for k in np.unique(fold):
                held = fold == k
                scores[held] = _fit_score(x[~held], y[~held], x[held], seed)
        out[f"gate:{COMBINED}:{seed}"] = scores
    return out


def describe(fit: pd.DataFrame | None, frame: pd.DataFrame, folds: int = FOLDS) -> str:
    """One line saying how the combined gate was fitted, for the notebook and the ledger."""
    if fit is not None:
        return (f"logistic on {len(fit)} read validation memories ({fit.base_id.nunique()} questions), "
                f"inputs {', '.join(INPUTS)}")
    return (f"cross-fitted on the {len(frame)} read test memories: {folds} folds of base questions, each "
            f"scored by a logistic fit on the others (no validation memories were read at this scale)")
