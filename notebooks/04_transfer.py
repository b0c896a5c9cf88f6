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
# # 04 · Transfer and saturation: does the signal survive another construction?
#
# Three stress tests of models trained on size-matched (family A) MuSiQue, none of which fits
# anything on the target:
#
# * **Family A → B.** MuSiQue-Full's own answerable/unanswerable twins (family B) are a second,
#   independent construction of insufficiency. Models trained on A are scored on B's test
#   split; H3 says MemSafe should lose less AUROC than flat TF-IDF and the text-length control.
# * **SQuAD 2.0.** Unanswerable questions written by crowdworkers against a single paragraph:
#   the MuSiQue-trained MemSafe applied to all 11,873 dev questions, with MuSiQue's validation
#   thresholds carried over. Its pairs are read by the same fold encoders through the scale's
#   transfer window (`NeuralBudget.transfer_max_length`: the paper's 256 at `paper` scale; 320
#   at `cpu`, since with our tokenizer 256 tokens cut more SQuAD pairs than the paper reports),
#   chosen so the share of truncated pairs is close to the paper's; section 3 reports both.
# * **Family A → blind-matched** (beyond the paper). The same models on MuSiQue's blind-matched
#   test memories (notebook 01, section 4), where every score of the memory alone sits at 1/2:
#   what a size-matched model keeps when only reading the question can help.
# * **Memorization.** Splits are disjoint by question, not by paragraph: how many test
#   paragraphs the training split already holds, and what happens to AUROC on the questions
#   whose gold evidence it never saw.
#
# Paper values only in `paper_*` columns. The shared data hold no MuSiQue-Full twins, so at
# `smoke` and `cpu` scale family B is empty: the notebook says so and H3 stays untested; the
# code path is tested on official-format fixtures (`tests/test_transfer.py`).

# %% tags=["parameters"]
scale = "smoke"
source_dataset = "musique"
family_b_models = ["memsafe", "mean_pool", "tfidf", "text_length"]
squad_models = ["memsafe", "tfidf", "paragraph_count"]
blind_matched_models = ["memsafe", "mean_pool", "tfidf", "lexset", "blind_unit"]
squad_alphas = [0.05, 0.10]
memorization_datasets = ["musique", "hotpotqa", "2wikimultihopqa"]
memorization_models = ["memsafe", "tfidf", "lexset"]
encoder = None

# %%
# %matplotlib inline
from dataclasses import asdict

import pandas as pd
from IPython.display import Markdown, display

from memsafe_lib import config
from memsafe_lib.estimators.neural_context import build_context
from memsafe_lib.estimators.registry import stage_a_kinds
from memsafe_lib.evaluation import transfer as T
from memsafe_lib.evaluation.audit import audit
from memsafe_lib.evaluation.hypotheses import write_hypotheses_table
from memsafe_lib.io import read_csv, write_csv, write_json
from memsafe_lib.ledger import record_run
from memsafe_lib.reporting import transfer as report
from memsafe_lib.reporting.figures import save_figure
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import by_split
from memsafe_lib.variants.store import build

configure_threads()  # native pools at MEMSAFE_THREADS (default 1): see memsafe_lib/threads.py
pd.set_option("display.width", 220, "display.max_columns", 40, "display.precision", 4)
cfg = config.scale_config(scale).with_encoder(encoder)  # the run's one configuration object
out = cfg.output_dir(config.NB04_TRANSFER)
seeds = list(cfg.seeds)
loaded, source = build(source_dataset, "size-matched", cfg)
_, family_b = build(source_dataset, "family-b", cfg)
squad_loaded, squad = build("squad2", "native", cfg)
family_b_test = [v for v in family_b.variants if v.split == "test"]
_, blind_matched = build(source_dataset, "blind-matched", cfg)
blind_matched_test = [v for v in blind_matched.variants if v.split == "test"]
models = list(dict.fromkeys([*family_b_models, *squad_models, *blind_matched_models]))
finetuned, frozen = stage_a_kinds(models)
context = build_context(source, cfg, seeds, finetuned=finetuned, frozen=frozen) if finetuned or frozen else None
print(f"scale={scale}: {cfg.description}")
print(f"family B test variants: {len(family_b_test)}; SQuAD 2.0 dev questions: {len(squad.variants)}")

# %% [markdown]
# ## 1 · Fit on family A once, score every target

# %%
targets = {"squad2": squad.variants, "blind-matched": blind_matched_test}
if family_b_test:
    targets["family-b"] = family_b_test
results = T.transfer(source, targets, models, seeds, context,
                     cache_dir=cfg.cache_dir(config.EVALUATE, source_dataset, "transfer"))
table = T.transfer_table(results, by_split(source.variants)["test"], targets)
write_csv(out / "transfer_scores.csv", table)
table.groupby(["population", "model"])[["unsafe_auroc", "ece"]].mean()

# %% [markdown]
# ## 2 · Family A → B and H3

# %%
if family_b_test:
    drops = report.drop_table(table[table.model.isin(family_b_models)])
    write_csv(out / "family_b.csv", drops)
    display(drops)
else:
    drops = None
    print(f"family B: no twins under MEMSAFE_DATA_DIR ({source_dataset}: {len(family_b.variants)} family-B variants); "
          "H3 is untested at this scale")
h3 = report.h3_verdict(table)
write_json(out / "h3.json", {"id": "H3", "status": h3.status, "evidence": h3.evidence, "statement": h3.statement})
write_hypotheses_table(cfg)  # the one table of H1-H5 and the gates, artifacts/<scale>/hypotheses.csv
print(f"H3: {h3.status} ({h3.evidence})")

# %% [markdown]
# ## 2b · Family A → blind-matched (beyond the paper)
#
# Trained on size-matched MuSiQue, scored unchanged on MuSiQue's blind-matched test memories. A
# model that leaned on what the memory alone gives away loses that part here; `blind_unit`
# (never reads the question) must land at exactly 0.5, whatever it learned on size matching.

# %%
blind_drops = report.drop_table(table[table.model.isin(blind_matched_models)], target="blind-matched")
write_csv(out / "blind_matched_transfer.csv", blind_drops)
display(blind_drops)
assert blind_drops.set_index("model").auroc_b.get("blind_unit", 0.5) == 0.5

# %% [markdown]
# ## 3 · SQuAD 2.0: a construction we did not build
#
# One paragraph per question, unanswerable = unsafe. The memory-length control, as the paper
# names it here, is the paragraph count (`paragraph_count`, label "Memory-length control
# (paragraph count)"): every memory has one paragraph, so it must sit at exactly 0.5. The
# text-length control (`text_length`, characters) is a different control, reported below.
# The thresholds are those chosen on MuSiQue validation for a 5% and a 10% evidence risk.

# %%
source_validation = by_split(source.variants)["validation"]
squad_scores = report.squad_table([r for r in results if r.model in squad_models], source_validation,
                                  squad.variants, squad_alphas)
write_csv(out / "squad.csv", squad_scores)
assert squad_scores.set_index("model").unsafe_auroc.get("paragraph_count", 0.5) == 0.5
display(squad_scores)
truncation, squad_window = None, None
if context is not None and context.stage_a:
    stage_a = next(iter(context.stage_a.values()))
    squad_window = T.target_window(context.budget, source.dataset, squad.variants)
    squad_truncation = report.squad_truncation_table(stage_a.encoders[0].tokenizer, squad.variants,
                                                     stage_a.encodings, squad_window)
    write_csv(out / "squad_truncation.csv", squad_truncation)
    display(squad_truncation)
    used = squad_truncation[(squad_truncation.pair == "plain") & (squad_truncation.window == squad_window)].iloc[0]
    bridge = squad_truncation[squad_truncation.pair == "bridge"].iloc[0]
    truncation = float(used.share)
    paper_row = squad_truncation[(squad_truncation.pair == "plain") & (squad_truncation.window == used.paper_window)]
    at_paper = "" if squad_window == used.paper_window else (
        f" (this tokenizer cuts {paper_row.share.iloc[0]:.2%} at {used.paper_window} tokens)")
    display(Markdown(
        f"SQuAD pairs are read at **{squad_window} tokens** (training window {context.budget.max_length}): "
        f"{used.truncated:,} of {used.pairs:,} (question, paragraph) pairs, **{used.share:.2%}**, are longer and "
        f"truncated, against the paper's {used.paper_share:.2%} at {used.paper_window} tokens{at_paper}. The paper's "
        f"figure concerns plain pairs; the bridge pairs (q ‖ u_top, u), which hold the paragraph twice, are cut "
        f"{bridge.share:.2%} of the time at {squad_window} tokens."))
squad_text_length = audit(squad, controls=["text_length"])
print("text-length control on SQuAD (fit on the hash-split train part of the dev set; the official train file "
      f"is not under MEMSAFE_DATA_DIR): test AUROC {squad_text_length['test_auroc']['text_length']:.4f}")
fig = report.squad_figure(results, T.as_test(squad.variants))
save_figure(fig, out / "fig_hardening_external.png")
fig

# %% [markdown]
# ## 4 · Memorization audit
#
# Notebook 02's test predictions, restricted to the questions whose gold evidence paragraphs
# never occur (as text) in the training split; no model is refitted.

# %%
audits = {d: T.memorization(build(d, "size-matched", cfg)[1].variants) for d in memorization_datasets}
memo = report.memorization_table(audits)
write_csv(out / "memorization.csv", memo)
display(memo)
restricted = []
for d in memorization_datasets:
    path = cfg.run_dir / config.EVALUATE / d / "size-matched" / "predictions.csv.gz"
    if path.exists():
        restricted.append(T.restricted_auroc(read_csv(path), audits[d]["unseen_ids"], memorization_models)
                          .assign(dataset=d))
restricted = pd.concat(restricted, ignore_index=True) if restricted else pd.DataFrame(
    columns=["dataset", "model", "change"])
write_csv(out / "memorization_restricted.csv", restricted)
display(restricted)
fig = report.transfer_figure(drops, restricted)
save_figure(fig, out / "fig_transfer.png")
fig

# %% [markdown]
# ## 5 · Summary (checked by nbval)

# %%
# NBVAL_CHECK_OUTPUT
print(f"family B test variants: {len(family_b_test)}; H3: {h3.status}")
print(f"SQuAD models: {list(squad_scores.model)}")

# %%
outputs = [out / f for f in ("transfer_scores.csv", "blind_matched_transfer.csv", "squad.csv", "memorization.csv",
                             "memorization_restricted.csv",
                             "fig_transfer.png", "fig_hardening_external.png", "h3.json")]
if drops is not None:
    outputs.append(out / "family_b.csv")
if truncation is not None:
    outputs.append(out / "squad_truncation.csv")
write_json(out / "summary.json", {"scale": scale, "seeds": seeds, "budget": asdict(cfg.neural),
                                  "family_b_test_variants": len(family_b_test), "h3": h3.status,
                                  "squad_auroc": squad_scores.set_index("model").unsafe_auroc.round(4).to_dict(),
                                  "squad_window": squad_window, "squad_truncated_pairs": truncation})
record_run("notebook:04_transfer", cfg, raw_files=[*loaded.files, *squad_loaded.files],
           settings={"source": source_dataset, "family_b_models": family_b_models, "squad_models": squad_models,
                     "squad_alphas": squad_alphas, "memorization_datasets": memorization_datasets,
                     "memorization_models": memorization_models, "seeds": seeds, "budget": asdict(cfg.neural)},
           outputs=[*outputs, out / "summary.json"],
           metrics={"h3": h3.status, "squad_auroc": squad_scores.set_index("model").unsafe_auroc.round(4).to_dict(),
                    "memorization": memo.set_index("dataset").fraction_in_training.round(4).to_dict()})
