"""Seeds per experiment as the paper states them (issue 32, item 5): the ablation table and
silver supervision on three Stage B seeds sharing the first encoder, reader gating on three
estimator seeds, the prevalence sweep on one, the clinical learning curve on three per point;
everything else on all of the scale's seeds."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from memsafe_lib import config
from memsafe_lib.config import SCALES, encoder_seed_for, experiment_scale
from memsafe_lib.estimators.neural_context import stage_b_inputs_key
from memsafe_lib.evaluation import reader_gating as G
from memsafe_lib.reporting import ablations

PAPER = SCALES["paper"]

# ---------------------------------------------------------------- the counts, at paper scale


@pytest.mark.parametrize(("experiment", "seeds"), [
    ("ablation", (17, 29, 43)),        # Table "ablation": three Stage B seeds sharing one encoder
    ("silver", (17, 29, 43)),          # "Over three seeds" (Supervision without gold unit targets)
    ("reader_gating", (17, 29, 43)),   # "three independently trained estimator seeds"
    ("prevalence", (17,)),             # appendix "Lower corruption prevalence": one estimator seed
    ("clinical_curve", (17, 29, 43)),  # "three seeds per point"
])
def test_paper_scale_seed_counts(experiment: str, seeds: tuple[int, ...]) -> None:
    assert PAPER.seeds == (17, 29, 43, 71, 101)  # the main tables keep all five
    assert experiment_scale(PAPER, experiment).seeds == seeds


@pytest.mark.parametrize("experiment", ["ablation", "silver"])
def test_ablation_and_silver_share_the_first_encoder(experiment: str) -> None:
    scale = experiment_scale(PAPER, experiment)
    assert scale.neural.encoder_seeds == (17,)
    assert [encoder_seed_for(s, scale.neural.encoder_seeds) for s in scale.seeds] == [17, 17, 17]
    # nothing else changes: same scale name (same folders and caches), same Stage A settings,
    # so the shared encoder is the one notebook 02 tuned for seed 17 (content-keyed cache)
    assert scale.name == "paper" and scale.run_dir == PAPER.run_dir
    assert scale.neural == replace(PAPER.neural, encoder_seeds=(17,))


@pytest.mark.parametrize("experiment", ["reader_gating", "prevalence", "clinical_curve"])
def test_estimator_seed_experiments_keep_their_own_encoders(experiment: str) -> None:
    scale = experiment_scale(PAPER, experiment)
    assert scale.neural == PAPER.neural
    # independently trained: seeds 17, 29, 43 each read their own encoder
    assert [encoder_seed_for(s, scale.neural.encoder_seeds) for s in scale.seeds] == list(scale.seeds)


def test_cpu_settings_are_unchanged_except_the_prevalence_sweep() -> None:
    cpu = SCALES["cpu"]
    assert cpu.seeds == (17, 29, 43) and cpu.neural.encoder_seeds == (17,)
    for experiment in ("ablation", "silver", "reader_gating", "clinical_curve"):
        assert experiment_scale(cpu, experiment) == cpu
    assert experiment_scale(cpu, "prevalence") == replace(cpu, seeds=(17,))


def test_smoke_and_paper_dry() -> None:
    smoke = SCALES["smoke"]
    for experiment in ("ablation", "silver", "reader_gating", "prevalence", "clinical_curve"):
        assert experiment_scale(smoke, experiment) == smoke  # one seed, one encoder already
    dry = experiment_scale(SCALES["paper-dry"], "ablation")
    assert dry.name == "paper-dry" and dry.seeds == (17, 29, 43) and dry.neural.encoder_seeds == (17,)


def test_unknown_experiment_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown experiment"):
        experiment_scale(PAPER, "main")


def test_a_shared_encoder_keeps_notebook_02s_stage_b_selection() -> None:
    """The grid reads the first encoder only: the ablation's scale must find notebook 02's
    selection (same key), not rerun the grid and overwrite its files."""
    variants = [SimpleNamespace(variant_id=f"v{i}", split=s, state=st)
                for i, (s, st) in enumerate([("train", "complete"), ("train", "missing"), ("validation", "missing")])]
    enc = {v.variant_id: SimpleNamespace(plain=np.ones((2, 3), np.float32) * i, bridge=np.zeros((2, 3), np.float32),
                                         plain_logit=np.zeros(2, np.float32), bridge_logit=np.zeros(2, np.float32),
                                         top_unit=0) for i, v in enumerate(variants)}
    result = SimpleNamespace(variants=variants)
    main = stage_b_inputs_key(result, enc, PAPER, 17)
    assert stage_b_inputs_key(result, enc, experiment_scale(PAPER, "ablation"), 17) == main
    # not vacuous: a budget field the selection reads still changes the key
    longer = replace(PAPER, neural=replace(PAPER.neural, stage_b_epochs=31))
    assert stage_b_inputs_key(result, enc, longer, 17) != main


# ---------------------------------------------------------------- the prevalence sweep: one seed


def _frame() -> pd.DataFrame:
    # 3 complete memories (the reader right on v0 and v1, wrong on v2) and 6 unsafe ones (wrong)
    unsafe = np.array([0, 0, 0, 1, 1, 1, 1, 1, 1], bool)
    wrong = np.array([0, 0, 1, 1, 1, 1, 1, 1, 1])
    f = pd.DataFrame({"variant_id": [f"v{i}" for i in range(9)], "base_id": [f"b{i // 3}" for i in range(9)],
                      "state": np.where(unsafe, "missing", "complete"), "unsafe": unsafe, "wrong": wrong,
                      "confidence": np.linspace(-0.1, -0.9, 9)})
    # seed 17 ranks the two right memories first; seed 29 ranks v1 (right) then v2 (wrong)
    f["gate:memsafe:17"] = [0.1, 0.2, 0.9, 0.5, 0.6, 0.7, 0.8, 0.85, 0.95]
    f["gate:memsafe:29"] = [0.9, 0.1, 0.2, 0.5, 0.6, 0.7, 0.8, 0.85, 0.95]
    return G.add_fixed_gates(f, judge_shots=())


def _memsafe(sweep: pd.DataFrame) -> pd.Series:
    return sweep[sweep.gate == "memsafe"].set_index("native").error


def test_prevalence_sweep_reads_one_seeds_column() -> None:
    # coverage 1/3. Prevalence 0.5: 3 complete + 3 unsafe, k = 2, only complete memories are
    # accepted by either seed (every unsafe score is above 0.2): seed 17 takes v0, v1 (0 wrong),
    # seed 29 takes v1, v2 (1 wrong of 2). Native (9 memories): k = 3, both add v3 (0.5, wrong):
    # seed 17 1/3, seed 29 2/3. The two seeds' mean would be 0.25 and 0.5.
    sweep = G.prevalence_sweep(_frame(), (0.5,), draws=2, coverages=(1 / 3,), seeds=(17,))
    assert _memsafe(sweep)[False] == pytest.approx(0.0)
    assert _memsafe(sweep)[True] == pytest.approx(1 / 3)
    other = G.prevalence_sweep(_frame(), (0.5,), draws=2, coverages=(1 / 3,), seeds=(29,))
    assert _memsafe(other)[False] == pytest.approx(0.5)
    assert _memsafe(other)[True] == pytest.approx(2 / 3)


def test_prevalence_sweep_defaults_to_the_first_seed() -> None:
    sweep = G.prevalence_sweep(_frame(), (0.5,), draws=1, coverages=(1 / 3,))
    assert _memsafe(sweep)[True] == pytest.approx(1 / 3)  # seed 17 alone, not the mean 0.5
    assert config.DEFAULT_SEED == 17


def test_prevalence_sweep_refuses_a_missing_seed() -> None:
    with pytest.raises(ValueError, match="memsafe.*101"):
        G.prevalence_sweep(_frame(), (0.5,), draws=1, coverages=(1 / 3,), seeds=(101,))


# ---------------------------------------------------------------- the ladder: Table "main"'s seeds


def test_the_ladder_reads_table_mains_rows_and_the_frozen_rung_from_notebook_03() -> None:
    def rows(values: dict[str, float], n_seeds: int) -> pd.DataFrame:
        return pd.DataFrame([{"dataset": "musique", "construction": "size-matched", "model": m, "unsafe_auroc": v,
                              "unsafe_auroc_sd": 0.01, "n_seeds": n_seeds} for m, v in values.items()])

    main = rows({"lexset": 0.60, "relevance_agg": 0.75, "mean_pool": 0.85, "memsafe": 0.90}, 5)
    panel = rows({"relevance_agg_frozen": 0.70, "relevance_agg": 0.74, "mean_pool": 0.84, "memsafe": 0.88,
                  "memsafe_frozen": 0.80}, 3)
    ladder = ablations.ladder_table(ablations.ladder_summary(main, panel), ["musique"]).set_index("model")
    assert ladder.unsafe_auroc.to_dict() == {"lexset": 0.60, "relevance_agg_frozen": 0.70, "relevance_agg": 0.75,
                                             "mean_pool": 0.85, "memsafe": 0.90}
    assert ladder.n_seeds.to_dict() == {"lexset": 5, "relevance_agg_frozen": 3, "relevance_agg": 5, "mean_pool": 5,
                                        "memsafe": 5}
    # the gap a frozen encoder closes: (0.70 - 0.60) / (0.90 - 0.60)
    assert ablations.gap_closed(ladder.reset_index()).fraction_closed.iloc[0] == pytest.approx(1 / 3)
