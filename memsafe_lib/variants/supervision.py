"""Alternative training sets built from the gold variants, for notebook 03:

* **silver supervision**: per-unit evidence targets from gold-answer string matching in the unit
  text instead of the annotated supporting paragraphs, on the training split only (validation
  and test, the variants themselves and their integrity labels stay gold);
* **nested training subsets** for learning curves: a salted-hash fraction of the training
  base questions (every variant of a kept question), nested so 25% is inside 50%.

Each returns a new :class:`ConstructionResult` whose ``construction`` names what changed
(``size-matched-silver``, ``size-matched-train25``), so its results and caches never mix with
the gold, full-data ones.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from memsafe_lib.data.loader import hash_rank
from memsafe_lib.variants.construction import ConstructionResult, Variant

SUBSET_SALT = "memsafe-learning-curve-v1"
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    """SQuAD-style answer normalisation: lower case, no punctuation, articles or extra spaces."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCT)).split())


def silver_labels(variant: Variant) -> list[bool]:
    """Per unit: does its *text* contain a gold answer (normalised, whole words)?

    The paper's appendix marks a unit as evidence "when the gold answer string appears in its text",
    so the unit title is not matched (a title naming the answer entity would otherwise make every
    sentence of that paragraph a silver positive). How the strings are compared is left open; we
    use SQuAD answer normalisation (:func:`normalize`: lower case, no punctuation, no articles,
    single spaces) on both sides and require a whole-word match, the usual distant-supervision
    reading, so "anna" does not match "annabelle".
    """
    answers = [a for a in (normalize(x) for x in variant.answers) if a]
    out = []
    for unit in variant.units:
        text = f" {normalize(unit.text)} "
        out.append(any(f" {a} " in text for a in answers))
    return out


def with_silver_training(result: ConstructionResult) -> ConstructionResult:
    """The same variants with silver per-unit targets on the training split."""
    variants = []
    for v in result.variants:
        if v.split == "train":
            units = tuple(replace(u, is_evidence=s) for u, s in zip(v.units, silver_labels(v), strict=True))
            v = replace(v, units=units)
        variants.append(v)
    return ConstructionResult(result.dataset, f"{result.construction}-silver", variants,
                              list(result.exclusions), list(result.absent),
                              base_construction=result.source_construction, silver=True,
                              training_fraction=result.training_fraction)


def silver_quality(variants: Sequence[Variant]) -> dict[str, Any]:
    """Precision and recall of the silver targets against gold on the training units."""
    pairs = [(s, u.is_evidence) for v in variants if v.split == "train"
             for s, u in zip(silver_labels(v), v.units, strict=True)]
    tp = sum(1 for s, g in pairs if s and g)
    silver, gold = sum(1 for s, _ in pairs if s), sum(1 for _, g in pairs if g)
    return {"units": len(pairs), "gold_evidence": gold, "silver_evidence": silver, "both": tp,
            "precision": tp / silver if silver else None, "recall": tp / gold if gold else None}


def in_training_subset(base_id: str, fraction: float) -> bool:
    """Whether a training question is in the ``fraction`` subset (nested across fractions)."""
    return hash_rank(base_id, SUBSET_SALT) < fraction * 2**64


def training_subset(result: ConstructionResult, fraction: float) -> ConstructionResult:
    """Every validation and test variant, and the training variants of a hash-chosen fraction
    of the training base questions."""
    if not 0 < fraction <= 1:
        raise ValueError(f"training fraction {fraction} must be in (0, 1]")
    if fraction == 1:
        return result
    variants = [v for v in result.variants if v.split != "train" or in_training_subset(v.base_id, fraction)]
    return ConstructionResult(result.dataset, f"{result.construction}-train{round(fraction * 100)}", variants,
                              list(result.exclusions), list(result.absent),
                              base_construction=result.source_construction, silver=result.silver,
                              training_fraction=result.training_fraction * fraction)
