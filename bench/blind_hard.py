"""Is the blind-hard construction no easier than size matching? Its frontier: questions kept
against the topic gap, beside size-matched and blind-matched memories.

For each QA dataset and construction (size-matched, blind-matched, blind-hard at each smallest
triple closeness in ``--closeness``), the controls are fitted on its train split and scored on
its test split: the shallow question-aware ones (``qu_tfidf``, ``title_named``,
``retrieval_sim``: they read the question only through topic or title overlap), and the
question-blind ones that need no encoder (``blind_bow``, ``blind_unit``, ``question_only``;
``blind_set`` reads MiniLM embeddings and is left to notebook 01's audit). Per row: test unsafe
AUROC, and the same for complete vs missing and complete vs relation-lost memories; the base
questions kept, also as a share of size-matched's; and, over the test questions, the share of
the units a missing memory holds and the question's complete memory does not that are the
question's own distractors (100% under size matching).

    MEMSAFE_RECORD=1 .venv/bin/python bench/blind_hard.py

Targets (issue: blind-hard): every blind control exactly 0.5; each shallow control within +0.03
of its size-matched AUROC; at least 60% of the size-matched base questions kept.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pandas as pd
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.config import FAMILY_A_DATASETS, scale_config
from memsafe_lib.data.loader import load_dataset
from memsafe_lib.data.records import BaseQuery
from memsafe_lib.evaluation.audit import fit_controls, per_state
from memsafe_lib.measures.metrics import unsafe_auroc
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import (
    COMPLETE,
    MISSING,
    TRIPLE_SALT,
    ConstructionResult,
    Variant,
    assign_split,
    build_blind_hard,
    build_blind_matched,
    build_size_matched,
    disjoint_evidence,
)
from memsafe_lib.variants.topics import distractor_closeness, topic_triples

SHALLOW = ("qu_tfidf", "title_named", "retrieval_sim")
BLIND = ("blind_bow", "blind_unit", "question_only")


def own_distractor_share(variants: list[Variant], distractors: dict[str, set[tuple[str, str]]]) -> float | None:
    """Of the units a test question's missing memory holds and its complete memory does not, the
    share that are that question's own distractors."""
    by_q: dict[str, dict[str, Variant]] = defaultdict(dict)
    for v in variants:
        if v.split == "test":
            by_q[v.base_id][v.state] = v
    own = total = 0
    for qid, states in by_q.items():
        if COMPLETE not in states or MISSING not in states:
            continue
        complete = {(u.title, u.text) for u in states[COMPLETE].units}
        replaced = [(u.title, u.text) for u in states[MISSING].units if (u.title, u.text) not in complete]
        total += len(replaced)
        own += sum(key in distractors[qid] for key in replaced)
    return own / total if total else None


def topic_closeness(queries: list[BaseQuery]) -> dict[str, float]:
    """Medians over the dataset's splits: a blind-hard triple's closeness (no smallest closeness),
    and a question's closeness to its own nearest distractor (the bar a replacement would meet)."""
    triples, own = [], []
    for split in ("train", "validation", "test"):
        members = [q for q in queries if q.answerable and assign_split(q.id) == split]
        triples += topic_triples(members, disjoint_evidence, TRIPLE_SALT)[2]
        own += distractor_closeness(members).tolist()
    return {"triple_closeness_median": float(np.median(triples)), "own_distractor_closeness_median":
            float(np.median(own))}


def rows_for(dataset: str, label: str, result: ConstructionResult, base: int,
             distractors: dict[str, set[tuple[str, str]]], sm_auroc: dict[str, float]) -> list[dict[str, object]]:
    kept = len({v.base_id for v in result.variants})
    splits = {s: {v.unsafe for v in result.variants if v.split == s} for s in ("train", "test")}
    if any(seen != {True, False} for seen in splits.values()):  # too few questions kept to fit or score
        return [{"dataset": dataset, "construction": label, "model": None, "role": None, "unsafe_auroc": None,
                 "base_questions": kept, "kept_share": kept / base}]
    _, fitted = fit_controls(result.variants, (*SHALLOW, *BLIND), eval_splits=("test",), where=f"{dataset}/{label}")
    share = own_distractor_share(result.variants, distractors)
    rows = []
    for r in fitted:
        y = [v.unsafe for v in r.variants]
        score = np.asarray(r.predictions.unsafe_prob)
        auroc = unsafe_auroc(y, score)
        rows.append({"dataset": dataset, "construction": label, "model": r.control,
                     "role": "shallow" if r.control in SHALLOW else "blind", "unsafe_auroc": auroc,
                     **per_state([v.state for v in r.variants], score),
                     "minus_size_matched": auroc - sm_auroc[r.control] if r.control in sm_auroc else 0.0,
                     "base_questions": kept, "kept_share": kept / base, "test_variants": len(r.variants),
                     "own_distractor_share": share})
    return rows


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--closeness", type=float, nargs="+", default=[0.0, 0.03, 0.05, 0.08],
                        help="blind-hard's smallest triple closeness, one construction each")
    args = parser.parse_args()
    configure_threads()
    scale = scale_config(args.scale)
    rows: list[dict[str, object]] = []
    files = []
    for dataset in FAMILY_A_DATASETS:
        loaded = load_dataset(dataset, config.data_dir(), max_base_queries=scale.max_base_queries)
        files += list(loaded.files)
        distractors = {q.id: {(u.title, u.text) for u in q.distractors} for q in loaded.queries}
        size_matched = build_size_matched(loaded.queries)
        base = len({v.base_id for v in size_matched.variants})
        first = rows_for(dataset, "size-matched", size_matched, base, distractors, {})
        sm = {str(r["model"]): float(r["unsafe_auroc"]) for r in first}  # type: ignore[arg-type]
        rows += [{**r, "minus_size_matched": 0.0} for r in first]
        rows += rows_for(dataset, "blind-matched", build_blind_matched(loaded.queries), base, distractors, sm)
        for t in args.closeness:
            rows += rows_for(dataset, f"blind-hard >= {t:g}", build_blind_hard(loaded.queries, t), base,
                             distractors, sm)
        closeness = topic_closeness(loaded.queries)
        rows = [{**r, **closeness} if r["dataset"] == dataset else r for r in rows]
        print(pd.DataFrame([r for r in rows if r["dataset"] == dataset]).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    save_report("blind_hard", "blind_hard_frontier", args, files, {"rows": table.to_dict(orient="records")},
                table=table)


if __name__ == "__main__":
    main()
