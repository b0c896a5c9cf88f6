"""Calibration, evidence AUPRC, missing-count MAE and error taxonomy: hand calculations,
independent numpy re-computations and scikit-learn, ties included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import average_precision_score, confusion_matrix, mean_absolute_error

from memsafe_lib.measures.metrics import (
    STATES,
    average_precision,
    error_taxonomy,
    evidence_auprc,
    expected_calibration_error,
    missing_count_mae,
    state_confusion,
)

# ---------------------------------------------------------------------------- ECE


def _ece_reference(y: np.ndarray, p: np.ndarray, n_bins: int) -> float:
    """Independent loop over the stated convention: [k/n, (k+1)/n), last bin closed."""
    total = 0.0
    for k in range(n_bins):
        lo, hi = k / n_bins, (k + 1) / n_bins
        mask = (p >= lo) & ((p < hi) if k < n_bins - 1 else (p <= 1.0))
        if mask.any():
            total += mask.sum() / len(p) * abs(y[mask].mean() - p[mask].mean())
    return total


def test_ece_hand_computed_two_bins() -> None:
    # bin [0, .5): p .2, .4 (mean .3), unsafe 0, 1 (mean .5) -> .5 * .2 = .1
    # bin [.5, 1]: p .6, .9 (mean .75), unsafe 1, 1 (mean 1) -> .5 * .25 = .125
    assert expected_calibration_error([0, 1, 1, 1], [0.2, 0.4, 0.6, 0.9], n_bins=2) == pytest.approx(0.225)


def test_ece_bin_edges_follow_the_convention() -> None:
    # 0.5 opens the upper bin: one bin (mean p .6, mean y .5) -> .1; a lower-bin 0.5 would give .4
    assert expected_calibration_error([0, 1], [0.5, 0.7], n_bins=2) == pytest.approx(0.1)
    # 1.0 belongs to the last bin: one bin (mean p .8, mean y .5) -> .3
    assert expected_calibration_error([1, 0], [0.6, 1.0], n_bins=2) == pytest.approx(0.3)
    # 0.0 is in the first bin; with one bin ECE is |mean y - mean p|
    assert expected_calibration_error([1, 0, 0], [0.0, 0.3, 1.0], n_bins=1) == pytest.approx(abs(1 / 3 - 1.3 / 3))


def test_ece_zero_for_perfect_calibration() -> None:
    # 10 rows at p=.3 with 3 unsafe, 4 rows at p=.75 with 3 unsafe, 5 rows at p=0 none unsafe
    y = np.array([1] * 3 + [0] * 7 + [1] * 3 + [0] + [0] * 5)
    p = np.array([0.3] * 10 + [0.75] * 4 + [0.0] * 5)
    assert expected_calibration_error(y, p) == pytest.approx(0.0, abs=1e-12)
    assert expected_calibration_error(y, p, n_bins=10) == pytest.approx(0.0, abs=1e-12)
    # the same probabilities with the labels flipped are badly calibrated
    assert expected_calibration_error(1 - y, p) > 0.3


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.booleans(), st.one_of(st.floats(0, 1), st.integers(0, 20).map(lambda k: k / 20))),
        min_size=1,
        max_size=80,
    ),
    st.integers(1, 25),
    st.randoms(use_true_random=False),
)
def test_ece_matches_numpy_reference_and_row_order(pairs, n_bins, rnd) -> None:
    y = np.array([a for a, _ in pairs], dtype=float)
    p = np.array([b for _, b in pairs], dtype=float)  # bin edges k/20 included
    ece = expected_calibration_error(y, p, n_bins=n_bins)
    assert ece == pytest.approx(_ece_reference(y, p, n_bins), abs=1e-12)
    assert 0.0 <= ece <= 1.0
    perm = list(range(len(y)))
    rnd.shuffle(perm)
    assert expected_calibration_error(y[perm], p[perm], n_bins=n_bins) == pytest.approx(ece, abs=1e-12)


def test_ece_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        expected_calibration_error([0, 1], [0.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        expected_calibration_error([0, 1], [0.5, 1.2])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        expected_calibration_error([0, 1], [0.5, float("nan")])
    with pytest.raises(ValueError, match="empty"):
        expected_calibration_error([], [])
    with pytest.raises(ValueError, match="n_bins"):
        expected_calibration_error([0], [0.5], n_bins=0)
    with pytest.raises(ValueError, match="0/1"):
        expected_calibration_error(["missing"], [0.5])


# ---------------------------------------------------------------------------- AP / evidence AUPRC


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=1, max_size=60))
def test_average_precision_matches_sklearn_with_ties(pairs) -> None:
    y = np.array([a for a, _ in pairs])
    s = np.array([b for _, b in pairs], dtype=float) / 5  # few distinct values: many ties
    if not y.any():
        with pytest.raises(ValueError, match="positive"):
            average_precision(y, s)
        return
    assert average_precision(y, s) == pytest.approx(average_precision_score(y, s), abs=1e-12)


def test_average_precision_hand_computed() -> None:
    # descending: .9 (pos) -> P=1, R=.5; .5 tie {pos, neg} -> P=2/3, R=1; .1 (neg) adds no recall
    assert average_precision([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    # a constant score gives the prevalence
    assert average_precision([1, 0, 0, 0], [0.3] * 4) == pytest.approx(0.25)


def test_evidence_auprc_pools_units_of_all_variants() -> None:
    rng = np.random.default_rng(3)
    labels, scores = [], []
    for _ in range(40):
        m = int(rng.integers(1, 7))
        labels.append(rng.integers(0, 2, m).astype(bool).tolist())
        scores.append((rng.integers(0, 4, m) / 4).tolist())
    flat_y = [v for row in labels for v in row]
    flat_s = [v for row in scores for v in row]
    expected = average_precision_score(flat_y, flat_s)
    assert evidence_auprc(labels, scores) == pytest.approx(expected, abs=1e-12)
    assert evidence_auprc(labels, scores) == pytest.approx(average_precision(flat_y, flat_s), abs=1e-15)


def test_evidence_auprc_length_mismatch_names_the_variant() -> None:
    with pytest.raises(ValueError, match="variant 2"):
        evidence_auprc([[True], [False, True], [True, False]], [[0.9], [0.1, 0.8], [0.5]])
    with pytest.raises(ValueError, match="number of variants"):
        evidence_auprc([[True]], [[0.9], [0.1]])
    with pytest.raises(ValueError, match="positive"):
        evidence_auprc([[False, False]], [[0.9, 0.1]])


# ---------------------------------------------------------------------------- MAE


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(0, 5)), min_size=1, max_size=40))
def test_missing_count_mae_matches_sklearn(pairs) -> None:
    t = [a for a, _ in pairs]
    e = [b for _, b in pairs]
    assert missing_count_mae(t, e) == pytest.approx(mean_absolute_error(t, e), abs=1e-12)


def test_missing_count_mae_rejects_bad_input() -> None:
    assert missing_count_mae([2, 0, 1], [1, 0, 3]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="differ in length"):
        missing_count_mae([1, 2], [1])
    with pytest.raises(ValueError, match="empty"):
        missing_count_mae([], [])
    with pytest.raises(ValueError, match="finite"):
        missing_count_mae([1.0], [float("nan")])


# ---------------------------------------------------------------------------- confusion / taxonomy


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(STATES), st.sampled_from(STATES)), min_size=1, max_size=50))
def test_state_confusion_matches_sklearn(pairs) -> None:
    t = [a for a, _ in pairs]
    p = [b for _, b in pairs]
    table = state_confusion(t, p, STATES)
    assert list(table.index) == list(STATES) and list(table.columns) == list(STATES)
    np.testing.assert_array_equal(table.to_numpy(), confusion_matrix(t, p, labels=list(STATES)))
    assert int(table.to_numpy().sum()) == len(t)


def test_state_confusion_orientation_and_unknown_state() -> None:
    table = state_confusion(["missing"], ["complete"], STATES)
    assert table.loc["missing", "complete"] == 1  # rows true, columns predicted
    assert table.loc["complete", "missing"] == 0
    assert table.index.name == "true" and table.columns.name == "predicted"
    with pytest.raises(ValueError, match="stale"):
        state_confusion(["stale"], ["complete"], STATES)


def test_error_taxonomy_hand_example() -> None:
    y_true = ["complete"] * 3 + ["missing"] * 2 + ["relation_lost"] * 3 + ["missing"]
    y_pred = ["complete", "missing", "relation_lost", "complete", "missing",
              "missing", "relation_lost", "complete", "complete"]
    surviving = [2, 2, 2, 1, 1, 2, 2, 0, 1]
    out = error_taxonomy(y_true, y_pred, surviving)
    # errors: c->m, c->r, m->c (twice), r->m, r->c: 6 of 9
    assert out["n"] == 9 and out["n_errors"] == 6
    assert out["error_rate"] == pytest.approx(6 / 9)
    assert out["error_share"] == pytest.approx({
        "complete->missing": 1 / 6, "complete->relation_lost": 1 / 6,
        "missing->complete": 2 / 6, "missing->relation_lost": 0.0,
        "relation_lost->complete": 1 / 6, "relation_lost->missing": 1 / 6,
    })
    assert sum(out["error_share"].values()) == pytest.approx(1.0)
    # truly unsafe: 6 rows, predicted complete: 3 of them; complete: 3 rows, 2 predicted unsafe
    assert out["unsafe_accepted_rate"] == pytest.approx(3 / 6)
    assert out["complete_rejected_rate"] == pytest.approx(2 / 3)
    # k=2: rows 0,1,2,5,6 -> errors 1,2,5; k=1: rows 3,4,8 -> errors 3,8; k=0: row 7 (error)
    assert out["error_rate_by_surviving"] == pytest.approx({2: 3 / 5, 1: 2 / 3, 0: 1.0})


def test_error_taxonomy_empty_groups_are_explicit() -> None:
    # no errors, no unsafe: shares undefined (empty), unsafe_accepted_rate None
    out = error_taxonomy(["complete", "complete"], ["complete", "complete"], [2, 2])
    assert out["error_rate"] == 0.0 and out["n_errors"] == 0
    assert out["error_share"] == {}
    assert out["unsafe_accepted_rate"] is None
    assert out["complete_rejected_rate"] == 0.0
    assert out["error_rate_by_surviving"] == {2: 0.0}
    # no complete variants: complete_rejected_rate None
    out = error_taxonomy(["missing", "relation_lost"], ["complete", "relation_lost"], [1, 0])
    assert out["complete_rejected_rate"] is None
    assert out["unsafe_accepted_rate"] == pytest.approx(0.5)
    assert out["error_rate_by_surviving"] == {0: 0.0, 1: 1.0}


def test_error_taxonomy_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="surviving_evidence"):
        error_taxonomy(["complete"], ["complete"], [1, 2])
    with pytest.raises(ValueError, match="empty"):
        error_taxonomy([], [], [])
    with pytest.raises(ValueError, match="integer"):
        error_taxonomy(["complete"], ["complete"], [1.5])
    with pytest.raises(ValueError, match="complete"):
        error_taxonomy(["missing"], ["missing"], [1], labels=("missing", "relation_lost"))


def test_error_taxonomy_agrees_with_confusion_on_random_data() -> None:
    rng = np.random.default_rng(7)
    t = rng.choice(STATES, 300).tolist()
    p = rng.choice(STATES, 300).tolist()
    k = rng.integers(0, 3, 300)
    out = error_taxonomy(t, p, k)
    table: pd.DataFrame = state_confusion(t, p)
    off = table.to_numpy().sum() - np.trace(table.to_numpy())
    assert out["n_errors"] == off
    assert out["error_share"]["missing->complete"] == pytest.approx(table.loc["missing", "complete"] / off)
    unsafe_rows = table.loc[["missing", "relation_lost"]]
    assert out["unsafe_accepted_rate"] == pytest.approx(unsafe_rows["complete"].sum() / unsafe_rows.to_numpy().sum())
