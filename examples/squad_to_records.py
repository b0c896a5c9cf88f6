"""SQuAD 2.0 (official JSON, .json or .json.gz) to memsafe records, one question per line.

    python examples/squad_to_records.py --out squad_records.jsonl --questions 400

reads SQuAD 2.0 dev from ``$MEMSAFE_DATA_DIR/squad2/`` (the complete file before a subset), or the
file you name.

A question's own paragraph is its evidence; other paragraphs of the same article are its
distractors (``--distractors`` of them, in a salted-hash order), so every unit of a memory is on
the question's topic and shares its title: a memory without the evidence cannot be told by its
topic. Unanswerable questions are excluded (SQuAD marks them unanswerable from their own
paragraph; they have no evidence to remove). The split is the article's (a salted hash of its
title, 70/15/15), so no paragraph is read in training and again at test.

Limits: another paragraph of the article may also answer the question (SQuAD does not say), which
makes some "missing" memories answerable; one paragraph of evidence means no relation-lost state.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from memsafe_lib.data.loader import discover_files
from memsafe_lib.io import write_jsonl
from memsafe_lib.variants.construction import assign_split

SALT = "memsafe-example-squad-records-v1"


def _rank(text: str) -> str:
    return hashlib.sha256(f"{SALT}\x1f{text}".encode()).hexdigest()


def default_squad() -> Path:
    """The SQuAD 2.0 dev file under ``$MEMSAFE_DATA_DIR/squad2/``: a complete one before a subset."""
    found = [p for p in discover_files("squad2")[0] if p.name.startswith("dev-v2.0")]
    if not found:
        raise SystemExit("no SQuAD 2.0 dev file (dev-v2.0*.json[.gz]) under $MEMSAFE_DATA_DIR/squad2/; name one")
    return sorted(found, key=lambda p: "subset" in p.name)[0]


def read_squad(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise SystemExit(f"{path}: not SQuAD's layout (a top-level object with a 'data' list of articles)")
    return data["data"]


def to_records(articles: list[dict[str, Any]], distractors: int, questions: int) -> tuple[list[dict], Counter]:
    """Records of the answerable questions (the ``questions`` first in a salted-hash order of their
    ids, all when 0) and what was left out."""
    counts: Counter = Counter()
    records = []
    for article in articles:
        title = article["title"]
        paragraphs = [p["context"] for p in article["paragraphs"]]
        split = assign_split(title)
        for i, paragraph in enumerate(article["paragraphs"]):
            for qa in paragraph["qas"]:
                if qa.get("is_impossible"):
                    counts["excluded: unanswerable"] += 1
                    continue
                others = sorted((j for j in range(len(paragraphs)) if j != i), key=lambda j: _rank(f"{qa['id']}/{j}"))
                if not others:
                    counts["excluded: article of one paragraph"] += 1
                    continue
                records.append({"id": qa["id"], "question": qa["question"],
                                "answers": sorted({a["text"] for a in qa.get("answers", [])}),
                                "evidence": [{"title": title, "text": paragraph["context"]}],
                                "distractors": [{"title": title, "text": paragraphs[j]} for j in others[:distractors]],
                                "split": split})
    if questions:
        drawn = {r["id"] for r in sorted(records, key=lambda r: _rank(r["id"]))[:questions]}
        counts["not drawn (--questions)"] += len(records) - len(drawn)
        records = [r for r in records if r["id"] in drawn]
    counts.update(f"kept: {r['split']}" for r in records)
    return records, counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("squad", type=Path, nargs="?", default=None,
                   help="SQuAD 2.0 JSON (dev-v2.0.json or a .json.gz of it); default: the one under "
                        "$MEMSAFE_DATA_DIR/squad2/")
    p.add_argument("--out", type=Path, required=True, help="records .jsonl to write")
    p.add_argument("--distractors", type=int, default=4, help="other paragraphs per question (default %(default)s)")
    p.add_argument("--questions", type=int, default=0,
                   help="keep this many answerable questions, drawn by a hash of their id (default: all)")
    args = p.parse_args(argv)
    source = args.squad or default_squad()
    records, counts = to_records(read_squad(source), args.distractors, args.questions)
    write_jsonl(args.out, records)
    print(f"{args.out}: {len(records)} records from {source.name}")
    for key, n in sorted(counts.items()):
        print(f"  {key}: {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
