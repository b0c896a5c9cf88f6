"""Clinical memories from MIMIC-IV measurement events, with the stale state (notebook 07).

The paper does not spell out its clinical construction; this is ours.

* **Units.** One measurement event rendered as text: ``Day 412: Creatinine (Blood) 1.1 mg/dL``
  (days since the patient's first event in the table, never a calendar date).
* **Base questions.** For a patient, a measurement and an anchor event ``e_k`` (its k-th
  event in time, k >= 2), asked "as of" the anchor's day; the patient's history is every
  event up to and including the anchor (later events are never in a memory):

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

from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

from memsafe_lib.data.loader import hash_rank
from memsafe_lib.data.mimic import ClinicalLoad, Event
from memsafe_lib.data.records import Exclusion
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
TOO_FEW_FILLERS = "too few events of other measurements before the anchor to fill the memory"
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


def _variant(base: str, dataset: str, patient: str, state: str, kind: Kind, measurement: str, anchor: Event,
             kept: Sequence[Event], evidence: Sequence[Event], history: int, answer: str) -> Variant:
    ev = {e.order for e in evidence}
    units = tuple(_unit(e, ev, i) for i, e in enumerate(sorted(kept, key=lambda e: e.order)))
    missing = len(ev) - sum(u.is_evidence for u in units)
    return Variant(f"{CLINICAL}:{dataset}:{base}:{state}", base, dataset, CLINICAL, state, assign_split(patient),
                   missing, _question(kind, measurement, anchor.day), (answer,), units, len(ev), history)


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
            for k in range(2, len(seq)):
                n_fillers = seq[k].order + 1 - (k + 1)  # history up to the anchor minus this measurement's events
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
        anchor = seq[k]
        history = histories[patient][: anchor.order + 1]
        fillers = [e for e in history if e.measurement != measurement]
        fill = sorted(fillers, key=lambda e: (hash_rank(f"{base}\x1f{e.order}", FILLER_SALT), e.order))[:memory_size]
        evidence = [anchor] if kind == "latest" else [seq[k - 1], anchor]
        superseded = [seq[k - 1]] if kind == "latest" else [seq[k - 2], seq[k - 1]]
        answer = _answer(kind, seq[: k + 1])

        def make(state: str, kept: list[Event], b: str = base, p: str = patient, kd: Kind = kind,
                 ev: list[Event] = evidence, ans: str = answer, anc: Event = anchor, m: str = measurement,
                 h: int = len(history)) -> Variant:
            return _variant(b, load.dataset, p, state, kd, m, anc, kept, ev, h, ans)

        variants.append(make(COMPLETE, [*evidence, *fill[: memory_size - len(evidence)]]))
        variants.append(make(MISSING, fill[:memory_size]))
        variants.append(make(STALE, [*superseded, *fill[: memory_size - len(superseded)]]))
        if kind == "change":
            variants.append(make(RELATION_LOST, [anchor, *fill[: memory_size - 1]]))
        else:
            absent.append(Exclusion(load.dataset, base, NO_RELATION_LOST, "", -1, CLINICAL))
    return ConstructionResult(load.dataset, CLINICAL, variants, list(load.exclusions) + exclusions, absent)
