"""The lexical baselines honour the shared estimator contract and their own definitions."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics.pairwise import cosine_similarity

from memsafe_lib.data.records import BaseQuery, Provenance, Unit
from memsafe_lib.estimators.baselines import FlatTfidf, RetrievalSimilarity, SufficientContextTfidf, _state_thresholds
from memsafe_lib.estimators.lexset import PAIR_FEATURE_NAMES, LexSet
from memsafe_lib.estimators.registry import ALL_BASELINES, LEXSET_VARIANTS, make_model
from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc
from memsafe_lib.variants import construction as C
from memsafe_lib.variants.construction import by_split

FILLER = "river castle engine violin glacier harbor orchid falcon copper meadow lantern comet".split()
ENTITIES = [f"entity{k}" for k in range(30)]


def lexical_query(i: int) -> BaseQuery:
    """Evidence units name the question's two entities, distractors name other entities.

    Every entity recurs across questions, so the only signal is whether the memory covers
    the entities *this* question asks about: a query-unit match, not a bag-of-words cue.
    """
    rng = np.random.default_rng(i)
    key = list(rng.choice(ENTITIES, 2, replace=False))
    others = [e for e in ENTITIES if e not in key]
    kinds = [True, True] + [False] * 6
    rng.shuffle(kinds)
    units, ev = [], 0
    for pos, is_ev in enumerate(kinds):
        entity = key[ev] if is_ev else rng.choice(others)
        ev += is_ev
        filler = " ".join(rng.choice(FILLER, 10))
        units.append(Unit(f"q{i}:{pos}", f"Page {pos}", f"about {entity} {filler}", is_ev, pos))
    return BaseQuery(f"q{i}", "synthetic", f"How are {key[0]} and {key[1]} related?", ("x",), tuple(units), True,
                     Provenance("synthetic", i, "0" * 64))


@pytest.fixture(scope="module")
def splits() -> dict[str, list[C.Variant]]:
    return by_split(C.build_size_matched([lexical_query(i) for i in range(150)]).variants)


@pytest.mark.parametrize("name", [*ALL_BASELINES, *LEXSET_VARIANTS])
def test_every_baseline_honours_the_contract(splits: dict[str, list[C.Variant]], name: str) -> None:
    model = make_model(name, 17).fit(splits["train"], splits["validation"])
    test = splits["test"]
    preds = model.predict(test)
    assert preds.unsafe_prob.shape == (len(test),)
    assert np.all((preds.unsafe_prob >= 0) & (preds.unsafe_prob <= 1))
    assert set(preds.state) <= set(C.STATES)
    if preds.unit_scores is not None:
        assert [len(s) for s in preds.unit_scores] == [len(v.units) for v in test]
    if preds.missing_count is not None:
        assert preds.missing_count.shape == (len(test),) and np.all(preds.missing_count >= 0)
    assert isinstance(model.deterministic, bool)


@pytest.mark.parametrize("name", ["sc_tfidf", "lexset", "retrieval_sim", *LEXSET_VARIANTS])
def test_query_matching_models_learn_the_match(splits: dict[str, list[C.Variant]], name: str) -> None:
    model = make_model(name, 17).fit(splits["train"], splits["validation"])
    test = splits["test"]
    assert unsafe_auroc([v.unsafe for v in test], model.predict(test).unsafe_prob) > 0.8


def test_flat_tfidf_cannot_see_the_match(splits: dict[str, list[C.Variant]]) -> None:
    """One bag of words for query and memory hides which entities the question asks for."""
    model = make_model("tfidf", 17).fit(splits["train"], splits["validation"])
    test = splits["test"]
    assert unsafe_auroc([v.unsafe for v in test], model.predict(test).unsafe_prob) < 0.7


def test_deterministic_models_do_not_depend_on_the_seed(splits: dict[str, list[C.Variant]]) -> None:
    for name in ("tfidf", "sc_tfidf", "retrieval_sim"):
        a = make_model(name, 17).fit(splits["train"], splits["validation"]).predict(splits["test"])
        b = make_model(name, 29).fit(splits["train"], splits["validation"]).predict(splits["test"])
        assert np.array_equal(a.unsafe_prob, b.unsafe_prob)


def test_lexset_variants_change_only_their_part(splits: dict[str, list[C.Variant]]) -> None:
    """``lexset_no_title`` reads LexSet's features less the two title columns (and the set's
    title aggregate); ``lexset_logistic`` keeps the features and puts logistic heads on them."""
    train = splits["train"][:90]
    full = LexSet(seed=17).fit(train)
    no_title = make_model("lexset_no_title", 17).fit(train)
    view_full, view_nt = full._views(train[:1])[0], no_title._views(train[:1])[0]
    title = [PAIR_FEATURE_NAMES.index("title_q_recall"), PAIR_FEATURE_NAMES.index("title_named")]
    np.testing.assert_array_equal(no_title._unit_matrix(view_nt), np.delete(full._unit_matrix(view_full), title, axis=1))
    scores = np.linspace(0, 1, len(train[0].units))
    assert no_title._set_row(view_nt, scores) == [x for i, x in enumerate(full._set_row(view_full, scores))
                                                   if i != 8 + 4]  # 8 score aggregates, then title_named max
    logistic = make_model("lexset_logistic", 17).fit(train, splits["validation"])
    assert isinstance(logistic._heads.unsafe.steps[-1][1], LogisticRegression) and "C" in logistic.config


def test_lexset_is_reproducible_per_seed(splits: dict[str, list[C.Variant]]) -> None:
    a = LexSet(seed=17).fit(splits["train"], splits["validation"]).predict(splits["test"])
    b = LexSet(seed=17).fit(splits["train"], splits["validation"]).predict(splits["test"])
    assert np.array_equal(a.unsafe_prob, b.unsafe_prob)
    assert all(np.array_equal(x, y) for x, y in zip(a.unit_scores, b.unit_scores, strict=True))


def test_lexset_localises_evidence(splits: dict[str, list[C.Variant]]) -> None:
    model = LexSet(seed=17).fit(splits["train"], splits["validation"])
    preds = model.predict(splits["test"])
    hits = [int(np.argmax(s)) in {i for i, u in enumerate(v.units) if u.is_evidence}
            for v, s in zip(splits["test"], preds.unit_scores, strict=True) if v.state == C.COMPLETE]
    assert np.mean(hits) > 0.9


def test_lexset_crossfit_folds_split_train_questions(splits: dict[str, list[C.Variant]]) -> None:
    folds = {v.base_id: C.train_fold(v.base_id) for v in splits["train"]}
    assert set(folds.values()) == {0, 1}  # both folds are populated, so each is scored by the other's model


def test_lexset_computes_each_pair_once(splits: dict[str, list[C.Variant]]) -> None:
    model = LexSet(seed=17).fit(splits["train"][:60])
    pairs = {(v.question, u.unit_id, u.text) for v in splits["train"][:60] for u in v.units}
    assert set(model._features._pair_cache) == pairs  # one entry per unique (question, unit) pair
    n_units = sum(len(v.units) for v in splits["train"][:60])
    assert len(pairs) < n_units  # variants of a question share units


def test_retrieval_unit_scores_are_tfidf_cosines(splits: dict[str, list[C.Variant]]) -> None:
    model = RetrievalSimilarity().fit(splits["train"], splits["validation"])
    v = splits["test"][0]
    units = model.vectorizer.transform([f"{u.title}: {u.text}" for u in v.units])
    expected = cosine_similarity(units, model.vectorizer.transform([v.question])).ravel()
    assert np.allclose(model.predict([v]).unit_scores[0], expected, atol=1e-6)
    agg = {"max": expected.max(), "mean": expected.mean(), "mean_top2": np.sort(expected)[-2:].mean()}
    assert model.predict([v]).unsafe_prob[0] == pytest.approx(1 - agg[model.aggregate], abs=1e-6)


def test_state_thresholds_maximise_macro_f1_on_a_separable_score() -> None:
    score = np.array([0.1, 0.15, 0.5, 0.55, 0.9, 0.95])
    states = ["complete", "complete", "relation_lost", "relation_lost", "missing", "missing"]
    lo, hi = _state_thresholds(score, states, n_grid=101)
    pred = np.where(score <= lo, "complete", np.where(score <= hi, "relation_lost", "missing"))
    assert macro_f1(states, list(pred)) == 1.0


def test_tfidf_selects_c_by_validation_auroc(splits: dict[str, list[C.Variant]]) -> None:
    model = FlatTfidf().fit(splits["train"], splits["validation"])
    best = max(model.selection_scores, key=lambda r: r["validation_auroc"])["validation_auroc"]
    chosen = next(r for r in model.selection_scores if r["C"] == model.config["C"])
    assert chosen["validation_auroc"] == best


def test_sc_tfidf_interaction_block_marks_covered_query_terms(splits: dict[str, list[C.Variant]]) -> None:
    model = SufficientContextTfidf().fit(splits["train"])
    v = splits["train"][0]
    x = model._blocks([v]).toarray().ravel()
    n = len(model.vectorizer.vocabulary_)
    q, m, qm = x[:n], x[n:2 * n], x[2 * n:]
    assert np.allclose(qm, q * m)
    assert np.all((qm > 0) == ((q > 0) & (m > 0)))


def test_lexset_features_do_not_depend_on_string_hashing() -> None:
    """Same data and seed give bit-identical features in every process (PYTHONHASHSEED varies).

    Long questions over a varied vocabulary make BM25 sum many terms, where the order of
    float additions shows in the last bits if it follows set (hash) order.
    """
    import os
    import subprocess
    import sys

    code = ("import hashlib, numpy as np\n"
            "from memsafe_lib.variants import construction as C\n"
            "from memsafe_lib.data.records import BaseQuery, Provenance, Unit\n"
            "from memsafe_lib.estimators.lexset import PAIR_FEATURE_NAMES, LexSet, UnitFeaturizer\n"
            "rng = np.random.default_rng(0)\n"
            "vocab = [f'w{k}' for k in range(300)]\n"
            "def query(i):\n"
            "    words = lambda n: ' '.join(rng.choice(vocab, n, p=np.r_[np.full(50, 0.012), np.full(250, 0.0016)]))\n"
            "    units = tuple(Unit(f'q{i}:{j}', f't{j}', words(60), j < 2, j) for j in range(8))\n"
            "    return BaseQuery(f'q{i}', 's', words(25), ('a',), units, True, Provenance('s', i, '0'))\n"
            "vs = C.build_size_matched([query(i) for i in range(30)]).variants\n"
            "m = LexSet(seed=17); m._features = UnitFeaturizer().fit(vs)\n"
            "print(hashlib.sha256(np.vstack([w.pair for w in m._views(vs)]).tobytes()).hexdigest())\n")
    digests = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout
        for h in (0, 1, 2, 3)
    }
    assert len(digests) == 1
