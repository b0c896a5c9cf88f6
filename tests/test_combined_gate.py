"""The combined reader gate: cross-fitting never lets a memory's own answer into its score,
and a validation fit equals scikit-learn's standardised logistic regression fitted directly."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from memsafe_lib.evaluation import combined_gate as C
from memsafe_lib.evaluation import reader_gating as G


def _frame(n_questions: int = 30, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for q in range(n_questions):
        for state in ("complete", "missing", "relation-lost"):
            unsafe = state != "complete"
            wrong = int(rng.random() < (0.8 if unsafe else 0.3))
            rows.append({"variant_id": f"q{q}-{state}", "base_id": f"q{q}", "state": state, "unsafe": unsafe,
                         "wrong": wrong, "confidence": -rng.random() - wrong,
                         "judge_score": 0.5 * unsafe + 0.5 * rng.random(),
                         "gate:memsafe:17": 0.6 * unsafe + 0.4 * rng.random(),
                         "gate:memsafe:29": 0.6 * unsafe + 0.4 * rng.random()})
    return G.add_fixed_gates(pd.DataFrame(rows))


def test_one_combined_column_per_memsafe_seed() -> None:
    out = C.add_combined_gate(_frame())
    assert {"gate:combined:17", "gate:combined:29"} <= set(out.columns)
    assert G.reader_table(out).set_index("gate").loc["combined", "n_seeds"] == 2


def test_cross_fitting_ignores_each_memorys_own_answer() -> None:
    frame = _frame()
    base = C.add_combined_gate(frame)
    folds = C.folds_of(frame.base_id.tolist())
    for row in (0, 7, 40):
        flipped = frame.copy()
        flipped.loc[row, "wrong"] = 1 - flipped.loc[row, "wrong"]
        out = C.add_combined_gate(flipped)
        same_fold = folds == folds[row]
        # the flipped label is used only by the other folds' fits, never by its own fold
        assert np.allclose(out.loc[same_fold, "gate:combined:17"], base.loc[same_fold, "gate:combined:17"])
        assert not np.allclose(out.loc[~same_fold, "gate:combined:17"], base.loc[~same_fold, "gate:combined:17"])


def test_variants_of_a_question_share_a_fold() -> None:
    frame = _frame()
    folds = pd.Series(C.folds_of(frame.base_id.tolist())).groupby(frame.base_id).nunique()
    assert (folds == 1).all()


def test_validation_fit_is_standardised_logistic_regression() -> None:
    fit, test = _frame(seed=1), _frame(seed=2)
    out = C.add_combined_gate(test, fit=fit)
    cols = ["gate:memsafe:17", "gate:llm_judge", "gate:confidence"]
    scaler = StandardScaler().fit(fit[cols].to_numpy())
    lr = LogisticRegression(C=1.0).fit(scaler.transform(fit[cols].to_numpy()), fit.wrong)
    expected = lr.predict_proba(scaler.transform(test[cols].to_numpy()))[:, 1]
    assert np.allclose(out["gate:combined:17"], expected, atol=1e-6)


def test_single_class_training_ties_everything() -> None:
    frame = _frame()
    frame["wrong"] = 1
    out = C.add_combined_gate(frame)
    assert np.allclose(out["gate:combined:17"], 1.0)


def test_missing_inputs_are_named() -> None:
    frame = _frame().drop(columns=["gate:llm_judge"])
    with pytest.raises(ValueError, match="gate:llm_judge"):
        C.add_combined_gate(frame)
    with pytest.raises(ValueError, match="gate:memsafe"):
        C.add_combined_gate(_frame().drop(columns=["gate:memsafe:17", "gate:memsafe:29"]))
