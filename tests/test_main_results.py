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
