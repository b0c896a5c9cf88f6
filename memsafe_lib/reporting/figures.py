"""Shared figure helpers: atomic PNG writes and reproducible seaborn jitter."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from memsafe_lib.io import atomic_open


def save_figure(fig: Figure, path: Path) -> Path:
    """Write a PNG atomically (temp file, then rename)."""
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=150, bbox_inches="tight")
    return path


@contextmanager
def seeded_global_rng(seed: int) -> Iterator[None]:
    """Seed numpy's global RNG for the block and restore its state afterwards."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)
