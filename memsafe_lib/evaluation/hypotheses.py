"""The paper's pre-registered hypotheses H1-H5, our H6 (the blind-matched construction), H7 (the
blind-hard construction) and the
smoke gates G2-G5, evaluated as code on whatever results exist: each verdict is pass, fail or
untested, with the evidence that decided it.

Each check is decided by the notebook whose runs test it (:data:`VERDICT_SOURCES`): notebook 02
(through ``summarize``) decides H1, H2 and the gates, 03 decides H4, 04 decides H3 and 07 decides
H5. Each writes one verdict file per check it decides (``<folder>/<id>.json``), and
:func:`write_hypotheses_table` gathers them into the one table, ``artifacts/<scale>/hypotheses.csv``,
each row naming the notebook and file it came from. Nothing else writes a table of verdicts, so no
two tables can disagree.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from memsafe_lib import config
from memsafe_lib.config import FAMILY_A_DATASETS, ScaleConfig
from memsafe_lib.estimators.shallow import SHALLOW_CONTROLS  # H7's shallow question-aware controls
from memsafe_lib.io import file_lock, write_csv, write_json
from memsafe_lib.ledger import record_run
from memsafe_lib.measures.inference import METRICS

MEMSAFE, MEAN_POOL, LEXSET, TFIDF = "memsafe", "mean_pool", "lexset", "tfidf"
TEXT_LENGTH, PARAGRAPH_COUNT, MEMSAFE_NO_BRIDGE = "text_length", "paragraph_count", "memsafe_no_bridge"

MUSIQUE, HOTPOTQA, TWOWIKI = FAMILY_A_DATASETS
CLINICAL_PREFIX = "mimic"
FAMILY_A = "size-matched"
BLIND_MATCHED = "blind-matched"
BLIND_HARD = "blind-hard"
BLIND_CONTROLS: tuple[str, ...] = ("blind_bow", "blind_unit", "blind_set", "question_only")
"""H6's question-blind controls (and the question-only one): :mod:`memsafe_lib.estimators.blind`."""
FAMILY_B = "family-b-from-a"
"""H3's family-B rows: models trained on family A, scored unchanged on family B's test split
(notebook 04's transfer); not models trained on family B."""
TEST, VALIDATION = "test", "validation"

PARAGRAPH_COUNT_MAX_AUROC = 0.60
"""Smoke gate: on size-matched data the paragraph count must not reveal the state."""
TEXT_LENGTH_MAX_AUROC = 0.70
"""Smoke gate: nor may the text length (beyond this weak residual)."""
MEMSAFE_OVER_LEXSET_MIN_VALIDATION = 0.05
"""Smoke gate: memsafe's validation unsafe AUROC exceeds lexset's by at least this."""

PASS, FAIL, UNTESTED = "pass", "fail", "untested"
PARTIAL = "partially refuted"
"""H5's status when Table "clinical"'s rows disagree (the paper's own outcome: LexSet leads the
small OMR row, MemSafe the two larger ones)."""
REPORT_COLUMNS: tuple[str, ...] = ("id", "statement", "status", "evidence")


STATEMENTS: dict[str, str] = {
    "H1": "memsafe exceeds mean_pool in test unsafe AUROC on MuSiQue, HotpotQA and 2WikiMultiHopQA "
          "(size-matched), with the bootstrap interval's lower end above 0",
    "H2": "memsafe exceeds lexset and tfidf in test unsafe AUROC and macro F1 (mean over seeds) "
          "on every QA dataset present (size-matched)",
    "H3": "on MuSiQue, memsafe's test unsafe-AUROC drop from family A (size-matched) to family B, "
          "trained on family A only, is smaller than tfidf's and than text_length's",
    "H4": "removing bridge-conditioned encoding (memsafe_no_bridge) lowers test unsafe AUROC on "
          "MuSiQue and 2WikiMultiHopQA (size-matched)",
    "H5": "memsafe exceeds lexset in test unsafe AUROC on MIMIC, in every clinical setting notebook 07 reports "
          "(Table clinical's rows and the learning curve's points; partially refuted where they disagree)",
    "H6": "memsafe exceeds lexset and every blind control (blind_bow, blind_unit, blind_set, question_only) in "
          "test unsafe AUROC (mean over seeds) on MuSiQue, HotpotQA and 2WikiMultiHopQA under the blind-matched "
          "construction (ours, registered before any of its test numbers was read)",
    "H7": "memsafe exceeds lexset, every blind control (blind_bow, blind_unit, blind_set, question_only) and every "
          "shallow question-aware control (qu_tfidf, title_named, retrieval_sim) in test unsafe AUROC (mean over "
          "seeds) on MuSiQue, HotpotQA and 2WikiMultiHopQA under the blind-hard construction (ours, registered "
          "before any of its test numbers existed)",
    "G2": "all data invariants hold",
    "G3": f"paragraph_count test unsafe AUROC <= {PARAGRAPH_COUNT_MAX_AUROC:.2f} on every size-matched dataset",
    "G4": f"text_length test unsafe AUROC <= {TEXT_LENGTH_MAX_AUROC:.2f} on every size-matched dataset",
    "G5": f"memsafe exceeds lexset by >= {MEMSAFE_OVER_LEXSET_MIN_VALIDATION:.2f} in validation unsafe AUROC "
          "on every size-matched dataset",
}

DROPPED_GATES: dict[str, str] = {
    "G1": "all tests pass: not a verdict a run can give. The suite checks the artifacts a run "
          "writes (nbval on the executed notebooks, `memsafe verify`), so it runs after the run, in "
          "`make test`; a result table written before it cannot attest it without being circular. "
          "The ledger's code fingerprint ties every result to the code the suite checked.",
}
"""Smoke gates of the paper that are not evaluated here, with the reason."""

_Check = tuple[bool | None, str]  # (outcome, evidence); None: could not be tested


def _status(checks: list[_Check], nothing: str = "no applicable data") -> tuple[str, str]:
    """fail if any check fails (a universal claim is refuted by one case), pass if all pass, else untested."""
    if not checks:
        return UNTESTED, nothing
    outcomes = [ok for ok, _ in checks]
    status = FAIL if False in outcomes else PASS if all(ok is True for ok in outcomes) else UNTESTED
    return status, "; ".join(text for _, text in checks)


def _verdict(check_id: str, checks: list[_Check], nothing: str = "no applicable data") -> dict[str, str]:
    status, evidence = _status(checks, nothing)
    return {"id": check_id, "statement": STATEMENTS[check_id], "status": status, "evidence": evidence}


def _report(rows: list[dict[str, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(REPORT_COLUMNS))


_KEYS = ("dataset", "construction", "model", "seed", "split")


class _Means:
    """Seed means of a results table, looked up by (dataset, construction, model, split, metric)."""

    def __init__(self, metrics: pd.DataFrame) -> None:
        missing = [c for c in _KEYS if c not in metrics.columns]
        if missing:
            raise ValueError(f"metrics table lacks column(s) {missing}")
        dup = metrics.duplicated(list(_KEYS))
        if dup.any():
            raise ValueError(f"metrics table has {int(dup.sum())} duplicate rows for one "
                             "(dataset, construction, model, seed, split)")
        self.table = metrics
        cols = [m for m in METRICS if m in metrics.columns]
        self.means = metrics.groupby(["dataset", "construction", "model", "split"])[cols].mean() if cols else None

    def get(self, dataset: str, construction: str, model: str, split: str, metric: str) -> float | None:
        if self.means is None or metric not in self.means.columns:
            return None
        try:
            value = self.means.loc[(dataset, construction, model, split), metric]
        except KeyError:
            return None
        return None if pd.isna(value) else float(value)

    def datasets(self, construction: str, predicate: Callable[[str], bool] = lambda d: True) -> list[str]:
        t = self.table
        return sorted(d for d in t.loc[t["construction"] == construction, "dataset"].unique() if predicate(d))


def _lookup_interval(intervals: pd.DataFrame | None, dataset: str, a: str, b: str,
                     metric: str) -> tuple[float, float] | None:
    """(lo, hi) for a - b; a stored b - a interval is negated."""
    if intervals is None or intervals.empty:
        return None
    for x, y, sign in ((a, b, 1.0), (b, a, -1.0)):
        hit = intervals[(intervals["dataset"] == dataset) & (intervals["model_a"] == x)
                        & (intervals["model_b"] == y) & (intervals["metric"] == metric)]
        if len(hit):
            lo, hi = float(hit["lo"].iloc[0]), float(hit["hi"].iloc[0])
            return (lo, hi) if sign > 0 else (-hi, -lo)
    return None


def _exceeds(means: _Means, dataset: str, construction: str, split: str, metric: str, a: str, b: str,
             margin: float = 0.0) -> _Check:
    """Check mean(a) - mean(b) > margin (>= margin when margin > 0)."""
    va, vb = means.get(dataset, construction, a, split, metric), means.get(dataset, construction, b, split, metric)
    where = f"{dataset} {split} {metric}"
    if va is None or vb is None:
        absent = [m for m, v in ((a, va), (b, vb)) if v is None]
        return None, f"{where}: missing {', '.join(absent)}"
    ok = va - vb >= margin - 1e-12 if margin > 0 else va > vb  # tolerance: 0.65 - 0.60 is 0.0499...
    rel = f">= {margin:.2f}" if margin > 0 else "> 0"
    return ok, f"{where}: {a} {va:.4f} - {b} {vb:.4f} = {va - vb:+.4f} ({'ok' if ok else 'not'} {rel})"


def _h2_checks(means: _Means, lexset: str) -> list[_Check]:
    qa_present = means.datasets(FAMILY_A, lambda d: d in FAMILY_A_DATASETS)
    return [_exceeds(means, d, FAMILY_A, TEST, metric, MEMSAFE, other)
            for d in qa_present for other in (lexset, TFIDF) for metric in METRICS]


def h2_readings(metrics: pd.DataFrame, variants: Sequence[str]) -> pd.DataFrame:
    """H2 read with each LexSet variant in LexSet's place (``against``), after the registered
    reading (``registered``: against LexSet itself, the verdict of the hypotheses table). The
    paper specifies LexSet by its name and the features Stage B borrows, so these rows show
    how much of H2's outcome rests on our choices (title features, gradient boosting); they
    are readings, not registered hypotheses."""
    means = _Means(metrics)
    rows = []
    for lexset in (LEXSET, *variants):
        status, evidence = _status(_h2_checks(means, lexset), "no size-matched QA dataset in the table")
        rows.append({"against": lexset, "registered": lexset == LEXSET, "status": status, "evidence": evidence})
    return pd.DataFrame(rows)


def evaluate_hypotheses(metrics: pd.DataFrame, intervals: pd.DataFrame | None = None) -> pd.DataFrame:
    """Status of the pre-registered hypotheses H1-H5 from seed-level results and bootstrap intervals.

    ``metrics`` has one row per (dataset, construction, model, seed, split) with
    ``unsafe_auroc`` and ``macro_f1``; values are averaged over seeds. ``intervals`` has
    dataset, model_a, model_b, metric, estimate, lo, hi (test split, size-matched). A
    hypothesis fails when any of its cases fails (each is a universal claim), passes when
    every case was tested and holds, and is otherwise untested; the evidence names what
    was missing.
    """
    means = _Means(metrics)
    rows = []

    h1: list[_Check] = []
    for d in FAMILY_A_DATASETS:
        ok, text = _exceeds(means, d, FAMILY_A, TEST, "unsafe_auroc", MEMSAFE, MEAN_POOL)
        ci = _lookup_interval(intervals, d, MEMSAFE, MEAN_POOL, "unsafe_auroc")
        if ci is None:
            text += f"; {d}: missing interval {MEMSAFE} - {MEAN_POOL}"
            ok = False if ok is False else None
        else:
            ci_ok = ci[0] > 0
            text += f", CI [{ci[0]:+.4f}, {ci[1]:+.4f}] ({'lo > 0' if ci_ok else 'lo <= 0'})"
            ok = None if ok is None and ci_ok else (bool(ok) and ci_ok)
        h1.append((ok, text))
    rows.append(_verdict("H1", h1))

    rows.append(_verdict("H2", _h2_checks(means, LEXSET), nothing="no size-matched QA dataset in the table"))

    drops: dict[str, float | None] = {}
    h3_missing = []
    for model in (MEMSAFE, TFIDF, TEXT_LENGTH):
        a = means.get(MUSIQUE, FAMILY_A, model, TEST, "unsafe_auroc")
        b = means.get(MUSIQUE, FAMILY_B, model, TEST, "unsafe_auroc")
        drops[model] = None if a is None or b is None else a - b
        if a is None:
            h3_missing.append(f"{model} {FAMILY_A}")
        if b is None:
            h3_missing.append(f"{model} {FAMILY_B}")
    h3: list[_Check] = []
    for other in (TFIDF, TEXT_LENGTH):
        dm, do = drops[MEMSAFE], drops[other]
        if dm is None or do is None:
            gone = [f for f in h3_missing if f.startswith((MEMSAFE + " ", other + " "))]
            h3.append((None, f"{MUSIQUE} drop {MEMSAFE} vs {other}: missing {', '.join(gone)}"))
        else:
            ok = dm < do
            h3.append((ok, f"{MUSIQUE} A->B drop {MEMSAFE} {dm:+.4f} vs {other} {do:+.4f} "
                           f"({'ok' if ok else 'not'} smaller)"))
    rows.append(_verdict("H3", h3))

    h4 = [_exceeds(means, d, FAMILY_A, TEST, "unsafe_auroc", MEMSAFE, MEMSAFE_NO_BRIDGE) for d in (MUSIQUE, TWOWIKI)]
    rows.append(_verdict("H4", h4))

    # H5 over every clinical (dataset, construction) in ``metrics``: notebook 07 passes Table
    # "clinical"'s rows, as the paper grades it, not the learning curve's points. Rows that
    # disagree make it partially refuted, the paper's outcome.
    clinical = sorted(d for d in metrics["dataset"].unique() if str(d).startswith(CLINICAL_PREFIX))
    h5: list[_Check] = []
    for d in clinical:
        for cons in sorted(metrics.loc[metrics["dataset"] == d, "construction"].unique()):
            ok, text = _exceeds(means, d, cons, TEST, "unsafe_auroc", MEMSAFE, LEXSET)
            h5.append((ok, f"{text} [{cons}]"))
    h5_row = _verdict("H5", h5, nothing=f"no dataset starting with {CLINICAL_PREFIX!r}")
    outcomes = {ok for ok, _ in h5}
    if {True, False} <= outcomes:
        h5_row["status"] = PARTIAL
    rows.append(h5_row)

    h6 = [_exceeds(means, d, BLIND_MATCHED, TEST, "unsafe_auroc", MEMSAFE, other)
          for d in FAMILY_A_DATASETS for other in (LEXSET, *BLIND_CONTROLS)] if means.datasets(BLIND_MATCHED) else []
    rows.append(_verdict("H6", h6, nothing=f"no {BLIND_MATCHED} runs in the table"))

    h7 = [_exceeds(means, d, BLIND_HARD, TEST, "unsafe_auroc", MEMSAFE, other)
          for d in FAMILY_A_DATASETS for other in (LEXSET, *BLIND_CONTROLS, *SHALLOW_CONTROLS)
          ] if means.datasets(BLIND_HARD) else []
    rows.append(_verdict("H7", h7, nothing=f"no {BLIND_HARD} runs in the table"))
    return _report(rows)


def _flag(check_id: str, value: bool | None, what: str) -> dict[str, str]:
    if value is None:
        return _verdict(check_id, [(None, f"{what}: not reported")])
    return _verdict(check_id, [(bool(value), f"{what}: {'yes' if value else 'no'}")])


def _ceiling(means: _Means, check_id: str, model: str, ceiling: float) -> dict[str, str]:
    checks: list[_Check] = []
    for d in means.datasets(FAMILY_A):
        v = means.get(d, FAMILY_A, model, TEST, "unsafe_auroc")
        if v is None:
            checks.append((None, f"{d}: missing {model}"))
        else:
            ok = v <= ceiling
            checks.append((ok, f"{d}: {model} {v:.4f} ({'<=' if ok else '>'} {ceiling:.2f})"))
    return _verdict(check_id, checks, nothing="no size-matched dataset in the table")


def smoke_gates(metrics: pd.DataFrame, *, invariants_hold: bool | None) -> pd.DataFrame:
    """Smoke gates G2-G5 that must pass before results are reported (same columns as the hypotheses).

    The invariant outcome comes in as a flag (None: not checked, so untested). The control
    gates read seed means of the test split; the memsafe-over-lexset gate reads the
    validation split so it can be checked without looking at test results. G1 (all tests
    pass) is not evaluated: :data:`DROPPED_GATES` says why.
    """
    means = _Means(metrics)
    rows = [_flag("G2", invariants_hold, "data invariants hold"),
            _ceiling(means, "G3", PARAGRAPH_COUNT, PARAGRAPH_COUNT_MAX_AUROC),
            _ceiling(means, "G4", TEXT_LENGTH, TEXT_LENGTH_MAX_AUROC)]
    g5 = [_exceeds(means, d, FAMILY_A, VALIDATION, "unsafe_auroc", MEMSAFE, LEXSET, MEMSAFE_OVER_LEXSET_MIN_VALIDATION)
          for d in means.datasets(FAMILY_A)]
    rows.append(_verdict("G5", g5, nothing="no size-matched dataset in the table"))
    return _report(rows)


@dataclass(frozen=True)
class VerdictSource:
    """Where a check's verdict comes from: the notebook whose runs test it and the artifact
    folder its verdict file is written to."""

    notebook: str
    folder: str

    def path(self, check_id: str) -> str:
        """The verdict file, relative to the run dir (``03_ablations/h4.json``)."""
        return f"{self.folder}/{check_id.lower()}.json"


_NB02 = VerdictSource(config.NB02_TRAINING, config.EVALUATE)  # notebook 02 summarizes into evaluate/
VERDICT_SOURCES: dict[str, VerdictSource] = {
    "H1": _NB02,
    "H2": _NB02,
    "H3": VerdictSource(config.NB04_TRANSFER, config.NB04_TRANSFER),  # transfer, family B from A
    "H4": VerdictSource(config.NB03_ABLATIONS, config.NB03_ABLATIONS),  # the no-bridge ablation
    "H5": VerdictSource(config.NB07_CLINICAL, config.NB07_CLINICAL),  # the clinical runs
    "H6": _NB02,  # notebook 02's blind-matched section
    "H7": _NB02,  # notebook 02's blind-hard section
    **{g: _NB02 for g in ("G2", "G3", "G4", "G5")},
}
"""The one notebook that decides each row of the table. Notebook 03's ``summarize`` sees
notebook 02's runs too, but only H4 is decided there: H1, H2 and the gates are questions
about the main runs, and H5 about the clinical ones."""
TABLE_COLUMNS: tuple[str, ...] = (*REPORT_COLUMNS, "notebook", "source")
RETIRED_TABLES: tuple[str, ...] = tuple(f"{folder}/{name}" for folder in (config.EVALUATE, config.NB03_ABLATIONS)
                                        for name in ("hypotheses.csv", "smoke_gates.csv"))
"""Per-folder tables that ``summarize`` wrote before the one table (relative to the run dir):
each held every hypothesis as seen from that folder's runs, so they contradicted each other
and notebooks 04 and 07. Nothing writes them now; ``memsafe verify`` tolerates their absence."""


def decided_in(folder: str) -> list[str]:
    """The checks whose verdict files ``folder`` holds."""
    return [i for i, s in VERDICT_SOURCES.items() if s.folder == folder]


def write_verdicts(report: pd.DataFrame, run_dir: Path, folder: str) -> list[Path]:
    """One verdict file per check of ``report`` that ``folder`` decides (others are ignored)."""
    rows = report.set_index("id")
    return [write_json(run_dir / VERDICT_SOURCES[i].path(i),
                       {"id": i, **{c: str(rows.loc[i, c]) for c in REPORT_COLUMNS if c != "id"}})
            for i in decided_in(folder) if i in rows.index]


def hypotheses_table(run_dir: Path) -> pd.DataFrame:
    """The one table: each check's verdict from the file its notebook wrote, untested (naming
    the file) where that notebook has not run."""
    rows = []
    for check_id, source in VERDICT_SOURCES.items():
        path = run_dir / source.path(check_id)
        if path.exists():
            verdict = json.loads(path.read_text(encoding="utf-8"))
            if verdict.get("id") != check_id:
                raise ValueError(f"{path}: holds the verdict of {verdict.get('id')!r}, not {check_id}")
            status, evidence = verdict["status"], verdict.get("evidence", "")
            statement = verdict.get("statement") or STATEMENTS[check_id]
        else:
            status, statement = UNTESTED, STATEMENTS[check_id]
            evidence = f"no {source.path(check_id)} (notebook {source.notebook} not run)"
        rows.append({"id": check_id, "statement": statement, "status": status, "evidence": evidence,
                     "notebook": source.notebook, "source": source.path(check_id)})
    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS))


def write_hypotheses_table(scale: ScaleConfig) -> Path:
    """Write ``<run dir>/hypotheses.csv`` from the verdict files present, with a ledger entry.

    Every notebook that decides a check calls this after writing its verdict, so whichever
    runs last leaves the table in step with every verdict file (and the ledger's latest
    entry for the table matches its bytes)."""
    run_dir = scale.run_dir
    with file_lock(run_dir / config.HYPOTHESES_FILE):  # notebooks side by side: one table at a time
        table = hypotheses_table(run_dir)
        path = write_csv(run_dir / config.HYPOTHESES_FILE, table)
        inputs = [run_dir / s for s in table.source if (run_dir / s).exists()]
        record_run("hypotheses", scale, inputs=inputs, outputs=[path],
                   metrics={"hypotheses": table.set_index("id")["status"].to_dict()})
    return path


def migrate_retired_tables(scale: ScaleConfig) -> list[Path]:
    """Turn the retired per-folder tables of a run dir into the verdict files of the one table:
    each table gives only the rows its own folder decides (``evaluate/hypotheses.csv`` gives
    H1 and H2, not H4), never overwrites a verdict file a notebook already wrote, and is then
    deleted; a ledger entry names the tables read and the files written. Committed results
    from before the one table keep their verdicts without re-running their notebooks."""
    run_dir = scale.run_dir
    present = [rel for rel in RETIRED_TABLES if (run_dir / rel).exists()]
    written: list[Path] = []
    for rel in present:
        folder = rel.split("/")[0]
        table = pd.read_csv(run_dir / rel, keep_default_na=False).set_index("id")
        for check_id in decided_in(folder):
            path = run_dir / VERDICT_SOURCES[check_id].path(check_id)
            if check_id in table.index and not path.exists():
                row = table.loc[check_id]
                written.append(write_json(path, {"id": check_id, "statement": str(row.get("statement", "")) or
                                                 STATEMENTS[check_id], "status": str(row["status"]),
                                                 "evidence": f"{row['evidence']} (from {rel})"}))
    if present:
        record_run("hypotheses-migration", scale, inputs=[run_dir / rel for rel in present], outputs=written,
                   settings={"retired": present})
        for rel in present:
            (run_dir / rel).unlink()
    return written


def disagreements(run_dir: Path, sources: Sequence[str] = RETIRED_TABLES) -> list[str]:
    """Where the one table and another statement of a verdict differ: a row whose verdict file
    says otherwise, or a row of a retired per-folder table (``sources``) that says otherwise.
    Empty when there is no one table yet (the layout before it)."""
    table_path = run_dir / config.HYPOTHESES_FILE
    if not table_path.exists():
        return []
    table = pd.read_csv(table_path, keep_default_na=False)
    status = dict(zip(table["id"], table["status"], strict=True))
    out = []
    for row in table.itertuples():
        path = run_dir / row.source
        if path.exists():
            said = json.loads(path.read_text(encoding="utf-8")).get("status")
            if said != row.status:
                out.append(f"{table_path}: {row.id} {row.status} but {row.source} says {said}")
        elif row.status != UNTESTED:
            out.append(f"{table_path}: {row.id} {row.status} but its source {row.source} is missing")
    for rel in sources:
        if (run_dir / rel).exists():
            other = pd.read_csv(run_dir / rel, keep_default_na=False)
            for check_id, said in zip(other["id"], other["status"], strict=True):
                if check_id in status and status[check_id] != said:
                    out.append(f"{run_dir / rel}: says {check_id} {said} but {table_path} says "
                               f"{status[check_id]} (a retired per-folder table: delete it)")
    return out
