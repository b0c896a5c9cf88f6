"""A reader: answers a question from a memory by greedy decoding, with the answer's sequence
confidence (mean token log-probability), every generation cached by (model, prompt, settings).

The memory comes first and the task last in the prompt, so a judge that reads the same
memory right after reuses llama.cpp's prompt cache for the shared prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memsafe_lib.estimators.llm import ContextOverflowError, Generation, GenerationCache, LanguageModel, Messages
from memsafe_lib.estimators.text import unit_text
from memsafe_lib.measures.answers import exact_match
from memsafe_lib.progress import progress_bar
from memsafe_lib.variants.construction import Variant

SYSTEM = "You read a memory and then do the task that follows it, using only what the memory says."
"""Shared by the reader and the judge, so their prompts share the prefix up to the task."""
READER_TASK = ("Answer the question using the memory above. Reply with the answer only: a short phrase, "
               "no explanation.")


def memory_block(v: Variant) -> str:
    return "\n".join(f"[{i + 1}] {unit_text(u.title, u.text)}" for i, u in enumerate(v.units))


def reader_messages(v: Variant) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Memory:\n{memory_block(v)}\n\nQuestion: {v.question}\n{READER_TASK}"}]


def clean_answer(text: str) -> str:
    """The first line, without a leading "Answer:" (small models sometimes add it)."""
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line[len("answer:"):].strip() if line.lower().startswith("answer:") else line


@dataclass(frozen=True)
class ReaderAnswer:
    variant_id: str
    answer: str
    confidence: float
    correct: bool
    prompt_tokens: int
    truncated: bool
    answer_tokens: int


@dataclass
class Reader:
    """Greedy reader over a :class:`LanguageModel`; ``max_tokens`` bounds the answer."""

    model: LanguageModel
    max_tokens: int = 16
    cache_path: Path | None = None

    @property
    def settings(self) -> dict[str, object]:
        return {"role": "reader", "max_tokens": self.max_tokens, "decoding": "greedy"}

    def _generate(self, messages: Messages, cache: GenerationCache | None) -> Generation:
        key = GenerationCache.key(self.model.fingerprint, self.settings, messages)
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            return Generation(hit["text"], tuple(hit["token_logprobs"]), hit["prompt_tokens"], hit["truncated"])
        try:
            out = self.model.generate(messages, self.max_tokens)
            # an answer that runs past a full context is cut or shifted; say so rather than hide it
            out = Generation(out.text, out.token_logprobs, out.prompt_tokens,
                             out.prompt_tokens + self.max_tokens > self.model.n_ctx)
        except ContextOverflowError as exc:  # no answer: scored wrong, confidence -inf, counted
            out = Generation("", (), exc.prompt_tokens, True)
        if cache is not None:
            cache.put(key, {"text": out.text, "token_logprobs": list(out.token_logprobs),
                            "prompt_tokens": out.prompt_tokens, "truncated": out.truncated})
        return out

    def answer(self, variants: Sequence[Variant], progress: bool = True) -> list[ReaderAnswer]:
        cache = GenerationCache(self.cache_path) if self.cache_path is not None else None
        out = []
        for v in progress_bar(variants, desc=f"reader {self.model.name}", disable=not progress, leave=False):
            g = self._generate(reader_messages(v), cache)
            text = clean_answer(g.text)
            out.append(ReaderAnswer(v.variant_id, text, g.confidence, exact_match(text, v.answers), g.prompt_tokens,
                                    g.truncated, len(g.token_logprobs)))
        if cache is not None:
            cache.close()
        return out
