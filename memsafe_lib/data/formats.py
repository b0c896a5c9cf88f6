"""Parsers from each official record layout to :class:`BaseQuery`.

A parser returns either a :class:`BaseQuery` or a :class:`Skip` (the record is valid
but cannot be used, with the reason recorded), and raises :class:`DataFormatError` when
the record is malformed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memsafe_lib.data.fields import Where, check, optional, require
from memsafe_lib.data.readers import iter_jsonl, read_json, read_json_array
from memsafe_lib.data.records import BaseQuery, Provenance, Unit

# Reasons are fixed strings so that counts group cleanly in the exclusion ledger.
NO_SUPPORTING = "no supporting facts / evidence labels"
TITLE_NOT_IN_CONTEXT = "supporting-fact title not in context"
DUPLICATE = "duplicate of an identical record read earlier"


@dataclass
class Skip:
    reason: str
    detail: str = ""


@dataclass
class Parsed:
    result: BaseQuery | Skip
    record_id: str
    dedupe_key: str
    warnings: list[str] = field(default_factory=list)


RawRecord = tuple[Where, int, Any]
"""Location, 0-based record index within the file, raw JSON record."""


def join_sentences(sentences: list[str]) -> str:
    """Join sentences the way they read: HotpotQA keeps leading spaces, 2Wiki does not."""
    out = ""
    for sentence in sentences:
        if out and not out[-1].isspace() and sentence and not sentence[0].isspace():
            out += " "
        out += sentence
    return out


# ---------------------------------------------------------------- MuSiQue (ans and full)


def iter_musique(path: Path) -> Iterator[RawRecord]:
    for index, (lineno, record) in enumerate(iter_jsonl(path)):
        yield Where(path, line=lineno), index, record


def parse_musique(record: Any, where: Where, provenance: Provenance) -> Parsed:
    rid = require(record, "id", str, where)
    where = where.with_id(rid)
    question = require(record, "question", str, where)
    answer = require(record, "answer", str, where)
    aliases = optional(record, "answer_aliases", list, where, [])
    answerable = optional(record, "answerable", bool, where, True)  # MuSiQue-Ans omits nothing, but be lenient
    paragraphs = require(record, "paragraphs", list, where)
    if not paragraphs:
        raise where.error("empty paragraph list", field="paragraphs")
    units = []
    for pos, para in enumerate(paragraphs):
        f = f"paragraphs[{pos}]"
        title = require(para, "title", str, where, path=f"{f}.title")
        text = require(para, "paragraph_text", str, where, path=f"{f}.paragraph_text")
        supporting = require(para, "is_supporting", bool, where, path=f"{f}.is_supporting")
        tag = "" if answerable else "~unanswerable"
        units.append(Unit(f"{rid}{tag}:{pos}", title, text, supporting, pos))
    for a in aliases:
        check(a, str, where, "answer_aliases[]")
    key = f"{rid}|{'answerable' if answerable else 'unanswerable'}"
    if answerable and not any(u.is_evidence for u in units):
        return Parsed(Skip(NO_SUPPORTING, "no paragraph has is_supporting=true"), rid, key)
    # Unanswerable records are returned as queries: family B pairs them with their
    # answerable twins, and the family-A constructions exclude them with a reason.
    query = BaseQuery(
        id=rid,
        dataset="musique",
        question=question,
        answers=(answer, *aliases),
        units=tuple(units),
        answerable=answerable,
        provenance=provenance,
        meta={"hops": int(rid[0]) if rid[:1].isdigit() else None},
    )
    return Parsed(query, rid, key)


# ---------------------------------------------------------------- HotpotQA and 2WikiMultiHopQA


def iter_json_array(path: Path) -> Iterator[RawRecord]:
    for index, record in enumerate(read_json_array(path)):
        yield Where(path, record=index), index, record


def parse_wiki_context(record: Any, where: Where, provenance: Provenance, dataset: str) -> Parsed:
    """HotpotQA distractor and 2WikiMultiHopQA share the ``context``/``supporting_facts`` layout.

    Supporting facts are sentence-level; a paragraph is evidence when its title is the
    title of any supporting fact (all paragraphs with that title, should it repeat).
    """
    rid = require(record, "_id", str, where)
    where = where.with_id(rid)
    question = require(record, "question", str, where)
    context = require(record, "context", list, where)
    units: list[Unit] = []
    sentences_by_title: dict[str, list[list[str]]] = {}
    for pos, entry in enumerate(context):
        f = f"context[{pos}]"
        if not (isinstance(entry, list) and len(entry) == 2):
            raise where.error("expected [title, [sentences]]", field=f)
        title = check(entry[0], str, where, f"{f}[0]")
        sentences = check(entry[1], list, where, f"{f}[1]")
        for s in sentences:
            check(s, str, where, f"{f}[1][]")
        sentences_by_title.setdefault(title, []).append(sentences)
        units.append(Unit(f"{rid}:{pos}", title, join_sentences(sentences), False, pos))
    if not units:
        raise where.error("empty context", field="context")

    facts = record.get("supporting_facts") if isinstance(record, dict) else None
    if not facts:
        return Parsed(Skip(NO_SUPPORTING, "supporting_facts missing or empty"), rid, rid)
    check(facts, list, where, "supporting_facts")
    titles: set[str] = set()
    warnings: list[str] = []
    for i, fact in enumerate(facts):
        f = f"supporting_facts[{i}]"
        if not (isinstance(fact, list) and len(fact) == 2):
            raise where.error("expected [title, sentence_index]", field=f)
        title = check(fact[0], str, where, f"{f}[0]")
        sent = check(fact[1], int, where, f"{f}[1]")
        if title not in sentences_by_title:
            return Parsed(Skip(TITLE_NOT_IN_CONTEXT, repr(title)), rid, rid)
        if not any(0 <= sent < len(s) for s in sentences_by_title[title]):
            warnings.append(
                f"{provenance.file} record {provenance.record_index} id {rid!r}: supporting fact "
                f"[{title!r}, {sent}] points past the paragraph's {len(sentences_by_title[title][0])} "
                "sentences; the paragraph is kept as evidence"
            )
        titles.add(title)
    answer = require(record, "answer", str, where)
    units = [Unit(u.unit_id, u.title, u.text, u.title in titles, u.source_position) for u in units]
    meta = {k: record[k] for k in ("type", "level") if isinstance(record.get(k), str)}
    query = BaseQuery(rid, dataset, question, (answer,), tuple(units), True, provenance, meta)
    return Parsed(query, rid, rid, warnings)


def parse_hotpotqa(record: Any, where: Where, provenance: Provenance) -> Parsed:
    return parse_wiki_context(record, where, provenance, "hotpotqa")


def parse_2wiki(record: Any, where: Where, provenance: Provenance) -> Parsed:
    return parse_wiki_context(record, where, provenance, "2wikimultihopqa")


# ---------------------------------------------------------------- SQuAD 2.0


def iter_squad(path: Path) -> Iterator[RawRecord]:
    """One record per question, flattened with its paragraph context and article title."""
    doc = read_json(path)
    where = Where(path)
    data = require(doc, "data", list, where)
    index = 0
    for a, article in enumerate(data):
        title = require(article, "title", str, where, path=f"data[{a}].title")
        paragraphs = require(article, "paragraphs", list, where, path=f"data[{a}].paragraphs")
        for p, para in enumerate(paragraphs):
            f = f"data[{a}].paragraphs[{p}]"
            context = require(para, "context", str, where, path=f"{f}.context")
            qas = require(para, "qas", list, where, path=f"{f}.qas")
            for q, qa in enumerate(qas):
                at = Where(path, record=index, prefix=f"{f}.qas[{q}]")
                if not isinstance(qa, dict):
                    raise at.error("expected a JSON object")
                yield at, index, {**qa, "title": title, "context": context}
                index += 1


def parse_squad(record: Any, where: Where, provenance: Provenance) -> Parsed:
    rid = require(record, "id", str, where)
    where = where.with_id(rid)
    question = require(record, "question", str, where)
    answers = require(record, "answers", list, where)
    impossible = optional(record, "is_impossible", bool, where, False)
    texts = [require(ans, "text", str, where, path=f"answers[{i}].text") for i, ans in enumerate(answers)]
    if not impossible and not texts:
        raise where.error("answerable question without answers", field="answers")
    unit = Unit(f"{rid}:0", record["title"], record["context"], not impossible, 0)
    query = BaseQuery(
        rid, "squad2", question, tuple(dict.fromkeys(texts)), (unit,), not impossible, provenance,
        {"title": record["title"]},
    )
    return Parsed(query, rid, rid)
