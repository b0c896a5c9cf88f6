"""Answer correctness as the SQuAD and MuSiQue evaluation scripts define it: normalised exact
match against the gold answer or any of its aliases."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse whitespace (the
    official SQuAD v1.1/v2.0 normalisation, which MuSiQue's script reuses)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
    """True when the normalised prediction equals any normalised gold answer or alias."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(a) for a in answers)
