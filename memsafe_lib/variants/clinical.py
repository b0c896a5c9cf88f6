"""Clinical memories from MIMIC-IV measurement events, with the stale state (notebook 07).

The paper does not spell out its clinical construction; this is ours. Its one design rule is
the paper's own lesson: **no state may be readable from the memory's surface.** Every state of
a question holds units on the same days, at the same positions, of near-equal text length, so
a model that does not read *which measurement* a unit is and compare it with the question sits
at chance (size, length, position and recency controls: notebook 07's control table).

* **Units.** One measurement event rendered as text: ``Day 412: Creatinine (Blood) 1.1 mg/dL``
  (days since the patient's first event in the table, never a calendar date). A unit's source
  position is the history index of its *day*'s first event: events of one day share a position,
  since their order within a day is recording order, not time.
* **Questions.** For a patient, a measurement ``m`` and its k-th event ``e_k`` (k >= 2), asked
  "as of" a query day: the patient's next day with any event after ``e_k``'s day, no later than
  ``m``'s next event, so ``e_k`` is the latest value of ``m`` before the query day. The history
  is every event on an earlier day than the query. Two kinds share each (patient, m, k):

  - *latest*: "what is the most recent value?"; evidence ``{e_k}`` (g = 1);
  - *change*: "how did it change between its last two measurements?"; evidence
    ``{e_{k-1}, e_k}`` (g = 2).
* **Slots and stand-ins.** A memory has three *slots*, on the days of ``e_{k-2}``, ``e_{k-1}``
  and ``e_k``, plus ``memory_size - 3`` fillers (the patient's events of other measurements
  before the query day, in salted-hash order). Each slot holds either its event of ``m`` or a
  *stand-in*: an event of another measurement recorded the same day whose text is at most
  :data:`MAX_LENGTH_GAP` characters longer or shorter (the closest, ties in salted-hash order;
  a question without one is excluded). States differ only in which slots hold ``m``:

  ======================  =========  =========  =====
  state                   e_{k-2}    e_{k-1}    e_k
  ======================  =========  =========  =====
  latest: complete        stand-in   stand-in   e_k
  latest: stale           stand-in   e_{k-1}    stand-in
  change: complete        stand-in   e_{k-1}    e_k
  change: relation-lost   stand-in   stand-in   e_k
  change: stale           e_{k-2}    e_{k-1}    stand-in
  missing (both kinds)    stand-in   stand-in   stand-in
  ======================  =========  =========  =====

  So every state has the same size, the same unit days, the same unit positions in memory and
  in the history, and text lengths within a few characters of each other. An earlier version
  filled memories with hash-ordered fillers only: a complete memory then always held the
  history's newest event, and a provenance-only control read the state at 0.74 test AUROC.
* **Sampling and splits.** Patients are sampled by a salted hash (``patient_fraction``) and
  assigned to splits by the shared split function, both of their cohort key (a public hash of
  the subject id, held in memory only), so every machine selects the same patients while
  credentialed pseudonyms stay private; no patient crosses splits. Questions are capped in
  salted-hash order of their (patient, m, k) group (every hash here reads the cohort key,
  never the pseudonym), so both kinds of a group are kept or dropped together and every group
  contributes the same states (Proposition 1's condition for surface controls at one half).

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
SLOTS = 3
"""Slots on the days of e_{k-2}, e_{k-1} and e_k."""
FILLER_SALT = "memsafe-clinical-filler-v2"
STAND_IN_SALT = "memsafe-clinical-stand-in-v1"
SAMPLE_SALT = "memsafe-clinical-patient-sample-v1"
CAP_SALT = "memsafe-clinical-question-cap-v2"
TOO_FEW_FILLERS = "too few events of other measurements before the query day to fill the memory"
NO_QUERY_DAY = "no later day with an event after the anchor (its last day in the table)"
NO_STAND_IN = ("no event of another measurement on an evidence event's day, of near-equal text length, to stand "
               "in for it")
MAX_LENGTH_GAP = 4
"""Characters a stand-in's text may differ from its anchor's. Without a limit, OMR stand-ins
were shorter than the asked measurement often enough (blood pressure, the most asked, has the
longest text) that total text length read the state at 0.547 AUROC over all variants; at 4
characters it sits at chance (notebook 07's control table)."""
NO_RELATION_LOST = "a single-event question has no relation-lost state"
NOT_SAMPLED = "patient not sampled (patient fraction)"
CAPPED = "question not sampled (question cap)"

SLOT_STATES: dict[Kind, tuple[tuple[str, tuple[bool, bool, bool]], ...]] = {
    "latest": ((COMPLETE, (False, False, True)), (MISSING, (False, False, False)), (STALE, (False, True, False))),
    "change": ((COMPLETE, (False, True, True)), (MISSING, (False, False, False)),
               (STALE, (True, True, False)), (RELATION_LOST, (False, False, True))),
}
"""Per kind, each state and which slots (e_{k-2}, e_{k-1}, e_k) hold the asked measurement."""


def _question(kind: Kind, measurement: str, day: int) -> str:
    if kind == "latest":
        return f"As of day {day}, what is the patient's most recent {measurement}?"
    return f"As of day {day}, how did the patient's {measurement} change between its last two measurements?"


def _answer(kind: Kind, events: Sequence[Event]) -> str:
    return events[-1].text_value if kind == "latest" else f"{events[-2].text_value} -> {events[-1].text_value}"


@dataclass(frozen=True)
class _Candidate:
    """A (patient, measurement, k) that passed every check; fillers are drawn only for the
    groups a question cap keeps (drawing them is most of the cost on laboratory events)."""

    key: str
    stable: str
    """The key with the cohort key for the pseudonym: what every hash here reads."""
    patient: str
    measurement: str
    query_day: int
    anchors: tuple[Event, Event, Event]
    stand_ins: tuple[Event, ...]
    history: int


@dataclass(frozen=True)
class _Group:
    """A kept candidate with what every state and both kinds share besides its slots: the
    fillers, and each day's source position."""

    c: _Candidate
    fillers: tuple[Event, ...]
    day_position: dict[int, int]
    """Day -> history index of the day's first event (every unit's source position)."""


def _stand_ins(group: str, anchors: Sequence[Event], same_day: dict[int, list[Event]], max_gap: int
               ) -> tuple[Event, ...] | None:
    """Per anchor, an event of another measurement on its day whose text is at most ``max_gap``
    characters longer or shorter, the closest in length (then salted-hash order), each used
    once; None when a day has no such event."""
    used: set[int] = set()
    chosen: list[Event] = []
    for a in anchors:
        size = len(a.text())
        pool = [e for e in same_day[a.day] if e.measurement != a.measurement and e.order not in used
                and abs(len(e.text()) - size) <= max_gap]
        if not pool:
            return None
        best = min(pool, key=lambda e: (abs(len(e.text()) - size), hash_rank(f"{group}\x1f{e.order}", STAND_IN_SALT),
                                        e.order))
        used.add(best.order)
        chosen.append(best)
    return tuple(chosen)


def _memory(g: _Group, holds: tuple[bool, bool, bool], evidence: set[int]) -> tuple[MemoryUnit, ...]:
    """The slots (anchor or stand-in) and fillers, ordered by day; within a day a slot sorts by
    its anchor's rank whichever event fills it, so memory positions never depend on the state."""
    slots = [(a if keep else s, a.order) for a, s, keep in zip(g.c.anchors, g.c.stand_ins, holds, strict=True)]
    items = sorted([*slots, *((f, f.order) for f in g.fillers)], key=lambda x: (x[0].day, x[1]))
    return tuple(MemoryUnit(f"{e.patient}:{e.order}", "", e.text(), e.order in evidence, i, g.day_position[e.day])
                 for i, (e, _) in enumerate(items))


def _candidates(load: ClinicalLoad, memory_size: int, patient_fraction: float, max_gap: int,
                kinds: Sequence[Kind], exclusions: list[Exclusion]
                ) -> tuple[list[_Candidate], dict[str, list[Event]]]:
    """Every usable (patient, measurement, k) group, the exclusions of the others (one per base
    question, with its reason), and each sampled patient's history in time order."""
    by_patient: dict[str, list[Event]] = defaultdict(list)
    for e in load.events:
        by_patient[e.patient].append(e)
    measurements = {m: i for i, m in enumerate(sorted({e.measurement for e in load.events}))}
    histories: dict[str, list[Event]] = {}
    found: list[_Candidate] = []
    for patient, events in sorted(by_patient.items()):
        if hash_rank(events[0].cohort_key or patient, SAMPLE_SALT) >= patient_fraction * 2**64:
            exclusions.append(Exclusion(load.dataset, patient, NOT_SAMPLED, "", -1, CLINICAL))
            continue
        history = histories[patient] = sorted(events, key=lambda e: e.order)
        days = sorted({e.day for e in history})
        event_days = [e.day for e in history]
        same_day: dict[int, list[Event]] = defaultdict(list)
        series: dict[str, list[Event]] = defaultdict(list)
        for e in history:
            same_day[e.day].append(e)
            series[e.measurement].append(e)
        for measurement, seq in sorted(series.items()):
            seq_days = [e.day for e in seq]
            for k in range(2, len(seq)):
                key = f"{patient}-m{measurements[measurement]:03d}-k{k}"
                stable = f"{seq[0].cohort_key or patient}-m{measurements[measurement]:03d}-k{k}"

                def exclude(reason: str, detail: str = "", key: str = key) -> None:
                    exclusions.extend(Exclusion(load.dataset, f"{key}-{kind}", reason, "", -1, CLINICAL, detail)
                                      for kind in kinds)

                nxt = bisect.bisect_right(days, seq[k].day)
                if nxt == len(days) or (k + 1 < len(seq) and days[nxt] > seq[k + 1].day):
                    exclude(NO_QUERY_DAY)
                    continue
                query_day = days[nxt]
                anchors = (seq[k - 2], seq[k - 1], seq[k])
                stand_ins = _stand_ins(stable, anchors, same_day, max_gap)
                if stand_ins is None:
                    exclude(NO_STAND_IN)
                    continue
                before = bisect.bisect_left(event_days, query_day)
                others = before - bisect.bisect_left(seq_days, query_day) - SLOTS
                if others < memory_size - SLOTS:
                    exclude(TOO_FEW_FILLERS, f"{others} < {memory_size - SLOTS}")
                    continue
                found.append(_Candidate(key, stable, patient, measurement, query_day, anchors, stand_ins, before))
    return found, histories


def _group(c: _Candidate, history: Sequence[Event], memory_size: int) -> _Group:
    """A kept candidate with its fillers: the other measurements' events before the query day,
    stand-ins excluded, in salted-hash order of the group."""
    taken = {e.order for e in c.stand_ins}
    pool = [e for e in history[: c.history] if e.measurement != c.measurement and e.order not in taken]
    fillers = sorted(pool, key=lambda e: (hash_rank(f"{c.stable}\x1f{e.order}", FILLER_SALT), e.order))
    first_of_day: dict[int, int] = {}
    for i, e in enumerate(history[: c.history]):
        first_of_day.setdefault(e.day, i)
    return _Group(c, tuple(fillers[: memory_size - SLOTS]), first_of_day)


def build_clinical(load: ClinicalLoad, *, memory_size: int = 8, patient_fraction: float = 1.0,
                   question_cap: int | None = None, kinds: Sequence[Kind] = KINDS,
                   max_length_gap: int = MAX_LENGTH_GAP) -> ConstructionResult:
    """Size-, day-, position- and length-matched clinical variants of ``load`` (see the module
    docstring). ``question_cap`` counts base questions; groups are kept whole (both kinds), so
    the cap is met to within one group."""
    if memory_size < SLOTS:
        raise ValueError(f"memory_size must be at least {SLOTS} (one unit per slot)")
    exclusions: list[Exclusion] = []
    absent: list[Exclusion] = []
    candidates, histories = _candidates(load, memory_size, patient_fraction, max_length_gap, kinds, exclusions)
    per_group = len(kinds)
    if question_cap is not None and len(candidates) * per_group > question_cap:
        ranked = sorted(candidates, key=lambda c: (hash_rank(c.stable, CAP_SALT), c.stable))
        keep = max(question_cap // per_group, 1)
        exclusions += [Exclusion(load.dataset, f"{c.key}-{kind}", CAPPED, "", -1, CLINICAL)
                       for c in ranked[keep:] for kind in kinds]
        kept = {c.key for c in ranked[:keep]}
        candidates = [c for c in candidates if c.key in kept]
    groups = [_group(c, histories[c.patient], memory_size) for c in candidates]
    variants: list[Variant] = []
    for g in groups:
        split = assign_split(g.c.anchors[0].cohort_key or g.c.patient)
        series = [*g.c.anchors]
        for kind in kinds:
            base = f"{g.c.key}-{kind}"
            evidence = {g.c.anchors[2].order} if kind == "latest" else {g.c.anchors[1].order, g.c.anchors[2].order}
            question, answer = _question(kind, g.c.measurement, g.c.query_day), _answer(kind, series)
            for state, holds in SLOT_STATES[kind]:
                units = _memory(g, holds, evidence)
                missing = len(evidence) - sum(u.is_evidence for u in units)
                variants.append(Variant(f"{CLINICAL}:{load.dataset}:{base}:{state}", base, load.dataset, CLINICAL,
                                        state, split, missing, question, (answer,), units, len(evidence), g.c.history))
            if kind == "latest":
                absent.append(Exclusion(load.dataset, base, NO_RELATION_LOST, "", -1, CLINICAL))
    return ConstructionResult(load.dataset, CLINICAL, variants, list(load.exclusions) + exclusions, absent)


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
