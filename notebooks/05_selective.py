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
# # 05 · Selective prediction at a fixed risk budget
#
# A deployed gate answers only when the memory's unsafe score is at most a threshold fixed in
# advance. This notebook reads the test and validation predictions notebook 02 wrote and asks,
# per model: how much does the gate answer (coverage) at a 5% evidence risk, what risk does it
# realise on test, and how close is that to what any ranker could reach given the prevalence
# (a third of the QA variants are complete, so coverage at 5% risk is capped at 0.3509)?
#
# Beyond the paper, the plain validation threshold (largest with observed risk ≤ 5%) sits
# beside a **Learn-then-Test** threshold whose risk is at most 5% with probability ≥ 90% over
# the validation draw; the paper's numbers appear only in `paper_*` columns. At our data size
# the validation splits hold a few hundred memories, so the guaranteed threshold is cautious.

# %% tags=["parameters"]
scale = "smoke"
datasets = ["musique", "hotpotqa", "2wikimultihopqa"]
models = ["memsafe", "mean_pool", "relevance_agg", "lexset"]
alpha = 0.05
delta = 0.1
figure_seed = 17

# %%
# %matplotlib inline
import pandas as pd
from IPython.display import display

from memsafe_lib import config
from memsafe_lib.io import read_csv, write_csv, write_json
from memsafe_lib.ledger import record_run
from memsafe_lib.reporting import selective
from memsafe_lib.reporting.figures import save_figure
from memsafe_lib.threads import configure_threads

configure_threads()  # native pools at MEMSAFE_THREADS (default 1): see memsafe_lib/threads.py
pd.set_option("display.width", 220, "display.max_columns", 40, "display.precision", 4)
cfg = config.scale_config(scale)  # the run's one configuration object
out = cfg.output_dir(config.NB05_SELECTIVE)
sources = {d: cfg.run_dir / config.EVALUATE / d / "size-matched" / "predictions.csv.gz" for d in datasets}
missing = [str(p) for p in sources.values() if not p.exists()]
if missing:
    raise FileNotFoundError(f"run notebook 02 at scale {scale} first; missing {missing}")
predictions = {d: read_csv(p) for d, p in sources.items()}
print(f"scale={scale}: {cfg.description}")

# %% [markdown]
# ## 1 · Table "selective"
#
# Seed means. `coverage` and `realized_risk` use the plain validation threshold; `ltt_*` the
# Learn-then-Test one. `realized_risk` averages the seeds that accepted anything
# (`seeds_accepting`); an empty accepted set has no risk, not a risk of zero.

# %%
points = pd.concat([selective.operating_points(predictions[d], d, models, alpha, delta) for d in datasets],
                   ignore_index=True)
write_csv(out / "operating_points.csv", points)
table = selective.selective_table(points)
write_csv(out / "selective.csv", table)
table

# %% [markdown]
# ## 2 · Figure "riskcoverage"

# %%
fig = selective.risk_coverage_figure(predictions, models, figure_seed, alpha)
save_figure(fig, out / "fig_riskcoverage.png")
fig

# %% [markdown]
# ## 3 · Error taxonomy (MemSafe, test split)
#
# Where the state predictions go wrong: confusions between the two unsafe states as shares of
# all errors, the safety-relevant direction (unsafe predicted complete) as a share of unsafe
# memories, needless abstentions as a share of complete ones, and the error rate by how many
# evidence items survive in the memory.

# %%
taxonomy = pd.concat([selective.taxonomy_table(predictions[d], d) for d in datasets], ignore_index=True)
write_csv(out / "taxonomy.csv", taxonomy)
display(taxonomy.pivot_table(index="quantity", columns="dataset", values=["value", "paper"], aggfunc="first"))
by_surviving = pd.concat([selective.error_by_surviving(predictions[d], d) for d in datasets], ignore_index=True)
write_csv(out / "error_by_surviving.csv", by_surviving)
by_surviving

# %% [markdown]
# ## 4 · Summary (checked by nbval)

# %%
# NBVAL_CHECK_OUTPUT
print(table[["dataset", "model", "n_seeds"]].to_string(index=False))

# %%
outputs = [out / f for f in ("operating_points.csv", "selective.csv", "fig_riskcoverage.png", "taxonomy.csv",
                             "error_by_surviving.csv")]
write_json(out / "summary.json", {"scale": scale, "alpha": alpha, "delta": delta, "models": models,
                                  "coverage": {f"{r.dataset}/{r.model}": round(r.coverage, 4)
                                               for r in table.itertuples()}})
record_run("notebook:05_selective", cfg,
           settings={"datasets": datasets, "models": models, "alpha": alpha, "delta": delta,
                     "figure_seed": figure_seed},
           outputs=[*outputs, out / "summary.json"], inputs=list(sources.values()),
           metrics={"selective": table.set_index(["dataset", "model"])[["aurc", "coverage", "ltt_coverage"]]
                    .round(4).reset_index().to_dict(orient="records")})
