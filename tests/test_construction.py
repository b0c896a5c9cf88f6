"""Invariants of the constructions, checked on synthetic queries and official-format fixtures."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsafe_lib.data import load_dataset
from memsafe_lib.variants import construction as C
from tests.synthetic import make_query


def test_split_is_deterministic_and_near_its_ratios() -> None:
    ids = [f"q{i}" for i in range(20000)]
    splits = [C.assign_split(i) for i in ids]
    assert splits == [C.assign_split(i) for i in ids]
    counts = Counter(splits)
    for name, ratio in zip(C.SPLITS, C.SPLIT_RATIOS, strict=True):
        assert abs(counts[name] / len(ids) - ratio) < 0.01


def test_split_salt_changes_assignment() -> None:
    ids = [f"q{i}" for i in range(200)]
    assert [C.assign_split(i) for i in ids] != [C.assign_split(i, salt="other") for i in ids]


@settings(max_examples=150, deadline=None)
@given(n_s=st.integers(1, 5), extra=st.integers(0, 12), n_titles=st.integers(1, 5), seed=st.integers(0, 10**6))
def test_size_matched_invariants(n_s: int, extra: int, n_titles: int, seed: int) -> None:
    n_d = n_s + extra
    titles = [f"E{k % n_titles}" for k in range(n_s)]
    q = make_query(f"q{seed}", n_s, n_d, titles=titles, seed=seed)
    result = C.build_size_matched([q])
    by_state = {v.state: v for v in result.variants}
    distinct = len(set(titles))
    assert set(by_state) == ({C.COMPLETE, C.MISSING, C.RELATION_LOST} if distinct >= 2 else {C.COMPLETE, C.MISSING})
    assert (len(result.absent) == 1) == (distinct < 2)
    for v in result.variants:
        assert len(v.units) == n_d  # every state has |D| units
        assert [u.position for u in v.units] == list(range(n_d))
        assert [u.source_position for u in v.units] == sorted(u.source_position for u in v.units)
        kept = sum(u.is_evidence for u in v.units)
        assert v.missing_count == n_s - kept and v.n_evidence == n_s
        assert v.split == C.assign_split(q.id)
    assert by_state[C.COMPLETE].missing_count == 0
    assert by_state[C.MISSING].missing_count == n_s
    # Distractors are a prefix of one fixed order, so states nest: complete ⊂ relation-lost ⊂ missing.
    dis = {s: {u.unit_id for u in v.units if not u.is_evidence} for s, v in by_state.items()}
    if C.RELATION_LOST in by_state:
        assert dis[C.COMPLETE] <= dis[C.RELATION_LOST] <= dis[C.MISSING]
        rl = by_state[C.RELATION_LOST]
        kept_titles = {u.title for u in rl.units if u.is_evidence}
        assert 0 < len(kept_titles) < distinct  # a proper non-empty subset of the titles
        # All units of a kept title stay.
        assert sum(u.is_evidence for u in rl.units) == sum(t in kept_titles for t in titles)


def test_size_matched_excludes_when_too_few_distractors() -> None:
    q = make_query("short", 3, 2)
    result = C.build_size_matched([q])
    assert result.variants == [] and [e.reason for e in result.exclusions] == [C.TOO_FEW_DISTRACTORS]


def test_deletion_sizes_leak_the_label() -> None:
    q = make_query("del", 2, 5)
    by_state = {v.state: v for v in C.build_deletion([q]).variants}
    assert len(by_state[C.COMPLETE].units) == 7  # S ∪ D
    assert len(by_state[C.MISSING].units) == 5  # D
    assert len(by_state[C.RELATION_LOST].units) == 6  # D plus one of the two evidence titles


def test_hash_choices_do_not_depend_on_input_order() -> None:
    qs = [make_query(f"q{i}", 2 + i % 3, 8, seed=i) for i in range(30)]
    a = {v.variant_id: v for v in C.build_size_matched(qs).variants}
    b = {v.variant_id: v for v in C.build_size_matched(list(reversed(qs))).variants}
    assert a == b


def test_relation_lost_uses_every_subset_size() -> None:
    sizes = Counter()
    for i in range(300):
        q = make_query(f"q{i}", 4, 10, seed=i)
        kept = C.relation_lost_evidence(q)
        assert kept is not None
        sizes[len(kept)] += 1
    assert set(sizes) == {1, 2, 3}


def test_unanswerable_records_are_excluded_from_family_a() -> None:
    q = make_query("u", 2, 6, answerable=False)
    result = C.build_size_matched([q])
    assert [e.reason for e in result.exclusions] == [C.UNANSWERABLE]


def test_family_b_on_official_format_pairs(qa_fixtures: Path) -> None:
    loaded = load_dataset("musique", qa_fixtures)
    result = C.construct(loaded, "family-b")
    states = {(v.base_id, v.state) for v in result.variants}
    assert states == {("2hop__1_1", C.COMPLETE), ("2hop__1_1", C.RELATION_LOST),
                      ("2hop__4_4", C.COMPLETE), ("2hop__4_4", C.MISSING)}
    reasons = defaultdict(set)
    for e in result.exclusions:
        reasons[e.reason].add(e.record_id)
    assert reasons[C.KEEPS_ALL_SUPPORT] == {"2hop__2_2"}
    assert reasons[C.CONTEXT_LENGTH_DIFFERS] == {"2hop__3_3"}
    rl = next(v for v in result.variants if v.state == C.RELATION_LOST)
    assert rl.missing_count == 1 and [u.title for u in rl.units if u.is_evidence] == ["Town A"]
    # Family B's complete/unsafe memories have equal length by construction.
    lengths = Counter((v.base_id, len(v.units)) for v in result.variants)
    assert all(n == 2 for n in lengths.values())
    acc = C.accounting(loaded, result)
    assert acc["raw_records"] == acc["used_records"] + acc["excluded"] == 11


def test_families_share_the_split(qa_fixtures: Path) -> None:
    loaded = load_dataset("musique", qa_fixtures)
    split_of = {}
    for name in ("size-matched", "deletion", "family-b"):
        for v in C.construct(loaded, name).variants:
            assert split_of.setdefault(v.base_id, v.split) == v.split


def test_fixture_accounting_for_every_dataset(qa_fixtures: Path) -> None:
    expected_excluded = {"musique": 6, "hotpotqa": 2, "2wikimultihopqa": 1, "squad2": 0}
    for dataset, n in expected_excluded.items():
        loaded = load_dataset(dataset, qa_fixtures)
        result = C.construct(loaded, C.default_construction(dataset))
        acc = C.accounting(loaded, result)
        assert acc["excluded"] == n
        assert acc["raw_records"] == acc["used_records"] + acc["excluded"]


def test_variant_round_trips_through_dict() -> None:
    v = C.build_size_matched([make_query("rt", 2, 4)]).variants[0]
    assert C.Variant.from_dict(v.to_dict()) == v


def test_unknown_construction_is_rejected(qa_fixtures: Path) -> None:
    loaded = load_dataset("hotpotqa", qa_fixtures)
    with pytest.raises(ValueError, match="unknown construction"):
        C.construct(loaded, "shuffled")
    with pytest.raises(ValueError, match="family B"):
        C.construct(loaded, "family-b")


def test_real_data_construction(real_data: Path) -> None:
    """Every base question yields all three states on HotpotQA and 2Wiki, and MuSiQue
    lacks relation-lost only where the evidence titles coincide."""
    for dataset in ("hotpotqa", "2wikimultihopqa", "musique"):
        loaded = load_dataset(dataset, real_data)
        result = C.construct(loaded, "size-matched")
        counts = result.state_counts()
        assert counts[C.COMPLETE] == counts[C.MISSING]
        assert counts[C.COMPLETE] - counts[C.RELATION_LOST] == len(result.absent)
        if dataset != "musique":
            assert not result.absent
