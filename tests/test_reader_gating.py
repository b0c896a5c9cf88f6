"""The reader-gating study's tables and criteria, on hand-built frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from memsafe_lib import config
from memsafe_lib.evaluation import reader_gating as G
from memsafe_lib.reporting import reader as R


def _frame() -> pd.DataFrame:
    # 3 complete + 6 unsafe memories; the reader is right on two complete ones only
    unsafe = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1], bool)
    wrong = np.array([0, 0, 1, 1, 1, 1, 1, 1, 1])
    f = pd.DataFrame({"variant_id": [f"v{i}" for i in range(9)], "base_id": [f"b{i // 3}" for i in range(9)],
                      "state": np.where(unsafe, "missing", "complete"), "unsafe": unsafe, "wrong": wrong,
                      "confidence": [-0.1, -2.0, -0.2, -0.3, -0.4, -0.5, -0.6, -0.7, -0.8]})
    f["gate:memsafe:17"] = [0.1, 0.2, 0.9, 0.5, 0.6, 0.7, 0.8, 0.85, 0.95]
    f["gate:memsafe:29"] = [0.2, 0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.95]
    f["gate:text_length:17"] = [0.5] * 9
    return G.add_fixed_gates(f, judge_shots=())


def test_reader_table_by_hand() -> None:
    t = _frame()
    table = G.reader_table(t, (1 / 9, 2 / 9, 1 / 3, 1.0)).set_index("gate")
    assert table.loc["answer_all", "error_at_1"] == pytest.approx(7 / 9)
    assert table.loc["memsafe", "error_at_0.222222"] == pytest.approx(0.0)   # both seeds accept v0, v1
    assert table.loc["memsafe", "n_seeds"] == 2
    # confidence ranks v0 (-0.1) then v2 (-0.2): one right, one wrong
    assert table.loc["confidence", "error_at_0.222222"] == pytest.approx(0.5)
    # ties in salted-hash order of the id (v6 v4 v7 v1 v0 v5 v3 v2 v8, tests/test_gating_order.py):
    # the oracle accepts the complete v1 and v0 first, both right
    assert table.loc["oracle", "error_at_0.222222"] == pytest.approx(0.0)
    assert table.loc["oracle", "error_at_0.333333"] == pytest.approx(1 / 3)  # then v2, wrong
    assert table.loc["text_length", "error_at_0.111111"] == pytest.approx(1.0)  # one tie group: v6, wrong


def test_coverage_at_risk_takes_whole_tie_groups() -> None:
    wrong = np.array([0, 0, 1, 1])
    assert G.coverage_at_risk(wrong, np.array([0.1, 0.2, 0.3, 0.4]), 0.0) == 0.5
    tied = np.array([0.1, 0.3, 0.3, 0.4])  # v1 (right) and v2 (wrong) tie: taking them gives 1/3 error
    assert G.coverage_at_risk(wrong, tied, 0.34) == 0.75
    assert G.coverage_at_risk(wrong, tied, 0.30) == 0.25
    assert G.coverage_at_risk(np.ones(3), np.arange(3.0), 0.1) == 0.0


def test_criteria_as_preregistered() -> None:
    c = G.criteria(_frame(), target=0.10).set_index("criterion")
    assert bool(c.loc["(i)", "met"])        # MemSafe reaches 2/9 at 0% error, confidence 1/9
    assert bool(c.loc["(ii)", "met"])
    assert bool(c.loc["(iii)", "met"])


def test_criterion_ii_at_matched_coverage_without_a_risk_target() -> None:
    """(ii) as the paper states it: no risk target, every gate at the same coverages. By hand
    (answer-all 7/9): at 25% (2.25 memories) both seeds take their two right memories and a
    quarter of a wrong one, 0.25 / 2.25; at 50% (4.5), 2.5 wrong of 4.5. The paragraph count
    (the paper's memory-length control, not text length) is read at the same coverages."""
    f = _frame()
    f["gate:paragraph_count"] = [1, 1, 2, 2, 2, 2, 2, 2, 2]
    c = G.criteria(f, target=0.10, coverages=(0.25, 0.5)).set_index("criterion")
    assert bool(c.loc["(ii)", "met"])
    value = c.loc["(ii)", "value"]
    assert f"MemSafe {0.25 / 2.25:.4f}" in value and f"MemSafe {2.5 / 4.5:.4f}" in value
    assert f"answer-all {7 / 9:.4f}" in value and "length" in value
    assert {"paragraph_count", "text_length"} <= set(G.reader_table(f).gate)
    worse = f.assign(**{"gate:memsafe:17": -f["gate:memsafe:17"], "gate:memsafe:29": -f["gate:memsafe:29"]})
    assert not G.criteria(worse, target=0.10, coverages=(0.25, 0.5)).set_index("criterion").loc["(ii)", "met"]


def test_prevalence_subsample_keeps_every_complete_memory() -> None:
    f = _frame()
    sub = G.prevalence_subsample(f, 0.5, draw=0)
    assert (~sub.unsafe).sum() == 3 and sub.unsafe.sum() == 3
    with pytest.raises(ValueError, match="needs 12 unsafe"):
        G.prevalence_subsample(f, 0.8, draw=0)
    sweep = G.prevalence_sweep(f, (0.4,), draws=3)
    assert set(sweep.gate) == {"answer_all", "memsafe", "oracle"} and sweep.native.any()
    native_all = sweep[(sweep.native) & (sweep.gate == "answer_all")].error.iloc[0]
    assert native_all == pytest.approx(7 / 9)


def test_model_gates_need_every_read_memory() -> None:
    f = _frame()[["variant_id", "unsafe", "wrong", "confidence"]]
    preds = pd.DataFrame({"model": "lexset", "seed": 17, "split": "test", "variant_id": ["v0", "v1"],
                          "unsafe_prob": [0.1, 0.2]})
    with pytest.raises(ValueError, match="lexset seed 17: no test prediction for 7"):
        G.add_model_gates(f, preds, ["lexset"])


def test_each_scored_judge_becomes_a_gate_and_an_unscored_one_does_not() -> None:
    f = _frame().assign(judge_score=np.linspace(0, 1, 9), judge_score_4shot=np.linspace(1, 0, 9))
    gates = G.gate_columns(G.add_fixed_gates(f))
    assert gates["llm_judge"] == ["gate:llm_judge"] and gates["llm_judge_4shot"] == ["gate:llm_judge_4shot"]
    partial = f.assign(judge_score_4shot=np.nan)
    assert "llm_judge_4shot" not in G.gate_columns(G.add_fixed_gates(partial))
    table = G.reader_table(G.add_fixed_gates(f), (1 / 9,)).set_index("gate")
    # the four-shot judge ranks v8 (an unsafe memory the reader gets wrong) first
    assert table.loc["llm_judge_4shot", "error_at_0.111111"] == pytest.approx(1.0)
    assert table.loc["llm_judge", "error_at_0.111111"] == pytest.approx(0.0)  # v0: right


def test_judge_table_carries_the_papers_values_by_name_only() -> None:
    from memsafe_lib import config
    from memsafe_lib.reporting.reader import judge_with_paper

    paper = config.paper_reference()["llm_judge"]
    t = judge_with_paper(pd.DataFrame({"model": ["llm_judge", "llm_judge_4shot", "lexset"],
                                       "unsafe_auroc": [0.6, 0.7, 0.8]}))
    assert t.paper_unsafe_auroc.tolist()[:2] == [paper["llm_judge"]["unsafe_auroc"],
                                                 paper["llm_judge_4shot"]["unsafe_auroc"]]
    assert pd.isna(t.paper_unsafe_auroc.iloc[2])  # the paper reports no LexSet AUROC on its judge subset
    assert t.unsafe_auroc.tolist() == [0.6, 0.7, 0.8]


def test_the_second_readers_table_carries_the_three_points_the_paper_quotes() -> None:
    """The paper quotes its 1.5B reader at 10% coverage only: MemSafe 0.8296, answering
    everything 0.9162; reader confidence's 0.9731 it quotes without a coverage, so it is no
    10%-coverage value."""
    table = R.with_paper(G.reader_table(_frame()), reference="reader_second").set_index("gate")
    assert table.loc["memsafe", "paper_error_at_0.1"] == 0.8296
    assert table.loc["answer_all", "paper_error_at_0.1"] == 0.9162
    assert pd.isna(table.loc["confidence", "paper_error_at_0.1"])
    assert table.loc["confidence", "paper_error_coverage_unstated"] == 0.9731
    assert "paper_error_coverage_unstated" not in R.with_paper(G.reader_table(_frame())).columns
    assert table["paper_error_at_0.05"].isna().all() and pd.isna(table.loc["oracle", "paper_error_at_0.1"])


def test_the_committed_prevalence_tables_native_cells_are_seed_17s_and_table_readers_the_seed_mean() -> None:
    """The prevalence sweep gates on one MemSafe seed (17, as the paper's appendix uses one);
    Table reader averages the three. Both recomputed here by hand from the committed reader
    answers and MemSafe's test predictions: the first memories in (score, salted id) order, the
    last of a fractional ``k = coverage * n`` counted in part."""
    root = config.REPO_ROOT / "artifacts" / "cpu"
    answers = pd.read_csv(root / "06_reader_gating" / "reader_answers.csv.gz")
    predictions = pd.read_csv(root / "evaluate" / "musique" / "size-matched" / "predictions.csv.gz")
    predictions = predictions[(predictions.model == "memsafe") & (predictions.split == "test")]
    ties = G.tie_order(answers.variant_id)

    def by_hand(seed: int, coverage: float) -> float:
        score = predictions[predictions.seed == seed].set_index("variant_id").unsafe_prob.reindex(answers.variant_id)
        wrong = answers.wrong.to_numpy(float)[np.lexsort((ties, score.to_numpy()))]
        k = coverage * len(wrong)
        whole = int(np.floor(k))
        return float((wrong[:whole].sum() + (k - whole) * (wrong[whole] if whole < len(wrong) else 0.0)) / k)

    sweep = pd.read_csv(root / "06_reader_gating" / "prevalence.csv")
    native = sweep[sweep.native & (sweep.gate == "memsafe")].set_index("coverage").error
    table = pd.read_csv(root / "06_reader_gating" / "reader.csv").set_index("gate")
    for coverage in (0.05, 0.1):
        assert native[coverage] == pytest.approx(by_hand(17, coverage))
        mean = np.mean([by_hand(seed, coverage) for seed in (17, 29, 43)])
        assert table.loc["memsafe", f"error_at_{coverage:g}"] == pytest.approx(mean)
