"""What the neural models need before they can be fitted: Stage A encodings per encoder
seed, and the Stage B configuration chosen on MuSiQue validation.

:class:`NeuralContext` is built once per (dataset, construction, scale) and handed to the
model factories of :mod:`memsafe_lib.models`. Stage A is cached by content (weights and
pairs), so a context for a dataset whose encoders were already tuned costs only a load.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from . import paths
from .audit import by_split
from .construction import ConstructionResult, build
from .encoders import VariantEncoding
from .io import atomic_open
from .ledger import code_fingerprint
from .memsafe import MemSafe
from .paths import NeuralBudget, encoder_seed_for, scale_config
from .progress import log, step
from .setmodel import GRID, SetModelConfig
from .stagea import StageAConfig, StageAResult, run_stage_a

GRID_DATASET = "musique"
"""The paper selects the Stage B configuration on MuSiQue validation and uses it everywhere."""


def stage_a_dir(scale: str, dataset: str) -> Path:
    """Fold encoders, checkpoints and the SQLite encoding cache of a dataset (not committed)."""
    return paths.cache_dir(scale, "02_training") / dataset / "stage_a"


@dataclass
class NeuralContext:
    dataset: str
    scale: str
    budget: NeuralBudget
    stage_a: dict[int, StageAResult]
    """Per encoder seed."""
    stage_b: dict[str, Any] = field(default_factory=dict)
    """The selected grid point (width, dropout, lr)."""
    device: str = "cpu"

    @property
    def cache_dir(self) -> Path:
        """Per-dataset model caches (Stage A, concatenated cross-encoder); not committed."""
        return stage_a_dir(self.scale, self.dataset).parent

    def encodings(self, seed: int) -> dict[str, VariantEncoding]:
        return self.stage_a[encoder_seed_for(seed, self.budget.encoder_seeds)].encodings

    def set_config(self, **overrides: Any) -> SetModelConfig:
        return replace(SetModelConfig(epochs=self.budget.stage_b_epochs), **{**self.stage_b, **overrides})


def stage_a_for(result: ConstructionResult, scale: str, encoder_seed: int, device: str = "cpu",
                progress: bool = True, frozen: bool = False) -> StageAResult:
    config = replace(StageAConfig.for_budget(scale_config(scale).neural, device), frozen=frozen)
    return run_stage_a(result.variants, config, encoder_seed, stage_a_dir(scale, result.dataset), progress)


def grid_file(scale: str) -> Path:
    return paths.output_dir(scale, "02_training") / "stage_b_grid.csv"


def select_stage_b(scale: str, device: str = "cpu", progress: bool = True) -> dict[str, Any]:
    """The grid point chosen on MuSiQue validation (seed 17, first encoder seed).

    Written to ``stage_b_grid.csv`` with the code fingerprint; reused while the code is
    unchanged. At scales without the full grid, the paper's point is used unevaluated.
    """
    budget = scale_config(scale).neural
    if not budget.full_grid:
        return dict(GRID[0])
    path = grid_file(scale)
    meta = path.with_suffix(".json")
    recorded = paths.recorded_dir(scale) / "02_training" / meta.name  # a scratch run may reuse it
    for saved_meta in dict.fromkeys([meta, recorded]):
        saved = json.loads(saved_meta.read_text()) if saved_meta.exists() else {}
        if saved.get("code") == code_fingerprint():
            log(f"Stage B grid: reusing the selection in {saved_meta} ({saved['selected']})")
            return dict(saved["selected"])
    _, result = build(GRID_DATASET, "size-matched", scale)
    seed = budget.encoder_seeds[0]
    encodings = stage_a_for(result, scale, seed, device, progress).encodings
    splits = by_split(result.variants)
    model = MemSafe(encodings, seed=seed, base=SetModelConfig(epochs=budget.stage_b_epochs), grid=GRID)
    with step(f"Stage B grid: {len(GRID)} points on {GRID_DATASET} validation"):
        model.fit(splits["train"], splits["validation"])
    scores = pd.DataFrame(model.selection_scores)
    selected = {k: model.config[k] for k in GRID[0]}
    with atomic_open(path, "w") as fh:
        scores.to_csv(fh, index=False, float_format="%.6f")
    with atomic_open(meta, "w") as fh:
        json.dump({"code": code_fingerprint(), "selected": selected, "dataset": GRID_DATASET, "seed": seed,
                   "rule": "validation unsafe AUROC, macro-F1 tie-break, then grid order"}, fh, indent=2)
    return selected


def build_context(result: ConstructionResult, scale: str, seeds: Sequence[int], device: str = "cpu",
                  progress: bool = True) -> NeuralContext:
    budget = scale_config(scale).neural
    needed = sorted({encoder_seed_for(s, budget.encoder_seeds) for s in seeds})
    stage_a = {s: stage_a_for(result, scale, s, device, progress) for s in needed}
    return NeuralContext(result.dataset, scale, budget, stage_a, select_stage_b(scale, device, progress), device)


def context_summary(context: NeuralContext) -> dict[str, Any]:
    return {"budget": asdict(context.budget), "stage_b": context.stage_b,
            "stage_a": {str(s): r.summary() for s, r in context.stage_a.items()}}


def train_gate(dataset: str, scale: str, seed: int | None = None, out: Path | None = None,
               device: str = "cpu", progress: bool = True) -> Path:
    """``memsafe train``: fit MemSafe on ``dataset`` (train split, selection on validation)
    and save it as a gate directory with its metrics and fingerprint; returns the path."""
    from .evaluate import EVAL_SPLITS, split_metrics
    from .gate import Gate
    from .ledger import data_fingerprint, fingerprint, record_run

    loaded, result = build(dataset, "size-matched", scale)
    seed = scale_config(scale).seeds[0] if seed is None else seed
    context = build_context(result, scale, [seed], device, progress)
    splits = by_split(result.variants)
    estimator = MemSafe(context.encodings(seed), seed, context.set_config())
    estimator.fit(splits["train"], splits.get("validation"))
    metrics = {s: split_metrics(splits[s], estimator.predict(splits[s])) for s in EVAL_SPLITS if splits.get(s)}
    settings = {"dataset": dataset, "scale": scale, "seed": seed, "construction": "size-matched",
                "budget": asdict(context.budget), "stage_b": estimator.config, "data": data_fingerprint(loaded.files)}
    stage_a = context.stage_a[encoder_seed_for(seed, context.budget.encoder_seeds)]
    gate = Gate.from_estimator(estimator, stage_a.encoders, stage_a.bi,
                               {"dataset": dataset, "scale": scale, "fingerprint": fingerprint(loaded.files, settings),
                                "metrics": metrics, "training": settings})
    path = gate.save(out or paths.run_dir(scale) / "gates" / f"{dataset}-seed{seed}")
    record_run(f"train:{dataset}", scale, raw_files=loaded.files, settings=settings,
               outputs=[path / "config.json", path / "set_model.safetensors"], metrics=metrics)
    return path
