"""Table "seedvar": seed SDs by hand, and the paper's rows present even where ours is deterministic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from memsafe_lib.reporting.main_results import seed_variability


def test_seed_variability_keeps_the_papers_rows_and_computes_sample_sds() -> None:
    rows = []
    for model, deterministic, values in (("memsafe", False, [0.70, 0.72, 0.74]), ("relevance_agg", True, [0.75] * 3),
                                         ("tfidf", True, [0.67] * 3)):
        for seed, v in zip((17, 29, 43), values, strict=True):
            rows.append({"dataset": "musique", "construction": "size-matched", "model": model, "seed": seed,
                         "split": "test", "unsafe_auroc": v, "deterministic": deterministic})
    table = seed_variability(pd.DataFrame(rows), ["musique"]).set_index("model")
    assert table.loc["memsafe", "musique_sd"] == pytest.approx(np.std([0.70, 0.72, 0.74], ddof=1))
    assert table.loc["relevance_agg", "musique_sd"] == 0.0  # one shared encoder: deterministic here
    assert table.loc["relevance_agg", "musique_paper_sd"] == 0.0008  # the paper lists it
    assert "tfidf" not in table.index  # deterministic and not in the paper's table


def test_per_state_table_averages_each_seeds_auroc_on_those_states_only() -> None:
    """Complete vs missing and complete vs relation-lost: scikit-learn on each seed's test rows of
    those two states, then the seed mean; validation rows and other models never enter."""
    from sklearn.metrics import roc_auc_score

    from memsafe_lib.reporting.main_results import per_state_table

    rng = np.random.default_rng(0)
    states = np.array(["complete", "missing", "relation_lost"] * 20)
    rows = []
    for seed in (17, 29):
        for split in ("validation", "test"):
            for model in ("memsafe", "tfidf"):
                score = rng.random(len(states)) + (states != "complete") * 0.3
                rows.append(pd.DataFrame({"model": model, "seed": seed, "split": split, "state": states,
                                          "unsafe": states != "complete", "unsafe_prob": score}))
    frame = pd.concat(rows, ignore_index=True)
    table = per_state_table({("musique", "blind-hard"): frame}, models=("memsafe", "lexset"))
    assert table.model.tolist() == ["memsafe"]  # lexset did not run; tfidf not asked for
    row = table.iloc[0]
    test = frame[(frame.split == "test") & (frame.model == "memsafe")]
    for state, column in (("missing", "auroc_complete_vs_missing"), ("relation_lost", "auroc_complete_vs_relation_lost")):
        expected = np.mean([roc_auc_score(g.state == state, g.unsafe_prob)
                            for _, g in test[test.state.isin(["complete", state])].groupby("seed")])
        assert row[column] == pytest.approx(expected, abs=1e-12)
    assert row.unsafe_auroc == pytest.approx(np.mean([roc_auc_score(g.unsafe, g.unsafe_prob)
                                                      for _, g in test.groupby("seed")]), abs=1e-12)
    assert (row.dataset, row.construction, row.n_seeds) == ("musique", "blind-hard", 2)


def test_a_construction_table_has_no_paper_columns_and_ours_as_table_main() -> None:
    """Blind-matched and blind-hard have no table in the paper: the paper's size-matched values
    must not stand beside ours; our columns are Table "main"'s."""
    from memsafe_lib.reporting.main_results import construction_table, main_table

    summary = pd.DataFrame([{"dataset": "musique", "construction": "blind-hard", "model": "memsafe", "unsafe_auroc": 0.8,
                             "unsafe_auroc_sd": 0.01, "macro_f1": 0.5, "n_seeds": 3, "paper_unsafe_auroc": 0.968,
                             "paper_macro_f1": 0.9}])
    table = construction_table(summary, ["musique"], "blind-hard")
    assert not [c for c in table.columns if "paper" in c]
    full = main_table(summary, ["musique"], "blind-hard")
    pd.testing.assert_frame_equal(table, full[table.columns])
    assert table.loc[0, "musique_auroc"] == 0.8
