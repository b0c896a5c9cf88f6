"""Synthetic base queries for property tests (no files involved)."""

from __future__ import annotations

import random

from memsafe_lib.data.records import BaseQuery, Provenance, Unit
from memsafe_lib.variants.construction import MemoryUnit, Variant


def make_query(qid: str, n_evidence: int, n_distractors: int, *, titles: list[str] | None = None,
               seed: int = 0, dataset: str = "synthetic", answerable: bool = True) -> BaseQuery:
    rng = random.Random(f"{qid}-{seed}")
    titles = titles or [f"E{k}" for k in range(n_evidence)]
    items = [(titles[k], True) for k in range(n_evidence)] + [(f"D{k}", False) for k in range(n_distractors)]
    rng.shuffle(items)
    units = tuple(
        Unit(f"{qid}:{pos}", title, f"text of {title} in {qid} " + "w " * rng.randint(1, 40), ev, pos)
        for pos, (title, ev) in enumerate(items)
    )
    return BaseQuery(qid, dataset, f"question {qid}?", ("answer",), units, answerable, Provenance("synthetic", 0, "0" * 64))


def variant(qid: str, *, question: str | None = None, answers: tuple[str, ...] = ("answer",), state: str = "complete",
            split: str = "test", texts: tuple[str, ...] = ("Paris is in France.", "Lyon is in France.")) -> Variant:
    """One hand-made memory (for readers and judges): units in the order given, the first one evidence."""
    units = tuple(MemoryUnit(f"{qid}:{i}", f"T{i}", t, i == 0, i, i) for i, t in enumerate(texts))
    return Variant(f"synthetic:{qid}:{state}", qid, "synthetic", "size-matched", state, split,
                   0 if state == "complete" else 1, question or f"question {qid}?", answers, units, 1, len(units))
