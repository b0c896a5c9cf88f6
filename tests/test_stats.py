"""Bootstrap, weighted AUROC, Wilcoxon/Holm and the hypothesis/gate code against independent computations."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm, rankdata, wilcoxon
from sklearn.metrics import f1_score, roc_auc_score
from statsmodels.stats.multitest import multipletests

from memsafe_lib.evaluation.hypotheses import evaluate_hypotheses, h2_readings, smoke_gates
from memsafe_lib.measures.inference import (
    BootstrapResult,
    _draw_counts,
    _prepare,
    _statistics,
    paired_bootstrap,
    weighted_auroc,
    wilcoxon_holm,
)
from memsafe_lib.measures.metrics import unsafe_auroc

STATES = ("complete", "missing", "relation_lost")

# --------------------------------------------------------------------------------------------- weighted AUROC


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.floats(0.01, 5.0)), min_size=2, max_size=60))
def test_weighted_auroc_matches_sklearn_sample_weight(rows: list[tuple[bool, int, float]]) -> None:
    y = np.array([r[0] for r in rows])
    s = np.array([r[1] for r in rows], dtype=float)  # few distinct values: many ties
    w = np.array([r[2] for r in rows])
    if y.all() or not y.any():
        with pytest.raises(ValueError, match="both classes"):
            weighted_auroc(y, s, w)
        return
    assert weighted_auroc(y, s, w) == pytest.approx(roc_auc_score(y, s, sample_weight=w), abs=1e-10)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.integers(0, 4)), min_size=2, max_size=60))
def test_weighted_auroc_equals_auroc_of_repeated_rows(rows: list[tuple[bool, int, int]]) -> None:
    y = np.array([r[0] for r in rows])
    s = np.array([r[1] for r in rows], dtype=float)
    w = np.array([r[2] for r in rows])
    y_rep, s_rep = np.repeat(y, w), np.repeat(s, w)  # weight 0 drops the row
    if y_rep.all() or not y_rep.any():
        with pytest.raises(ValueError, match="both classes"):
            weighted_auroc(y, s, w)
        return
    assert weighted_auroc(y, s, w) == pytest.approx(unsafe_auroc(y_rep, s_rep), abs=1e-12)
    if y.any() and not y.all():
        assert weighted_auroc(y, s, np.ones(len(y))) == pytest.approx(unsafe_auroc(y, s), abs=1e-12)


def test_weighted_auroc_hand_computed_and_rejects_bad_weights() -> None:
    # unsafe {0.9 (w=2), 0.5}, complete {0.5, 0.1}: (2*(1+1) + 1*(0.5+1)) / (3*2)
    assert weighted_auroc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1], [2, 1, 1, 1]) == pytest.approx(5.5 / 6)
    with pytest.raises(ValueError, match="both classes"):
        weighted_auroc([1, 0], [0.3, 0.2], [1, 0])
    with pytest.raises(ValueError, match="non-negative"):
        weighted_auroc([1, 0], [0.3, 0.2], [1, -1])


# --------------------------------------------------------------------------------------------- bootstrap


def simulate(n_bases: int, seeds: tuple[int, ...], mu_a: float, mu_b: float, tau: float, s: float,
             rng: np.random.Generator, seed_shift: float = 0.0) -> pd.DataFrame:
    """1 complete + 2 unsafe variants per question; score = mu * unsafe + u_question + noise.

    The question effect u is shared by both models, all variants and all seeds (it is the
    question's difficulty), so the two models' scores are correlated through it.
    """
    u = rng.normal(0, tau, n_bases)
    rows = []
    for k, seed in enumerate(seeds):
        for b in range(n_bases):
            for state in STATES:
                unsafe = state != "complete"
                a = (mu_a + k * seed_shift) * unsafe + u[b] + rng.normal(0, s)
                bb = mu_b * unsafe + u[b] + rng.normal(0, s)
                rows.append((seed, f"q{b}", unsafe, state, a, bb))
    frame = pd.DataFrame(rows, columns=["seed", "base_id", "unsafe", "state", "score_a", "score_b"])
    frame["pred_a"] = np.where(frame["score_a"] < 0.5 * mu_a, "complete",
                               np.where(frame["score_a"] < mu_a, "missing", "relation_lost"))
    frame["pred_b"] = np.where(frame["score_b"] < 0.5 * mu_b, "complete", "missing")
    return frame


def test_identical_and_monotone_models_give_zero_interval() -> None:
    f = simulate(60, (17, 29, 43), 1.0, 1.0, 1.0, 1.0, np.random.default_rng(0))
    f["score_b"] = f["score_a"]
    r = paired_bootstrap(f, n_resamples=300)
    assert (r.estimate, r.lo, r.hi) == (0.0, 0.0, 0.0) and not r.excludes_zero
    # A monotone transform has the same ranks on every resample: only a paired bootstrap gives exactly 0.
    f["score_b"] = 3 * f["score_a"] + 1
    r = paired_bootstrap(f, n_resamples=300)
    assert (r.lo, r.hi) == (0.0, 0.0)
    f["pred_b"] = f["pred_a"]
    r = paired_bootstrap(f, metric="macro_f1", n_resamples=300)
    assert (r.estimate, r.lo, r.hi) == (0.0, 0.0, 0.0)


def test_shifting_unsafe_scores_up_gives_positive_interval() -> None:
    f = simulate(80, (17, 29), 0.5, 0.5, 1.0, 1.0, np.random.default_rng(1))
    f["score_a"] = f["score_b"] + 0.8 * f["unsafe"]
    r = paired_bootstrap(f, n_resamples=300)
    assert r.estimate > 0 and r.lo > 0 and r.excludes_zero
    assert r.lo <= r.estimate <= r.hi


def test_estimate_is_mean_over_seeds_of_sklearn_differences() -> None:
    f = simulate(50, (17, 29, 43), 1.0, 0.6, 1.0, 1.0, np.random.default_rng(2), seed_shift=0.3)
    r = paired_bootstrap(f, n_resamples=50)
    expected = {}
    for seed, g in f.groupby("seed"):
        expected[seed] = roc_auc_score(g["unsafe"], g["score_a"]) - roc_auc_score(g["unsafe"], g["score_b"])
    assert r.per_seed.keys() == expected.keys()
    for seed in expected:
        assert r.per_seed[seed] == pytest.approx(expected[seed], abs=1e-12)
    assert r.estimate == pytest.approx(np.mean(list(expected.values())), abs=1e-12)

    r = paired_bootstrap(f, metric="macro_f1", n_resamples=50)
    f1 = {seed: f1_score(g["state"], g["pred_a"], labels=list(STATES), average="macro", zero_division=0)
          - f1_score(g["state"], g["pred_b"], labels=list(STATES), average="macro", zero_division=0)
          for seed, g in f.groupby("seed")}
    assert r.estimate == pytest.approx(np.mean(list(f1.values())), abs=1e-12)


@pytest.mark.parametrize("metric", ["unsafe_auroc", "macro_f1"])
def test_each_resample_statistic_matches_weighted_sklearn(metric: str) -> None:
    """A resample's statistic, recomputed by sklearn with multiplicities as sample weights."""
    f = simulate(25, (17, 29, 43), 1.0, 0.6, 1.0, 1.0, np.random.default_rng(3), seed_shift=0.4)
    f = f.sample(frac=1.0, random_state=0).reset_index(drop=True)  # row order must not matter
    seeds = list(pd.unique(f["seed"]))
    codes, bases = pd.factorize(f["base_id"])
    prepared = _prepare(f, metric, seeds, np.asarray(codes), len(bases), list(STATES))
    rng = np.random.default_rng(4)
    seed_counts, base_counts = _draw_counts(rng, 20, len(seeds)), _draw_counts(rng, 20, len(bases))
    assert (seed_counts.sum(axis=1) == len(seeds)).all() and (base_counts.sum(axis=1) == len(bases)).all()
    got = _statistics(prepared, seed_counts, base_counts)
    for i in range(20):
        mult = dict(zip(bases, base_counts[i], strict=True))
        total = 0.0
        for j, seed in enumerate(seeds):
            g = f[f["seed"] == seed]
            w = g["base_id"].map(mult).to_numpy(float)
            if metric == "unsafe_auroc":
                diff = (roc_auc_score(g["unsafe"], g["score_a"], sample_weight=w)
                        - roc_auc_score(g["unsafe"], g["score_b"], sample_weight=w))
            else:
                diff = (f1_score(g["state"], g["pred_a"], labels=list(STATES), average="macro", sample_weight=w,
                                 zero_division=0)
                        - f1_score(g["state"], g["pred_b"], labels=list(STATES), average="macro", sample_weight=w,
                                   zero_division=0))
            total += seed_counts[i, j] * diff
        assert got[i] == pytest.approx(total / len(seeds), abs=1e-12)


def _unpaired_width(f: pd.DataFrame, n_resamples: int, rng: np.random.Generator) -> float:
    """Percentile-interval width when each model gets its own base-question draw (what pairing avoids)."""
    codes, bases = pd.factorize(f["base_id"])
    y, sa, sb = f["unsafe"].to_numpy(), f["score_a"].to_numpy(), f["score_b"].to_numpy()
    stats = []
    for _ in range(n_resamples):
        wa = np.bincount(rng.integers(0, len(bases), len(bases)), minlength=len(bases))[codes]
        wb = np.bincount(rng.integers(0, len(bases), len(bases)), minlength=len(bases))[codes]
        stats.append(weighted_auroc(y, sa, wa) - weighted_auroc(y, sb, wb))
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(hi - lo)


def test_resamples_are_paired_across_models() -> None:
    """Strongly correlated models (b is a with its unsafe scores lowered a little, plus small
    noise): per resample the two AUROCs move together, so the paired interval of the
    difference is far narrower than with an independent question draw per model."""
    rng = np.random.default_rng(5)
    f = simulate(150, (17,), 1.0, 1.0, 1.0, 1.0, rng)
    f["score_b"] = f["score_a"] - 0.2 * f["unsafe"] + rng.normal(0, 0.1, len(f))
    paired = paired_bootstrap(f, n_resamples=400)
    unpaired = _unpaired_width(f, 400, np.random.default_rng(6))
    print(f"paired width {paired.hi - paired.lo:.4f}, unpaired width {unpaired:.4f}")
    assert paired.excludes_zero
    assert paired.hi - paired.lo < 0.3 * unpaired


def test_one_base_question_draw_serves_every_seed() -> None:
    """Three seeds with identical scores: if the question draw is shared across seeds the
    statistic equals the one-seed statistic, so the width stays; independent draws per seed
    would shrink it by about sqrt(3)."""
    one = simulate(150, (17,), 1.0, 0.7, 1.0, 1.0, np.random.default_rng(7))
    three = pd.concat([one.assign(seed=s) for s in (17, 29, 43)], ignore_index=True)
    w1 = paired_bootstrap(one, n_resamples=1000, random_state=1)
    w3 = paired_bootstrap(three, n_resamples=1000, random_state=2)
    assert w3.estimate == pytest.approx(w1.estimate, abs=1e-12)
    ratio = (w3.hi - w3.lo) / (w1.hi - w1.lo)
    assert 0.85 < ratio < 1.15


def _tiny(n_complete_only: int, n_unsafe_only: int) -> pd.DataFrame:
    """Questions with a single variant, so a resample can miss a class."""
    rng = np.random.default_rng(8)
    rows = [(17, f"c{i}", False, "complete") for i in range(n_complete_only)]
    rows += [(17, f"u{i}", True, "missing") for i in range(n_unsafe_only)]
    f = pd.DataFrame(rows, columns=["seed", "base_id", "unsafe", "state"])
    f["score_a"] = rng.normal(size=len(f)) + f["unsafe"]
    f["score_b"] = rng.normal(size=len(f))
    f["pred_a"] = np.where(f["score_a"] > 0.5, "missing", "complete")
    f["pred_b"] = np.where(f["score_b"] > 0.0, "missing", "complete")
    return f


@pytest.mark.parametrize("metric", ["unsafe_auroc", "macro_f1"])
def test_single_class_resamples_are_redrawn_not_scored(metric: str) -> None:
    f = _tiny(3, 7)  # P(no complete question drawn) = 0.7**10, about 2.8% of resamples
    r = paired_bootstrap(f, metric=metric, n_resamples=1000)
    assert 0 < r.n_redrawn <= 100
    assert len(r.samples) == 1000 and np.all(np.isfinite(r.samples))
    assert np.isfinite(r.lo) and np.isfinite(r.hi)
    with pytest.raises(ValueError, match="max_redraw_fraction"):
        paired_bootstrap(_tiny(1, 5), metric=metric, n_resamples=500)  # (5/6)**6, about 33% undefined


def test_reproducible_with_same_random_state() -> None:
    f = simulate(40, (17, 29), 1.0, 0.6, 1.0, 1.0, np.random.default_rng(9))
    r1, r2 = paired_bootstrap(f, n_resamples=200, random_state=3), paired_bootstrap(f, n_resamples=200, random_state=3)
    assert (r1.lo, r1.hi) == (r2.lo, r2.hi) and np.array_equal(r1.samples, r2.samples)
    r3 = paired_bootstrap(f, n_resamples=200, random_state=4)
    assert not np.array_equal(r1.samples, r3.samples)
    narrow = paired_bootstrap(f, n_resamples=200, random_state=3, confidence=0.5)
    assert r1.lo < narrow.lo < narrow.hi < r1.hi
    assert isinstance(r1, BootstrapResult) and r1.n_resamples == 200


def test_bootstrap_rejects_unpaired_or_incomplete_frames() -> None:
    f = simulate(10, (17,), 1.0, 0.6, 1.0, 1.0, np.random.default_rng(10))
    with pytest.raises(ValueError, match="score_b"):
        paired_bootstrap(f.drop(columns="score_b"))
    g = f.copy()
    g.loc[0, "score_b"] = np.nan
    with pytest.raises(ValueError, match="missing values"):
        paired_bootstrap(g)
    with pytest.raises(ValueError, match="metric"):
        paired_bootstrap(f, metric="accuracy")


def _true_auroc(mu: float, tau: float, s: float, n: int) -> float:
    """Expected AUROC for n questions with 1 complete + 2 unsafe variants each.

    Of the 2n * n (unsafe, complete) pairs, 2n share a question: their difference is
    mu + e - e' ~ N(mu, 2 s^2); the rest differ also by u - u' ~ N(0, 2 tau^2). The class
    counts are fixed, so the expectation is exactly the pair-weighted mean.
    """
    same = norm.cdf(mu / np.sqrt(2 * s**2))
    across = norm.cdf(mu / np.sqrt(2 * (tau**2 + s**2)))
    return (1 / n) * same + (1 - 1 / n) * across


def test_interval_ends_are_the_percentiles_of_the_resampled_differences() -> None:
    """The 95% interval is the 2.5th and 97.5th percentile of the resampled statistics (a 92%
    interval would still pass a coverage check on a few hundred simulations); 90% is 5th-95th."""
    f = simulate(30, (17, 29), 1.0, 0.6, 1.0, 0.7, np.random.default_rng(5))
    for confidence, ends in ((0.95, [2.5, 97.5]), (0.90, [5.0, 95.0])):
        r = paired_bootstrap(f, n_resamples=400, random_state=1, confidence=confidence)
        assert len(r.samples) == 400
        np.testing.assert_allclose([r.lo, r.hi], np.percentile(r.samples, ends), rtol=0, atol=1e-12)


def test_interval_covers_known_difference_at_nominal_rate() -> None:
    n, mu_a, mu_b, tau, s = 40, 1.0, 0.6, 1.0, 0.7
    truth = _true_auroc(mu_a, tau, s, n) - _true_auroc(mu_b, tau, s, n)
    rng = np.random.default_rng(11)
    covered, estimates = [], []
    for rep in range(150):
        f = simulate(n, (17,), mu_a, mu_b, tau, s, rng)
        r = paired_bootstrap(f, n_resamples=200, random_state=rep)
        covered.append(r.lo <= truth <= r.hi)
        estimates.append(r.estimate)
    # the closed form is right: the estimates average to it (4 standard errors)
    assert abs(np.mean(estimates) - truth) < 4 * np.std(estimates) / np.sqrt(len(estimates))
    coverage = float(np.mean(covered))
    print(f"simulated 95% coverage: {coverage:.3f} (truth {truth:.4f})")
    assert 0.85 <= coverage <= 0.99


def test_bootstrap_is_fast_enough_at_paper_scale() -> None:
    import time

    rng = np.random.default_rng(12)
    f = simulate(1000, (17, 29, 43, 71, 101), 1.0, 0.7, 1.0, 1.0, rng)  # 15,000 rows
    start = time.perf_counter()
    r = paired_bootstrap(f, n_resamples=1000)
    assert time.perf_counter() - start < 10
    assert r.excludes_zero


# --------------------------------------------------------------------------------------------- Wilcoxon / Holm


def _per_seed(values: dict[str, list[float]]) -> pd.DataFrame:
    seeds = [17, 29, 43, 71, 101]
    return pd.DataFrame([{"model": m, "seed": s, "unsafe_auroc": v, "macro_f1": v / 2}
                         for m, vs in values.items() for s, v in zip(seeds, vs, strict=True)])


def _brute_force_p(d: np.ndarray) -> float:
    """Two-sided p of W+ over all 2^n sign flips of the nonzero differences (mid-ranks for ties)."""
    d = d[d != 0]
    r = rankdata(np.abs(d))
    observed = r[d > 0].sum()
    null = np.array([sum(r[i] for i in range(len(d)) if signs[i]) for signs in itertools.product([0, 1], repeat=len(d))])
    return min(1.0, 2 * min(np.mean(null <= observed + 1e-9), np.mean(null >= observed - 1e-9)))


def test_five_positive_seeds_give_the_smallest_attainable_p() -> None:
    table = _per_seed({"memsafe": [0.80, 0.82, 0.81, 0.83, 0.79], "tfidf": [0.70, 0.71, 0.73, 0.69, 0.74]})
    out = wilcoxon_holm(table, [("memsafe", "tfidf", "unsafe_auroc")])
    row = out.iloc[0]
    assert row["p_value"] == pytest.approx(0.0625) and row["statistic"] == 0.0 and row["n_seeds"] == 5
    assert row["mean_diff"] == pytest.approx(np.mean([0.10, 0.11, 0.08, 0.14, 0.05]))
    assert "0.0625" in row["note"]
    assert list(out.columns) == ["model_a", "model_b", "metric", "n_seeds", "mean_diff", "statistic", "p_value",
                                 "p_holm", "note"]


def test_holm_matches_statsmodels_and_hand_computation() -> None:
    table = _per_seed({
        "memsafe": [0.80, 0.82, 0.81, 0.83, 0.79],
        "tfidf": [0.70, 0.71, 0.73, 0.69, 0.74],  # all positive
        "lexset": [0.81, 0.80, 0.82, 0.80, 0.78],  # mixed signs
        "mean_pool": [0.75, 0.84, 0.76, 0.90, 0.77],  # mixed, larger
    })
    comps = [("memsafe", "tfidf", "unsafe_auroc"), ("memsafe", "lexset", "unsafe_auroc"),
             ("memsafe", "mean_pool", "unsafe_auroc"), ("memsafe", "tfidf", "macro_f1")]
    out = wilcoxon_holm(table, comps)
    for (a, b, m), p in zip(comps, out["p_value"], strict=True):
        d = table[table.model == a][m].to_numpy() - table[table.model == b][m].to_numpy()
        # rounded: memsafe - lexset is -0.01, 0.02, -0.01, 0.03, 0.01 up to float noise, a three-way tie
        assert p == pytest.approx(_brute_force_p(np.round(d, 12)))
    assert out["p_value"].iloc[0] == pytest.approx(wilcoxon([0.10, 0.11, 0.08, 0.14, 0.05], method="exact").pvalue)
    p = out["p_value"].to_numpy()
    assert np.allclose(out["p_holm"], multipletests(p, method="holm")[1])
    order = np.argsort(p)  # Holm by hand: step-down multipliers m, m-1, ..., running maximum, capped at 1
    adjusted = np.minimum(1, np.maximum.accumulate(p[order] * (len(p) - np.arange(len(p)))))
    hand = np.empty_like(p)
    hand[order] = adjusted
    assert np.allclose(out["p_holm"], hand)


def test_all_zero_and_tied_differences() -> None:
    table = _per_seed({"a": [0.8, 0.7, 0.6, 0.9, 0.5], "b": [0.8, 0.7, 0.6, 0.9, 0.5],
                       "c": [0.7, 0.6, 0.7, 1.0, 0.4], "d": [0.8, 0.8, 0.6, 0.8, 0.5]})
    out = wilcoxon_holm(table, [("a", "b", "unsafe_auroc"), ("a", "c", "unsafe_auroc"), ("a", "d", "unsafe_auroc")])
    zero, ties, with_zero = out.iloc[0], out.iloc[1], out.iloc[2]
    assert zero["p_value"] == 1.0 and zero["mean_diff"] == 0.0 and "all differences are zero" in zero["note"]
    # +0.1, +0.1, -0.1, -0.1, +0.1 (float noise rounded away): ties, exact sign-flip distribution
    assert ties["p_value"] == pytest.approx(_brute_force_p(np.array([0.1, 0.1, -0.1, -0.1, 0.1])))
    assert "ties" in ties["note"]
    assert with_zero["p_value"] == pytest.approx(_brute_force_p(np.array([0.0, -0.1, 0.0, 0.1, 0.0])))
    assert np.isfinite(out["p_holm"]).all()
    with pytest.raises(ValueError, match="no unsafe_auroc values"):
        wilcoxon_holm(table, [("a", "zzz", "unsafe_auroc")])


# --------------------------------------------------------------------------------------------- hypotheses / gates

QA = ("musique", "hotpotqa", "2wikimultihopqa")


def results_table(values: dict[tuple[str, str, str, str], tuple[float, float]]) -> pd.DataFrame:
    """Two seeds per cell at value -/+ 0.002, so the seed mean is exactly the given value."""
    rows = []
    for (dataset, construction, model, split), (auroc, f1) in values.items():
        for seed, jitter in ((17, -0.002), (29, 0.002)):
            rows.append({"dataset": dataset, "construction": construction, "model": model, "seed": seed,
                         "split": split, "unsafe_auroc": auroc + jitter, "macro_f1": f1 + jitter})
    return pd.DataFrame(rows)


def passing_values() -> dict[tuple[str, str, str, str], tuple[float, float]]:
    v: dict[tuple[str, str, str, str], tuple[float, float]] = {}
    for d in QA:
        for model, auroc, f1 in (("memsafe", 0.80, 0.60), ("mean_pool", 0.75, 0.55), ("lexset", 0.58, 0.40),
                                 ("tfidf", 0.60, 0.42), ("text_length", 0.52, 0.30), ("paragraph_count", 0.50, 0.17),
                                 ("memsafe_no_bridge", 0.74, 0.52)):
            v[(d, "size-matched", model, "test")] = (auroc, f1)
        v[(d, "size-matched", "memsafe", "validation")] = (0.79, 0.60)
        v[(d, "size-matched", "lexset", "validation")] = (0.60, 0.40)
    for model, auroc in (("memsafe", 0.76), ("tfidf", 0.50), ("text_length", 0.40)):  # drops .04, .10, .12
        v[("musique", "family-b-from-a", model, "test")] = (auroc, 0.5)
    v[("mimic-iv", "clinical", "memsafe", "test")] = (0.70, 0.50)
    v[("mimic-iv", "clinical", "lexset", "test")] = (0.60, 0.45)
    for d in QA:  # H6: blind-matched, blind controls at chance
        for model, auroc in (("memsafe", 0.70), ("lexset", 0.60), ("blind_bow", 0.50), ("blind_unit", 0.50),
                             ("blind_set", 0.50), ("question_only", 0.50)):
            v[(d, "blind-matched", model, "test")] = (auroc, 0.4)
    for d in QA:  # H7: blind-hard, blind controls at chance, shallow ones below memsafe
        for model, auroc in (("memsafe", 0.70), ("lexset", 0.60), ("blind_bow", 0.50), ("blind_unit", 0.50),
                             ("blind_set", 0.50), ("question_only", 0.50), ("qu_tfidf", 0.62),
                             ("title_named", 0.55), ("retrieval_sim", 0.58)):
            v[(d, "blind-hard", model, "test")] = (auroc, 0.4)
    return v


def intervals_table(lo: float = 0.02) -> pd.DataFrame:
    return pd.DataFrame([{"dataset": d, "model_a": "memsafe", "model_b": "mean_pool", "metric": "unsafe_auroc",
                          "estimate": 0.05, "lo": lo, "hi": 0.08} for d in QA])


def status(report: pd.DataFrame) -> dict[str, str]:
    return dict(zip(report["id"], report["status"], strict=True))


def test_hypotheses_pass_on_a_passing_table() -> None:
    out = evaluate_hypotheses(results_table(passing_values()), intervals_table())
    assert list(out.columns) == ["id", "statement", "status", "evidence"]
    assert status(out) == {f"H{i}": "pass" for i in range(1, 8)}
    h1 = out.set_index("id").loc["H1", "evidence"]
    assert "0.8000" in h1 and "0.7500" in h1 and "+0.0200" in h1  # the numbers used


def test_hypotheses_fail_when_the_claims_do_not_hold() -> None:
    v = passing_values()
    v[("2wikimultihopqa", "size-matched", "memsafe_no_bridge", "test")] = (0.85, 0.6)  # no bridge is better -> H4 fail
    v[("musique", "size-matched", "tfidf", "test")] = (0.60, 0.65)  # tfidf better macro F1 -> H2 fail
    v[("musique", "family-b-from-a", "tfidf", "test")] = (0.58, 0.5)  # tfidf drops only 0.02 -> H3 fail
    v[("mimic-iv", "clinical", "lexset", "test")] = (0.71, 0.45)  # H5 fail
    v[("hotpotqa", "blind-matched", "blind_set", "test")] = (0.72, 0.4)  # a blind control beats memsafe: H6 fail
    v[("musique", "blind-hard", "qu_tfidf", "test")] = (0.71, 0.4)  # a shallow control beats memsafe: H7 fail
    out = evaluate_hypotheses(results_table(v), intervals_table(lo=-0.01))  # H1: interval reaches 0
    assert status(out) == {f"H{i}": "fail" for i in range(1, 8)}
    h7 = out.set_index("id").loc["H7", "evidence"]
    assert "musique test unsafe_auroc: memsafe 0.7000 - qu_tfidf 0.7100 = -0.0100 (not > 0)" in h7
    h6 = out.set_index("id").loc["H6", "evidence"]
    assert "hotpotqa test unsafe_auroc: memsafe 0.7000 - blind_set 0.7200 = -0.0200 (not > 0)" in h6


def test_hypotheses_untested_when_models_are_missing() -> None:
    v = {k: x for k, x in passing_values().items()
         if k[2] != "mean_pool" and not (k[0] == "2wikimultihopqa" and k[2] == "memsafe_no_bridge")
         and not k[0].startswith("mimic") and k[1] != "family-b-from-a"
         and not (k[1] == "blind-matched" and k[2] == "blind_unit")}
    out = evaluate_hypotheses(results_table(v), None).set_index("id")
    assert out.loc["H1", "status"] == "untested" and "missing mean_pool" in out.loc["H1", "evidence"]
    assert "missing interval" in out.loc["H1", "evidence"]
    assert out.loc["H2", "status"] == "pass"
    assert out.loc["H3", "status"] == "untested" and "memsafe family-b-from-a" in out.loc["H3", "evidence"]
    # H4: musique holds, 2wiki cannot be tested -> untested, and the evidence says which
    assert out.loc["H4", "status"] == "untested"
    assert "2wikimultihopqa test unsafe_auroc: missing memsafe_no_bridge" in out.loc["H4", "evidence"]
    assert "musique test unsafe_auroc: memsafe 0.8000" in out.loc["H4", "evidence"]
    assert out.loc["H5", "status"] == "untested" and "mimic" in out.loc["H5", "evidence"]
    assert out.loc["H6", "status"] == "untested" and "missing blind_unit" in out.loc["H6", "evidence"]
    no_blind = {k: x for k, x in v.items() if k[1] != "blind-matched"}
    h6 = evaluate_hypotheses(results_table(no_blind), None).set_index("id").loc["H6"]
    assert h6["status"] == "untested" and h6["evidence"] == "no blind-matched runs in the table"
    no_hard = {k: x for k, x in v.items() if k[1] != "blind-hard"}
    h7 = evaluate_hypotheses(results_table(no_hard), None).set_index("id").loc["H7"]
    assert h7["status"] == "untested" and h7["evidence"] == "no blind-hard runs in the table"


def test_h5_is_partially_refuted_when_a_clinical_setting_goes_to_lexset() -> None:
    """Every clinical setting counts, the learning curve's smallest point included (the paper's own
    H5 outcome); notebook 07 passes the curve's metrics with the table's."""
    v = passing_values()
    v[("mimic-iv", "clinical-cap250", "memsafe", "test")] = (0.90, 0.5)
    v[("mimic-iv", "clinical-cap250", "lexset", "test")] = (0.95, 0.5)
    h5 = evaluate_hypotheses(results_table(v), intervals_table()).set_index("id").loc["H5"]
    assert h5["status"] == "partially refuted" and "[clinical-cap250]" in h5["evidence"]
    source = (Path(__file__).resolve().parent.parent / "notebooks" / "07_clinical.py").read_text(encoding="utf-8")
    assert "h5 = evaluate_hypotheses(curve_metrics)" in source


def test_smoke_gates() -> None:
    v = passing_values()
    out = status(smoke_gates(results_table(v), invariants_hold=True))
    assert out == {f"G{i}": "pass" for i in range(2, 6)}  # G1 (tests pass) is not a run's to judge

    for d in QA:
        v[(d, "size-matched", "paragraph_count", "test")] = (0.65, 0.2)
        v[(d, "size-matched", "text_length", "test")] = (0.71, 0.3)
    v[("hotpotqa", "size-matched", "lexset", "validation")] = (0.75, 0.4)  # margin 0.04 < 0.05
    out = status(smoke_gates(results_table(v), invariants_hold=None))
    assert out == {"G2": "untested", "G3": "fail", "G4": "fail", "G5": "fail"}

    no_validation = {k: x for k, x in passing_values().items() if k[3] != "validation"}
    report = smoke_gates(results_table(no_validation), invariants_hold=True).set_index("id")
    assert report.loc["G5", "status"] == "untested" and "missing memsafe, lexset" in report.loc["G5", "evidence"]
    assert report.loc["G2", "status"] == "pass"


def test_h2_is_read_against_each_lexset_variant_beside_the_registered_verdict() -> None:
    """Where LexSet's strength comes from (issue 46, item 11): H2 with a variant in LexSet's place."""
    v = passing_values()
    for d in QA:
        v[(d, "size-matched", "lexset", "test")] = (0.85, 0.40)          # LexSet beats MemSafe: H2 fails
        v[(d, "size-matched", "lexset_no_title", "test")] = (0.70, 0.40)  # without titles it does not
    v[("musique", "size-matched", "lexset_logistic", "test")] = (0.79, 0.61)  # macro F1 above MemSafe's
    out = h2_readings(results_table(v), ("lexset_no_title", "lexset_logistic", "lexset_absent")).set_index("against")
    assert list(out.index) == ["lexset", "lexset_no_title", "lexset_logistic", "lexset_absent"]
    assert out.loc["lexset", "registered"] and not out.loc["lexset_no_title", "registered"]
    assert out.loc["lexset", "status"] == evaluate_hypotheses(results_table(v)).set_index("id").loc["H2", "status"]
    assert out.loc["lexset", "status"] == "fail" and out.loc["lexset_no_title", "status"] == "pass"
    assert out.loc["lexset_logistic", "status"] == "fail"
    assert "musique test macro_f1: memsafe 0.6000 - lexset_logistic 0.6100" in out.loc["lexset_logistic", "evidence"]
    assert out.loc["lexset_absent", "status"] == "untested"


def test_h5_is_partially_refuted_when_the_clinical_rows_disagree() -> None:
    """The paper's H5: LexSet leads its small OMR row, MemSafe the two larger ones, "partially
    refuted"; not a plain fail (one case refutes a universal claim) nor a pass."""
    v = passing_values()
    del v[("mimic-iv", "clinical", "memsafe", "test")], v[("mimic-iv", "clinical", "lexset", "test")]
    for cons, memsafe, lexset in (("clinical-cap2000", 0.60, 0.70), ("clinical-cap3000", 0.80, 0.70)):
        v[("mimic-omr", cons, "memsafe", "test")] = (memsafe, 0.5)
        v[("mimic-omr", cons, "lexset", "test")] = (lexset, 0.5)
    v[("mimic-labs", "clinical-cap3000", "memsafe", "test")] = (0.9, 0.5)
    v[("mimic-labs", "clinical-cap3000", "lexset", "test")] = (0.8, 0.5)
    h5 = evaluate_hypotheses(results_table(v)).set_index("id").loc["H5"]
    assert h5.status == "partially refuted"
    assert "memsafe 0.6000 - lexset 0.7000" in h5.evidence and "[clinical-cap2000]" in h5.evidence
    for rows, expected in (((0.60, 0.60), "fail"), ((0.80, 0.80), "pass")):
        w = dict(v)
        for cons, memsafe in zip(("clinical-cap2000", "clinical-cap3000"), rows, strict=True):
            w[("mimic-omr", cons, "memsafe", "test")] = (memsafe, 0.5)
        w[("mimic-labs", "clinical-cap3000", "memsafe", "test")] = (rows[0] + 0.15, 0.5)  # LexSet: 0.8
        assert evaluate_hypotheses(results_table(w)).set_index("id").loc["H5", "status"] == expected
