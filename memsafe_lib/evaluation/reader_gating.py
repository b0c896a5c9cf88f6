"""Gating a reader: which memories a gate lets the reader answer, and how often it is wrong.

The reader answers every variant of a hash-chosen sample of test questions; each gate ranks
the same memories by an unsafe score (lower = answer first). Gates: MemSafe and LexSet (one
column per seed), flat TF-IDF, the memory-length control (``paragraph_count``: the memory's
units, the paper's "Memory-length control" row, which scores exactly 0.5000 on SQuAD 2.0 where
text length, a row of its own, scores 0.515), the text-length control (``text_length``:
characters), the LLM judge, the reader's own
sequence confidence (negated: confident = answer first), and the oracle integrity label
(which is an oracle for evidence, not for answer correctness). ``answer_all`` is the error
of answering everything.

Ties inside a gate's scores are broken in one fixed order for every gate: the salted SHA-256
rank of the memory's ``variant_id`` (:func:`tie_order`, salt :data:`TIE_SALT`), the kind of
ordering the paper's code uses everywhere. The paper is silent on its gates' tie rule, but its
oracle row changes with coverage (0.7230, 0.7205, 0.7133 at 5%, 10%, 25%, all inside the
complete third of the memories) and with prevalence, which a fixed order gives and an
expectation over ties (the oracle would equal the complete memories' mean error at every
coverage up to 1/3) does not. The AURC column and the criteria's ``coverage_at_risk`` keep
their threshold semantics (tie groups accepted whole, or as an expectation), as every AURC in
this library does.

Everything here works on a frame with one row per memory: ``variant_id``, ``base_id``,
``state``, ``unsafe``, ``wrong`` (0/1: the reader's answer is not an exact match) and one
``gate:<name>[:<seed>]`` column per gate score.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig
from memsafe_lib.data.loader import hash_rank
from memsafe_lib.encodings.encoders import default_device
from memsafe_lib.estimators.judge import LLMJudge
from memsafe_lib.estimators.llm import load_model
from memsafe_lib.estimators.reader import Reader
from memsafe_lib.evaluation.llm_judge import judge_subset
from memsafe_lib.measures.gating import error_at_coverage
from memsafe_lib.measures.risk_coverage import aurc
from memsafe_lib.progress import progress_bar, step
from memsafe_lib.variants.construction import Variant

COVERAGES = (0.05, 0.10, 0.25, 0.50)
"""Table "reader"'s columns."""
RISK_TARGET = 0.10
"""The pre-registered criteria's matched risk target."""
PREVALENCES = (0.20, 0.40, 0.60)
"""Unsafe prevalences of the sweep (the native rate is added)."""

GATE_MODELS = {"memsafe": "MemSafe", "lexset": "LexSet", "tfidf": "Flat TF-IDF",
               "paragraph_count": "Memory-length control (paragraph count)",
               "text_length": "Text-length control (characters)"}
"""Evaluated models used as gates, read from the evaluation's test predictions."""
LENGTH_CONTROL = "memory-length control (paragraph count)"
"""Criterion (ii)'s control, named as the paper names it, with the length it measures."""
TIE_SALT = "reader-gate-ties"
"""Salt of the fixed order in which every gate accepts memories with tied scores."""


def tie_order(variant_ids: Sequence[str] | pd.Series) -> np.ndarray:
    """Each memory's position in salted-SHA-256 order of its id (ties on the hash, never seen
    in practice, by the id itself): the secondary sort key of every gate. It depends only on
    the ids, so row order, reruns and subsampling (the prevalence sweep) keep it."""
    ids = [str(v) for v in variant_ids]
    ranked = sorted(range(len(ids)), key=lambda i: (hash_rank(ids[i], TIE_SALT), ids[i]))
    positions = np.empty(len(ids), dtype=np.int64)
    positions[ranked] = np.arange(len(ids))
    return positions


def gate_error(frame: pd.DataFrame, score: str, coverage: float) -> float:
    """The reader's error among the ``coverage * n`` memories of ``frame`` with the lowest
    ``score`` column, tied scores in :func:`tie_order`; a fractional ``k = coverage * n``
    counts its last memory in part (:func:`memsafe_lib.measures.gating.error_at_coverage`)."""
    return error_at_coverage(frame["wrong"].to_numpy(float), frame[score].to_numpy(float), coverage,
                              tiebreak=tie_order(frame["variant_id"]))


def gate_columns(frame: pd.DataFrame) -> dict[str, list[str]]:
    """gate name -> its score columns (several for a seeded gate)."""
    out: dict[str, list[str]] = {}
    for col in frame.columns:
        if col.startswith("gate:"):
            out.setdefault(col.split(":")[1], []).append(col)
    return out


def add_model_gates(frame: pd.DataFrame, predictions: pd.DataFrame, models: Sequence[str], split: str = "test"
                    ) -> pd.DataFrame:
    """One ``gate:<model>:<seed>`` column per seed of each model's ``split`` predictions."""
    test = predictions[predictions.split == split]
    out = frame.copy()
    for model in models:
        for seed, group in test[test.model == model].groupby("seed"):
            scores = group.set_index("variant_id")["unsafe_prob"].reindex(out.variant_id)
            if scores.isna().any():
                missing = int(scores.isna().sum())
                raise ValueError(f"{model} seed {seed}: no {split} prediction for {missing} read memories")
            out[f"gate:{model}:{seed}"] = scores.to_numpy()
    return out


def judge_column(shots: int) -> str:
    """The answers frame's column for a ``shots``-shot judge (zero-shot: ``judge_score``)."""
    return "judge_score" if shots == 0 else f"judge_score_{shots}shot"


def judge_gate(shots: int) -> str:
    """The gate name of a ``shots``-shot judge (zero-shot: ``llm_judge``, as in the paper's table)."""
    return "llm_judge" if shots == 0 else f"llm_judge_{shots}shot"


def add_fixed_gates(frame: pd.DataFrame, confidence: str = "confidence", judge_shots: Sequence[int] = (0, 4)
                    ) -> pd.DataFrame:
    """The oracle label, the reader's negated confidence and each judge that was scored."""
    out = frame.copy()
    out["gate:oracle"] = out["unsafe"].astype(float)
    out["gate:confidence"] = -out[confidence].astype(float)
    for shots in judge_shots:
        if judge_column(shots) in out and out[judge_column(shots)].notna().all():
            out[f"gate:{judge_gate(shots)}"] = out[judge_column(shots)].astype(float)
    return out


def reader_table(frame: pd.DataFrame, coverages: Sequence[float] = COVERAGES) -> pd.DataFrame:
    """Error among answered memories at each coverage, per gate (mean and sample SD over its
    seeds), with the answer-all row first.

    ``error_at_<c>``: ties in the fixed :func:`tie_order`, and ``k = c * n`` answered memories
    with the ``ceil(k)``-th counted in part when ``k`` is fractional (30 memories at 5%: the
    first memory and half of the second). ``aurc``: the risk-coverage module's, ties as an
    expectation."""
    wrong = frame["wrong"].to_numpy(float)
    rows = [{"gate": "answer_all", "n_seeds": 1, **{f"error_at_{c:g}": float(wrong.mean()) for c in coverages},
             **{f"error_at_{c:g}_sd": 0.0 for c in coverages}, "aurc": float(wrong.mean())}]
    for gate, cols in gate_columns(frame).items():
        per_seed = np.array([[gate_error(frame, c, cov) for cov in coverages] for c in cols])
        aurcs = [aurc(wrong.astype(bool), frame[c]) for c in cols]
        row: dict[str, object] = {"gate": gate, "n_seeds": len(cols)}
        for j, cov in enumerate(coverages):
            row[f"error_at_{cov:g}"] = float(per_seed[:, j].mean())
            row[f"error_at_{cov:g}_sd"] = float(per_seed[:, j].std(ddof=1)) if len(cols) > 1 else 0.0
        row["aurc"] = float(np.mean(aurcs))
        rows.append(row)
    return pd.DataFrame(rows)


def coverage_at_risk(wrong: np.ndarray, score: np.ndarray | pd.Series, target: float) -> float:
    """The largest coverage (one point per distinct score, ties all-or-nothing) at which the
    error among answered memories is at most ``target``; 0 when none is."""
    order = np.argsort(np.asarray(score, float), kind="stable")
    s = np.asarray(score, float)[order]
    w = np.asarray(wrong, float)[order]
    best = 0.0
    accepted = errors = 0.0
    for i in range(len(s)):
        accepted += 1
        errors += w[i]
        if i + 1 < len(s) and s[i + 1] == s[i]:
            continue  # a threshold takes the whole tie group
        if errors / accepted <= target:
            best = accepted / len(s)
    return best


def criteria(frame: pd.DataFrame, target: float = RISK_TARGET,
             coverages: Sequence[float] = COVERAGES) -> pd.DataFrame:
    """The three pre-registered reader criteria, graded as the paper states them (seed means):

    (i) at the ``target`` reader risk, MemSafe's coverage exceeds reader confidence's;
    (ii) MemSafe's error among answered is below answering everything at coverage matched to
         the memory-length control's (``paragraph_count``, the paper's row of Table "reader"):
         the paper names no risk target here, so every gate is read at the same coverages,
         Table "reader"'s (ties in the one fixed order), and (ii) holds when MemSafe is below
         answer-all at each of them;
    (iii) MemSafe's AURC over answer correctness is below reader confidence's.
    """
    wrong = frame["wrong"].to_numpy(float)
    gates = gate_columns(frame)
    mem = gates.get("memsafe", [])
    cov_mem = float(np.mean([coverage_at_risk(wrong, frame[c], target) for c in mem])) if mem else float("nan")
    cov_conf = coverage_at_risk(wrong, frame["gate:confidence"], target)
    length = gates.get("paragraph_count", [])
    answer_all = float(wrong.mean())
    if mem:
        points = []
        for c in coverages:
            err_mem = float(np.mean([gate_error(frame, col, c) for col in mem]))
            err_len = float(np.mean([gate_error(frame, col, c) for col in length])) if length else float("nan")
            points.append((c, err_mem, err_len))
        ii_met = all(e < answer_all for _, e, _ in points)
        ii_value = "; ".join(f"at {c:g}: MemSafe {e:.4f}" + (f", length {e_len:.4f}" if length else "")
                             for c, e, e_len in points) + f"; answer-all {answer_all:.4f}"
    else:
        ii_met, ii_value = False, "no MemSafe gate"
    ii_statement = (f"MemSafe error < answer-all at coverage matched to the {LENGTH_CONTROL} "
                    f"({', '.join(f'{c:g}' for c in coverages)})")
    table = reader_table(frame)
    aurc_of = table.set_index("gate")["aurc"]
    rows = [
        {"criterion": "(i)", "statement": f"coverage at reader risk <= {target:g}: MemSafe > reader confidence",
         "met": bool(cov_mem > cov_conf), "value": f"MemSafe {cov_mem:.3f} vs confidence {cov_conf:.3f}"},
        {"criterion": "(ii)", "statement": ii_statement, "met": bool(ii_met), "value": ii_value},
        {"criterion": "(iii)", "statement": "AURC over answer correctness: MemSafe < reader confidence",
         "met": bool(aurc_of.get("memsafe", np.inf) < aurc_of["confidence"]),
         "value": f"MemSafe {aurc_of.get('memsafe', float('nan')):.4f} vs confidence {aurc_of['confidence']:.4f}"},
    ]
    return pd.DataFrame(rows)


def prevalence_subsample(frame: pd.DataFrame, prevalence: float, draw: int) -> pd.DataFrame:
    """Every complete memory, and unsafe memories in salted-hash order up to ``prevalence``."""
    complete = frame[~frame.unsafe.astype(bool)]
    unsafe = frame[frame.unsafe.astype(bool)]
    want = int(round(prevalence / (1 - prevalence) * len(complete)))
    if want > len(unsafe):
        raise ValueError(f"prevalence {prevalence:g} needs {want} unsafe memories, only {len(unsafe)} read")
    ranked = sorted(unsafe.variant_id, key=lambda v: hash_rank(v, f"prevalence-{draw}"))
    return pd.concat([complete, unsafe[unsafe.variant_id.isin(set(ranked[:want]))]]).sort_index()


def seed_columns(frame: pd.DataFrame, gates: Sequence[str], seeds: Sequence[int]) -> pd.DataFrame:
    """``frame`` with only the columns of ``gates``, a seeded gate's (``gate:<name>:<seed>``)
    narrowed to ``seeds``; a seeded gate without any of them is refused, not silently dropped."""
    wanted = {str(s) for s in seeds}
    keep = []
    for gate, cols in gate_columns(frame).items():
        if gate not in gates:
            continue
        seeded = [c for c in cols if len(c.split(":")) == 3]
        chosen = [c for c in seeded if c.split(":")[2] in wanted]
        if seeded and not chosen:
            raise ValueError(f"gate {gate}: no column for seeds {list(seeds)} (has {seeded})")
        keep += chosen + [c for c in cols if c not in seeded]
    return frame[[c for c in frame.columns if not c.startswith("gate:") or c in keep]]


def prevalence_sweep(frame: pd.DataFrame, prevalences: Sequence[float] = PREVALENCES, draws: int = 5,
                     coverages: Sequence[float] = (0.05, 0.10), gates: Sequence[str] = ("memsafe", "oracle"),
                     seeds: Sequence[int] = (config.DEFAULT_SEED,)) -> pd.DataFrame:
    """Error at ``coverages`` for answer-all and ``gates`` as the unsafe share falls; mean
    over hash-chosen draws (the native rate has one draw: nothing is subsampled).

    A seeded gate reads only the columns of ``seeds``: the paper's sweep uses one estimator
    seed (appendix "Lower corruption prevalence"), ``config.experiment_scale(scale,
    "prevalence").seeds``, the first of the scale's seeds, which is the default here."""
    frame = seed_columns(frame, gates, seeds)
    native = float(frame.unsafe.mean())
    rows = []
    for prevalence in [*prevalences, native]:
        is_native = prevalence == native
        tables = [reader_table(frame if is_native else prevalence_subsample(frame, prevalence, d), coverages)
                  for d in range(1 if is_native else draws)]
        for gate in ("answer_all", *gates):
            for cov in coverages:
                values = [float(t.set_index("gate").loc[gate, f"error_at_{cov:g}"]) for t in tables
                          if gate in set(t.gate)]
                if values:
                    rows.append({"prevalence": prevalence, "native": is_native, "gate": gate, "coverage": cov,
                                 "error": float(np.mean(values)), "draws": len(values)})
    return pd.DataFrame(rows)


def reader_sample(variants: Sequence[Variant], n_questions: int | None, salt: str = "reader-sample"
                  ) -> list[Variant]:
    """Every variant of the first ``n_questions`` questions (of one split) in salted-hash order."""
    return judge_subset(variants, n_questions, salt=salt)


def read_and_judge(variants: Sequence[Variant], scale: ScaleConfig, reader_model: str, judge_model: str | None,
                   n_ctx: int = 8192, max_tokens: int = 16, device: str | None = None, progress: bool = True
                   ) -> tuple[pd.DataFrame, dict]:
    """The reader's answer to every memory and, memory by memory right after it, the judge's
    score (same model: the judge reuses the reader's prompt cache). Both cached on disk by
    (model, settings, prompt) under the notebook's cache, so a killed run resumes. Both run
    on ``device``, by default the run's (a GPU where torch sees one, as Stage A and B)."""
    cache = scale.cache_dir(config.NB06_READER) / "generations.sqlite"
    device = device or default_device()
    lm = load_model(reader_model, n_ctx=n_ctx, device=device)
    reader = Reader(lm, max_tokens=max_tokens, cache_path=cache)
    judge = None
    if judge_model is not None:
        judge = LLMJudge(judge_model, n_ctx=n_ctx, device=device, cache_path=cache,
                         lm=lm if judge_model == reader_model else None)
    rows, seconds = [], {"reader": 0.0, "judge": 0.0}
    with step(f"reader {reader_model} and judge {judge_model} on {len(variants)} memories"):

        for v in progress_bar(variants, desc="read and judge", disable=not progress):
            start = time.perf_counter()
            a = reader.answer([v], progress=False)[0]
            seconds["reader"] += time.perf_counter() - start
            start = time.perf_counter()
            score = float(judge.scores([v], progress=False)[0]) if judge is not None else float("nan")
            seconds["judge"] += time.perf_counter() - start
            rows.append({"variant_id": v.variant_id, "base_id": v.base_id, "state": v.state, "unsafe": v.unsafe,
                         "answer": a.answer, "wrong": int(not a.correct), "confidence": a.confidence,
                         "answer_tokens": a.answer_tokens, "prompt_tokens": a.prompt_tokens,
                         "truncated": a.truncated, "judge_score": score})
    info = {"reader": reader_model, "judge": judge_model, "reader_fingerprint": lm.fingerprint,
            "seconds_reader": round(seconds["reader"], 1), "seconds_judge": round(seconds["judge"], 1),
            "judge_truncated": judge.truncated if judge else 0, "judge_undecided": judge.undecided if judge else 0}
    return pd.DataFrame(rows), info


def few_shot_judge(variants: Sequence[Variant], train: Sequence[Variant], scale: ScaleConfig, judge_model: str,
                   shots: int, n_ctx: int = 16384, device: str | None = None, progress: bool = True
                   ) -> tuple[np.ndarray, dict]:
    """A ``shots``-shot judge's unsafe scores on memories already read, exemplars from ``train``.

    A pass of its own after the reader's: every prompt starts with the same exemplars, so
    llama.cpp computes that prefix once and each memory costs only its own tokens (run
    between reader calls, the prefix would be evicted every time). The paper's four-shot judge
    uses a 16,384-token window; cached like the zero-shot judge; on ``device`` (default: the run's)."""
    cache = scale.cache_dir(config.NB06_READER) / "generations.sqlite"
    judge = LLMJudge(judge_model, shots=shots, n_ctx=n_ctx, device=device or default_device(),
                     cache_path=cache).fit(train)
    start = time.perf_counter()
    with step(f"{shots}-shot judge {judge_model} on {len(variants)} memories"):
        scores = judge.scores(variants, progress=progress)
    judge.lm = None  # frees the model (a second context window of n_ctx tokens)
    return scores, {f"seconds_judge_{shots}shot": round(time.perf_counter() - start, 1),
                    f"judge_{shots}shot_truncated": judge.truncated, f"judge_{shots}shot_undecided": judge.undecided,
                    f"judge_{shots}shot_n_ctx": n_ctx,
                    f"judge_{shots}shot_exemplars": [f"{v.variant_id} ({v.state})" for v in judge.exemplars]}
