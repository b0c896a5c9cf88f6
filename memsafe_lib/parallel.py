"""Independent fits side by side, one process each.

Why: model fits are the largest cost of a cpu reproduction, and their matrices are too small
for two threads to share well. Three callers use it: the set-model and concatenated
cross-encoder fits of different seeds (:mod:`memsafe_lib.evaluation.runs`), the Stage B grid points
(:mod:`memsafe_lib.estimators.neural_context`) and the two Stage A fold encoders
(:mod:`memsafe_lib.encodings.stagea`). Each process runs one torch thread, so the weights are
the same whatever the number of processes; for Stage B on 2 cores this gives 1.46x the fits
per hour of one two-thread fit after another (``artifacts/cpu/bench/stage_b_parallel_musique.csv``).

Workers are fresh interpreters (``spawn``: no thread pool or CUDA state inherited), each
given the shared inputs once; a task is a module-level function ``task(shared, item)``.
Callers cache each result on disk as it is produced, so a killed batch resumes with the
fits that finished. Memory: this process hands its freed pages back before the workers start,
and each worker after each task (:mod:`memsafe_lib.memory`), so that three processes that each
once held several GB fit in the machine together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from typing import Any, TypeVar

from memsafe_lib import config
from memsafe_lib.memory import release_memory
from memsafe_lib.progress import progress_bar
from memsafe_lib.threads import configure_threads

T = TypeVar("T")
R = TypeVar("R")

_SHARED: dict[str, Any] = {}


def _start_worker(shared: Any) -> None:
    configure_threads(1)  # the processes share the cores: one thread each, for every pool
    _SHARED["value"] = shared


def _call(task: Callable[[Any, T], R], shared: Any, item: T) -> R:
    try:
        return task(shared, item)
    finally:  # a process runs many fits: what one fit freed must not stay held for the next
        release_memory()


def _run(task: Callable[[Any, T], R], item: T) -> R:
    return _call(task, _SHARED["value"], item)


def side_by_side(task: Callable[[Any, T], R], items: Sequence[T], shared: Any, *, label: str,
                 workers: int | None = None, on_result: Callable[[T, R], None] | None = None) -> list[R]:
    """``task(shared, item)`` for every item, in order, on up to ``workers`` processes
    (default :func:`config.fit_workers`); in this process when one worker or one item.
    ``on_result`` sees each (item, result) as it finishes (to log or cache it). The first
    error stops the batch and is raised here."""
    workers = min(workers or config.fit_workers(), len(items))
    results: dict[int, R] = {}
    if workers <= 1:
        for i, item in enumerate(progress_bar(items, desc=label, leave=False)):
            results[i] = _call(task, shared, item)
            if on_result:
                on_result(item, results[i])
        return [results[i] for i in range(len(items))]
    release_memory()  # this process waits meanwhile: what it freed (Stage A's encodings) is the workers'
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_start_worker,
                             initargs=(shared,)) as pool:
        futures = {pool.submit(_run, task, item): i for i, item in enumerate(items)}
        pending = set(futures)
        with progress_bar(total=len(items), desc=f"{label} ({workers} processes)", leave=False) as bar:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    if future.exception() is not None:
                        for other in pending:
                            other.cancel()
                        raise future.exception()  # type: ignore[misc]
                    i = futures[future]
                    results[i] = future.result()
                    if on_result:
                        on_result(items[i], results[i])
                    bar.update()
    return [results[i] for i in range(len(items))]
