"""Topic closeness between questions, for the blind-hard construction's triples.

The blind-matched construction forms triples of questions with disjoint evidence in hash order,
so the units that replace a question's evidence in its unsafe memories are other questions'
evidence on unrelated topics: a model that reads the question only through topic overlap gains
there what it could not gain on size-matched memories, whose replacements are the question's
own (retrieved, on-topic) distractors. Blind-hard keeps the triple design and forms each triple
from questions whose evidence is disjoint but close to each other's questions.

Closeness of question x to question y: the largest TF-IDF cosine between x's question and any of
y's evidence units. A triple's closeness is the smallest of its six directed closenesses, so
every question of it finds the other two's evidence on its topic. The vectoriser is fitted on
the questions and units of the questions being grouped (text only; no label, no split is read
beyond the grouping by split the construction does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer

from memsafe_lib.data.loader import hash_rank
from memsafe_lib.data.records import BaseQuery, Unit

TRIPLE_CANDIDATES = 40
"""Partners considered per question (its closest, by pair closeness): the greedy search looks at
pairs of these, so its cost grows with the square of this number, not of the split."""


def _unit_text(u: Unit) -> str:
    return f"{u.title}: {u.text}"


def _vectorizer(queries: Sequence[BaseQuery]) -> TfidfVectorizer:
    """TF-IDF fitted on the questions and every unit of ``queries`` (sorted: the same on every run)."""
    texts = sorted({_unit_text(u) for q in queries for u in q.units} | {q.question for q in queries})
    return TfidfVectorizer(lowercase=True, sublinear_tf=True, dtype=np.float32).fit(texts)


def closeness(queries: Sequence[BaseQuery]) -> np.ndarray:
    """``c[x, y]``: the largest TF-IDF cosine between question x and an evidence unit of y."""
    vectorizer = _vectorizer(queries)
    questions = vectorizer.transform([q.question for q in queries])
    evidence = [_unit_text(u) for q in queries for u in q.evidence]
    owners = np.repeat(np.arange(len(queries)), [len(q.evidence) for q in queries])
    sims = (questions @ vectorizer.transform(evidence).T).toarray()  # rows L2-normalised: dot = cosine
    out = np.zeros((len(queries), len(queries)), dtype=np.float32)
    for y in range(len(queries)):
        cols = owners == y
        if cols.any():
            out[:, y] = sims[:, cols].max(axis=1)
    return out


def distractor_closeness(queries: Sequence[BaseQuery]) -> np.ndarray:
    """Per question, the largest TF-IDF cosine between it and one of its own distractors: how near
    the units that replace its evidence under size matching are (the bar for blind-hard's)."""
    vectorizer = _vectorizer(queries)
    out = np.zeros(len(queries), dtype=np.float32)
    for i, q in enumerate(queries):
        if q.distractors:
            units = vectorizer.transform([_unit_text(u) for u in q.distractors])
            out[i] = float((units @ vectorizer.transform([q.question]).T).toarray().max())
    return out


def topic_triples(queries: Sequence[BaseQuery], disjoint: Callable[[BaseQuery, BaseQuery, BaseQuery], bool],
                  salt: str, min_closeness: float = 0.0, candidates: int = TRIPLE_CANDIDATES
                  ) -> tuple[list[tuple[BaseQuery, ...]], list[BaseQuery], list[float]]:
    """Greedy triples in salted-hash order: each question still free takes the pair of free
    partners (among its ``candidates`` closest) whose triple closeness is largest, with pairwise
    disjoint evidence (``disjoint(a, b, c)``), if it reaches ``min_closeness``; else it is left
    out. Returns (triples, questions left, each triple's closeness)."""
    order = sorted(range(len(queries)), key=lambda i: (hash_rank(queries[i].id, salt), queries[i].id))
    c = closeness(queries)
    pair = np.minimum(c, c.T)  # both directions: x's question near y's evidence and y's near x's
    free = np.ones(len(queries), dtype=bool)
    triples, left, scores = [], [], []
    for a in order:
        if not free[a]:
            continue
        free[a] = False
        others = np.flatnonzero(free)
        ranked = others[np.lexsort((others, -pair[a, others]))][:candidates]  # closest first, ties by index
        best, best_score = None, -1.0
        for x, b in enumerate(ranked):
            for cc in ranked[x + 1:]:
                score = float(min(pair[a, b], pair[a, cc], pair[b, cc]))
                if score > best_score and disjoint(queries[a], queries[b], queries[cc]):
                    best, best_score = (int(b), int(cc)), score
        if best is None or best_score < min_closeness:
            left.append(queries[a])
            continue
        free[list(best)] = False
        triples.append((queries[a], queries[best[0]], queries[best[1]]))
        scores.append(best_score)
    return triples, left, scores
