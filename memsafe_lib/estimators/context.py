"""What the neural estimators need before they can be fitted: Stage A encodings per encoder
seed and the Stage B configuration. Built by :func:`memsafe_lib.estimators.neural_context.build_context`
once per (dataset, construction, scale) and handed to the factories of the registry."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from memsafe_lib import config
from memsafe_lib.config import NeuralBudget, ScaleConfig, encoder_seed_for, private_cache_dir
from memsafe_lib.data.mimic import CLINICAL_DATASETS
from memsafe_lib.encodings.encoders import VariantEncoding
from memsafe_lib.encodings.stagea import StageAResult
from memsafe_lib.estimators.setmodel import SetModelConfig


def model_cache_dir(scale: ScaleConfig, dataset: str) -> Path:
    """Per-dataset model caches (Stage A fold encoders and encodings, the concatenated
    cross-encoder); not committed. Clinical encodings are derived from a person's
    measurements, so they live outside ``artifacts/`` (:func:`config.private_cache_dir`)."""
    if dataset in CLINICAL_DATASETS:
        return private_cache_dir(scale, "models", dataset)
    return scale.cache_dir(config.NB02_TRAINING) / dataset


def pretrained_embeddings(scale: ScaleConfig, dataset: str) -> Path:
    """The SQLite cache of the pretrained encoder's query-free embeddings (fp32, keyed by weights,
    window and text) that Stage A's ranker and the question-blind set model both read: one file
    for every QA dataset and notebook, so a unit is embedded once per run whoever asks first.
    Clinical texts are a person's measurements: theirs stays outside ``artifacts/``."""
    if dataset in CLINICAL_DATASETS:
        return private_cache_dir(scale, "models") / "pretrained_embeddings.sqlite"
    return scale.cache_dir(config.EVALUATE) / "pretrained_embeddings.sqlite"


@dataclass
class NeuralContext:
    dataset: str
    scale: ScaleConfig
    stage_a: dict[int, StageAResult]
    """Per encoder seed."""
    stage_b: dict[str, Any] = field(default_factory=dict)
    """The selected grid point (width, dropout, lr)."""
    device: str = "cpu"
    frozen: dict[int, StageAResult] = field(default_factory=dict)
    """Per encoder seed, Stage A without fine-tuning (the ablations' frozen encoder); built only
    when a model needs it."""

    @property
    def budget(self) -> NeuralBudget:
        return self.scale.neural

    @property
    def cache_dir(self) -> Path:
        return model_cache_dir(self.scale, self.dataset)

    @property
    def pretrained_embeddings(self) -> Path:
        return pretrained_embeddings(self.scale, self.dataset)

    def encodings(self, seed: int, frozen: bool = False) -> dict[str, VariantEncoding]:
        """Stage A encodings for a Stage B seed: fine-tuned, or ``frozen`` (pretrained encoder)."""
        table = self.frozen if frozen else self.stage_a
        encoder_seed = encoder_seed_for(seed, self.budget.encoder_seeds)
        if encoder_seed not in table:
            kind = "frozen" if frozen else "fine-tuned"
            raise ValueError(f"{self.dataset}: no {kind} Stage A for encoder seed {encoder_seed}; build the "
                             f"context with {'frozen' if frozen else 'finetuned'}=True")
        return table[encoder_seed].encodings

    def concat_start_file(self, seed: int) -> Path | None:
        """The weights the concatenated cross-encoder of ``seed`` starts from: None for the shipped
        ``encoder`` (``concat_start="pretrained"``), else fold encoder 0 of the fine-tuned Stage A of
        the seed's encoder seed (``"stage_a"``; a seed without its own encoders reuses another's,
        as Stage B does)."""
        start = self.budget.concat_start
        if start == "pretrained":
            return None
        if start != "stage_a":
            raise ValueError(f"concat_start must be 'pretrained' or 'stage_a', got {start!r}")
        encoder_seed = encoder_seed_for(seed, self.budget.encoder_seeds)
        result = self.stage_a.get(encoder_seed)
        if result is None or not result.encoder_files:
            raise ValueError(f"{self.dataset}: the concatenated cross-encoder starts from Stage A (concat_start="
                             f"'stage_a') but the context has no fine-tuned fold encoders for encoder seed "
                             f"{encoder_seed}; build it with finetuned=True")
        return result.encoder_files[0]

    def without_encoders(self) -> NeuralContext:
        """The same context holding only the Stage A encodings (all that set models read):
        light enough to hand to worker processes; fold encoders and ranker stay here."""
        def strip(table: dict[int, StageAResult]) -> dict[int, StageAResult]:
            return {s: replace(r, encoders=(), bi=None, target_cache=None)  # type: ignore[arg-type]
                    for s, r in table.items()}

        return replace(self, stage_a=strip(self.stage_a), frozen=strip(self.frozen))

    def set_config(self, **overrides: Any) -> SetModelConfig:
        return SetModelConfig.for_budget(self.budget, **{**self.stage_b, **overrides})
