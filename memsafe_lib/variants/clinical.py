"""Clinical memories from MIMIC-IV measurement events, with the stale state (notebook 07).

The paper does not spell out its clinical construction; this is ours. Its one design rule is
the paper's lesson taken to its strict form: **no memory may carry its label.** Every memory is
complete for one question and unsafe for two others, so a model that does not read the
question (and compare the asked measurement with the memory) sits at chance, exactly; and
every question has one complete and two unsafe variants of one size, so a model that reads only
the question sits at chance too (Proposition 1 applied to memories and to questions).

* **Units.** One measurement event rendered as text: ``Day 412: Creatinine (Blood) 1.1 mg/dL``
  (days since the patient's first event in the table, never a calendar date). A unit's source
  position is the history index of its *day*'s first event: events of one day share a position,
  since their order within a day is recording order, not time.
* **Triples.** For a patient and two days d1 < d2, the measurements whose consecutive events
  fall on d1 and d2 (so d2 holds their newest value and d1 the one before) are put in
  salted-hash order and taken three at a time, (a, b, c). The query day is the patient's next
  day with any event after d2; the history is every event on an earlier day. With ``m@d`` the
  measurement's last event on day ``d``:

  - *latest* ("what is the most recent value?", evidence ``{m@d2}``):
    ``L_a = {a@d2, b@d1}``, ``L_b = {b@d2, c@d1}``, ``L_c = {c@d2, a@d1}``. For a, ``L_a`` is
    complete, ``L_c`` stale (only the superseded value), ``L_b`` missing;
  - *change* ("how did it change between its last two measurements?", evidence
    ``{m@d1, m@d2}``): ``C_a = {a@d1, a@d2, b@d2}``, ``C_b``, ``C_c`` likewise. For a, ``C_a`` is
    complete, ``C_c`` relation-lost (only the newest value), ``C_b`` missing.

  Every memory is filled to ``memory_size`` with the same fillers: the patient's events of
  *other* measurements before the query day, in salted-hash order of the triple. A memory of a
  triple therefore differs from its siblings only in which measurement sits in which slot, and
  it is the same memory, unit for unit, for each of the three questions that read it.
* **What an earlier version leaked.** States used to differ by which slots held the asked
  measurement or a same-day stand-in of another. Fillers excluded the asked measurement, so a
  missing memory held one measurement type fewer: a question-blind logistic model on type
  counts read the state well above chance on OMR, and since "latest" questions had three states
  and "change" questions four, the question type alone read it too (a reviewer's measurements
  on that code, not rerun here). Before that, hash-ordered fillers alone let a provenance-only
  control read the state at 0.74.
* **Sampling and splits.** Patients are sampled by a salted hash (``patient_fraction``) and
  assigned to splits by the shared split function, both of their cohort key (a public hash of
  the subject id, held in memory only), so every machine selects the same patients while
  credentialed pseudonyms stay private; no patient crosses splits. Questions are capped in
  salted-hash order of their triples, stratified by split so a small cap keeps validation and
  test questions (every hash here reads the cohort key, never the pseudonym); a triple's six
  questions are kept or dropped together.

Variants carry state, evidence flags and missing count exactly like the QA variants, so every
estimator and metric runs unchanged. Ids are pseudonymous (``p012-m003-k4-change``).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memsafe_lib.data.loader import hash_rank
from memsafe_lib.data.mimic import ClinicalLoad, Event
from memsafe_lib.data.records import Exclusion, LoadSummary
from memsafe_lib.variants.construction import (
    COMPLETE,
    MISSING,
    RELATION_LOST,
    STALE,
    ConstructionResult,
    MemoryUnit,
    Variant,
    assign_split,
)

CLINICAL = "clinical"
Kind = Literal["latest", "change"]
KINDS: tuple[Kind, ...] = ("latest", "change")
TRIPLE = 3
"""Measurements per triple: each memory is complete for one and unsafe for the other two."""
FILLER_SALT = "memsafe-clinical-filler-v3"
TRIPLE_SALT = "memsafe-clinical-triple-v1"
SAMPLE_SALT = "memsafe-clinical-patient-sample-v1"
CAP_SALT = "memsafe-clinical-question-cap-v3"
TOO_FEW_FILLERS = "too few events of other measurements before the query day to fill the memory"
NO_QUERY_DAY = "no later day with an event after the anchor (its last day in the table)"
NO_TRIPLE = ("fewer than three measurements with consecutive events on the same two days (the rest of its "
             "day pair after triples were formed)")
NOT_SAMPLED = "patient not sampled (patient fraction)"
CAPPED = "question not sampled (question cap)"

STATES_OF: dict[Kind, tuple[str, str, str]] = {"latest": (COMPLETE, MISSING, STALE),
                                               "change": (COMPLETE, MISSING, RELATION_LOST)}
"""Per kind, the state of the question's own memory, of the next one's and of the previous one's
(a -> b -> c -> a): the next holds none of its events, the previous holds one."""


def _question(kind: Kind, measurement: str, day: int) -> str:
    if kind == "latest":
        return f"As of day {day}, what is the patient's most recent {measurement}?"
    return f"As of day {day}, how did the patient's {measurement} change between its last two measurements?"


def _answer(kind: Kind, older: Event, newer: Event) -> str:
    return newer.text_value if kind == "latest" else f"{older.text_value} -> {newer.text_value}"


@dataclass(frozen=True)
class _Member:
    """One measurement of a triple: its events on d1 and d2 and its question key."""

    key: str
    measurement: str
    older: Event
    newer: Event


@dataclass(frozen=True)
class _Triple:
    stable: str
    """A hash key from the cohort key (never the pseudonym): what every hash here reads."""
    patient: str
    query_day: int
    members: tuple[_Member, _Member, _Member]
    history: int
    """Events before the query day (|H|)."""


def _member_key(patient: str, index: int, k: int) -> str:
    return f"{patient}-m{index:03d}-k{k}"


def _day_pairs(history: Sequence[Event]) -> dict[tuple[int, int], list[tuple[str, Event, Event, int]]]:
    """(d1, d2) -> measurements whose consecutive event days are d1 and d2, each with its last
    event on either day and the rank k of the newer one among its days."""
    by_day: dict[str, dict[int, Event]] = defaultdict(dict)
    for e in history:
        by_day[e.measurement][e.day] = e  # history is in time order: the day's last event wins
    pairs: dict[tuple[int, int], list[tuple[str, Event, Event, int]]] = defaultdict(list)
    for measurement, days in sorted(by_day.items()):
        ordered = sorted(days)
        for k in range(1, len(ordered)):
            d1, d2 = ordered[k - 1], ordered[k]
            pairs[(d1, d2)].append((measurement, days[d1], days[d2], k))
    return pairs


def _triples(load: ClinicalLoad, patient_fraction: float, kinds: Sequence[Kind], exclusions: list[Exclusion]
             ) -> tuple[list[_Triple], dict[str, list[Event]]]:
    """Every triple of every sampled patient, the exclusions of the other (patient, measurement,
    k) questions (one per kind, with its reason), and each sampled patient's history."""
    by_patient: dict[str, list[Event]] = defaultdict(list)
    for e in load.events:
        by_patient[e.patient].append(e)
    index = {m: i for i, m in enumerate(sorted({e.measurement for e in load.events}))}
    histories: dict[str, list[Event]] = {}
    found: list[_Triple] = []

    def exclude(key: str, reason: str) -> None:
        exclusions.extend(Exclusion(load.dataset, f"{key}-{kind}", reason, "", -1, CLINICAL) for kind in kinds)

    for patient, events in sorted(by_patient.items()):
        cohort = events[0].cohort_key or patient
        if hash_rank(cohort, SAMPLE_SALT) >= patient_fraction * 2**64:
            exclusions.append(Exclusion(load.dataset, patient, NOT_SAMPLED, "", -1, CLINICAL))
            continue
        history = histories[patient] = sorted(events, key=lambda e: e.order)
        days = sorted({e.day for e in history})
        event_days = [e.day for e in history]
        for (d1, d2), members in sorted(_day_pairs(history).items()):
            nxt = bisect.bisect_right(days, d2)
            if nxt == len(days):
                for m, _, _, k in members:
                    exclude(_member_key(patient, index[m], k), NO_QUERY_DAY)
                continue
            stable = f"{cohort}-{d1}-{d2}"
            ranked = sorted(members, key=lambda x: (hash_rank(f"{stable}\x1f{x[0]}", TRIPLE_SALT), x[0]))
            usable = len(ranked) - len(ranked) % TRIPLE
            for m, _, _, k in ranked[usable:]:
                exclude(_member_key(patient, index[m], k), NO_TRIPLE)
            for t in range(0, usable, TRIPLE):
                group = tuple(_Member(_member_key(patient, index[m], k), m, older, newer)
                              for m, older, newer, k in ranked[t:t + TRIPLE])
                found.append(_Triple(f"{stable}-{t}", patient, days[nxt], group,  # type: ignore[arg-type]
                                     bisect.bisect_left(event_days, days[nxt])))
    return found, histories


def _filler_pool(t: _Triple, history: Sequence[Event]) -> list[Event]:
    """Events of the measurements the triple does not ask about, before its query day."""
    asked = {m.measurement for m in t.members}
    return [e for e in history[: t.history] if e.measurement not in asked]


def _fillers(pool: Sequence[Event], t: _Triple, count: int) -> tuple[Event, ...]:
    """The first ``count`` events of ``pool`` in salted-hash order of the triple. Hashing a
    pool costs one SHA-256 per earlier event of the patient, so it is done only for the
    triples a question cap keeps (the lab table has 19,000 triples; smoke keeps 15)."""
    return tuple(sorted(pool, key=lambda e: (hash_rank(f"{t.stable}\x1f{e.order}", FILLER_SALT), e.order))[:count])


def _split_of(t: _Triple) -> str:
    """The triple's patient's split (of the cohort key, never the pseudonym)."""
    return assign_split(t.members[0].older.cohort_key or t.patient)


def _capped(filled: Sequence[_Triple], keep: int) -> set[str]:
    """The ``keep`` triples a question cap keeps, in salted-hash order, stratified by split: each
    split first gets its share of ``keep`` (at least one triple where it has any), the rest goes
    in hash order, so a small cap still has validation and test questions."""
    ranked = sorted(filled, key=lambda t: (hash_rank(t.stable, CAP_SALT), t.stable))
    by_split: dict[str, list[str]] = defaultdict(list)
    for t in ranked:
        by_split[_split_of(t)].append(t.stable)
    kept: set[str] = set()
    for stables in by_split.values():
        kept.update(stables[: max(1, keep * len(stables) // len(ranked))])
    for t in ranked:
        if len(kept) >= keep:
            break
        kept.add(t.stable)
    return kept


def build_clinical(load: ClinicalLoad, *, memory_size: int = 8, patient_fraction: float = 1.0,
                   question_cap: int | None = None, kinds: Sequence[Kind] = KINDS) -> ConstructionResult:
    """Blind-matched clinical variants of ``load`` (see the module docstring). ``question_cap``
    counts base questions; triples are kept whole (three measurements, every kind), so the cap
    is met to within one triple."""
    slots = {"latest": 2, "change": 3}
    if memory_size < max(slots[k] for k in kinds):
        raise ValueError(f"memory_size must be at least {max(slots[k] for k in kinds)} (the slots of a memory)")
    exclusions: list[Exclusion] = []
    triples, histories = _triples(load, patient_fraction, kinds, exclusions)
    n_fillers = memory_size - min(slots[k] for k in kinds)
    filled: list[_Triple] = []
    for t in triples:
        if len(_filler_pool(t, histories[t.patient])) < n_fillers:
            for m in t.members:
                exclusions.extend(Exclusion(load.dataset, f"{m.key}-{kind}", TOO_FEW_FILLERS, "", -1, CLINICAL)
                                  for kind in kinds)
        else:
            filled.append(t)
    per_triple = TRIPLE * len(kinds)
    if question_cap is not None and len(filled) * per_triple > question_cap:
        kept = _capped(filled, max(question_cap // per_triple, 1))
        exclusions += [Exclusion(load.dataset, f"{m.key}-{kind}", CAPPED, "", -1, CLINICAL)
                       for t in filled if t.stable not in kept for m in t.members for kind in kinds]
        filled = [t for t in filled if t.stable in kept]
    variants: list[Variant] = []
    for t in filled:
        fillers = _fillers(_filler_pool(t, histories[t.patient]), t, n_fillers)
        history = histories[t.patient]
        first_of_day: dict[int, int] = {}
        for i, e in enumerate(history[: t.history]):
            first_of_day.setdefault(e.day, i)
        split = _split_of(t)
        a, b, c = t.members
        for kind in kinds:
            # each member's memory: its own evidence and the next member's newer (latest: older) event
            memories = {}
            for own, nxt in ((a, b), (b, c), (c, a)):
                slot = [own.newer, nxt.older] if kind == "latest" else [own.older, own.newer, nxt.newer]
                pad = fillers[: memory_size - len(slot)]
                memories[own.key] = tuple(sorted([*slot, *pad], key=lambda e: e.order))
            for own, nxt, prev in ((a, b, c), (b, c, a), (c, a, b)):
                base = f"{own.key}-{kind}"
                evidence = {own.newer.order} if kind == "latest" else {own.older.order, own.newer.order}
                question = _question(kind, own.measurement, t.query_day)
                for state, source in zip(STATES_OF[kind], (own, nxt, prev), strict=True):
                    units = tuple(MemoryUnit(f"{e.patient}:{e.order}", "", e.text(), e.order in evidence, i,
                                             first_of_day[e.day]) for i, e in enumerate(memories[source.key]))
                    missing = len(evidence) - sum(u.is_evidence for u in units)
                    variants.append(Variant(f"{CLINICAL}:{load.dataset}:{base}:{state}", base, load.dataset,
                                            CLINICAL, state, split, missing, question,
                                            (_answer(kind, own.older, own.newer),), units, len(evidence), t.history))
    return ConstructionResult(load.dataset, CLINICAL, variants, list(load.exclusions) + exclusions, [])


def clinical_accounting(load: ClinicalLoad | LoadSummary, result: ConstructionResult) -> dict[str, object]:
    """The clinical data table: table rows (raw = used events + excluded rows, by reason),
    then questions (excluded by reason, kept) and variants by state and split. Counts only."""
    rows = Counter(e.reason for e in result.exclusions if e.stage == "load")
    questions = Counter(e.reason for e in result.exclusions if e.stage == CLINICAL)
    kept = {v.base_id for v in result.variants}
    return {"dataset": result.dataset, "construction": result.construction, "raw_rows": load.raw_records,
            "excluded_rows": sum(rows.values()), "used_rows": load.raw_records - sum(rows.values()),
            "excluded_rows_by_reason": dict(sorted(rows.items())),
            "patients_sampled_out": questions.pop(NOT_SAMPLED, 0),
            "questions_excluded_by_reason": dict(sorted(questions.items())), "base_questions": len(kept),
            "patients": len({b.split("-")[0] for b in kept}), "variants": len(result.variants),
            "variants_by_state": dict(sorted(Counter(v.state for v in result.variants).items())),
            "base_questions_by_split": dict(sorted(Counter(v.split for v in result.variants
                                                           if v.state == COMPLETE).items()))}
