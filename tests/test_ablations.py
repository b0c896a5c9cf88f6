"""Notebook 03's tables from hand-made summaries: signs of the deltas, the gap share, the
interaction's marginal gains; and which Stage A each ablated model reads."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pandas as pd
import pytest

from memsafe_lib.config import SCALES
from memsafe_lib.estimators import registry
from memsafe_lib.estimators.context import NeuralContext
from memsafe_lib.reporting import ablations

AUROC = {"memsafe": 0.80, "memsafe_frozen": 0.70, "memsafe_no_bridge": 0.75, "mean_pool": 0.78,
         "memsafe_no_lexical": 0.79, "memsafe_no_localization": 0.81, "relevance_agg_frozen": 0.60,
         "relevance_agg": 0.72, "lexset": 0.65}


def _summary(values: dict[str, float], dataset: str = "musique") -> pd.DataFrame:
    return pd.DataFrame([{"dataset": dataset, "construction": "size-matched", "model": m, "unsafe_auroc": v,
                          "unsafe_auroc_sd": 0.01, "macro_f1": v - 0.3, "n_seeds": 3} for m, v in values.items()])


def _intervals(values: dict[str, float], dataset: str = "musique") -> pd.DataFrame:
    rows = []
    for m, v in values.items():
        for metric in ("unsafe_auroc", "macro_f1"):
            d = values["memsafe"] - v
            rows.append({"dataset": dataset, "construction": "size-matched", "model_a": "memsafe", "model_b": m,
                         "metric": metric, "estimate": d, "lo": d - 0.02, "hi": d + 0.01})
    return pd.DataFrame(rows)


def test_ablation_deltas_are_row_minus_full_with_the_interval_flipped() -> None:
    table = ablations.ablation_table(_summary(AUROC), _intervals(AUROC)).set_index("model")
    assert list(table.index) == list(registry.ABLATIONS)
    frozen = table.loc["memsafe_frozen"]
    assert frozen.delta_unsafe_auroc == pytest.approx(0.70 - 0.80)
    assert frozen.delta_unsafe_auroc_lo == pytest.approx(-0.10 - 0.01)  # -(estimate + 0.01)
    assert frozen.delta_unsafe_auroc_hi == pytest.approx(-0.10 + 0.02)
    assert pd.isna(table.loc["memsafe"].delta_unsafe_auroc)
    # the paper's printed deltas, not differences of its rounded means (those differ by 1e-4)
    printed = {"memsafe_frozen": (-0.0553, -0.1596), "memsafe_no_bridge": (-0.0251, -0.0377),
               "mean_pool": (-0.0173, -0.0265), "memsafe_no_lexical": (-0.0038, -0.0090),
               "memsafe_no_localization": (+0.0002, -0.0014), "relevance_agg_frozen": (-0.2268, -0.3327)}
    for model, (auroc, f1) in printed.items():
        assert table.loc[model].paper_delta_unsafe_auroc == auroc and table.loc[model].paper_delta_macro_f1 == f1
    assert table.loc["relevance_agg_frozen"].paper_unsafe_auroc == 0.7407


def test_gap_share_and_its_undefined_case() -> None:
    ladder = ablations.ladder_table(_summary(AUROC), ["musique"])
    assert list(ladder.model) == list(registry.LADDER)
    gap = ablations.gap_closed(ladder).iloc[0]
    assert gap.gap == pytest.approx(0.80 - 0.65) and gap.fraction_closed == pytest.approx((0.60 - 0.65) / 0.15)
    assert gap.paper_fraction_closed == 0.41
    # the paper divides by its ablation's own full model (0.3854 = 0.9674 - 0.5820), not Table main's
    own = ablations.gap_closed(ladder, _summary({"memsafe": 0.78})).iloc[0]
    assert own.full_model == pytest.approx(0.78) and own.gap == pytest.approx(0.78 - 0.65)
    assert own.fraction_closed == pytest.approx((0.60 - 0.65) / 0.13)
    worse = ablations.gap_closed(ablations.ladder_table(_summary({**AUROC, "memsafe": 0.6}), ["musique"])).iloc[0]
    assert worse.gap < 0 and pd.isna(worse.fraction_closed)  # a share of a negative gap means nothing


def test_interaction_gains_by_hand() -> None:
    cells = ablations.interaction_table(_summary(AUROC))
    gains = ablations.interaction_gains(cells).set_index("gain").unsafe_auroc
    assert gains["set model, frozen encoder"] == pytest.approx(0.70 - 0.60)
    assert gains["set model, fine-tuned encoder"] == pytest.approx(0.80 - 0.72)
    assert gains["fine-tuning, relevance aggregation"] == pytest.approx(0.72 - 0.60)
    assert gains["fine-tuning, set model"] == pytest.approx(0.80 - 0.70)


def test_frozen_models_read_the_frozen_stage_a_and_others_the_fine_tuned() -> None:
    assert registry.stage_a_kinds(["memsafe", "lexset"]) == (True, False)
    assert registry.stage_a_kinds(["relevance_agg_frozen"]) == (False, True)
    assert registry.stage_a_kinds(list(registry.ABLATIONS)) == (True, True)
    assert registry.stage_a_kinds(["tfidf"]) == (False, False)
    scale = replace(SCALES["smoke"], neural=replace(SCALES["smoke"].neural, encoder_seeds=(17,)))
    tuned, frozen = {"v": "tuned"}, {"v": "frozen"}
    context = NeuralContext("d", scale, {17: SimpleNamespace(encodings=tuned)},  # type: ignore[dict-item]
                            frozen={17: SimpleNamespace(encodings=frozen)})  # type: ignore[dict-item]
    for name in registry.ABLATIONS:
        model = registry.make_model(name, 17, context)
        assert model.encodings is (frozen if name in registry.FROZEN_MODELS else tuned), name
    assert registry.make_model("memsafe_no_bridge", 17, context).bridge is False
    assert registry.make_model("memsafe_no_lexical", 17, context).base.use_lexical is False
    assert registry.make_model("memsafe_no_localization", 17, context).base.localization_heads is False
    no_frozen = NeuralContext("d", scale, {17: SimpleNamespace(encodings=tuned)})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="frozen=True"):
        registry.make_model("memsafe_frozen", 17, no_frozen)
