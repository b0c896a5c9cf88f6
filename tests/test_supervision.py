"""Silver targets and nested training subsets (notebook 03), checked by hand."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from memsafe_lib.evaluation import runs as E
from memsafe_lib.reporting import ablations
from memsafe_lib.variants import construction as C
from memsafe_lib.variants import supervision as S

from .synthetic import make_query


def _variant(answers: tuple[str, ...], texts: list[str], gold: list[bool], split: str = "train") -> C.Variant:
    units = tuple(C.MemoryUnit(f"u{i}", f"T{i}", t, g, i, i) for i, (t, g) in enumerate(zip(texts, gold, strict=True)))
    return C.Variant("v", "b", "d", "size-matched", "complete", split, 0, "q?", answers, units, sum(gold), len(units))


def test_silver_labels_match_whole_normalised_answers() -> None:
    v = _variant(("Anna Smith", "The Bridge"), ["It was built by anna smith.", "Annabelle Smithers wrote it.",
                                                "See: the bridge!", "Nothing here."], [True, True, False, False])
    assert S.silver_labels(v) == [True, False, True, False]
    assert S.normalize("The  Bridge, of Anna!") == "bridge of anna"


def test_silver_labels_match_the_unit_text_not_its_title() -> None:
    """Appendix silver: "the gold answer string appears in its text" -- a title mention is not enough."""
    v = _variant(("Anna Smith",), ["A bridge over the river.", "It was built by Anna Smith."], [False, True])
    v = replace(v, units=(replace(v.units[0], title="Anna Smith"), replace(v.units[1], title="Bridge")))
    assert S.silver_labels(v) == [False, True]


def test_silver_changes_training_targets_only_and_is_scored_against_gold() -> None:
    train = _variant(("Anna",), ["anna built it", "cats", "anna again"], [True, True, False])
    test = replace(train, variant_id="t", split="test")
    result = C.ConstructionResult("d", "size-matched", [train, test], [])
    silver = S.with_silver_training(result)
    assert silver.construction == "size-matched-silver"
    assert [u.is_evidence for u in silver.variants[0].units] == [True, False, True]
    assert silver.variants[1] == test  # validation and test stay gold
    assert silver.variants[0].state == train.state and silver.variants[0].missing_count == train.missing_count
    q = S.silver_quality(result.variants)
    assert (q["units"], q["gold_evidence"], q["silver_evidence"], q["both"]) == (3, 2, 2, 1)
    assert q["precision"] == pytest.approx(1 / 2) and q["recall"] == pytest.approx(1 / 2)
    assert E._cache_key("d", "c", "memsafe", 17, result) != E._cache_key("d", "c", "memsafe", 17, silver)


def test_training_subsets_are_nested_and_keep_every_evaluation_variant() -> None:
    result = C.build_size_matched([make_query(f"s{i}", 2, 3) for i in range(400)])
    quarter, half = S.training_subset(result, 0.25), S.training_subset(result, 0.5)
    assert quarter.construction == "size-matched-train25" and S.training_subset(result, 1.0) is result
    ids = {f: {v.variant_id for v in r.variants if v.split == "train"} for f, r in ((0.25, quarter), (0.5, half))}
    assert ids[0.25] < ids[0.5]
    all_train = {v.base_id for v in result.variants if v.split == "train"}
    kept = {v.base_id for v in half.variants if v.split == "train"}
    assert 0.4 < len(kept) / len(all_train) < 0.6  # a hash fraction, roughly half
    assert [v for v in half.variants if v.split != "train"] == [v for v in result.variants if v.split != "train"]
    with pytest.raises(ValueError, match="training fraction"):
        S.training_subset(result, 0)


def test_curve_crossing_by_hand() -> None:
    rows = []
    for f, gap in ((0.25, -0.10), (0.5, -0.05), (1.0, 0.0)):
        rows += [{"dataset": "d", "fraction": f, "train_questions": round(f * 400), "model": "lexset",
                  "unsafe_auroc": 0.8, "unsafe_auroc_sd": 0.0, "n_seeds": 3},
                 {"dataset": "d", "fraction": f, "train_questions": round(f * 400), "model": "memsafe",
                  "unsafe_auroc": 0.8 + gap, "unsafe_auroc_sd": 0.0, "n_seeds": 3}]
    out = ablations.curve_crossing(pd.DataFrame(rows)).iloc[0]
    assert out.gap_change_per_doubling == pytest.approx(0.05)
    assert out.crossing_fraction == pytest.approx(1.0)
    assert out.crossing_train_questions == 400
