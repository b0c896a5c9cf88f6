"""Text handling shared by the lexical estimators: tokens and serialisations."""

from __future__ import annotations

import re
from functools import lru_cache

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from memsafe_lib.variants.construction import Variant

TOKEN = re.compile(r"[a-z0-9]+")
SEP = " [SEP] "


@lru_cache(maxsize=1 << 18)
def content_tokens(text: str) -> frozenset[str]:
    """Lower-cased alphanumeric tokens without English stop words (cached: units recur)."""
    return frozenset(t for t in TOKEN.findall(text.lower()) if t not in ENGLISH_STOP_WORDS)


def unit_text(title: str, text: str) -> str:
    return f"{title}: {text}"


def memory_text(variant: Variant) -> str:
    """The memory as one string, units in memory order."""
    return SEP.join(unit_text(u.title, u.text) for u in variant.units)


def serialize(variant: Variant) -> str:
    """(query, memory) as one document, the input of the flat TF-IDF baseline."""
    return variant.question + SEP + memory_text(variant)
