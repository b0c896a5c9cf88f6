"""Hand freed memory back to the operating system between long steps.

Why: glibc's malloc keeps the pages of freed blocks for reuse, and torch on a CPU allocates
through it. After Stage A's encodings (in the main process) or a fit at 512 tokens (in a
side-by-side worker) a process can hold several GB it no longer uses: in a cpu run of notebook
02 the main process and its two fit workers held 7-8 GB each and a 24 GiB machine ran out of
memory during the ninth fit of the concatenated cross-encoder. ``malloc_trim(0)``
returns the free pages (inside the heap too, not only at its top) without moving a live block,
so it changes no result, and it takes milliseconds. Where the C library is not glibc (macOS,
musl) there is nothing to call and :func:`release_memory` only collects garbage.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable
from functools import cache


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_memory() -> bool:
    """Collect garbage, then return the C heap's free pages to the system; True where the C
    library could be asked (glibc), False where only garbage was collected."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
