"""Inference for the paper's model comparisons: weighted AUROC, the paired hierarchical
bootstrap and seed-level Wilcoxon tests with Holm correction.

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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.stats import PermutationMethod, wilcoxon
from statsmodels.stats.multitest import multipletests

from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc

BOOTSTRAP_RESAMPLES = 1000
MIN_WILCOXON_P_FIVE_SEEDS = 2 / 2**5
"""0.0625: the smallest two-sided exact Wilcoxon p with five paired seeds."""

METRICS: tuple[str, ...] = ("unsafe_auroc", "macro_f1")



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


def cluster_bootstrap_auroc(unsafe: Sequence[bool] | np.ndarray, score: Sequence[float] | np.ndarray,
                            groups: Sequence[object], n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                            confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the unsafe AUROC with questions resampled as clusters (all memories
    of a drawn question come along, as in the paper's bootstrap): one model, one seed. Resamples
    with one class only are redrawn."""
    y = np.asarray(unsafe, dtype=bool)
    s = np.asarray(score, dtype=float)
    _, cluster = np.unique(np.asarray([str(g) for g in groups]), return_inverse=True)
    if not (y.shape == s.shape == cluster.shape):
        raise ValueError(f"labels, scores and groups must be of one length: {y.shape}, {s.shape}, {cluster.shape}")
    if y.all() or not y.any():
        raise ValueError("AUROC needs both unsafe and complete memories")
    rng = np.random.default_rng(seed)
    n_clusters = int(cluster.max()) + 1
    values: list[float] = []
    while len(values) < n_resamples:
        counts = np.bincount(rng.integers(0, n_clusters, n_clusters), minlength=n_clusters)
        w = counts[cluster].astype(float)
        if (w * y).sum() > 0 and (w * ~y).sum() > 0:
            values.append(weighted_auroc(y, s, w))
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return float(lo), float(hi)


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
