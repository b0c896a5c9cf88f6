"""bf16 only where the hardware computes it: every ``bf16=True`` in the library asks, this
module answers.

Why: bf16 autocast is what makes Stage A and Stage B fit the CPU budget on a processor with bf16
matrix units (AMX, AVX512), but on one without them torch has no fast bf16 kernel: on an AMD
EPYC with AVX2 only, a bf16 matmul ran two orders of magnitude slower than fp32 and Stage A's
encoder several times slower (``bench/precision.py``, ``artifacts/cpu/bench/precision_avx2.csv``),
and a cold cpu run's fold fine-tuning was not done after two and a half times the minutes it
took on a CPU with AMX. Having bf16 kernels is not enough either: on a Xeon with AVX512-BF16
but no AMX tiles (as a virtual machine may show one), ``bench/precision.py`` measured bf16
slower than fp32 (a matmul at 0.55 of fp32's rate, Stage A's encoder at 0.64; that machine's
row was not kept), while on a Zen 4 EPYC with the same instructions bf16 ran about twice as
fast as fp32 (``artifacts/cpu/bench/precision_avx512_amd.csv``). So
``auto`` (the default) computes in bf16 only where it pays: a GPU with bf16, a CPU with AMX tiles
(where a bf16 matmul ran five times fp32's), and a CPU whose bf16 kernels measure at least
:data:`BF16_MARGIN` times fp32's rate in a short matmul probe, run once per machine and kept in
``~/.cache/memsafe/precision.json`` so every later process and run on it chooses the same. The
choice is part of every cache key that precision can change (encoder fingerprints, fine-tuning
runs, cached model runs) and of each ledger entry's ``environment``.

``MEMSAFE_BF16``: ``auto`` (default), ``1`` (bf16 wherever asked, however slow), ``0`` (fp32
everywhere). Numbers computed in fp32 differ from bf16 ones in the last digits, as numbers from
another CPU may anyway; the ledger says which precision produced each run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from memsafe_lib import config
from memsafe_lib.progress import log

BF16_ENV = "MEMSAFE_BF16"
MODES = ("auto", "1", "0")
BF16_MARGIN = 1.2
"""bf16 is chosen on a CPU without AMX only where its matmul runs this many times fp32's rate:
where the two are close, fp32 (the more exact) wins."""
PROBE_SIZE = 768
PROBE_FILE = "precision.json"


def mode() -> str:
    """``MEMSAFE_BF16``, checked: ``auto`` unless set."""
    value = os.environ.get(BF16_ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"{BF16_ENV}={value!r}: expected one of {', '.join(MODES)} "
                         "(auto: bf16 only where the hardware has a fast bf16 path)")
    return value


@cache
def bf16_native(device_type: str) -> bool:
    """Whether torch has bf16 kernels on this kind of device (the ledger's ``bf16_units``): a CUDA
    GPU that supports bf16, or a CPU whose oneDNN bf16 kernels torch would use (AVX512 or AMX on
    x86, bf16 on Arm). Whether they beat fp32 is :func:`bf16_pays`'s question."""
    import torch  # lazy: heavy

    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device_type == "cpu":
        check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
        return bool(check()) if check is not None else False
    return False


def _cpu_key() -> str:
    """What the probe's answer depends on: the CPU (its /proc/cpuinfo model name and flags, or
    the platform's processor string elsewhere) and torch's kernels."""
    import torch

    info = Path("/proc/cpuinfo").read_text(errors="ignore").splitlines() if Path("/proc/cpuinfo").exists() else []
    model = next((x.split(":", 1)[1].strip() for x in info if x.startswith("model name")), platform.processor())
    flags = next((x for x in info if x.startswith("flags")), "")
    return f"{model}|torch {torch.__version__}|flags {hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def matmul_rates(n: int = PROBE_SIZE, rounds: int = 5) -> tuple[float, float]:
    """(fp32, bf16) GFLOP/s of an n x n matmul at this process's threads, best of interleaved
    rounds (so a load that comes and goes slows both alike)."""
    import torch

    a32, b32 = torch.randn(n, n), torch.randn(n, n)
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    best = [0.0, 0.0]
    for _ in range(rounds):
        for i, (a, b) in enumerate(((a32, b32), (a16, b16))):
            a @ b  # warm-up: allocation and kernel selection
            start = time.perf_counter()
            for _ in range(4):
                a @ b
            best[i] = max(best[i], 2 * n**3 * 4 / (time.perf_counter() - start) / 1e9)
    return best[0], best[1]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process probes at a time; the others wait and read its answer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def cpu_bf16_pays() -> bool:
    """Whether bf16 beats fp32 by :data:`BF16_MARGIN` on this CPU: AMX tiles say yes at once;
    otherwise the probe's answer for this machine, measured on first use and kept."""
    import torch

    if getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)():
        return True
    path, key = config.private_cache_root() / PROBE_FILE, _cpu_key()
    with _locked(path):
        known = json.loads(path.read_text()) if path.exists() else {}
        if key not in known:
            fp32, bf16 = matmul_rates()
            known[key] = {"fp32_gflops": round(fp32, 1), "bf16_gflops": round(bf16, 1),
                          "bf16": bf16 >= BF16_MARGIN * fp32}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(known, indent=1) + "\n")
            os.replace(tmp, path)
            log(f"bf16 probe on this CPU: a matmul at {bf16:.0f} GFLOP/s in bf16, {fp32:.0f} in fp32: "
                f"{'bf16' if known[key]['bf16'] else 'fp32'} from now on (kept in {path})")
    return bool(known[key]["bf16"])


@cache
def bf16_pays(device_type: str) -> bool:
    """Whether ``auto`` computes in bf16 here: the hardware has a fast bf16 path and, on a CPU,
    it measured faster than fp32 (:func:`cpu_bf16_pays`)."""
    if not bf16_native(device_type):
        return False
    return cpu_bf16_pays() if device_type == "cpu" else True


def _device_type(device: str) -> str:
    return device.split(":")[0]


def use_bf16(requested: bool, device: str = "cpu") -> bool:
    """The precision a ``bf16=requested`` computation on ``device`` actually runs in."""
    if not requested:
        return False
    current = mode()
    if current != "auto":
        return current == "1"
    pays = bf16_pays(_device_type(device))
    if not pays:
        _say_fallback(_device_type(device))
    return pays


@cache
def _say_fallback(device_type: str) -> None:
    """Tell the user once per process why this run computes in fp32."""
    why = "bf16 measured no faster than fp32" if bf16_native(device_type) else "it has no fast bf16 path"
    log(f"bf16 asked for, but on this {device_type} {why}: computing in fp32 ({BF16_ENV}=1 forces bf16)")


def signature(device: str = "cpu") -> str:
    """What a cache key must name so results of another precision are not reused."""
    return f"bf16:{mode()}:{int(use_bf16(True, device))}"
