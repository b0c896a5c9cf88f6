"""The blind audit: controls that never read the question find a planted leak, and the
blind-matched construction leaves them nothing (every memory complete once and unsafe twice).

Expected values come from the construction's definition (recomputed here from the base
queries), from Proposition 1 applied to memories (exactly 1/2) and from scikit-learn."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from memsafe_lib.data.records import BaseQuery, Provenance, Unit
from memsafe_lib.estimators.blind import (
    BlindBagOfWords,
    BlindSet,
    BlindUnitEvidence,
    QuestionOnly,
    unit_seen_auroc,
    unseen_memories,
)
from memsafe_lib.measures.metrics import unsafe_auroc
from memsafe_lib.variants.construction import (
    COMPLETE,
    MISSING,
    NO_CLOSE_TRIPLE,
    RELATION_LOST,
    TRIPLE_SALT,
    build_blind_hard,
    build_blind_matched,
    build_size_matched,
    by_split,
    disjoint_evidence,
    memory_key,
    memory_multiplicities,
    multiplicities,
    relation_lost_evidence,
)
from memsafe_lib.variants.topics import closeness, topic_triples
from tests.synthetic import make_query

TRIPLE_BUILDERS = pytest.mark.parametrize("build", [build_blind_matched, build_blind_hard],
                                          ids=["blind-matched", "blind-hard"])


def _queries(n: int = 240) -> list[BaseQuery]:
    """Evidence and distractors that a unit's text alone tells apart (titles E*/D*): a leak."""
    return [make_query(f"q{i:03d}", 2 + i % 2, 8, seed=i) for i in range(n)]


def _shared_queries(n: int = 240, pool: int = 30) -> list[BaseQuery]:
    """Questions whose evidence paragraphs come from a small shared pool (as MuSiQue's recur), with
    their own distractors; the two kinds of paragraph are written alike."""
    out = []
    for i in range(n):
        picks = sorted({(i * 7 + k * 11) % pool for k in range(2)})
        units = [Unit(f"q{i}:e{p}", f"Page {p}", f"page {p} says fact {p}", True, k) for k, p in enumerate(picks)]
        units += [Unit(f"q{i}:d{k}", f"Page x{i}-{k}", f"page x{i}-{k} says fact x{i}{k}", False, 2 + k)
                  for k in range(6)]
        out.append(BaseQuery(f"q{i:03d}", "synthetic", f"question {i}?", ("a",), tuple(units), True,
                             Provenance("synthetic", i, "0" * 64)))
    return out


def _split(variants):  # noqa: ANN001, ANN202 - test helper
    parts = by_split(variants)
    assert {"train", "validation", "test"} <= set(parts)
    return parts


@TRIPLE_BUILDERS
def test_blind_matched_states_follow_from_each_memorys_evidence(build) -> None:  # noqa: ANN001
    """Recompute each variant's state, missing count and evidence flags from the memory's texts
    and the question's own evidence: complete = all of S, missing = none, relation-lost = the
    size-matched relation-lost subset exactly."""
    queries = {q.id: q for q in _queries(90)}
    result = build(queries.values())
    assert result.variants
    for v in result.variants:
        q = queries[v.base_id]
        evidence = {(u.title, u.text) for u in q.evidence}
        present = {(u.title, u.text) for u in v.units} & evidence
        expected = {COMPLETE: evidence, MISSING: set(),
                    RELATION_LOST: {(u.title, u.text) for u in relation_lost_evidence(q) or []}}[v.state]
        assert present == expected, v.variant_id
        assert v.missing_count == len(evidence) - len(present)
        assert [u.is_evidence for u in v.units] == [(u.title, u.text) in evidence for u in v.units]
        assert len({(u.title, u.text) for u in v.units}) == len(v.units)  # no paragraph twice


@TRIPLE_BUILDERS
def test_every_memory_is_complete_once_and_unsafe_twice_in_every_split(build) -> None:  # noqa: ANN001
    result = build(_queries())
    accounted = {v.base_id for v in result.variants} | {e.record_id for e in result.exclusions}
    assert accounted == {q.id for q in _queries()}  # every question used or excluded with a reason
    for split, variants in _split(result.variants).items():
        _, n_u, n_c = memory_multiplicities(variants)
        assert set(zip(n_u, n_c, strict=True)) == {(2, 1)}, split
        _, q_u, q_c = multiplicities(variants)
        assert set(zip(q_u, q_c, strict=True)) == {(2, 1)}, split
        sizes: dict[str, set[int]] = {}
        for v in variants:
            sizes.setdefault(v.base_id, set()).add(len(v.units))
        assert all(len(s) == 1 for s in sizes.values())  # Proposition 1: size constant within a question


def test_any_score_of_the_memory_alone_has_auroc_one_half() -> None:
    """A fixed random function of the memory (a hash), so no model is involved."""
    for variants in _split(build_blind_matched(_queries()).variants).values():
        score = [int(hashlib.sha256(memory_key(v).encode()).hexdigest()[:8], 16) for v in variants]
        y = [v.unsafe for v in variants]
        assert unsafe_auroc(y, score) == 0.5
        assert roc_auc_score(y, score) == pytest.approx(0.5, abs=1e-12)


def _test_auroc(estimator, variants) -> float:  # noqa: ANN001 - test helper
    parts = _split(variants)
    estimator.fit(parts["train"], parts["validation"])
    test = parts["test"]
    score = estimator.predict(test).unsafe_prob
    y = [v.unsafe for v in test]
    assert unsafe_auroc(y, score) == pytest.approx(roc_auc_score(y, score), abs=1e-12)
    return unsafe_auroc(y, score)


@pytest.mark.parametrize("make", [BlindBagOfWords, BlindUnitEvidence])
def test_blind_controls_find_the_planted_leak_of_size_matching(make) -> None:  # noqa: ANN001
    assert _test_auroc(make(), build_size_matched(_queries()).variants) > 0.9


@pytest.mark.parametrize("make", [BlindBagOfWords, BlindUnitEvidence, QuestionOnly])
def test_blind_controls_sit_at_one_half_on_blind_matched(make) -> None:  # noqa: ANN001
    assert _test_auroc(make(), build_blind_matched(_queries()).variants) == 0.5


def test_blind_set_model_finds_the_leak_and_then_sits_at_one_half() -> None:
    """The set transformer over query-free embeddings (the packaged sentence encoder)."""
    leaky = _test_auroc(BlindSet(17, epochs=8, patience=None), build_size_matched(_queries(150)).variants)
    assert leaky > 0.8
    assert _test_auroc(BlindSet(17, epochs=2, patience=None), build_blind_matched(_queries(150)).variants) == 0.5


def test_question_only_reads_unequal_state_counts() -> None:
    """Where questions contribute different numbers of unsafe variants (single-title evidence has no
    relation-lost under size matching), a question-only model can read that."""
    queries = [make_query(f"q{i:03d}", 2, 8, seed=i, titles=["Same", "Same"] if i % 2 else None) for i in range(240)]
    for q in queries:  # the questions say which kind they are
        object.__setattr__(q, "question", f"{'single' if q.id[-1] in '13579' else 'double'} {q.id}?")
    assert _test_auroc(QuestionOnly(), build_size_matched(queries).variants) != 0.5


def _training_status_lookup(train, variants) -> list[float]:  # noqa: ANN001 - test helper
    """The issue's memorisation cue, no learning: how many of a memory's units were evidence in
    some training memory."""
    was_evidence = {(u.title, u.text) for v in train for u in v.units if u.is_evidence}
    return [float(sum((u.title, u.text) in was_evidence for u in v.units)) for v in variants]


def test_training_status_reads_size_matched_labels_but_not_blind_matched() -> None:
    for build, leaks in ((build_size_matched, True), (build_blind_matched, False)):
        parts = _split(build(_shared_queries()).variants)
        test = parts["test"]
        auroc = unsafe_auroc([v.unsafe for v in test], _training_status_lookup(parts["train"], test))
        if leaks:
            assert auroc < 0.2  # complete memories hold the paragraphs that were evidence in training
        else:
            assert auroc == 0.5


def test_unit_seen_auroc_matches_a_hand_count() -> None:
    train = build_size_matched(_shared_queries(60)).variants
    parts = _split(train)
    test = parts["test"]
    scores = [np.array([1.0 if u.is_evidence else 0.0 for u in v.units]) for v in test]  # a perfect unit model
    out = unit_seen_auroc(parts["train"], test, scores)
    seen = {(u.title, u.text) for v in parts["train"] for u in v.units}
    n_seen = sum((u.title, u.text) in seen for v in test for u in v.units)
    assert out["units_seen"] == n_seen and out["units_all"] == sum(len(v.units) for v in test)
    assert out["unit_auroc_all"] == 1.0
    mask = unseen_memories(parts["train"], test)
    assert mask.tolist() == [not any((u.title, u.text) in seen for u in v.units) for v in test]
    assert Counter(mask.tolist())[True] < len(test)  # shared evidence pages: most memories hold a seen unit


def _write_variants(path, variants) -> None:  # noqa: ANN001 - test helper
    import json

    path.write_text("".join(json.dumps(v.to_dict()) + "\n" for v in variants), encoding="utf-8")


def test_audit_blind_flags_a_leaky_file_and_passes_a_blind_matched_one(tmp_path, capsys) -> None:  # noqa: ANN001
    from memsafe_lib.cli import main

    leaky, clean = tmp_path / "leaky.jsonl", tmp_path / "clean.jsonl"
    _write_variants(leaky, build_size_matched(_queries(90)).variants)
    _write_variants(clean, build_blind_matched(_queries(90)).variants)
    assert main(["audit", "--blind", str(leaky)]) == 1
    out = capsys.readouterr().out
    assert "verdict: LEAKS" in out and "blind_unit" in out.split("verdict:")[1]
    assert main(["audit", "--blind", str(clean)]) == 0
    out = capsys.readouterr().out
    assert "verdict: clean" in out and "every score of the memory alone within 0.0000 of 1/2" in out


@pytest.mark.parametrize(("line", "field"), [
    ({"base_id": "b", "split": "test", "question": "q?", "units": ["x"], "state": "gone"}, "state"),
    ({"base_id": "b", "split": "dev", "question": "q?", "units": ["x"], "state": "complete"}, "split"),
    ({"base_id": "b", "split": "test", "question": "q?", "units": [{"title": "t"}], "state": "complete"}, "units[0]"),
    ({"split": "test", "question": "q?", "units": ["x"], "state": "complete"}, "base_id"),
])
def test_audit_blind_names_file_line_and_field_of_bad_input(tmp_path, capsys, line, field) -> None:  # noqa: ANN001
    import json

    from memsafe_lib.cli import main

    path = tmp_path / "mine.jsonl"
    good = {"base_id": "a", "split": "train", "question": "q?", "units": ["x", {"title": "t", "text": "y"}],
            "state": "complete"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(line) + "\n", encoding="utf-8")
    before = sorted(tmp_path.iterdir())
    assert main(["audit", "--blind", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "line 2" in err and f"field {field!r}" in err
    assert sorted(tmp_path.iterdir()) == before  # nothing written


def _starved_queries(n: int = 60) -> list[BaseQuery]:
    """Questions of two to four evidence units whose distractors are copies of one shared
    paragraph: a triple's pooled fill holds a single unit, too few to even out memories whose
    evidence and relation-lost subsets differ in size by up to four."""
    out = []
    for i in range(n):
        units = [Unit(f"q{i}:e{k}", f"Title {i}-{k}", f"fact {i} part {k}", True, k) for k in range(2 + i % 3)]
        units += [Unit(f"q{i}:d{k}", "Shared", "the one shared paragraph", False, 9 + k) for k in range(len(units))]
        out.append(BaseQuery(f"q{i:03d}", "synthetic", f"question {i}?", ("a",), tuple(units), True,
                             Provenance("synthetic", i, "0" * 64)))
    return out


def test_blind_matched_memories_of_a_question_have_one_size_even_when_the_fill_runs_short() -> None:
    queries = _starved_queries()
    needs = {q.id: len(q.evidence) for q in queries}
    result = build_blind_matched(queries)
    sizes: dict[str, set[int]] = {}
    for v in result.variants:
        sizes.setdefault(v.base_id, set()).add(len(v.units))
    assert all(len(s) == 1 for s in sizes.values()), "a question's three memories differ in size"
    kept = set(sizes)
    excluded = {e.record_id for e in result.exclusions}
    assert kept | excluded == set(needs) and not kept & excluded  # no question dropped silently
    _, n_u, n_c = memory_multiplicities(result.variants)
    assert all(u == 2 and c == 1 for u, c in zip(n_u, n_c, strict=True))


def test_blind_set_reads_the_rankers_fp32_embeddings_from_one_cache(tmp_path) -> None:  # noqa: ANN001
    """The question-blind set model and Stage A's ranker read each unit through the same
    pretrained encoder, window, precision and text, so one disk cache serves both: what
    :func:`embed_units` stores is what a fresh fp32 ranker computes (no autocast), and a ranker
    given that cache finds every unit there."""
    from memsafe_lib.config import PACKAGED_ENCODER
    from memsafe_lib.encodings.encoders import EncoderConfig, EncodingCache, make_ranker, unit_string
    from memsafe_lib.estimators.blind import embed_units, unit_embedder

    variants = build_size_matched(_queries(12)).variants
    texts = list(dict.fromkeys(unit_string(u.title, u.text) for v in variants for u in v.units))
    cache = tmp_path / "pretrained.sqlite"
    assert embed_units(variants, cache, progress=False) == len(texts)
    stored = EncodingCache(cache)
    assert len(stored) == len(texts)
    fresh = make_ranker(EncoderConfig(model=PACKAGED_ENCODER, max_length=128))  # fp32, no cache
    expected = fresh.embed(texts)
    np.testing.assert_allclose(unit_embedder(PACKAGED_ENCODER, 128, cache).embed(texts), expected, atol=1e-6)
    ranker = make_ranker(EncoderConfig(model=PACKAGED_ENCODER, max_length=128), stored)
    np.testing.assert_allclose(ranker.embed(texts), expected, atol=1e-6)
    assert len(stored) == len(texts)  # the ranker embedded nothing: every unit was in the cache


def test_notebook_01s_audit_side_by_side_equals_its_loops(monkeypatch) -> None:  # noqa: ANN001
    """One dataset per worker: the same audit rows and the same blind-control scores, in the same
    order, as the loops over datasets and constructions it replaced."""
    from memsafe_lib.config import FIT_WORKERS_ENV, SCALES
    from memsafe_lib.estimators.blind import blind_set_config
    from memsafe_lib.evaluation.audit import audit, audit_side_by_side, fit_controls

    monkeypatch.setenv(FIT_WORKERS_ENV, "2")
    results = {name: {"size-matched": build_size_matched(qs), "blind-matched": build_blind_matched(qs)}
               for name, qs in (("a", _queries(48)), ("b", _shared_queries(72)))}
    shortcut, blind = ["majority", "tfidf"], ["blind_bow", "blind_set"]
    audits, fits = audit_side_by_side(results, shortcut, ("size-matched", "blind-matched"), blind,
                                      ("size-matched",), SCALES["smoke"], progress=False)
    loops = [audit(results[d][c], controls=shortcut) for d in results for c in ("size-matched", "blind-matched")]
    assert [a["rows"] for a in audits] == [a["rows"] for a in loops]
    assert list(fits) == [("a", "size-matched"), ("b", "size-matched")]
    for (d, c), (train, fitted) in fits.items():
        train_here, here = fit_controls(results[d][c].variants, blind, where=f"{d}/{c}",
                                        blind_config=blind_set_config(SCALES["smoke"]))
        assert [v.variant_id for v in train] == [v.variant_id for v in train_here]
        assert [(r.control, r.split) for r in fitted] == [(r.control, r.split) for r in here]
        for r, h in zip(fitted, here, strict=True):
            np.testing.assert_allclose(r.predictions.unsafe_prob, h.predictions.unsafe_prob, atol=1e-6)


def test_the_blind_set_model_embeds_units_at_the_scales_stage_a_window() -> None:
    """Where a scale's Stage A starts from a sentence encoder (smoke, cpu), the question-blind set
    model embeds a unit exactly as that scale's ranker does (the same encoder, fp32, the scale's
    window), so one cached embedding serves both. At smoke (32 tokens) it used to embed at 128
    tokens on its own: four times the work, none of it shared. Here smoke's ranker finds every
    unit notebook 01's audit embedded."""
    from memsafe_lib.config import PACKAGED_ENCODER, SCALES
    from memsafe_lib.encodings.encoders import EncoderConfig, EncodingCache, make_ranker, unit_string
    from memsafe_lib.estimators.blind import BlindSetConfig, blind_set_config
    from memsafe_lib.estimators.context import pretrained_embeddings
    from memsafe_lib.evaluation.audit import audit_side_by_side

    smoke = SCALES["smoke"]
    for scale in (smoke, SCALES["cpu"]):
        neural = scale.neural
        assert blind_set_config(scale) == BlindSetConfig(neural.encoder, neural.max_length, neural.stage_b_epochs,
                                                         neural.stage_b_patience)
    assert SCALES["cpu"].neural.encoder == PACKAGED_ENCODER and smoke.neural.max_length < 128
    results = {"a": {"size-matched": build_size_matched(_queries(48))}}
    _, fits = audit_side_by_side(results, [], (), ["blind_set"], ("size-matched",), smoke, progress=False)
    assert fits[("a", "size-matched")][1]
    variants = results["a"]["size-matched"].variants
    texts = list(dict.fromkeys(unit_string(u.title, u.text) for v in variants for u in v.units))
    cache = EncodingCache(pretrained_embeddings(smoke, "a"))
    assert len(cache) == len(texts)
    ranker = make_ranker(EncoderConfig(model=smoke.neural.encoder, max_length=smoke.neural.max_length), cache)
    ranker.embed(texts)
    assert len(cache) == len(texts)  # the ranker embedded nothing: the audit had, at its window


def test_the_blind_set_model_trains_for_the_scales_stage_b_epochs() -> None:
    """The question-blind set model is MemSafe's set model without the question, so it trains as
    the scale's Stage B does: smoke's 4 epochs (it used to run 30, with patience 10, at every
    scale), the paper's 30 without early stopping, and cpu's 30 with patience 10 as before."""
    from memsafe_lib.config import SCALES
    from memsafe_lib.estimators.blind import DEFAULT_BLIND_SET, blind_set_config
    from memsafe_lib.estimators.registry import make_model

    for name in ("smoke", "cpu", "paper"):
        neural = SCALES[name].neural
        model = make_model("blind_set", 17, blind_config=blind_set_config(SCALES[name]))
        assert (model.set_config.epochs, model.set_config.patience) == (neural.stage_b_epochs, neural.stage_b_patience)
    assert SCALES["smoke"].neural.stage_b_epochs == 4
    cpu = blind_set_config(SCALES["cpu"])
    assert (cpu.epochs, cpu.patience) == (DEFAULT_BLIND_SET.epochs, DEFAULT_BLIND_SET.patience) == (30, 10)


def _topical(topics: dict[str, list[str]]) -> list[BaseQuery]:
    """One question per word: it names its word, its evidence paragraph is about the word's topic
    (the topic name and the word), its distractors about nothing in particular."""
    out = []
    for topic, words in topics.items():
        for w in words:
            units = (Unit(f"{w}:e", f"{w.title()} page", f"the {topic} {w} is known for its {topic}", True, 0),
                     Unit(f"{w}:e2", f"{w.title()} notes", f"{w} notes on {topic}", True, 1),
                     *(Unit(f"{w}:d{k}", f"Other {w} {k}", f"filler text number {k} of {w}", False, 2 + k)
                       for k in range(4)))
            out.append(BaseQuery(f"q-{w}", "synthetic", f"what is the {topic} {w} known for?", ("a",), units, True,
                                 Provenance("synthetic", 0, "0" * 64)))
    return out


def test_closeness_is_the_largest_cosine_of_a_question_to_anothers_evidence() -> None:
    queries = _topical({"volcano": ["etna", "hekla"], "violin": ["amati"]})
    c = closeness(queries)
    assert c[0, 1] > 0 and c[0, 1] > c[0, 2]  # etna's question is nearer hekla's (volcano) evidence than amati's
    assert c[0, 0] == c[0].max()  # and nearest its own


def test_blind_hard_triples_keep_to_a_topic_and_a_smallest_closeness_excludes_with_a_reason() -> None:
    topics = {"volcano": ["etna", "hekla", "fuji"], "violin": ["amati", "guarneri", "stradivari"]}
    queries = _topical(topics)
    triples, left, scores = topic_triples(queries, disjoint_evidence, TRIPLE_SALT)
    assert not left and len(triples) == 2
    topic_of = {f"q-{w}": t for t, ws in topics.items() for w in ws}
    assert all(len({topic_of[q.id] for q in triple}) == 1 for triple in triples)  # hash-order triples would mix
    assert min(scores) > 0
    # every triple below the smallest closeness asked for: nobody is grouped, each with its reason
    strict = build_blind_hard(queries, min_closeness=max(scores) + 0.01)
    assert not strict.variants
    assert {e.reason for e in strict.exclusions} == {NO_CLOSE_TRIPLE}
    assert {e.record_id for e in strict.exclusions} == {q.id for q in queries}
