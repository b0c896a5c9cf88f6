"""bf16 only where the hardware computes it: every ``bf16=True`` in the library asks, this
module answers.

Why: bf16 autocast is what makes Stage A and Stage B fit the CPU budget on a processor with bf16
matrix units (AMX, AVX512), but on one without them torch has no fast bf16 kernel: on an AMD
EPYC with AVX2 only, a bf16 matmul ran two orders of magnitude slower than fp32 and Stage A's
encoder several times slower (``bench/precision.py``, ``artifacts/cpu/bench/precision_avx2.csv``),
and a cold cpu run's fold fine-tuning was not done after two and a half times the minutes it
took on a CPU with AMX. So ``auto`` (the default) keeps bf16 where torch has a fast path
and computes in fp32 elsewhere, and the choice is part of every cache key that precision can
change (encoder fingerprints, fine-tuning runs, cached model runs) and of each ledger entry's
``environment``.

``MEMSAFE_BF16``: ``auto`` (default), ``1`` (bf16 wherever asked, however slow), ``0`` (fp32
everywhere). Numbers computed in fp32 differ from bf16 ones in the last digits, as numbers from
another CPU may anyway; the ledger says which precision produced each run.
"""

from __future__ import annotations

import os
from functools import cache

from memsafe_lib.progress import log

BF16_ENV = "MEMSAFE_BF16"
MODES = ("auto", "1", "0")


def mode() -> str:
    """``MEMSAFE_BF16``, checked: ``auto`` unless set."""
    value = os.environ.get(BF16_ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"{BF16_ENV}={value!r}: expected one of {', '.join(MODES)} "
                         "(auto: bf16 only where the hardware has a fast bf16 path)")
    return value


@cache
def bf16_native(device_type: str) -> bool:
    """Whether torch has a fast bf16 path on this kind of device: a CUDA GPU that supports bf16,
    or a CPU whose oneDNN bf16 kernels torch would use (AVX512 or AMX on x86, bf16 on Arm)."""
    import torch  # lazy: heavy

    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device_type == "cpu":
        check = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
        return bool(check()) if check is not None else False
    return False


def _device_type(device: str) -> str:
    return device.split(":")[0]


def use_bf16(requested: bool, device: str = "cpu") -> bool:
    """The precision a ``bf16=requested`` computation on ``device`` actually runs in."""
    if not requested:
        return False
    current = mode()
    if current != "auto":
        return current == "1"
    native = bf16_native(_device_type(device))
    if not native:
        _say_fallback(_device_type(device))
    return native


@cache
def _say_fallback(device_type: str) -> None:
    """Tell the user once per process why this run computes in fp32."""
    log(f"bf16 asked for, but this {device_type} has no fast bf16 path: computing in fp32 "
        f"({BF16_ENV}=1 forces bf16)")


def signature(device: str = "cpu") -> str:
    """What a cache key must name so results of another precision are not reused."""
    return f"bf16:{mode()}:{int(use_bf16(True, device))}"
