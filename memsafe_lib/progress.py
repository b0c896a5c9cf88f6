"""One-line progress messages with wall-clock time, for steps that take minutes.

tqdm bars show progress inside a step; these lines say which step is running, how long it
took and whether it was resumed from a cache. They go to stderr, so they reach the terminal
from the CLI and, through ``memsafe notebook`` (papermill's ``stderr_file``), from inside a
notebook kernel too, where tqdm draws widgets the terminal never sees.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tqdm.auto import tqdm

_START = time.monotonic()
BAR_DELAY_S = 1.0  # a bar for work shorter than this is never drawn


def progress_bar(iterable: Any = None, **kwargs: Any) -> tqdm:
    """tqdm that draws only once the work has lasted ``BAR_DELAY_S``: an agent scoring a few
    memories gets one line per step, not a bar per 16 pairs."""
    return tqdm(iterable, delay=BAR_DELAY_S, **kwargs)


def elapsed(seconds: float) -> str:
    """``42.0 s``, ``3.5 min`` or ``1.25 h``: readable at a glance in a log."""
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def log(message: str) -> None:
    """``[memsafe 12:03:11 +4.2 min] message`` on stderr (time since the process started)."""
    stamp = time.strftime("%H:%M:%S")
    print(f"[memsafe {stamp} +{elapsed(time.monotonic() - _START)}] {message}", file=sys.stderr, flush=True)


@contextmanager
def step(what: str) -> Iterator[None]:
    """Log the start and the duration of a step."""
    log(f"{what} ...")
    start = time.monotonic()
    yield
    log(f"{what}: done in {elapsed(time.monotonic() - start)}")

