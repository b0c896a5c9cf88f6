"""From base queries to memory variants: the leaky deletion construction, the paper's
size-matched construction (family A), our blind-matched construction (no memory carries its
label: :func:`build_blind_matched`), MuSiQue-Full's native pairs (family B) and the
single-paragraph SQuAD 2.0 setting.

Every choice that looks random (split, which distractors, which evidence titles
survive in relation-lost) is a salted SHA-256 of the base question id, so the same
data always gives the same variants without stored randomness, and every family
shares one split function.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from itertools import zip_longest
from typing import Any

from memsafe_lib.data.loader import hash_rank
from memsafe_lib.data.records import BaseQuery, Exclusion, LoadResult, LoadSummary, Unit
from memsafe_lib.variants.topics import topic_triples

COMPLETE, MISSING, RELATION_LOST, STALE = "complete", "missing", "relation_lost", "stale"
STATES: tuple[str, ...] = (COMPLETE, MISSING, RELATION_LOST)
"""QA integrity states; ``stale`` occurs only in the clinical data."""
ALL_STATES: tuple[str, ...] = (*STATES, STALE)
"""Every integrity state, in the order tables and state heads list them."""


def states_of(variants: Iterable[Variant]) -> tuple[str, ...]:
    """The state set a model of these variants predicts: the QA three, plus ``stale`` where a
    variant has it (the clinical data)."""
    return ALL_STATES if any(v.state == STALE for v in variants) else STATES


def present_states(states: Iterable[str]) -> list[str]:
    """The states that occur, in :data:`ALL_STATES` order (the labels of a macro F1)."""
    seen = set(states)
    return [s for s in ALL_STATES if s in seen]

CONSTRUCTIONS: tuple[str, ...] = ("size-matched", "deletion", "blind-matched", "family-b", "native")

SPLIT_SALT = "memsafe-split-v1"
SPLIT_RATIOS: tuple[float, float, float] = (0.8, 0.1, 0.1)
"""train / validation / test fractions of base questions (the paper does not state its ratios)."""
SPLITS: tuple[str, ...] = ("train", "validation", "test")

DISTRACTOR_SALT = "memsafe-distractor-order-v1"
FOLD_SALT = "memsafe-train-fold-v1"
"""Two hash folds of the training questions (Stage A fine-tuning, LexSet cross-fitting)."""
RELATION_SALT = "memsafe-relation-lost-v1"
TRIPLE_SALT = "memsafe-blind-triple-v1"
BLIND_HARD = "blind-hard"
"""Order in which blind-matched triples are formed, and each memory's unit order."""

# Exclusion reasons (fixed strings so the ledger groups them).
UNANSWERABLE = "unanswerable source record (reserved for family B)"
TOO_FEW_DISTRACTORS = "too few distractors (|D| < |S|)"
NO_DISTRACTORS = "no distractors (the missing memory would be empty)"
RELATION_LOST_IMPOSSIBLE = "relation-lost impossible: every evidence unit has the same title"
NO_TWIN_ANSWERABLE = "unanswerable record without an answerable twin"
NO_TWIN_UNANSWERABLE = "answerable record without an unanswerable twin"
CONTEXT_LENGTH_DIFFERS = "answerable and unanswerable contexts differ in length"
KEEPS_ALL_SUPPORT = "unanswerable context keeps every supporting paragraph"
NOT_FAMILY_A = "dataset has no family-A construction (single-paragraph contexts)"
NO_RELATION_LOST = "no relation-lost state (every evidence unit has the same title): blind matching needs all three"
SHORT_FILL = ("blind-matched triple without enough distinct distractors to give its three memories one size "
              "(the triple's questions are excluded together)")
NO_TRIPLE = "no blind-matched triple: fewer than two other questions of its split with evidence disjoint from its own"
NO_CLOSE_TRIPLE = ("no blind-hard triple: no two free questions of its split, among its closest, with evidence "
                   "disjoint from its own and each other's and close enough to its topic")


def assign_split(base_id: str, ratios: Sequence[float] = SPLIT_RATIOS, salt: str = SPLIT_SALT) -> str:
    """Split of a base question: a salted hash of its id, shared by every family."""
    u = hash_rank(base_id, salt) / 2**64
    cumulative = 0.0
    for name, ratio in zip(SPLITS, ratios, strict=True):
        cumulative += ratio
        if u < cumulative:
            return name
    return SPLITS[-1]


def split_of(q: BaseQuery) -> str:
    """A question's split: the one its records file gives (``meta["split"]``), else
    :func:`assign_split` of its id."""
    return str(q.meta.get("split") or assign_split(q.id))


def train_fold(base_id: str) -> int:
    """Fold 0 or 1 of a training question; encoders and cross-fitted models use the same folds."""
    return hash_rank(base_id, FOLD_SALT) % 2


@dataclass(frozen=True)
class MemoryUnit:
    unit_id: str
    title: str
    text: str
    is_evidence: bool
    position: int
    """Index in the constructed memory."""
    source_position: int
    """Index in the original context."""


@dataclass(frozen=True)
class Variant:
    """One constructed memory with its integrity label."""

    variant_id: str
    base_id: str
    dataset: str
    construction: str
    state: str
    split: str
    missing_count: int
    """g = |E(q) \\ M|, the number of required evidence units absent from the memory."""
    question: str
    answers: tuple[str, ...]
    units: tuple[MemoryUnit, ...]
    n_evidence: int
    """|S|, the number of evidence units of the base query."""
    source_units: int
    """Number of units in the original context (|H| in the compression ratio |M|/|H|)."""

    @property
    def unsafe(self) -> bool:
        return self.state != COMPLETE

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row["answers"] = list(self.answers)
        return row

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Variant:
        units = tuple(MemoryUnit(**u) for u in row["units"])
        return cls(**{**row, "answers": tuple(row["answers"]), "units": units})


@dataclass
class ConstructionResult:
    dataset: str
    construction: str
    variants: list[Variant]
    exclusions: list[Exclusion]
    """Base records not used by this construction (beyond the loader's exclusions)."""
    absent: list[Exclusion] = field(default_factory=list)
    """Used base queries that lack one state (e.g. relation-lost), with the reason."""
    base_construction: str = ""
    """The construction this was derived from (silver targets, a training subset); "" = itself."""
    silver: bool = False
    """Training units carry silver evidence targets (:func:`~memsafe_lib.variants.supervision.with_silver_training`)."""
    training_fraction: float = 1.0
    """The hash subset of training questions kept (:func:`~memsafe_lib.variants.supervision.training_subset`)."""

    @property
    def source_construction(self) -> str:
        """The construction to build for another dataset that this result's Stage A pools with."""
        return self.base_construction or self.construction

    def state_counts(self) -> Counter[str]:
        return Counter(v.state for v in self.variants)


def _memory(units: Iterable[Unit]) -> tuple[MemoryUnit, ...]:
    """Order kept units as they appear in the source context and number them."""
    ordered = sorted(units, key=lambda u: u.source_position)
    return tuple(
        MemoryUnit(u.unit_id, u.title, u.text, u.is_evidence, i, u.source_position) for i, u in enumerate(ordered)
    )


def _variant(q: BaseQuery, construction: str, state: str, units: Iterable[Unit], n_evidence: int) -> Variant:
    memory = _memory(units)
    kept = sum(u.is_evidence for u in memory)
    return Variant(
        variant_id=f"{construction}:{q.dataset}:{q.id}:{state}",
        base_id=q.id,
        dataset=q.dataset,
        construction=construction,
        state=state,
        split=split_of(q),
        missing_count=n_evidence - kept,
        question=q.question,
        answers=q.answers,
        units=memory,
        n_evidence=n_evidence,
        source_units=len(q.units),
    )


def distractor_order(q: BaseQuery) -> list[Unit]:
    """Distractors in the fixed salted-hash order in which size matching adds them."""
    return sorted(q.distractors, key=lambda u: (hash_rank(f"{q.id}\x1f{u.unit_id}", DISTRACTOR_SALT), u.unit_id))


def relation_lost_evidence(q: BaseQuery) -> list[Unit] | None:
    """Evidence kept by the relation-lost state: a hash-chosen proper non-empty subset of
    the evidence *titles* (all units of a kept title stay). ``None`` when fewer than two
    distinct titles make such a subset impossible.

    The titles are put in salted-hash order and the first ``m`` are kept, with
    ``m = 1 + hash mod (T - 1)`` for ``T`` distinct titles, so every size from 1 to T-1 occurs.
    """
    titles = list(dict.fromkeys(u.title for u in q.evidence))
    if len(titles) < 2:
        return None
    ordered = sorted(titles, key=lambda t: (hash_rank(f"{q.id}\x1f{t}", RELATION_SALT), t))
    m = 1 + hash_rank(q.id, RELATION_SALT + "/m") % (len(titles) - 1)
    keep = set(ordered[:m])
    return [u for u in q.evidence if u.title in keep]


def _exclude(q: BaseQuery, reason: str, construction: str, detail: str = "") -> Exclusion:
    return Exclusion(q.dataset, q.id, reason, q.provenance.file, q.provenance.record_index, construction, detail)


def _family_a_states(q: BaseQuery) -> list[tuple[str, list[Unit]]]:
    """The evidence each state keeps: complete = S, missing = none, relation-lost = a subset."""
    states: list[tuple[str, list[Unit]]] = [(COMPLETE, list(q.evidence)), (MISSING, [])]
    subset = relation_lost_evidence(q)
    if subset is not None:
        states.append((RELATION_LOST, subset))
    return states


def build_size_matched(queries: Iterable[BaseQuery]) -> ConstructionResult:
    """Family A: every state has exactly |D| units; a state keeping k evidence units adds
    the first |D| - k distractors in salted-hash order."""
    return _build_family_a(queries, "size-matched")


def build_deletion(queries: Iterable[BaseQuery]) -> ConstructionResult:
    """The leaky construction: complete = S ∪ D, missing = D, relation-lost = D ∪ subset(S)."""
    return _build_family_a(queries, "deletion")


def _build_family_a(queries: Iterable[BaseQuery], construction: str) -> ConstructionResult:
    queries = list(queries)
    dataset = queries[0].dataset if queries else ""
    variants: list[Variant] = []
    exclusions: list[Exclusion] = []
    absent: list[Exclusion] = []
    for q in queries:
        if not q.answerable:
            exclusions.append(_exclude(q, UNANSWERABLE, construction))
            continue
        n_s, n_d = len(q.evidence), len(q.distractors)
        if construction == "size-matched" and n_d < n_s:
            exclusions.append(_exclude(q, TOO_FEW_DISTRACTORS, construction, f"|D|={n_d}, |S|={n_s}"))
            continue
        if construction == "deletion" and n_d == 0:
            exclusions.append(_exclude(q, NO_DISTRACTORS, construction, f"|S|={n_s}"))
            continue
        states = _family_a_states(q)
        if len(states) < 3:
            titles = sorted({u.title for u in q.evidence})
            absent.append(_exclude(q, RELATION_LOST_IMPOSSIBLE, construction, f"titles={titles}"))
        order = distractor_order(q)
        for state, kept in states:
            distractors = order[: n_d - len(kept)] if construction == "size-matched" else order
            variants.append(_variant(q, construction, state, [*kept, *distractors], n_s))
    return ConstructionResult(dataset, construction, variants, exclusions, absent)


def build_family_b(queries: Iterable[BaseQuery]) -> ConstructionResult:
    """Family B: MuSiQue-Full answerable/unanswerable twins sharing an id.

    The answerable context is the complete memory; the unanswerable context, which drops
    the paragraph of one reasoning step, is missing (no supporting paragraph left) or
    relation-lost (some left). A unit counts as evidence when its title and text match a
    supporting paragraph of the answerable twin. Pairs are excluded when the contexts
    differ in length or when the unanswerable context keeps every supporting paragraph.
    """
    queries = list(queries)
    dataset = queries[0].dataset if queries else ""
    by_id: dict[str, dict[bool, BaseQuery]] = {}
    for q in queries:
        by_id.setdefault(q.id, {})[q.answerable] = q
    variants: list[Variant] = []
    exclusions: list[Exclusion] = []
    for twins in by_id.values():
        answerable, unanswerable = twins.get(True), twins.get(False)
        if answerable is None or unanswerable is None:
            lone = answerable or unanswerable
            assert lone is not None
            exclusions.append(_exclude(lone, NO_TWIN_UNANSWERABLE if answerable else NO_TWIN_ANSWERABLE, "family-b"))
            continue
        if len(answerable.units) != len(unanswerable.units):
            detail = f"{len(answerable.units)} vs {len(unanswerable.units)} paragraphs"
            for q in (answerable, unanswerable):
                exclusions.append(_exclude(q, CONTEXT_LENGTH_DIFFERS, "family-b", detail))
            continue
        support = {(u.title, u.text) for u in answerable.evidence}
        units = [
            Unit(u.unit_id, u.title, u.text, (u.title, u.text) in support, u.source_position)
            for u in unanswerable.units
        ]
        kept = {(u.title, u.text) for u in units if u.is_evidence}
        if kept == support:
            for q in (answerable, unanswerable):
                exclusions.append(_exclude(q, KEEPS_ALL_SUPPORT, "family-b"))
            continue
        n_s = len(answerable.evidence)
        variants.append(_variant(answerable, "family-b", COMPLETE, answerable.units, n_s))
        state = RELATION_LOST if kept else MISSING
        variants.append(_variant(unanswerable, "family-b", state, units, n_s))
    return ConstructionResult(dataset, "family-b", variants, exclusions)


def build_native(queries: Iterable[BaseQuery]) -> ConstructionResult:
    """SQuAD 2.0 as released: one memory (the question's paragraph) per question;
    answerable = complete, unanswerable = missing (g = 1: the answer-bearing passage)."""
    queries = list(queries)
    dataset = queries[0].dataset if queries else ""
    variants = []
    for q in queries:
        state = COMPLETE if q.answerable else MISSING
        v = _variant(q, "native", state, q.units, 1)
        variants.append(replace(v, missing_count=0 if q.answerable else 1))
    return ConstructionResult(dataset, "native", variants, [])


def _key(u: Unit) -> tuple[str, str]:
    """A paragraph's identity across questions (MuSiQue repeats paragraphs under new unit ids)."""
    return (u.title, u.text)


def disjoint_evidence(a: BaseQuery, b: BaseQuery, c: BaseQuery) -> bool:
    """Whether the three questions' evidence is pairwise disjoint (by paragraph identity)."""
    keys = [{_key(u) for u in q.evidence} for q in (a, b, c)]
    return not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])


def _triples(queries: Sequence[BaseQuery]) -> tuple[list[tuple[BaseQuery, ...]], list[BaseQuery]]:
    """Greedy triples in salted-hash order: each question takes the first two later ones whose
    evidence is disjoint from its own and each other's, preferring questions of its own
    size-matched memory size |D| (so memories keep that size wherever the data allow)."""
    pool = sorted(queries, key=lambda q: (hash_rank(q.id, TRIPLE_SALT), q.id))
    triples, left = [], []
    while pool:
        a = pool.pop(0)
        ranked = sorted(range(len(pool)), key=lambda i: (len(pool[i].distractors) != len(a.distractors), i))
        found = next(((i, j) for x, i in enumerate(ranked) for j in ranked[x + 1:]
                      if disjoint_evidence(a, pool[i], pool[j])), None)
        if found is None:
            left.append(a)
            continue
        b, c = pool[found[0]], pool[found[1]]
        for i in sorted(found, reverse=True):
            del pool[i]
        triples.append((a, b, c))
    return triples, left


def _shared_memory(owner: BaseQuery, partial: list[Unit], fill: Sequence[Unit], size: int, tag: str
                   ) -> tuple[Unit, ...]:
    """Owner's evidence, the next question's relation-lost subset and the first fill units up to
    ``size``, in a salted-hash order of the triple (source contexts differ, so no source order)."""
    units = [*owner.evidence, *partial]
    units += list(fill[: size - len(units)])
    ordered = sorted(units, key=lambda u: (hash_rank(f"{tag}\x1f{u.unit_id}", TRIPLE_SALT), u.unit_id))
    return tuple(Unit(u.unit_id, u.title, u.text, False, i) for i, u in enumerate(ordered))


def _as_variant(q: BaseQuery, state: str, memory: tuple[Unit, ...], construction: str = "blind-matched") -> Variant:
    """``memory`` read for question ``q``: its evidence flags and missing count are q's."""
    evidence = {_key(u) for u in q.evidence}
    units = tuple(MemoryUnit(u.unit_id, u.title, u.text, _key(u) in evidence, u.source_position, u.source_position)
                  for u in memory)
    return Variant(f"{construction}:{q.dataset}:{q.id}:{state}", q.id, q.dataset, construction, state,
                   split_of(q), len(q.evidence) - sum(u.is_evidence for u in units), q.question, q.answers,
                   units, len(q.evidence), len(units))


def build_blind_matched(queries: Iterable[BaseQuery]) -> ConstructionResult:
    """Blind matching: no memory carries its label, so a model that never reads the question
    cannot beat chance.

    Questions of one split with pairwise disjoint evidence form triples (a, b, c), preferring
    questions of the same size-matched memory size |D|. Three memories of one size n are built,

    * X_a = S_a ∪ RL(S_b) ∪ fill,  X_b = S_b ∪ RL(S_c) ∪ fill,  X_c = S_c ∪ RL(S_a) ∪ fill,

    where RL is the size-matched relation-lost subset, n is the largest |D| of the three unless a
    question's evidence and the next one's subset need more (2WikiMultiHopQA's four-paragraph
    questions, |D| = 6, with a three-paragraph subset: n = 7), and the fill is the three questions'
    distractors interleaved (a, b, c, a, ...; each in its size-matched hash order, no evidence
    of the triple) so every memory holds about as many distractors of each question. Each
    question reads all three: its own memory is complete, the one holding its partial evidence is
    relation-lost, the third is missing. Every memory is therefore complete for one question
    and unsafe for two, and every question has one complete and two unsafe variants of one size:
    any score that depends only on the memory (question-blind) or only on the question has unsafe
    AUROC exactly 1/2 on any split (Proposition 1 applied to memories and to questions), and
    memory size, |M|/|H| and positions are constant within a base query. Provenance is not
    kept: units come from three contexts, so each unit's position is its place in the memory.
    """
    return _build_triples(queries, "blind-matched", _triples, NO_TRIPLE)


TripleForm = Callable[[Sequence[BaseQuery]], tuple[list[tuple[BaseQuery, ...]], list[BaseQuery]]]


def _build_triples(queries: Iterable[BaseQuery], construction: str, form: TripleForm, no_triple: str
                   ) -> ConstructionResult:
    """The triple design shared by blind-matched and blind-hard; ``form`` groups one split's
    questions into triples (and the ones it leaves out, excluded for ``no_triple``)."""
    queries = list(queries)
    dataset = queries[0].dataset if queries else ""
    exclusions: list[Exclusion] = []
    strata: dict[str, list[BaseQuery]] = defaultdict(list)
    kept: dict[str, list[Unit]] = {}
    for q in queries:
        if not q.answerable:
            exclusions.append(_exclude(q, UNANSWERABLE, construction))
        elif len(q.distractors) < len(q.evidence):
            exclusions.append(_exclude(q, TOO_FEW_DISTRACTORS, construction,
                                       f"|D|={len(q.distractors)}, |S|={len(q.evidence)}"))
        elif (subset := relation_lost_evidence(q)) is None:
            exclusions.append(_exclude(q, NO_RELATION_LOST, construction))
        else:
            kept[q.id] = subset
            strata[split_of(q)].append(q)
    variants: list[Variant] = []
    for split, members in sorted(strata.items()):
        triples, left = form(members)
        exclusions += [_exclude(q, no_triple, construction, f"split {split}") for q in left]
        for a, b, c in triples:
            needs = [len(x.evidence) + len(kept[y.id]) for x, y in ((a, b), (b, c), (c, a))]
            evidence = {_key(u) for q in (a, b, c) for u in q.evidence}
            seen: set[tuple[str, str]] = set()
            fill = []
            for u in (u for group in zip_longest(*(distractor_order(q) for q in (a, b, c))) for u in group if u):
                if _key(u) not in evidence and _key(u) not in seen:
                    seen.add(_key(u))
                    fill.append(u)
            # One size for all three memories: the largest |D| or need, unless the pooled fill is too
            # short to bring the smallest need up to it (distractors shared or equal to the triple's
            # evidence); then the largest size the fill allows, if it still holds every need.
            size = min(max(*(len(q.distractors) for q in (a, b, c)), *needs), min(needs) + len(fill))
            if size < max(needs):
                exclusions += [_exclude(q, SHORT_FILL, construction, f"split {split}, needs {needs}, "
                                        f"{len(fill)} distinct distractors") for q in (a, b, c)]
                continue
            tag = f"{a.id}\x1f{b.id}\x1f{c.id}"
            memory = {q.id: _shared_memory(q, kept[nxt.id], fill, size, tag) for q, nxt in ((a, b), (b, c), (c, a))}
            for q, nxt, prev in ((a, b, c), (b, c, a), (c, a, b)):
                variants += [_as_variant(q, COMPLETE, memory[q.id], construction),
                             _as_variant(q, MISSING, memory[nxt.id], construction),
                             _as_variant(q, RELATION_LOST, memory[prev.id], construction)]
    return ConstructionResult(dataset, construction, variants, exclusions)


def build_blind_hard(queries: Iterable[BaseQuery], min_closeness: float = 0.0) -> ConstructionResult:
    """Blind-hard: blind matching (:func:`build_blind_matched`: no memory or question carries its
    label) with each triple formed from questions whose evidence is disjoint but whose topics are
    close (:func:`memsafe_lib.variants.topics.topic_triples`), so that the units replacing a
    question's evidence sit as near its topic as the data allow, not on unrelated topics a model
    reading the question shallowly would notice. ``min_closeness``: the smallest triple closeness
    kept (questions without such a triple are excluded); the frontier of questions kept against
    the topic gap is ``bench/blind_hard.py``'s."""
    def form(members: Sequence[BaseQuery]) -> tuple[list[tuple[BaseQuery, ...]], list[BaseQuery]]:
        triples, left, _ = topic_triples(members, disjoint_evidence, TRIPLE_SALT, min_closeness)
        return triples, left

    return _build_triples(queries, BLIND_HARD, form, NO_CLOSE_TRIPLE)


def memory_key(v: Variant) -> str:
    """Everything a question-blind model can read of a memory: its units' titles and texts in
    order, their source positions and the history's size (never the question, ids or labels)."""
    units = "\x1e".join(f"{u.title}\x1f{u.text}\x1f{u.source_position}" for u in v.units)
    return f"{v.source_units}\x1d{units}"


def memory_multiplicities(variants: Iterable[Variant]) -> tuple[list[str], list[int], list[int]]:
    """Per distinct memory (:func:`memory_key`): (keys, number of unsafe variants, number of
    complete variants). The groups for which Proposition 1 bounds every question-blind score,
    as :func:`multiplicities` gives them for size-only scores."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for v in variants:
        counts[memory_key(v)][0 if v.unsafe else 1] += 1
    keys = sorted(counts)
    return keys, [counts[k][0] for k in keys], [counts[k][1] for k in keys]


BUILDERS = {
    "size-matched": build_size_matched,
    "deletion": build_deletion,
    "blind-matched": build_blind_matched,
    BLIND_HARD: build_blind_hard,
    "family-b": build_family_b,
    "native": build_native,
}


def construct(loaded: LoadResult, construction: str) -> ConstructionResult:
    """Build ``construction`` from a loaded dataset; the loader's exclusions are carried along."""
    if construction not in BUILDERS:
        raise ValueError(f"unknown construction {construction!r}; choose one of {list(BUILDERS)}")
    if construction == "native" and loaded.dataset != "squad2":
        raise ValueError("the native construction is defined for squad2 only")
    if construction == "family-b" and loaded.dataset != "musique":
        raise ValueError("family B is defined for MuSiQue-Full only")
    if loaded.dataset == "squad2" and construction != "native":
        result = ConstructionResult(
            "squad2", construction, [], [_exclude(q, NOT_FAMILY_A, construction) for q in loaded.queries]
        )
    else:
        result = BUILDERS[construction](loaded.queries)
    result.dataset = loaded.dataset
    result.exclusions = list(loaded.exclusions) + result.exclusions
    return result


def accounting(loaded: LoadResult | LoadSummary, result: ConstructionResult) -> dict[str, Any]:
    """Raw = used + excluded, with exclusions by reason (the data table's columns)."""
    # Counts are of raw records, not ids: MuSiQue-Full twins are two records.
    excluded = Counter(e.reason for e in result.exclusions)
    n_excluded = sum(excluded.values())
    used = loaded.raw_records - n_excluded
    return {
        "dataset": loaded.dataset,
        "construction": result.construction,
        "raw_records": loaded.raw_records,
        "used_records": used,
        "base_questions": len({v.base_id for v in result.variants}),
        "excluded": n_excluded,
        "excluded_by_reason": dict(sorted(excluded.items())),
        "variants": len(result.variants),
        "variants_by_state": {s: result.state_counts().get(s, 0) for s in STATES},
        "variants_by_split": dict(Counter(v.split for v in result.variants)),
        "absent_states": dict(Counter(e.reason for e in result.absent)),
    }


def default_construction(dataset: str) -> str:
    """SQuAD 2.0 is used as released; every other QA dataset is size-matched (the paper's)."""
    return "native" if dataset == "squad2" else "size-matched"


def by_split(variants: Iterable[Variant]) -> dict[str, list[Variant]]:
    """Variants grouped by their split, in input order."""
    out: dict[str, list[Variant]] = defaultdict(list)
    for v in variants:
        out[v.split].append(v)
    return dict(out)


def multiplicities(variants: Iterable[Variant]) -> tuple[list[str], list[int], list[int]]:
    """Per base query: (ids, number of unsafe variants, number of complete variants)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for v in variants:
        counts[v.base_id][0 if v.unsafe else 1] += 1
    ids = sorted(counts)
    return ids, [counts[i][0] for i in ids], [counts[i][1] for i in ids]
