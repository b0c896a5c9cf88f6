"""Native thread pools (OpenMP, BLAS, torch), set once where a run starts.

Why: scikit-learn's gradient boosting runs on OpenMP, whose workers spin while they wait.
With as many workers as cores and other work on those cores, they spin against each other:
a LexSet fit that takes seconds with one thread did not finish in 300 s beside two busy
processes on a 2-core machine (``artifacts/cpu/bench/threads_musique.csv``).
Every entry point (the CLI, each notebook's first cell, the test session, ``bench/``) calls
:func:`configure_threads`; LexSet also wraps its fits in :func:`limited_threads`, so a user
who imports the library into their own script gets the same protection.

The numbers come from :mod:`memsafe_lib.config` (``MEMSAFE_THREADS``): unset, OpenMP/BLAS
fits get one thread and torch one per core; a number sets every pool; 0 changes nothing.
Stage B (the set model) is the exception: it always runs one torch thread on CPU
(:func:`torch_threads_held`), see :data:`memsafe_lib.config.STAGE_B_THREADS`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from threadpoolctl import threadpool_limits

from memsafe_lib import config

_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
             "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def configure_threads(threads: int | None = None) -> tuple[int, int]:
    """Set this process's native pools, and those of the processes it starts (notebook
    kernels inherit the environment). Returns (fit threads, torch threads); (0, 0) when
    ``MEMSAFE_THREADS=0`` asked to leave the libraries alone.

    Environment variables reach libraries loaded later and child processes; threadpoolctl
    reaches the ones already loaded; torch is imported here (about a second) so that its
    intra-op count is set once, whatever ``OMP_NUM_THREADS`` says.
    """
    if threads is None and config.native_threads() == 0 or threads == 0:
        return 0, 0
    fit = config.fit_threads() if threads is None else threads
    torch_n = config.torch_threads() if threads is None else threads
    for var in _ENV_VARS:
        os.environ[var] = str(fit)
    threadpool_limits(limits=fit)
    import torch  # lazy: heavy (about a second); only the pools are set here

    if torch.get_num_threads() != torch_n:
        torch.set_num_threads(torch_n)
    return fit, torch_n


@contextmanager
def limited_threads(threads: int | None = None) -> Iterator[int]:
    """Hold OpenMP/BLAS pools at ``threads`` (default: the fit setting) inside the block."""
    threads = config.fit_threads() if threads is None else threads
    if threads == 0:
        yield 0
        return
    with threadpool_limits(limits=threads):
        yield threads


@contextmanager
def torch_threads_held(threads: int) -> Iterator[int]:
    """torch intra-op threads at ``threads`` inside the block, restored after (nesting is fine)."""
    import torch

    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
