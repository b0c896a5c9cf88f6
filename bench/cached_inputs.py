"""What the Stage B benchmarks share: a dataset's cached Stage A encodings and the Stage B
point notebook 02 selected, read without computing either (run notebook 02 first)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig
from memsafe_lib.data.records import RawFile
from memsafe_lib.encodings.encoders import VariantEncoding
from memsafe_lib.evaluation.neural import grid_file, stage_a_for
from memsafe_lib.variants.construction import Variant, by_split
from memsafe_lib.variants.store import build


@dataclass
class StageBInputs:
    raw_files: list[RawFile]
    encodings: dict[str, VariantEncoding]
    splits: dict[str, list[Variant]]
    point: dict[str, Any]


def selected_point(scale: ScaleConfig) -> dict[str, Any]:
    """The Stage B grid point notebook 02 selected (this checkout's run, else the recorded one)."""
    selection = grid_file(scale).with_suffix(".json")
    recorded = scale.recorded_dir / config.NB02_TRAINING / selection.name
    return json.loads((selection if selection.exists() else recorded).read_text())["selected"]


def stage_b_inputs(dataset: str, scale: ScaleConfig, construction: str = "size-matched") -> StageBInputs:
    point = selected_point(scale)
    loaded, result = build(dataset, construction, scale)
    encodings = stage_a_for(result, scale, scale.neural.encoder_seeds[0]).encodings
    return StageBInputs(list(loaded.files), encodings, by_split(result.variants), point)
