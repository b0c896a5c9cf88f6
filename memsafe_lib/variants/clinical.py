"""Clinical memories from MIMIC-IV measurement events, with the stale state (notebook 07).

The paper does not spell out its clinical construction; this is ours.

* **Units.** One measurement event rendered as text: ``Day 412: Creatinine (Blood) 1.1 mg/dL``
  (days since the patient's first event in the table, never a calendar date).
* **Base questions.** For a patient, a measurement and an anchor event ``e_k`` (its k-th
  event in time, k >= 2), asked "as of" a query day: the patient's next day with any event
  after ``e_k``'s day, no later than the measurement's next event, so ``e_k`` is the latest
  value before the query day. The history is every event on an earlier day than the query
  (events of the query day and later are never in a memory). The question does not reveal ``e_k``'s day, so a memory
  whose newest value is old may be stale or may be all there is: the model must judge it.

  - *latest*: "what is the most recent value?"; evidence ``{e_k}`` (g = 1);
  - *change*: "how did it change between its last two measurements?"; evidence
    ``{e_{k-1}, e_k}`` (g = 2).
* **States**, all size-matched (every state holds ``memory_size`` units, the rest filled with
  the patient's events of *other* measurements before the anchor, in salted-hash order):

  - complete: the evidence events;
  - missing: no event of the measurement at all;
  - relation-lost (change only): ``e_k`` without ``e_{k-1}`` (and no older event), so the
    change cannot be read;
  - stale: ``e_k`` gone while superseded events are present (latest: ``e_{k-1}``; change:
    ``e_{k-2}`` and ``e_{k-1}``), so the memory answers with an outdated value.
* **Sampling and splits.** Patients are sampled by a salted hash of their pseudonym
  (``patient_fraction``), questions capped in salted-hash order (``question_cap``), and the
  shared split function is applied to the *patient*, so no patient crosses splits.

Variants carry state, evidence flags and missing count exactly like the QA variants, so every
estimator and metric runs unchanged. Ids are pseudonymous (``p012-m003-k4-change``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
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
FILLER_SALT = "memsafe-clinical-filler-v1"
SAMPLE_SALT = "memsafe-clinical-patient-sample-v1"
CAP_SALT = "memsafe-clinical-question-cap-v1"
TOO_FEW_FILLERS = "too few events of other measurements before the query day to fill the memory"
NO_QUERY_DAY = "no later day with an event after the anchor (its last day in the table)"
NO_RELATION_LOST = "a single-event question has no relation-lost state"
NOT_SAMPLED = "patient not sampled (patient fraction)"
CAPPED = "question not sampled (question cap)"


def _question(kind: Kind, measurement: str, day: int) -> str:
    if kind == "latest":
        return f"As of day {day}, what is the patient's most recent {measurement}?"
    return f"As of day {day}, how did the patient's {measurement} change between its last two measurements?"


def _answer(kind: Kind, events: Sequence[Event]) -> str:
    return events[-1].text_value if kind == "latest" else f"{events[-2].text_value} -> {events[-1].text_value}"


def _unit(e: Event, evidence: set[int], position: int) -> MemoryUnit:
    return MemoryUnit(f"{e.patient}:{e.order}", "", e.text(), e.order in evidence, position, e.order)


def _variant(base: str, dataset: str, patient: str, state: str, kind: Kind, measurement: str, query_day: int,
             kept: Sequence[Event], evidence: Sequence[Event], history: int, answer: str) -> Variant:
    ev = {e.order for e in evidence}
    units = tuple(_unit(e, ev, i) for i, e in enumerate(sorted(kept, key=lambda e: e.order)))
    missing = len(ev) - sum(u.is_evidence for u in units)
    return Variant(f"{CLINICAL}:{dataset}:{base}:{state}", base, dataset, CLINICAL, state, assign_split(patient),
                   missing, _question(kind, measurement, query_day), (answer,), units, len(ev), history)


def build_clinical(load: ClinicalLoad, *, memory_size: int = 8, patient_fraction: float = 1.0,
                   question_cap: int | None = None, kinds: Sequence[Kind] = KINDS) -> ConstructionResult:
    """Size-matched clinical variants of ``load`` (see the module docstring)."""
    if memory_size < 3:
        raise ValueError("memory_size must be at least 3 (two evidence events and a filler)")
    by_patient: dict[str, list[Event]] = defaultdict(list)
    for e in load.events:
        by_patient[e.patient].append(e)
    exclusions: list[Exclusion] = []
    absent: list[Exclusion] = []
    measurements = {m: i for i, m in enumerate(sorted({e.measurement for e in load.events}))}
    histories: dict[str, list[Event]] = {}
    series: dict[tuple[str, str], list[Event]] = {}
    candidates: list[tuple[str, str, str, Kind, int]] = []  # (base, patient, measurement, kind, k): cheap to cap
    query_days: dict[tuple[str, str, int], int] = {}
    for patient, events in sorted(by_patient.items()):
        if hash_rank(patient, SAMPLE_SALT) >= patient_fraction * 2**64:
            exclusions.append(Exclusion(load.dataset, patient, NOT_SAMPLED, "", -1, CLINICAL))
            continue
        histories[patient] = sorted(events, key=lambda e: e.order)  # e.order is the index in this list
        by_measurement: dict[str, list[Event]] = defaultdict(list)
        for e in histories[patient]:
            by_measurement[e.measurement].append(e)
        for measurement, seq in sorted(by_measurement.items()):
            series[(patient, measurement)] = seq
            days = sorted({e.day for e in histories[patient]})
            for k in range(2, len(seq)):
                later = [d for d in days if d > seq[k].day and (k + 1 == len(seq) or d <= seq[k + 1].day)]
                if not later:
                    exclusions += [Exclusion(load.dataset, f"{patient}-m{measurements[measurement]:03d}-k{k}-{kind}",
                                             NO_QUERY_DAY, "", -1, CLINICAL) for kind in kinds]
                    continue
                query_days[(patient, measurement, k)] = later[0]
                history_len = sum(1 for e in histories[patient] if e.day < later[0])
                same = sum(1 for e in seq if e.day < later[0])
                n_fillers = history_len - same
                for kind in kinds:
                    base = f"{patient}-m{measurements[measurement]:03d}-k{k}-{kind}"
                    if n_fillers < memory_size:
                        exclusions.append(Exclusion(load.dataset, base, TOO_FEW_FILLERS, "", -1, CLINICAL,
                                                    f"{n_fillers} < {memory_size}"))
                    else:
                        candidates.append((base, patient, measurement, kind, k))
    if question_cap is not None and len(candidates) > question_cap:
        ranked = sorted(candidates, key=lambda c: (hash_rank(c[0], CAP_SALT), c[0]))
        exclusions += [Exclusion(load.dataset, c[0], CAPPED, "", -1, CLINICAL) for c in ranked[question_cap:]]
        keep = {c[0] for c in ranked[:question_cap]}
        candidates = [c for c in candidates if c[0] in keep]
    variants: list[Variant] = []
    for base, patient, measurement, kind, k in candidates:
        seq = series[(patient, measurement)]
        anchor, query_day = seq[k], query_days[(patient, measurement, k)]
        history = [e for e in histories[patient] if e.day < query_day]
        fillers = [e for e in history if e.measurement != measurement]
        fill = sorted(fillers, key=lambda e: (hash_rank(f"{base}\x1f{e.order}", FILLER_SALT), e.order))[:memory_size]
        evidence = [anchor] if kind == "latest" else [seq[k - 1], anchor]
        superseded = [seq[k - 1]] if kind == "latest" else [seq[k - 2], seq[k - 1]]
        answer = _answer(kind, seq[: k + 1])

        def make(state: str, kept: list[Event], b: str = base, p: str = patient, kd: Kind = kind,
                 ev: list[Event] = evidence, ans: str = answer, qd: int = query_day, m: str = measurement,
                 h: int = len(history)) -> Variant:
            return _variant(b, load.dataset, p, state, kd, m, qd, kept, ev, h, ans)

        variants.append(make(COMPLETE, [*evidence, *fill[: memory_size - len(evidence)]]))
        variants.append(make(MISSING, fill[:memory_size]))
        variants.append(make(STALE, [*superseded, *fill[: memory_size - len(superseded)]]))
        if kind == "change":
            variants.append(make(RELATION_LOST, [anchor, *fill[: memory_size - 1]]))
        else:
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
