# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: memsafe
#     language: python
#     name: memsafe
# ---

# %% [markdown]
# # 03 · Where MemSafe's signal comes from: ablations, the attribution ladder, the interaction
#
# Notebook 02 compared MemSafe with its comparators. Here we take it apart. **Table
# "ablation"** removes one part at a time from the full model (fine-tuning, the bridge-
# conditioned encoding, the set model, the lexical/position features, the localization heads)
# and, in its last row, fine-tuning *and* the set model together. As in the paper, these
# rows run on three Stage B seeds that share one Stage A encoder (the first seed's, the one
# notebook 02 tuned), so only the removed part differs between rows and seeds differ only in
# Stage B (`config.experiment_scale(cfg, "ablation")`; at `cpu` that is the scale itself:
# three seeds, one encoder). **Figure "attribution"** climbs from LexSet to MemSafe one rung
# at a time and reports the share of the LexSet-to-MemSafe gap that a frozen encoder already
# closes; its rungs from Table "main" are notebook 02's, on all of the scale's seeds, as the
# paper's five-seed figure. **Figure "interaction"** crosses frozen/fine-tuned encoders
# with/without the set model. H4 (the bridge matters on MuSiQue and 2WikiMultiHopQA) is
# evaluated on the shared-encoder runs, as the paper's ablation.
#
# Every number is computed here; the paper's appear only in `paper_*` columns (full data, the
# MS MARCO cross-encoder start). Read notebook 02's caveats first: at `cpu` scale the encoder
# starts from all-MiniLM-L6-v2, a bi-encoder without a trained relevance head, so its *frozen*
# relevance score is the bi-encoder's cosine (said in the Stage A table below), not a
# cross-encoder's logit as in the paper; and at our data size LexSet is much stronger than
# the paper's, so the gap MemSafe must close is smaller or negative.

# %% tags=["parameters"]
scale = "smoke"
ablation_datasets = ["musique"]
bridge_datasets = ["musique", "2wikimultihopqa"]
ladder_datasets = ["musique", "hotpotqa", "2wikimultihopqa"]
silver_datasets = ["musique"]
curve_datasets = ["hotpotqa"]  # paper: MuSiQue and HotpotQA (config.LEARNING_CURVE_03); cpu: none
curve_fractions = [0.5]  # cpu and paper: 0.25 and 0.5
n_resamples = 1000
encoder = None

# %%
# %matplotlib inline
import json
from dataclasses import asdict

import pandas as pd
from IPython.display import display

from memsafe_lib import config
from memsafe_lib.estimators.registry import ABLATIONS, INTERACTION, LADDER
from memsafe_lib.evaluation.runs import EvaluationRequest, run_evaluations
from memsafe_lib.evaluation.summary import (
    ABLATION_COMPARISONS,
    evaluation_dirs,
    load_metrics,
    summarize,
    summary_table,
)
from memsafe_lib.io import write_csv, write_json
from memsafe_lib.ledger import record_run
from memsafe_lib.reporting import ablations
from memsafe_lib.reporting.figures import save_figure
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.store import build
from memsafe_lib.variants.supervision import silver_quality

configure_threads()  # native pools at MEMSAFE_THREADS (default 1): see memsafe_lib/threads.py
pd.set_option("display.width", 220, "display.max_columns", 40, "display.precision", 4)
cfg = config.scale_config(scale).with_encoder(encoder)  # the run's one configuration object
out = cfg.output_dir(config.NB03_ABLATIONS)
# every run here: the ablation's three Stage B seeds sharing the first encoder; silver
# supervision the same (its gold row is the ablation's full model)
ablation_cfg = config.experiment_scale(cfg, "ablation")
silver_cfg = config.experiment_scale(cfg, "silver")
seeds = list(ablation_cfg.seeds)
print(f"scale={scale}: {cfg.description}")
print(f"seeds: {seeds} (scale: {list(cfg.seeds)}), sharing encoder seed {list(ablation_cfg.neural.encoder_seeds)}; "
      f"Stage A start: {cfg.neural.encoder}")

# %% [markdown]
# ## 1 · Fit the ablated models
#
# Every run here is in the ablation's scope (the ladder's runs give its paired step
# intervals; its means come from notebook 02, section 4). Fitted models are cached under
# `evaluate/` by code, data and settings, so the rows notebook 02 already fitted (MemSafe,
# mean pooling, relevance aggregation, LexSet) are loaded, not refitted: at `cpu` all of
# them; where notebook 02's seeds have encoders of their own (`paper`), those of the first
# seed and LexSet's. The frozen rows need Stage A without fine-tuning: every memory encoded
# once more by the pretrained encoder where a frozen set model reads the encodings (MuSiQue);
# where only relevance aggregation reads them (the ladder on HotpotQA and 2Wiki), the
# pretrained ranker's relevance scores are all it needs, and no pair is encoded
# (`pair_encodings` below). `run_evaluations` runs Stage A for every dataset first and then
# fits all their set models in one side-by-side batch (three seeds on two cores would leave a
# core idle at the end of each dataset's batch); each fit is the same as alone.

# %%
datasets = list(dict.fromkeys([*ablation_datasets, *bridge_datasets, *ladder_datasets, *curve_datasets]))
models = {}
for d in datasets:
    wanted = [*(ABLATIONS if d in ablation_datasets else ()), *(LADDER if d in ladder_datasets else ()),
              *(["memsafe", "memsafe_no_bridge"] if d in bridge_datasets else ()),
              *(ablations.CURVE_MODELS if d in curve_datasets else ())]  # the curve's full-data point
    if d in ablation_datasets:
        wanted += list(INTERACTION.values())
    models[d] = list(dict.fromkeys(wanted))
requests = [EvaluationRequest(d, tuple(models[d]), folder=config.NB03_ABLATIONS) for d in datasets]
files = dict(zip(datasets, run_evaluations(requests, seeds, ablation_cfg), strict=True))
pd.DataFrame([{"dataset": d, "models": ", ".join(m)} for d, m in models.items()])

# %% [markdown]
# **Silver supervision.** MemSafe trained with per-unit targets from gold-answer string
# matching (a unit is "evidence" when it contains a gold answer) on the training split only;
# variants, integrity labels and everything we score against stay gold. **Learning curve.**
# MemSafe and LexSet trained on nested salted-hash fractions of the training questions (the
# encoder is fine-tuned on the same fraction); validation and test are the full splits.
# Where the scale pools Stage A over the three multi-hop datasets (`smoke`, `cpu`), the pooled
# fold encoders see every pooled dataset under the same change (silver targets, or the same
# fraction of each dataset's training questions), so a point differs from the full run only
# in what it varies; the curve's two datasets share one encoder pair per fraction.
# The silver run and the curve points share one batch of fits, as above, and one scope: the
# paper has no QA learning curve, so we give it the ablation's (three Stage B seeds sharing
# one encoder per point; its full-data point is this notebook's own run), the cheapest
# replication the paper uses for its component studies.

# %%
silver = [EvaluationRequest(d, ("memsafe",), folder=config.NB03_ABLATIONS, supervision="silver")
          for d in silver_datasets]
points = [(d, f) for d in curve_datasets for f in curve_fractions]
curve = [EvaluationRequest(d, ("memsafe", "lexset"), folder=config.NB03_ABLATIONS, train_fraction=f) for d, f in points]
written = run_evaluations([*silver, *curve], list(silver_cfg.seeds), silver_cfg)
silver_files = dict(zip(silver_datasets, written[:len(silver)], strict=True))
curve_files = dict(zip(points, written[len(silver):], strict=True))
gold = {d: build(d, None, cfg)[1] for d in dict.fromkeys([*silver_datasets, *curve_datasets])}

# %%
stage_a = []
for d in datasets:
    neural = json.loads(files[d]["neural"].read_text())
    for kind in ("stage_a", "stage_a_frozen"):
        for encoder_seed, s in neural.get(kind, {}).items():
            stage_a.append({"dataset": d, "stage_a": "fine-tuned" if kind == "stage_a" else "frozen",
                            "encoder_seed": int(encoder_seed), "relevance_logit": s.get("relevance_logit"),
                            "u_top_by": s.get("u_top_by"), "pair_encodings": s.get("pair_encodings", True),
                            "pairs_unique": s["pairs_unique"],
                            "seconds_encode": s.get("seconds_encode")})
stage_a = pd.DataFrame(stage_a)
write_csv(out / "stage_a.csv", stage_a)
stage_a

# %% [markdown]
# ## 2 · Paired intervals and H4
#
# The same paired hierarchical bootstrap as notebook 02 (resamples over base questions and
# seeds, one draw for both models), now for each ablation against the full model, each rung
# of the ladder against the one below, and the interaction's gains, all within this
# notebook's shared-encoder runs: notebook 02's results are not mixed in (at `paper` its
# seeds 29 and 43 read their own encoders). H4 is decided here (`h4.json`) and shown from
# the one table of verdicts, `artifacts/<scale>/hypotheses.csv`. `main_summary` is notebook
# 02's Table "main" on all of the scale's seeds, which the ladder's means read.

# %%
summary_files = summarize(cfg, n_resamples=n_resamples, sources=(config.NB03_ABLATIONS,),
                          folder=config.NB03_ABLATIONS, comparisons=ABLATION_COMPARISONS)
summary = pd.read_csv(summary_files["summary"])
intervals = pd.read_csv(summary_files["intervals"])
hypotheses = pd.read_csv(summary_files["hypotheses"])
main_summary = summary_table(load_metrics(cfg, (config.EVALUATE,)))
hypotheses[hypotheses.id == "H4"]

# %% [markdown]
# ## 3 · Table "ablation"
#
# `delta_*` is the row minus the full model (paired bootstrap estimate, 95% interval). The
# paper's rows are on MuSiQue with the MS MARCO cross-encoder; `paper_delta_*` are the Δ it
# prints (differences of its unrounded means).

# %%
ablation = pd.concat([ablations.ablation_table(summary, intervals, d) for d in ablation_datasets], ignore_index=True)
write_csv(out / "ablation.csv", ablation)
ablation

# %% [markdown]
# ## 4 · Figure "attribution": the ladder from LexSet to MemSafe
#
# Each rung changes several things at once (features, encoder, aggregation), so the ladder
# describes where AUROC rises, not a causal split of credit. The share of the gap a frozen
# encoder closes is undefined where MemSafe does not beat LexSet. Means as the paper's
# figure: the rungs of Table "main" on all of the scale's seeds (notebook 02), the frozen
# rung, which only this notebook fits, from its runs (deterministic given the frozen
# encoder, so its mean is the same over any seeds). The gap's full model is this notebook's
# own (`full_model`), as the paper divides by its ablation's 0.9674, not Table main's MemSafe.

# %%
ladder = ablations.ladder_table(ablations.ladder_summary(main_summary, summary), ladder_datasets)
write_csv(out / "ladder.csv", ladder)
gap = ablations.gap_closed(ladder, summary)
write_csv(out / "gap_closed.csv", gap)
display(gap)
fig = ablations.attribution_figure(ladder)
save_figure(fig, out / "fig_attribution.png")
fig

# %% [markdown]
# ## 5 · Figure "interaction": fine-tuning × set model
#
# All four cells share one encoder (three Stage B seeds); in the paper the fine-tuned cell
# without the set model came from its five-seed main table. The LexSet line is Table
# "main"'s.

# %%
interaction = pd.concat([ablations.interaction_table(summary, d) for d in ablation_datasets], ignore_index=True)
write_csv(out / "interaction.csv", interaction)
gains = pd.concat([ablations.interaction_gains(interaction[interaction.dataset == d]).assign(dataset=d)
                   for d in ablation_datasets], ignore_index=True)
write_csv(out / "interaction_gains.csv", gains)
display(gains)
lexset = main_summary[(main_summary.dataset == ablation_datasets[0]) & (main_summary.model == "lexset")
                      & (main_summary.construction == "size-matched")].unsafe_auroc
fig = ablations.interaction_figure(interaction[interaction.dataset == ablation_datasets[0]],
                                   float(lexset.iloc[0]) if len(lexset) else None)
save_figure(fig, out / "fig_interaction.png")
fig

# %% [markdown]
# ## 6 · Silver supervision
#
# Precision and recall of the silver targets against the annotated evidence (training units),
# and the silver-trained MemSafe beside the gold-trained one (per-unit AUPRC is always
# against gold). The paper reports silver precision 0.653 and recall 0.365 on MuSiQue.

# %%
quality = {d: silver_quality(gold[d].variants) for d in silver_datasets}
silver = ablations.silver_table(summary, quality, silver_datasets)
write_csv(out / "silver.csv", silver)
silver

# %% [markdown]
# ## 7 · Learning curve: does MemSafe catch up with LexSet as data grows?
#
# `gap_change_per_doubling` is the least-squares slope of (MemSafe − LexSet) against log2 of
# the training fraction, and `crossing_fraction` where that line reaches zero: an
# extrapolation from three points, flagged when it lies outside the fractions we ran.
# The paper has no QA learning curve; `cpu` leaves it out (`curve_datasets = []`: with pooled
# Stage A each fraction tunes its own pooled fold-encoder pair, about 50 minutes for the two
# fractions, which the four-hour budget cannot hold); pass the datasets to run it.

# %%
curve_outputs = ["learning_curve.csv", "learning_curve_crossing.csv", "fig_learning_curve.png"] if points else []
if points:
    train_questions = {d: len({v.base_id for v in gold[d].variants if v.split == "train"}) for d in curve_datasets}
    curve = ablations.learning_curve_table(summary, curve_datasets, curve_fractions, train_questions)
    write_csv(out / "learning_curve.csv", curve)
    crossing = ablations.curve_crossing(curve)
    write_csv(out / "learning_curve_crossing.csv", crossing)
    display(crossing)
    fig = ablations.learning_curve_figure(curve)
    save_figure(fig, out / "fig_learning_curve.png")
    display(fig)
else:
    print(f"no QA learning curve at scale {scale} (curve_datasets is empty)")

# %% [markdown]
# ## 8 · Summary (checked by nbval)

# %%
# NBVAL_CHECK_OUTPUT
print(ablation[["dataset", "model", "n_seeds"]].to_string(index=False))
print(hypotheses[hypotheses.id == "H4"][["id", "status"]].to_string(index=False))

# %%
outputs = [out / f for f in ("stage_a.csv", "ablation.csv", "ladder.csv", "gap_closed.csv", "interaction.csv",
                             "interaction_gains.csv", "fig_attribution.png", "fig_interaction.png", "silver.csv",
                             *curve_outputs)]
write_json(out / "summary.json", {
    "scale": scale, "seeds": seeds, "encoder_seeds": list(ablation_cfg.neural.encoder_seeds),
    "ladder_seeds": list(cfg.seeds), "budget": asdict(ablation_cfg.neural), "datasets": models,
    "ablation_auroc": {d: g.set_index("model").unsafe_auroc.round(4).to_dict() for d, g in ablation.groupby("dataset")},
    "h4": hypotheses.set_index("id").status.get("H4"),
})
record_run("notebook:03_ablations", cfg,
           settings={"ablation_datasets": ablation_datasets, "bridge_datasets": bridge_datasets,
                     "ladder_datasets": ladder_datasets, "seeds": seeds,
                     "encoder_seeds": list(ablation_cfg.neural.encoder_seeds), "ladder_seeds": list(cfg.seeds),
                     "budget": asdict(ablation_cfg.neural),
                     "silver_datasets": silver_datasets, "curve_datasets": curve_datasets,
                     "curve_fractions": curve_fractions, "n_resamples": n_resamples},
           outputs=[*outputs, out / "summary.json"],
           metrics={"ablation": {d: g.set_index("model")[["unsafe_auroc", "macro_f1"]].round(4).to_dict(orient="index")
                                 for d, g in ablation.groupby("dataset")},
                    "h4": hypotheses.set_index("id").status.get("H4")},
           inputs=[*(f for d in datasets for f in files[d].values()),
                   *(f for fs in [*silver_files.values(), *curve_files.values()] for f in fs.values()),
                   *summary_files.values(), *(d / "metrics.csv" for d in evaluation_dirs(cfg))])
