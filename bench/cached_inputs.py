"""What the Stage B benchmarks share: a dataset's cached Stage A encodings and the Stage B
point notebook 02 selected, read without computing either (run notebook 02 first)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig
from memsafe_lib.data.records import RawFile
from memsafe_lib.encodings.encoders import VariantEncoding
from memsafe_lib.estimators.neural_context import grid_file, stage_a_for
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import Variant, by_split, present_states
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


def seed_comparison(description: str) -> tuple[argparse.Namespace, int, ScaleConfig, StageBInputs, list[str]]:
    """What a Stage B comparison over seeds starts from: its arguments (``--dataset``,
    ``--scale``, ``--seeds``), the torch thread count, the scale, the dataset's cached inputs and
    the states present in its validation split."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--dataset", default="musique")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--seeds", type=int, nargs="+", default=[17, 29, 43])
    args = parser.parse_args()
    threads = configure_threads()
    scale = config.scale_config(args.scale)
    inputs = stage_b_inputs(args.dataset, scale)
    labels = present_states([v.state for v in inputs.splits["validation"]])
    return args, threads[1], scale, inputs, labels
