"""Inference for the paper's model comparisons, and its pre-registered hypotheses and smoke gates as code.

The paper's intervals come from "a paired hierarchical bootstrap with 1,000 resamples over
base questions and seeds": base questions are resampled as clusters (all variants of a
drawn question come along), the same draw is used for every seed and for both models, so
the interval reflects the uncertainty of the *difference* and not that of each model.
Seed-level Wilcoxon tests are descriptive only: with five seeds the smallest attainable
two-sided p is 2 / 2**5 = 0.0625, so no comparison can reach p < 0.05.

Resamples in which a metric is undefined (one class only for AUROC, a missing state for
macro F1) are redrawn and counted, never scored 0 or NaN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.stats import PermutationMethod, wilcoxon
from statsmodels.stats.multitest import multipletests

from .metrics import macro_f1, unsafe_auroc

# ---------------------------------------------------------------------------------------------
# Constants: names, thresholds and the paper's inference settings.

SEEDS: tuple[int, ...] = (17, 29, 43, 71, 101)
BOOTSTRAP_RESAMPLES = 1000
MIN_WILCOXON_P_FIVE_SEEDS = 2 / 2**5
"""0.0625: the smallest two-sided exact Wilcoxon p with five paired seeds."""

METRICS: tuple[str, ...] = ("unsafe_auroc", "macro_f1")

MEMSAFE, MEAN_POOL, LEXSET, TFIDF = "memsafe", "mean_pool", "lexset", "tfidf"
TEXT_LENGTH, PARAGRAPH_COUNT, MEMSAFE_NO_BRIDGE = "text_length", "paragraph_count", "memsafe_no_bridge"

MUSIQUE, HOTPOTQA, TWOWIKI = "musique", "hotpotqa", "2wikimultihopqa"
QA_DATASETS: tuple[str, ...] = (MUSIQUE, HOTPOTQA, TWOWIKI)
CLINICAL_PREFIX = "mimic"
FAMILY_A, FAMILY_B = "size-matched", "family-b"
TEST, VALIDATION = "test", "validation"

PARAGRAPH_COUNT_MAX_AUROC = 0.60
"""Smoke gate: on size-matched data the paragraph count must not reveal the state."""
TEXT_LENGTH_MAX_AUROC = 0.70
"""Smoke gate: nor may the text length (beyond this weak residual)."""
MEMSAFE_OVER_LEXSET_MIN_VALIDATION = 0.05
"""Smoke gate: memsafe's validation unsafe AUROC exceeds lexset's by at least this."""

PASS, FAIL, UNTESTED = "pass", "fail", "untested"
REPORT_COLUMNS: tuple[str, ...] = ("id", "statement", "status", "evidence")


# ---------------------------------------------------------------------------------------------
# Weighted AUROC


def _auroc_from_bins(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """AUROC from class weights per dense score rank (last axis, ascending); ties count 1/2.

    Returns NaN where a class has zero weight; callers decide what that means.
    """
    below = np.cumsum(neg, axis=-1) - neg  # negative weight strictly below each rank
    num = np.sum(pos * (below + 0.5 * neg), axis=-1)
    denom = pos.sum(axis=-1) * neg.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, num / np.where(denom > 0, denom, 1.0), np.nan)


def weighted_auroc(
    unsafe: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray
) -> float:
    """AUROC with example weights, ties counting one half, in O(n log n).

    A row of weight k counts as k copies of itself, which is how the cluster bootstrap
    represents a base question drawn k times. Raises ``ValueError`` when either class has
    zero total weight (undefined, not 0.5).
    """
    y = np.asarray(unsafe, dtype=bool)
    s = np.asarray(score, dtype=float)
    w = np.asarray(weights, dtype=float)
    if not (y.shape == s.shape == w.shape) or y.ndim != 1:
        raise ValueError(f"labels, scores and weights must be 1-d of one length: {y.shape}, {s.shape}, {w.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and non-negative")
    _, rank = np.unique(s, return_inverse=True)
    pos = np.bincount(rank, weights=w * y)
    neg = np.bincount(rank, weights=w * ~y)
    w_pos, w_neg = float(pos.sum()), float(neg.sum())
    if w_pos <= 0 or w_neg <= 0:
        raise ValueError(f"AUROC needs both classes with positive weight (unsafe={w_pos}, complete={w_neg})")
    return float(_auroc_from_bins(pos, neg))


# ---------------------------------------------------------------------------------------------
# Paired hierarchical bootstrap


@dataclass(frozen=True)
class BootstrapResult:
    """Difference metric(a) - metric(b), averaged over seeds, with its percentile interval."""

    metric: str
    estimate: float
    lo: float
    hi: float
    n_resamples: int
    n_redrawn: int
    per_seed: dict[object, float]
    confidence: float = 0.95
    samples: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)

    @property
    def excludes_zero(self) -> bool:
        """True when the interval lies strictly on one side of zero."""
        return self.lo > 0 or self.hi < 0


@dataclass(frozen=True)
class _SeedTables:
    """Per seed and model, class weights per (base question, score bin) as sparse matrices.

    For AUROC the bins are dense score ranks and there are two tables per model (unsafe,
    complete); for macro F1 the bins are states and the tables are true-positive,
    true-support and predicted counts. A resample's weighted counts are then one product
    ``base_counts @ table``.
    """

    metric: str
    tables: list[dict[str, sparse.csr_array]]  # one dict per seed


def _table(base_idx: np.ndarray, bins: np.ndarray, values: np.ndarray, n_bases: int, n_bins: int) -> sparse.csr_array:
    return sparse.csr_array((values.astype(float), (base_idx, bins)), shape=(n_bases, n_bins))


def _prepare(frame: pd.DataFrame, metric: str, seeds: list[object], base_idx: np.ndarray,
             n_bases: int, labels: list[str]) -> _SeedTables:
    tables: list[dict[str, sparse.csr_array]] = []
    seed_col = frame["seed"].to_numpy()
    for seed in seeds:
        rows = np.flatnonzero(seed_col == seed)
        b = base_idx[rows]
        t: dict[str, sparse.csr_array] = {}
        if metric == "unsafe_auroc":
            y = frame["unsafe"].to_numpy(dtype=bool)[rows]
            for m in ("a", "b"):
                uniq, rank = np.unique(frame[f"score_{m}"].to_numpy(dtype=float)[rows], return_inverse=True)
                t[f"pos_{m}"] = _table(b, rank, y, n_bases, len(uniq))
                t[f"neg_{m}"] = _table(b, rank, ~y, n_bases, len(uniq))
        else:
            code = {c: i for i, c in enumerate(labels)}
            true = frame["state"].astype(str).to_numpy()[rows]
            t_code = np.array([code[c] for c in true], dtype=int)
            t["true"] = _table(b, t_code, np.ones(len(rows)), n_bases, len(labels))
            for m in ("a", "b"):
                pred = frame[f"pred_{m}"].astype(str).to_numpy()[rows]
                known = np.array([c in code for c in pred], dtype=bool)  # other predictions only add errors
                p_code = np.array([code.get(c, 0) for c in pred], dtype=int)
                t[f"pred_{m}"] = _table(b, p_code, known, n_bases, len(labels))
                t[f"tp_{m}"] = _table(b, t_code, pred == true, n_bases, len(labels))
        tables.append(t)
    return _SeedTables(metric, tables)


def _differences(prepared: _SeedTables, base_counts: np.ndarray) -> np.ndarray:
    """metric_w(a) - metric_w(b) per seed (rows) and resample (columns); NaN where undefined."""
    counts = np.asarray(base_counts, dtype=float)
    out = np.empty((len(prepared.tables), counts.shape[0]))
    for i, t in enumerate(prepared.tables):
        if prepared.metric == "unsafe_auroc":
            values = [_auroc_from_bins(counts @ t[f"pos_{m}"], counts @ t[f"neg_{m}"]) for m in ("a", "b")]
        else:
            support = counts @ t["true"]
            values = []
            for m in ("a", "b"):
                denom = support + counts @ t[f"pred_{m}"]
                with np.errstate(invalid="ignore", divide="ignore"):
                    f1 = np.where(denom > 0, 2 * (counts @ t[f"tp_{m}"]) / np.where(denom > 0, denom, 1.0), 0.0)
                # a state absent from the resample makes macro F1 undefined, as for AUROC
                values.append(np.where(np.all(support > 0, axis=1), f1.mean(axis=1), np.nan))
        out[i] = values[0] - values[1]
    return out


def _statistics(prepared: _SeedTables, seed_counts: np.ndarray, base_counts: np.ndarray) -> np.ndarray:
    """Mean over drawn seeds (with multiplicity) of the weighted difference; NaN if undefined for a drawn seed."""
    diffs = _differences(prepared, base_counts).T  # resamples x seeds
    drawn = seed_counts > 0
    undefined = np.any(drawn & np.isnan(diffs), axis=1)
    stat = np.sum(np.where(drawn, diffs, 0.0) * seed_counts, axis=1) / seed_counts.sum(axis=1)
    return np.where(undefined, np.nan, stat)


def _draw_counts(rng: np.random.Generator, n_draws: int, n_items: int) -> np.ndarray:
    """Multiplicities of ``n_items`` draws with replacement from ``n_items`` items, per resample."""
    idx = rng.integers(0, n_items, size=(n_draws, n_items)) + n_items * np.arange(n_draws)[:, None]
    return np.bincount(idx.ravel(), minlength=n_draws * n_items).reshape(n_draws, n_items)


_REQUIRED = {"unsafe_auroc": ("seed", "base_id", "unsafe", "score_a", "score_b"),
             "macro_f1": ("seed", "base_id", "state", "pred_a", "pred_b")}


def _point_estimate(frame: pd.DataFrame, metric: str, seeds: list[object], labels: list[str]) -> dict[object, float]:
    per_seed: dict[object, float] = {}
    for seed in seeds:
        g = frame[frame["seed"] == seed]
        key = seed.item() if isinstance(seed, np.generic) else seed
        if metric == "unsafe_auroc":
            y = g["unsafe"].to_numpy(dtype=bool)
            per_seed[key] = (unsafe_auroc(y, g["score_a"].to_numpy(float))
                             - unsafe_auroc(y, g["score_b"].to_numpy(float)))
        else:
            missing = sorted(set(labels) - set(g["state"].astype(str)))
            if missing:
                raise ValueError(f"seed {key} lacks state(s) {missing}: macro F1 over {labels} is undefined there")
            t = g["state"].astype(str).tolist()
            per_seed[key] = (macro_f1(t, g["pred_a"].astype(str).tolist(), labels)
                             - macro_f1(t, g["pred_b"].astype(str).tolist(), labels))
    return per_seed


def paired_bootstrap(
    frame: pd.DataFrame,
    *,
    metric: str = "unsafe_auroc",
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    random_state: int | np.random.Generator | None = 0,
    max_redraw_fraction: float = 0.1,
    confidence: float = 0.95,
    batch_size: int = 250,
) -> BootstrapResult:
    """Paired hierarchical bootstrap of metric(a) - metric(b) over seeds and base questions.

    ``frame`` has one row per (seed, variant): ``seed``, ``base_id`` and, for
    ``"unsafe_auroc"``, ``unsafe`` (bool), ``score_a``, ``score_b``; for ``"macro_f1"``,
    ``state`` (true state), ``pred_a``, ``pred_b``. Both models are scored on the same
    rows (that is the pairing). A deterministic model has no seed: the caller broadcasts
    its scores to every seed of the other model.

    Each resample draws seeds with replacement and, once, base questions with replacement
    (clusters: every variant of a drawn question, weighted by its multiplicity); that one
    question draw serves every drawn seed and both models, so shared question difficulty
    cancels in the difference. The statistic is the mean over drawn seeds of the weighted
    difference. Resamples where the metric is undefined for a drawn seed (a single class;
    for macro F1 a missing state) are redrawn and counted in ``n_redrawn``; more than
    ``max_redraw_fraction * n_resamples`` redraws raise ``ValueError``, since the interval
    would then describe a conditional distribution far from the data's.
    """
    if metric not in _REQUIRED:
        raise ValueError(f"metric must be one of {sorted(_REQUIRED)}, not {metric!r}")
    missing_cols = [c for c in _REQUIRED[metric] if c not in frame.columns]
    if missing_cols:
        raise ValueError(f"frame lacks column(s) {missing_cols} needed for {metric}")
    if len(frame) == 0:
        raise ValueError("frame is empty")
    if n_resamples < 1:
        raise ValueError("n_resamples must be at least 1")
    if not 0 < confidence < 1:
        raise ValueError("confidence must lie strictly between 0 and 1")
    if max_redraw_fraction < 0:
        raise ValueError("max_redraw_fraction must be non-negative")
    cols = list(_REQUIRED[metric])
    if frame[cols].isna().any().any():
        bad = [c for c in cols if frame[c].isna().any()]
        raise ValueError(f"missing values in {bad}: both models must be scored on every row")
    if metric == "unsafe_auroc" and not np.all(np.isfinite(frame[["score_a", "score_b"]].to_numpy(float))):
        raise ValueError("scores must be finite")
    frame = frame.reset_index(drop=True)

    seeds = list(pd.unique(frame["seed"]))
    base_codes, _bases = pd.factorize(frame["base_id"])
    n_bases = len(_bases)
    labels = sorted(set(frame["state"].astype(str))) if metric == "macro_f1" else []

    per_seed = _point_estimate(frame, metric, seeds, labels)
    estimate = float(np.mean(list(per_seed.values())))

    prepared = _prepare(frame, metric, seeds, np.asarray(base_codes), n_bases, labels)
    rng = random_state if isinstance(random_state, np.random.Generator) else np.random.default_rng(random_state)
    max_redrawn = max_redraw_fraction * n_resamples
    kept: list[np.ndarray] = []
    n_kept = n_redrawn = 0
    while n_kept < n_resamples:
        n = min(batch_size, n_resamples - n_kept)
        seed_counts = _draw_counts(rng, n, len(seeds))
        base_counts = _draw_counts(rng, n, n_bases)
        stat = _statistics(prepared, seed_counts, base_counts)
        ok = ~np.isnan(stat)
        n_redrawn += int((~ok).sum())
        if n_redrawn > max_redrawn:
            raise ValueError(
                f"{n_redrawn} resamples were undefined for {metric} (a single class or a missing state), more than "
                f"max_redraw_fraction={max_redraw_fraction} of {n_resamples}; too few base questions per class")
        kept.append(stat[ok])
        n_kept += int(ok.sum())
    samples = np.concatenate(kept)
    alpha = (1 - confidence) / 2
    lo, hi = np.percentile(samples, [100 * alpha, 100 * (1 - alpha)])
    return BootstrapResult(metric=metric, estimate=estimate, lo=float(lo), hi=float(hi), n_resamples=n_resamples,
                           n_redrawn=n_redrawn, per_seed=per_seed, confidence=confidence, samples=samples)


# ---------------------------------------------------------------------------------------------
# Seed-level Wilcoxon signed-rank tests with Holm correction (descriptive)


def wilcoxon_holm(per_seed: pd.DataFrame, comparisons: Iterable[tuple[str, str, str]]) -> pd.DataFrame:
    """Seed-paired two-sided Wilcoxon signed-rank tests, Holm-corrected over ``comparisons``.

    Descriptive only: with five seeds the smallest attainable two-sided p is 0.0625, so
    no comparison can be significant at 0.05; the paper's inference is the bootstrap.
    ``per_seed`` has columns ``model``, ``seed`` and one column per metric; each
    comparison is ``(model_a, model_b, metric)`` over the seeds both models have.
    Differences are rounded to 12 decimals so float noise does not create or break ties
    and zeros. Without ties or zeros the exact null distribution is used; with them, the
    exact sign-flip distribution (n <= 13) or the normal approximation (larger n). All
    differences zero gives p = 1.0 with a note instead of scipy's NaN.
    """
    comparisons = list(comparisons)
    if not comparisons:
        raise ValueError("no comparisons given")
    for col in ("model", "seed"):
        if col not in per_seed.columns:
            raise ValueError(f"per_seed lacks column {col!r}")
    rows = []
    for model_a, model_b, metric in comparisons:
        if metric not in per_seed.columns:
            raise ValueError(f"per_seed has no metric column {metric!r}")
        sides = []
        for model in (model_a, model_b):
            g = per_seed.loc[per_seed["model"] == model, ["seed", metric]].dropna()
            if g.empty:
                raise ValueError(f"no {metric} values for model {model!r}")
            if g["seed"].duplicated().any():
                raise ValueError(f"model {model!r} has several {metric} rows for one seed")
            sides.append(g.set_index("seed")[metric])
        joined = pd.concat(sides, axis=1, join="inner", keys=["a", "b"])
        if joined.empty:
            raise ValueError(f"{model_a!r} and {model_b!r} share no seed with {metric}")
        d = np.round(joined["a"].to_numpy(float) - joined["b"].to_numpy(float), 12)
        n = len(d)
        nonzero = d[d != 0]
        notes = []
        if nonzero.size == 0:
            statistic, p = 0.0, 1.0
            notes.append("all differences are zero: p set to 1.0")
        else:
            has_ties = len(np.unique(np.abs(nonzero))) < nonzero.size
            if not has_ties and nonzero.size == n:
                method: str | PermutationMethod = "exact"
            elif n <= 13:
                method = PermutationMethod()  # 2**n <= 9999 sign flips: enumerated, so exact
                notes.append("ties or zeros: exact sign-flip distribution")
            else:
                method = "asymptotic"
                notes.append("ties or zeros: normal approximation")
            res = wilcoxon(d, alternative="two-sided", method=method)
            statistic, p = float(res.statistic), float(res.pvalue)
            floor = 2 / 2**nonzero.size
            if floor >= 0.05:
                notes.append(f"descriptive: smallest attainable p is {floor:.4g} "
                             f"with {nonzero.size} nonzero differences")
        rows.append({"model_a": model_a, "model_b": model_b, "metric": metric, "n_seeds": n,
                     "mean_diff": float(np.mean(d)), "statistic": statistic, "p_value": p, "note": "; ".join(notes)})
    out = pd.DataFrame(rows)
    out["p_holm"] = multipletests(out["p_value"].to_numpy(float), method="holm")[1]
    return out[["model_a", "model_b", "metric", "n_seeds", "mean_diff", "statistic", "p_value", "p_holm", "note"]]


# ---------------------------------------------------------------------------------------------
# Pre-registered hypotheses and smoke gates

STATEMENTS: dict[str, str] = {
    "H1": "memsafe exceeds mean_pool in test unsafe AUROC on MuSiQue, HotpotQA and 2WikiMultiHopQA "
          "(size-matched), with the bootstrap interval's lower end above 0",
    "H2": "memsafe exceeds lexset and tfidf in test unsafe AUROC and macro F1 (mean over seeds) "
          "on every QA dataset present (size-matched)",
    "H3": "on MuSiQue, memsafe's test unsafe-AUROC drop from family A (size-matched) to family B "
          "is smaller than tfidf's and than text_length's",
    "H4": "removing bridge-conditioned encoding (memsafe_no_bridge) lowers test unsafe AUROC on "
          "MuSiQue and 2WikiMultiHopQA (size-matched)",
    "H5": "memsafe exceeds lexset in test unsafe AUROC on MIMIC",
    "G1": "all tests pass",
    "G2": "all data invariants hold",
    "G3": f"paragraph_count test unsafe AUROC <= {PARAGRAPH_COUNT_MAX_AUROC:.2f} on every size-matched dataset",
    "G4": f"text_length test unsafe AUROC <= {TEXT_LENGTH_MAX_AUROC:.2f} on every size-matched dataset",
    "G5": f"memsafe exceeds lexset by >= {MEMSAFE_OVER_LEXSET_MIN_VALIDATION:.2f} in validation unsafe AUROC "
          "on every size-matched dataset",
}

_Check = tuple[bool | None, str]  # (outcome, evidence); None: could not be tested


def _verdict(check_id: str, checks: list[_Check], nothing: str = "no applicable data") -> dict[str, str]:
    """fail if any check fails (a universal claim is refuted by one case), pass if all pass, else untested."""
    if not checks:
        status, evidence = UNTESTED, nothing
    else:
        outcomes = [ok for ok, _ in checks]
        status = FAIL if False in outcomes else PASS if all(ok is True for ok in outcomes) else UNTESTED
        evidence = "; ".join(text for _, text in checks)
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
    for d in QA_DATASETS:
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

    qa_present = means.datasets(FAMILY_A, lambda d: d in QA_DATASETS)
    h2 = [_exceeds(means, d, FAMILY_A, TEST, metric, MEMSAFE, other)
          for d in qa_present for other in (LEXSET, TFIDF) for metric in METRICS]
    rows.append(_verdict("H2", h2, nothing="no size-matched QA dataset in the table"))

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

    clinical = sorted(d for d in metrics["dataset"].unique() if str(d).startswith(CLINICAL_PREFIX))
    h5: list[_Check] = []
    for d in clinical:
        for cons in sorted(metrics.loc[metrics["dataset"] == d, "construction"].unique()):
            ok, text = _exceeds(means, d, cons, TEST, "unsafe_auroc", MEMSAFE, LEXSET)
            h5.append((ok, f"{text} [{cons}]"))
    rows.append(_verdict("H5", h5, nothing=f"no dataset starting with {CLINICAL_PREFIX!r}"))
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


def smoke_gates(metrics: pd.DataFrame, *, tests_passed: bool | None, invariants_hold: bool | None) -> pd.DataFrame:
    """Smoke gates G1-G5 that must pass before results are reported (same columns as the hypotheses).

    Test and invariant outcomes come in as flags (None: not run, so untested). The
    control gates read seed means of the test split; the memsafe-over-lexset gate reads
    the validation split so it can be checked without looking at test results.
    """
    means = _Means(metrics)
    rows = [_flag("G1", tests_passed, "test suite passed"), _flag("G2", invariants_hold, "data invariants hold"),
            _ceiling(means, "G3", PARAGRAPH_COUNT, PARAGRAPH_COUNT_MAX_AUROC),
            _ceiling(means, "G4", TEXT_LENGTH, TEXT_LENGTH_MAX_AUROC)]
    g5 = [_exceeds(means, d, FAMILY_A, VALIDATION, "unsafe_auroc", MEMSAFE, LEXSET, MEMSAFE_OVER_LEXSET_MIN_VALIDATION)
          for d in means.datasets(FAMILY_A)]
    rows.append(_verdict("G5", g5, nothing="no size-matched dataset in the table"))
    return _report(rows)
