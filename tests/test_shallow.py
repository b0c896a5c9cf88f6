"""Shallow question-aware controls and per-state AUROC: hand examples and scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from memsafe_lib.estimators.registry import MODEL_GROUPS, make_model
from memsafe_lib.estimators.shallow import title_named, title_named_features, top_cosines
from memsafe_lib.evaluation.audit import blind_verdict, control_role, per_state
from memsafe_lib.measures.metrics import state_auroc
from memsafe_lib.variants.construction import COMPLETE, MISSING, RELATION_LOST, MemoryUnit, Variant


def test_state_auroc_is_sklearns_on_the_two_states_alone() -> None:
    rng = np.random.default_rng(0)
    states = rng.choice([COMPLETE, MISSING, RELATION_LOST], size=300)
    score = rng.normal(size=300) + (states == MISSING) * 0.8 + (states == RELATION_LOST) * 0.3
    for state in (MISSING, RELATION_LOST):
        kept = np.isin(states, [COMPLETE, state])
        assert state_auroc(states, score, state) == pytest.approx(roc_auc_score(states[kept] == state, score[kept]))
    assert state_auroc(states[states != MISSING], score[states != MISSING], MISSING) is None
    both = per_state(states, score)
    assert both["auroc_complete_vs_missing"] > both["auroc_complete_vs_relation_lost"] > 0.5


def test_top_cosines_sort_and_pad() -> None:
    assert top_cosines(np.array([0.1, 0.7, 0.3]), 4) == [0.7, 0.3, 0.1, 0.0]
    assert top_cosines(np.array([0.5, 0.2, 0.9, 0.4]), 2) == [0.9, 0.5]


def test_a_title_is_named_when_every_content_token_is_in_the_question() -> None:
    q = "Which river flows through the town where the founder of Halvorsen Optics was born?"
    assert title_named(q, "Halvorsen Optics")
    assert not title_named(q, "Maren Halvorsen")  # "maren" is not in the question
    assert not title_named(q, "The")  # no content token: names nothing
    v = _variant("q", q, COMPLETE, ["Halvorsen Optics", "Maren Halvorsen", "Trelby", "River"])
    assert title_named_features(v) == [2.0, 0.5]  # Halvorsen Optics, and River (its one token is asked)


def _variant(qid: str, question: str, state: str, titles: list[str], texts: list[str] | None = None,
             split: str = "test") -> Variant:
    texts = texts or [f"{t} is a place." for t in titles]
    units = tuple(MemoryUnit(f"{qid}:{i}", t, x, False, i, i) for i, (t, x) in enumerate(zip(titles, texts, strict=True)))
    return Variant(f"{qid}:{state}", qid, "synthetic", "size-matched", state, split, 0 if state == COMPLETE else 1,
                   question, ("a",), units, 1, len(units))


def _topical(n: int, missing_on_topic: bool) -> list[Variant]:
    """Each question asks about its own topic word; its complete memory holds a unit on that word,
    its missing memory either the same unit of another question's word (a topic gap) or a unit on
    its own word, as close to the question, that does not answer (no gap)."""
    out = []
    for i in range(n):
        split = ("train", "validation", "test")[i % 3] if i >= 30 else "train"
        word, other = f"topic{i}", f"topic{(i + 1) % n}"
        filler = [f"filler{j} {i % 7}" for j in range(4)]
        q = f"what happened at {word} in spring?"
        complete = [f"{word} in spring: a flood came.", *filler]
        missing = [(f"{word} in spring: a fair came." if missing_on_topic else f"{other} in spring: a flood came."),
                   *filler]
        titles = [f"T{i}a", *[f"F{j}" for j in range(4)]]
        out += [_variant(f"q{i}", q, COMPLETE, titles, complete, split), _variant(f"q{i}", q, MISSING, titles, missing, split)]
    return out


@pytest.mark.parametrize("on_topic, low, high", [(False, 0.9, 1.0), (True, 0.4, 0.6)])
def test_question_unit_cosines_see_a_topic_gap_and_little_else(on_topic: bool, low: float, high: float) -> None:
    variants = _topical(90, on_topic)
    train = [v for v in variants if v.split == "train"]
    test = [v for v in variants if v.split == "test"]
    model = make_model("qu_tfidf", 17).fit(train, [v for v in variants if v.split == "validation"])
    auroc = roc_auc_score([v.unsafe for v in test], model.predict(test).unsafe_prob)
    assert low <= auroc <= high


def test_shallow_controls_are_grouped_and_not_held_to_chance() -> None:
    assert MODEL_GROUPS["shallow"] == ("qu_tfidf", "title_named", "retrieval_sim")
    assert [control_role(m) for m in ("qu_tfidf", "blind_bow", "text_length")] == ["shallow", "blind", "surface"]
    rows = [{"model": "qu_tfidf", "role": "shallow", "split": "test", "unsafe_auroc": 0.8, "within_chance": False},
            {"model": "blind_bow", "role": "blind", "split": "test", "unsafe_auroc": 0.5, "within_chance": True}]
    assert blind_verdict(rows) == (True, [])
    rows[1].update(unsafe_auroc=0.6, within_chance=False)
    assert blind_verdict(rows) == (False, ["blind_bow 0.600"])
