"""Transfer without refitting, its cache, the memorization audit and the restricted AUROC."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import brier_score_loss, roc_auc_score

from memsafe_lib.evaluation import transfer as T
from memsafe_lib.measures.metrics import brier_score
from memsafe_lib.variants import construction as C
from tests.test_baselines import lexical_query


def test_brier_score_matches_sklearn() -> None:
    y, p = [True, False, True, False], [0.9, 0.2, 0.4, 0.7]
    assert brier_score(y, p) == pytest.approx(brier_score_loss(y, p))


def test_transfer_scores_targets_unchanged_and_resumes_from_cache(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    source = C.build_size_matched([lexical_query(i) for i in range(120)])
    target = C.build_deletion([lexical_query(i) for i in range(120, 150)]).variants
    results = T.transfer(source, {"deletion": target}, ["tfidf", "text_length"], [17], cache_dir=tmp_path)
    table = T.transfer_table(results, [v for v in source.variants if v.split == "test"], {"deletion": target})
    assert set(table.population) == {"source_test", "deletion"}
    row = table[(table.model == "tfidf") & (table.population == "deletion")].iloc[0]
    preds = next(r for r in results if r.model == "tfidf").predictions["deletion"]
    assert row.n == len(target) and row.unsafe_auroc == pytest.approx(
        roc_auc_score([v.unsafe for v in target], preds.unsafe_prob))

    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("refitted although the transfer was cached")

    monkeypatch.setattr(T, "make_model", no_fit)
    again = T.transfer(source, {"deletion": target}, ["tfidf", "text_length"], [17], cache_dir=tmp_path)
    np.testing.assert_array_equal(again[0].predictions["deletion"].unsafe_prob, results[0].predictions["deletion"].unsafe_prob)
    assert all(v.split == "test" for v in T.as_test(target))


def test_a_deterministic_model_is_fitted_once_for_every_seed(tmp_path: Path) -> None:
    """TF-IDF is deterministic: notebook 04 fitted it once per seed (three identical fits, 25 s
    each on the cpu data); one fit now serves every seed, and LexSet still gets one per seed."""
    source = C.build_size_matched([lexical_query(i) for i in range(120)])
    target = C.build_deletion([lexical_query(i) for i in range(120, 150)]).variants
    results = T.transfer(source, {"deletion": target}, ["tfidf", "lexset"], [17, 29, 43], cache_dir=tmp_path)
    assert [(r.model, r.seed) for r in results] == [(m, s) for m in ("tfidf", "lexset") for s in (17, 29, 43)]
    assert len(list(tmp_path.glob("transfer-tfidf-*.pkl"))) == 1
    assert len(list(tmp_path.glob("transfer-lexset-*.pkl"))) == 3
    tfidf = [r.predictions["deletion"].unsafe_prob for r in results[:3]]
    np.testing.assert_array_equal(tfidf[0], tfidf[2])


def _v(base: str, split: str, state: str, units: list[tuple[str, bool]]) -> C.Variant:
    mem = tuple(C.MemoryUnit(f"{base}{i}", t, t, ev, i, i) for i, (t, ev) in enumerate(units))
    return C.Variant(f"{base}:{state}", base, "d", "size-matched", state, split, 0, "q", (), mem, 1, len(mem))


def test_memorization_audit_by_hand() -> None:
    variants = [_v("a", "train", "complete", [("P1", True), ("P2", False)]),
                _v("b", "test", "complete", [("P1", True), ("P3", False)]),  # its evidence P1 was seen in training
                _v("c", "test", "complete", [("P2", True), ("P4", False)]),  # its evidence P2 was seen (as a distractor)
                _v("d", "test", "complete", [("P5", True), ("P6", False)])]  # nothing seen
    audit = T.memorization(variants)
    assert audit["test_paragraphs"] == 6 and audit["also_in_training"] == 2
    assert audit["fraction_in_training"] == pytest.approx(2 / 6)
    assert audit["evidence_status_agrees"] == pytest.approx(1 / 2)  # P1 agrees, P2 does not
    assert audit["unseen_ids"] == ["d"]  # only d's gold evidence text never occurs in training


def test_restricted_auroc_by_hand() -> None:
    rows = [{"model": "m", "seed": 17, "split": "test", "base_id": b, "unsafe": u, "unsafe_prob": s}
            for b, u, s in [("a", True, 0.9), ("a", False, 0.1), ("b", True, 0.2), ("b", False, 0.6),
                            ("c", True, 0.8), ("c", False, 0.3)]]
    out = T.restricted_auroc(pd.DataFrame(rows), ["a", "c"], ["m"]).iloc[0]
    assert out.auroc_all == pytest.approx(roc_auc_score([1, 0, 1, 0, 1, 0], [0.9, 0.1, 0.2, 0.6, 0.8, 0.3]))
    assert out.auroc_evidence_unseen == pytest.approx(1.0) and out.questions_kept == 2


def test_h3_is_read_from_transfer_drops_by_hand() -> None:
    from memsafe_lib.reporting.transfer import drop_table, h3_verdict

    rows = []
    for model, a, b in (("memsafe", 0.90, 0.86), ("tfidf", 0.70, 0.60), ("text_length", 0.55, 0.50)):
        rows += [{"model": model, "seed": 17, "population": "source_test", "unsafe_auroc": a, "ece": 0.1},
                 {"model": model, "seed": 17, "population": "family-b", "unsafe_auroc": b, "ece": 0.2}]
    table = pd.DataFrame(rows)
    drops = drop_table(table).set_index("model")
    assert drops.loc["memsafe", "drop"] == pytest.approx(0.04) and drops.loc["tfidf", "drop"] == pytest.approx(0.10)
    assert h3_verdict(table).status == "pass"  # 0.04 < 0.10 and 0.04 < 0.05
    table.loc[(table.model == "text_length") & (table.population == "family-b"), "unsafe_auroc"] = 0.53
    assert h3_verdict(table).status == "fail"  # text length drops only 0.02
    assert h3_verdict(table[table.population == "source_test"]).status == "untested"  # no family B: untested


def test_family_b_from_official_format_files_goes_through_transfer(qa_fixtures: Path) -> None:
    """The A->B path on MuSiQue-Full fixture twins (the shared data have none)."""
    from memsafe_lib.config import SCALES
    from memsafe_lib.reporting.transfer import drop_table
    from memsafe_lib.variants.store import build

    _, family_b = build("musique", "family-b", SCALES["smoke"])
    assert family_b.variants and {v.state for v in family_b.variants} >= {"complete", "missing"}
    source = C.build_size_matched([lexical_query(i) for i in range(120)])
    results = T.transfer(source, {"family-b": family_b.variants}, ["tfidf", "text_length"], [17])
    table = T.transfer_table(results, [v for v in source.variants if v.split == "test"],
                             {"family-b": family_b.variants})
    drops = drop_table(table)
    assert set(drops.model) == {"tfidf", "text_length"} and drops["drop"].notna().all()


def test_transferred_set_models_side_by_side_equal_one_after_another(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Notebook 04 fits the set models' seeds in two worker processes: the same predictions on
    the source and the target as fitting them here one after another."""
    from dataclasses import replace

    from memsafe_lib.config import FIT_WORKERS_ENV, SCALES
    from memsafe_lib.encodings.encoders import EncodeStats
    from memsafe_lib.encodings.stagea import StageAResult
    from memsafe_lib.estimators.context import NeuralContext
    from tests.test_setmodel import _variants_and_encodings

    variants, enc = _variants_and_encodings(60)
    splits = ["train", "train", "validation", "test"]
    source_variants = [replace(v, split=splits[int(v.base_id[1:]) % 4]) for v in variants if int(v.base_id[1:]) < 48]
    target = [v for v in variants if int(v.base_id[1:]) >= 48]
    source = C.ConstructionResult("synthetic", "size-matched", source_variants, [])
    scale = replace(SCALES["smoke"], neural=replace(SCALES["smoke"].neural, encoder_seeds=(17,)))
    out = {}
    for workers in ("2", "1"):
        monkeypatch.setenv(FIT_WORKERS_ENV, workers)
        stage_a = StageAResult(dict(enc), (), None, EncodeStats(), (0, 0))  # type: ignore[arg-type]
        context = NeuralContext("synthetic", scale, {17: stage_a}, {"width": 16, "heads": 2, "epochs": 2})
        out[workers] = T.transfer(source, {"other": target}, ["memsafe", "tfidf"], [17, 29], context,
                                  cache_dir=tmp_path / workers)
        assert len(list((tmp_path / workers).glob("transfer-memsafe-*.pkl"))) == 2
    assert [(r.model, r.seed) for r in out["2"]] == [("memsafe", 17), ("memsafe", 29), ("tfidf", 17), ("tfidf", 29)]
    for a, b in zip(out["2"], out["1"], strict=True):
        for name in ("source_test", "other"):
            np.testing.assert_array_equal(a.predictions[name].unsafe_prob, b.predictions[name].unsafe_prob)
