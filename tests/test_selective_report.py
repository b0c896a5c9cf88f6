"""Notebook 05's tables from a hand-made predictions frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from memsafe_lib.reporting import selective as S


def _predictions() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for split, n in (("validation", 300), ("test", 300)):
        for i in range(n):
            state = ["complete", "missing", "relation_lost"][i % 3]
            unsafe = state != "complete"
            score = float(np.clip(rng.normal(0.7 if unsafe else 0.3, 0.15), 0, 1))
            pred = "complete" if score < 0.5 else ("missing" if i % 2 else "relation_lost")
            rows.append({"model": "memsafe", "seed": 17, "split": split, "variant_id": f"{split}{i}",
                         "base_id": f"b{i // 3}", "state": state, "unsafe": unsafe, "unsafe_prob": score,
                         "pred_state": pred, "surviving": i % 3, "missing_count": 0, "pred_missing": 0.0})
    return pd.DataFrame(rows)


def test_operating_points_match_a_hand_applied_threshold() -> None:
    from memsafe_lib.measures.risk_coverage import threshold_for_risk

    pred = _predictions()
    points = S.operating_points(pred, "d", ["memsafe"], alpha=0.05).iloc[0]
    val, test = pred[pred.split == "validation"], pred[pred.split == "test"]
    t = threshold_for_risk(val.unsafe.to_numpy(), val.unsafe_prob.to_numpy(), 0.05)
    accepted = test[test.unsafe_prob <= t]
    assert points.coverage == pytest.approx(len(accepted) / len(test))
    assert points.realized_risk == pytest.approx(accepted.unsafe.mean())
    assert points.coverage_ceiling == pytest.approx((1 / 3) / 0.95)
    assert points.ltt_coverage <= points.coverage + 1e-12  # the guaranteed threshold is more cautious here
    table = S.selective_table(pd.DataFrame([points]))
    assert table.iloc[0].seeds_accepting == 1 and table.iloc[0].paper_aurc is None


def test_taxonomy_and_error_by_surviving_by_hand() -> None:
    pred = _predictions()
    test = pred[pred.split == "test"]
    wrong = test.state != test.pred_state
    tax = S.taxonomy_table(pred, "musique").set_index("quantity").value
    assert tax["error_rate"] == pytest.approx(wrong.mean())
    unsafe = test[test.unsafe]
    assert tax["unsafe_predicted_complete"] == pytest.approx((unsafe.pred_state == "complete").mean())
    one = test[test.surviving == 1]
    assert tax["error_rate_one_surviving"] == pytest.approx((one.state != one.pred_state).mean())
    by = S.error_by_surviving(pred, "musique").set_index("surviving")
    assert by.loc[1, "error_rate"] == pytest.approx(tax["error_rate_one_surviving"])
    assert S.taxonomy_table(pred, "musique").set_index("quantity").paper["error_rate"] == 0.1985
