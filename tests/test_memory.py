"""Freed memory goes back to the system between fits: the 24 GiB machine that ran notebook 02
at cpu ran out of memory when its main process and two fit workers each kept the pages of
what they had freed (glibc keeps a freed block's pages for reuse)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from memsafe_lib import memory, parallel
from memsafe_lib.memory import release_memory

# 2,000 blocks of 100 kB (below glibc's mmap threshold, so on the heap), all freed but the last,
# which pins the heap's top: only a trim of the heap's interior can give the 200 MB back.
FRAGMENTED = textwrap.dedent("""
    import sys
    def rss_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    blocks = [bytearray(100_000) for _ in range(2_000)]
    for b in blocks:
        b[::4096] = b"x" * len(b[::4096])  # touch every page
    last = blocks[-1]
    del blocks
    held = rss_mb()
    if sys.argv[1] == "release":
        from memsafe_lib.memory import release_memory
        release_memory()
    print(held, rss_mb())
""")


def _rss_before_after(mode: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", FRAGMENTED, mode], capture_output=True, text=True, check=True)
    held, after = map(float, out.stdout.split())
    return held, after


@pytest.mark.skipif(memory._malloc_trim() is None, reason="the C library is not glibc: nothing to trim")
def test_release_gives_freed_heap_pages_back() -> None:
    held, kept = _rss_before_after("keep")
    assert kept > held - 50, "without a release the freed blocks' pages stay resident (what the fix is for)"
    held, after = _rss_before_after("release")
    assert held - after > 150, f"release_memory() gave back {held - after:.0f} of about 200 MB"


def test_release_without_glibc_only_collects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert release_memory() is False


@pytest.mark.parametrize("fails", [False, True])
def test_every_task_is_followed_by_a_release(monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    calls: list[str] = []
    monkeypatch.setattr(parallel, "release_memory", lambda: calls.append("release"))

    def task(shared: int, item: int) -> int:
        calls.append(f"task {item}")
        if fails:
            raise RuntimeError("fit failed")
        return shared * item

    if fails:
        with pytest.raises(RuntimeError):
            parallel.side_by_side(task, [1, 2], 10, label="t", workers=1)
        assert calls == ["task 1", "release"]
    else:
        assert parallel.side_by_side(task, [1, 2], 10, label="t", workers=1) == [10, 20]
        assert calls == ["task 1", "release", "task 2", "release"]
    parallel._SHARED["value"] = 3  # what a worker's initializer leaves
    calls.clear()
    if not fails:
        assert parallel._run(task, 5) == 15
        assert calls == ["task 5", "release"]
