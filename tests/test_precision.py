"""bf16 where the hardware computes it fast, fp32 elsewhere (memsafe_lib.precision)."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np
import pytest

from memsafe_lib import precision
from memsafe_lib.encodings import encoders as E
from memsafe_lib.encodings import finetune as F

PAIRS = [E.Pair("who wrote the novel?", "The novel was written by Ann Lee in 1901."),
         E.Pair("where is the tower?", "The tower stands in the old town of Bern.")]


def test_mode_defaults_to_auto_and_names_the_variable_on_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(precision.BF16_ENV, raising=False)
    assert precision.mode() == "auto"
    monkeypatch.setenv(precision.BF16_ENV, "yes")
    with pytest.raises(ValueError, match="MEMSAFE_BF16='yes'"):
        precision.use_bf16(True)


@pytest.mark.parametrize(("env", "native", "expected"), [
    ("auto", True, True), ("auto", False, False), ("1", False, True), ("0", True, False)])
def test_use_bf16_follows_the_hardware_unless_forced(monkeypatch: pytest.MonkeyPatch, env: str, native: bool,
                                                     expected: bool) -> None:
    monkeypatch.setenv(precision.BF16_ENV, env)
    monkeypatch.setattr(precision, "bf16_pays", lambda device_type: native)
    assert precision.use_bf16(True, "cpu") is expected
    assert precision.use_bf16(False, "cpu") is False  # fp32 asked for is fp32 everywhere


def _cpu_flags() -> set[str]:
    cpuinfo = Path("/proc/cpuinfo")
    if platform.machine() != "x86_64" or not cpuinfo.exists():
        return set()
    line = next((x for x in cpuinfo.read_text().splitlines() if x.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def test_native_bf16_matches_the_cpu_flags() -> None:
    """Independent reading: oneDNN's bf16 kernels need AVX512 (core: F, BW, VL, DQ) or AVX-NE-CONVERT
    on x86; an AVX2-only CPU has neither, and torch's bf16 matmul there is the slow fallback."""
    flags = _cpu_flags()
    if not flags:
        pytest.skip("not an x86 Linux machine")
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        assert precision.bf16_native("cpu")
    elif "avx512f" not in flags and "avx_ne_convert" not in flags:
        assert not precision.bf16_native("cpu")
    else:
        pytest.skip("a partial AVX512 set: torch's answer is not read off the flags alone")


@pytest.fixture
def no_amx(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """A CPU without AMX tiles and a private cache of its own; counts the probe's runs."""
    import torch

    monkeypatch.setenv("MEMSAFE_PRIVATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    return []


@pytest.mark.parametrize(("fp32", "bf16", "expected"), [(100.0, 119.0, False), (100.0, 121.0, True),
                                                        (270.0, 149.5, False)])
def test_without_amx_bf16_is_chosen_only_where_the_probe_measures_it_faster_by_the_margin(
        monkeypatch: pytest.MonkeyPatch, no_amx: list[int], tmp_path: Path, fp32: float, bf16: float,
        expected: bool) -> None:
    # (270, 149.5): the GFLOP/s bench/precision.py measured on a Xeon with AVX512-BF16 and no AMX
    def probe() -> tuple[float, float]:
        no_amx.append(1)
        return fp32, bf16
    monkeypatch.setattr(precision, "matmul_rates", probe)
    assert precision.cpu_bf16_pays() is expected
    assert precision.cpu_bf16_pays() is expected  # a later process: read back, not measured again
    assert len(no_amx) == 1
    [kept] = json.loads((tmp_path / "cache" / precision.PROBE_FILE).read_text()).values()
    assert kept == {"fp32_gflops": fp32, "bf16_gflops": bf16, "bf16": expected}


def test_amx_tiles_choose_bf16_without_a_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import torch

    monkeypatch.setenv("MEMSAFE_PRIVATE_CACHE", str(tmp_path))
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True, raising=False)
    monkeypatch.setattr(precision, "matmul_rates", lambda: pytest.fail("AMX needs no probe"))
    assert precision.cpu_bf16_pays()


def test_bf16_pays_needs_the_kernels_first(monkeypatch: pytest.MonkeyPatch) -> None:
    precision.bf16_pays.cache_clear()
    monkeypatch.setattr(precision, "bf16_native", lambda device_type: False)
    monkeypatch.setattr(precision, "cpu_bf16_pays", lambda: pytest.fail("no kernels, no probe"))
    try:
        assert not precision.bf16_pays("cpu")
    finally:
        precision.bf16_pays.cache_clear()


def test_the_probe_times_both_precisions_on_this_machine() -> None:
    fp32, bf16 = precision.matmul_rates(n=128, rounds=1)
    assert fp32 > 0 and bf16 > 0


def test_fallback_encodes_as_fp32_and_shares_its_cache_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(precision.BF16_ENV, "auto")
    monkeypatch.setattr(precision, "bf16_pays", lambda device_type: False)
    fallback = E.CrossEncoder(E.EncoderConfig(bf16=True, max_length=48), seed=3)
    fp32 = E.CrossEncoder(E.EncoderConfig(bf16=False, max_length=48), seed=3)
    assert not fallback.bf16
    assert fallback.fingerprint() == fp32.fingerprint()  # the same computation, one cache entry
    rep_a, logit_a = E.encode_pairs(fallback, PAIRS, None, progress=False)
    rep_b, logit_b = E.encode_pairs(fp32, PAIRS, None, progress=False)
    assert np.array_equal(rep_a, rep_b) and np.array_equal(logit_a, logit_b)
    monkeypatch.setenv(precision.BF16_ENV, "1")
    forced = E.CrossEncoder(E.EncoderConfig(bf16=True, max_length=48), seed=3)
    assert forced.bf16 and forced.fingerprint() != fp32.fingerprint()


def test_finetuning_key_names_the_precision_that_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = np.array([1.0, 0.0], dtype=np.float32)
    model = E.CrossEncoder(E.EncoderConfig(bf16=False, max_length=48), seed=3)  # same weights either way
    config = F.FinetuneConfig(bf16=True)
    monkeypatch.setenv(precision.BF16_ENV, "1")
    bf16_key = F.run_key(model, PAIRS, labels, config, seed=17)
    monkeypatch.setenv(precision.BF16_ENV, "0")
    assert F.run_key(model, PAIRS, labels, config, seed=17) != bf16_key
