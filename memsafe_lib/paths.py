"""The one place that knows where data, artifacts and notebooks live, and what each scale means.

Every path can be overridden by an environment variable so the same code runs in CI,
on a laptop and on a GPU node:

* ``MEMSAFE_DATA_DIR``: root of the raw data (``<root>/<dataset>/...``); default ``./data``.
* ``MEMSAFE_ARTIFACTS_DIR``: root of generated outputs; default ``<repo>/artifacts``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

QA_DATASETS: tuple[str, ...] = ("musique", "hotpotqa", "2wikimultihopqa", "squad2")
"""Directory names under ``MEMSAFE_DATA_DIR``; the first three are the family-A datasets."""

FAMILY_A_DATASETS: tuple[str, ...] = ("musique", "hotpotqa", "2wikimultihopqa")


def data_dir() -> Path:
    return Path(os.environ.get("MEMSAFE_DATA_DIR", REPO_ROOT / "data")).expanduser().resolve()


def artifacts_dir() -> Path:
    return Path(os.environ.get("MEMSAFE_ARTIFACTS_DIR", REPO_ROOT / "artifacts")).expanduser().resolve()


def notebooks_dir() -> Path:
    return REPO_ROOT / "notebooks"


def paper_reference_file() -> Path:
    """Values reported in the paper, kept apart from anything we compute."""
    return REPO_ROOT / "paper" / "reference_values.json"


def ledger_file() -> Path:
    return artifacts_dir() / "ledger.jsonl"


@dataclass(frozen=True)
class ScaleConfig:
    """What a scale means. One code path serves all three; only these numbers change."""

    name: str
    max_base_queries: int | None
    """Cap on base queries per dataset (taken in salted-hash order, so the subset is
    deterministic and spread across splits); ``None`` keeps every record."""
    seeds: tuple[int, ...]
    datasets: tuple[str, ...] = FAMILY_A_DATASETS
    description: str = ""
    extra: dict[str, object] = field(default_factory=dict)


SCALES: dict[str, ScaleConfig] = {
    "smoke": ScaleConfig(
        name="smoke",
        max_base_queries=150,
        seeds=(17,),
        description="CI: every notebook on small real subsets, minutes on 2 CPU cores.",
    ),
    "cpu": ScaleConfig(
        name="cpu",
        max_base_queries=None,
        seeds=(17, 29, 43),
        description="All real data present under MEMSAFE_DATA_DIR, about an hour on 2 cores.",
    ),
    "paper": ScaleConfig(
        name="paper",
        max_base_queries=None,
        seeds=(17, 29, 43, 71, 101),
        description="Full official files, the paper's five seeds; needs a GPU.",
    ),
}

DEFAULT_SCALE = "cpu"


def scale_config(name: str) -> ScaleConfig:
    try:
        return SCALES[name]
    except KeyError:
        raise ValueError(f"unknown scale {name!r}; choose one of {sorted(SCALES)}") from None


def output_dir(scale: str, notebook: str) -> Path:
    """``artifacts/<scale>/<notebook>/``, created on demand."""
    path = artifacts_dir() / scale / notebook
    path.mkdir(parents=True, exist_ok=True)
    return path
