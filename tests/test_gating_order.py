"""Issue 32 (items 6, 7, 10): the reader gate's fixed order inside tied scores, the error at a
fractional coverage, and one explicit name per length control.

Expected values are counted by hand from the salted SHA-256 order, which the tests recompute
with hashlib (not with the library's ``hash_rank``)."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from memsafe_lib.evaluation import reader_gating as G
from memsafe_lib.measures.gating import error_at_coverage, expected_accepted_errors


def _sha_order(ids: list[str], salt: str) -> list[str]:
    rank = {i: int.from_bytes(hashlib.sha256(f"{salt}\x1f{i}".encode()).digest()[:8], "big") for i in ids}
    return sorted(ids, key=lambda i: (rank[i], i))


# --- measures: a secondary key inside tied scores -------------------------------------------

def test_tiebreak_fixes_the_order_inside_a_tie_group() -> None:
    wrong = [0, 1, 1, 1, 1]
    score = [0.0, 0.0, 0.0, 1.0, 1.0]
    tiebreak = [2, 0, 1, 3, 4]  # inside the tied 0.0 group: memory 1 (wrong), 2 (wrong), then 0 (right)
    assert error_at_coverage(wrong, score, 0.2, tiebreak=tiebreak) == pytest.approx(1.0)   # k = 1
    assert error_at_coverage(wrong, score, 0.4, tiebreak=tiebreak) == pytest.approx(1.0)   # k = 2
    assert error_at_coverage(wrong, score, 0.6, tiebreak=tiebreak) == pytest.approx(2 / 3)  # k = 3
    # without a tiebreak the tied group is still the expectation over its orders (the AURC's rule)
    assert error_at_coverage(wrong, score, 0.2) == pytest.approx(2 / 3)


def test_tiebreak_never_overrides_the_score() -> None:
    wrong, score = [1, 0], [0.9, 0.1]
    assert error_at_coverage(wrong, score, 0.5, tiebreak=[0, 1]) == pytest.approx(0.0)


def test_fractional_k_counts_the_next_memory_in_part() -> None:
    # k = c * n = 2.5: the first two memories fully, the third with weight 1/2, over k
    wrong, score = [1, 0, 1, 0], [0.0, 0.0, 0.0, 1.0]
    tiebreak = [0, 1, 2, 3]
    assert expected_accepted_errors(wrong, score, 2.5, tiebreak=tiebreak) == pytest.approx(1.5)
    assert error_at_coverage(wrong, score, 0.625, tiebreak=tiebreak) == pytest.approx(1.5 / 2.5)
    with pytest.raises(ValueError, match="one length"):
        error_at_coverage(wrong, score, 0.5, tiebreak=[0, 1])


# --- the reader gate: every gate's ties in the salted-hash order of the memory id -------------

def _frame() -> pd.DataFrame:
    # 4 complete memories (v0..v3, the reader right on v0 and v2) and 8 unsafe ones, all wrong
    ids = [f"v{i}" for i in range(12)]
    unsafe = np.array([False] * 4 + [True] * 8)
    wrong = np.array([0, 1, 0, 1] + [1] * 8)
    f = pd.DataFrame({"variant_id": ids, "base_id": [f"b{i // 3}" for i in range(12)],
                      "state": np.where(unsafe, "missing", "complete"), "unsafe": unsafe, "wrong": wrong,
                      "confidence": np.linspace(-1, -2, 12)})
    f["gate:text_length:17"] = 0.5  # one tie group
    return G.add_fixed_gates(f, judge_shots=())


def test_the_hash_order_used_for_the_hand_counts() -> None:
    ids = [f"v{i}" for i in range(12)]
    order = _sha_order(ids, G.TIE_SALT)
    assert G.TIE_SALT == "reader-gate-ties"
    assert order == ["v6", "v4", "v7", "v1", "v9", "v0", "v5", "v3", "v11", "v2", "v10", "v8"]
    positions = G.tie_order(pd.Series(ids))
    assert [ids[i] for i in np.argsort(positions)] == order


def test_oracle_error_changes_with_coverage_in_the_fixed_order() -> None:
    # complete memories in hash order: v1 (wrong), v0 (right), v3 (wrong), v2 (right); n = 12
    coverages = (1 / 12, 0.1, 0.25, 1 / 3, 0.5)
    table = G.reader_table(_frame(), coverages).set_index("gate")
    oracle = [table.loc["oracle", f"error_at_{c:g}"] for c in coverages]
    assert oracle[0] == pytest.approx(1.0)          # k = 1: v1
    assert oracle[1] == pytest.approx(1 / 1.2)      # k = 1.2: v1, then v0 (right) counted at 0.2
    assert oracle[2] == pytest.approx(2 / 3)        # k = 3: v1, v0, v3
    assert oracle[3] == pytest.approx(2 / 4)        # k = 4: every complete memory
    assert oracle[4] == pytest.approx(4 / 6)        # k = 6: and two unsafe (wrong) ones
    # the text-length gate is one tie group: the hash order of every memory, v6 (wrong) first
    assert table.loc["text_length", "error_at_0.0833333"] == pytest.approx(1.0)
    assert table.loc["text_length", "error_at_0.5"] == pytest.approx(5 / 6)  # v6 v4 v7 v1 v9 v0


def test_the_order_is_reproducible_and_ignores_row_order() -> None:
    f = _frame()
    shuffled = f.sample(frac=1.0, random_state=3).reset_index(drop=True)
    a = G.reader_table(f, (1 / 12, 0.25)).set_index("gate")
    b = G.reader_table(shuffled, (1 / 12, 0.25)).set_index("gate")
    pd.testing.assert_frame_equal(a, b.loc[a.index])
    pd.testing.assert_frame_equal(a, G.reader_table(f, (1 / 12, 0.25)).set_index("gate"))


def test_oracle_error_changes_with_prevalence() -> None:
    f = _frame()
    sweep = G.prevalence_sweep(f, (0.2,), draws=1, coverages=(0.2,), gates=("oracle",))
    oracle = sweep[sweep.gate == "oracle"].set_index("native").error
    # 20%: 4 complete + 1 unsafe, k = 1: v1 (wrong); native: k = 2.4: v1, v0, v3 at 0.4
    assert oracle[False] == pytest.approx(1.0)
    assert oracle[True] == pytest.approx(1.4 / 2.4)


# --- item 7: one name per control ------------------------------------------------------------

def test_every_memory_length_label_says_which_length() -> None:
    from memsafe_lib.reporting.reader import GATE_LABELS
    from memsafe_lib.reporting.transfer import SQUAD_LABELS

    # the paper's memory-length control is the paragraph count (issue 46, item 7); text length is its own row
    assert GATE_LABELS["paragraph_count"] == G.GATE_MODELS["paragraph_count"] == "Memory-length control (paragraph count)"
    assert GATE_LABELS["text_length"] == G.GATE_MODELS["text_length"] == "Text-length control (characters)"
    assert SQUAD_LABELS["paragraph_count"] == "Memory-length control (paragraph count)"
    assert SQUAD_LABELS["text_length"] == "Text-length control"
    crit = G.criteria(_frame(), target=0.10).set_index("criterion")
    texts = [*GATE_LABELS.values(), *G.GATE_MODELS.values(), *SQUAD_LABELS.values(),
             crit.loc["(ii)", "statement"], crit.loc["(ii)", "value"]]
    for text in texts:
        if "memory-length" in text.lower() or "memory length" in text.lower():
            assert "(paragraph count)" in text, text
    assert "(paragraph count)" in crit.loc["(ii)", "statement"]


def test_squad_table_names_the_paragraph_count_control() -> None:
    from memsafe_lib.estimators.controls import Predictions
    from memsafe_lib.evaluation.transfer import TransferResult
    from memsafe_lib.reporting.transfer import squad_table
    from memsafe_lib.variants import construction as C

    def variant(i: int, unsafe: bool, split: str) -> C.Variant:
        unit = (C.MemoryUnit(f"u{i}", "t", "x" * (i + 1), not unsafe, 0, 0),)
        return C.Variant(f"q{i}:{'missing' if unsafe else 'complete'}", f"q{i}", "d", "native",
                         "missing" if unsafe else "complete", split, 0, "q", (), unit, 1, 1)

    squad = [variant(i, i % 2 == 1, "validation") for i in range(4)]
    validation = [variant(i, i % 2 == 1, "validation") for i in range(4)]
    flat = Predictions(unsafe_prob=np.full(4, 0.5), state=np.array(["complete"] * 4))
    results = [TransferResult("paragraph_count", 17, {"squad2": flat, "source_validation": flat})]
    table = squad_table(results, validation, squad)
    assert table.columns[:2].tolist() == ["model", "label"]
    assert table.set_index("model").loc["paragraph_count", "label"] == "Memory-length control (paragraph count)"
    assert table.set_index("model").loc["paragraph_count", "unsafe_auroc"] == pytest.approx(0.5)
