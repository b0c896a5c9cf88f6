"""A trained MemSafe model as a self-contained sufficiency gate for your own agent.

    gate = Gate.load("artifacts/cpu/gates/musique-seed17")
    out = gate.score("Who founded the company that makes X?", ["Title: unit text", ...])
    out.unsafe_prob, out.state_probs, out.unit_evidence, out.missing_count

A gate directory holds ``config.json`` (settings, feature statistics, fingerprint of the
code, data and settings that produced it), ``set_model.safetensors`` (Stage B and the
token standardisation) and the two fold encoders (``encoder_fold{0,1}.safetensors``); new
memories are embedded like test memories, by the average of both fold encoders.

Inputs a gate cannot know: the position of each unit in the agent's full history and the
history's size (provenance). Pass them if you have them; otherwise a unit's memory
position stands in for its source position and the memory is taken as the whole history.

Probabilities are calibrated: a gate stores temperatures fitted on its validation memories
(``config["calibration"]["temperature"]``, one per input form, with and without provenance),
and every score passes through them; the ranking, so every AUROC, is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save

from memsafe_lib.encodings.encoders import (
    EncoderConfig,
    EncodingCache,
    Pair,
    PretrainedRanker,
    make_ranker,
    unit_string,
)
from memsafe_lib.encodings.finetune import encode_with_folds
from memsafe_lib.encodings.stagea import FoldEncoder, fold_encoder
from memsafe_lib.errors import DataFormatError
from memsafe_lib.estimators.lexset import UnitFeaturizer
from memsafe_lib.estimators.memsafe import MemSafe, Standardizer, TokenBuilder
from memsafe_lib.estimators.setmodel import SetModel, SetModelConfig, predict_sets
from memsafe_lib.io import atomic_open
from memsafe_lib.measures.calibration import scale_binary, scale_states
from memsafe_lib.measures.risk_control import RiskControl, ltt_threshold
from memsafe_lib.variants.construction import COMPLETE, STATES, MemoryUnit, Variant

FORMAT_VERSION = 3
"""2: config.json holds validation calibration scores (for ``--risk``); 3: temperatures fitted
on them and the default threshold (a format-2 gate loads uncalibrated, temperatures 1)."""
READS = (1, 2, FORMAT_VERSION)
FORMS: tuple[str, str] = ("with_provenance", "without_provenance")
DEFAULT_THRESHOLD = 0.5
"""A gate answers when its calibrated unsafe probability is at most this (the fewest expected
errors when answering a complete memory and abstaining on an unsafe one cost alike); ``--risk``
replaces it with a Learn-then-Test threshold."""


@dataclass
class GateOutput:
    unsafe_prob: float
    """Probability that the memory is not complete for the query."""
    state_probs: dict[str, float]
    unit_evidence: list[float]
    """Per unit, in input order: probability that it carries required evidence."""
    missing_count: float
    """Estimated number of required evidence units absent from the memory."""
    truncated_units: int = 0
    """Units whose (query, unit) pair is longer than the encoder's window (``max_length``
    tokens): the gate read only their beginning."""
    max_length: int = 0
    """The encoder's window in tokens."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def unit_of(u: Any, i: int) -> tuple[str, str]:
    if isinstance(u, str):
        return "", u
    if isinstance(u, Mapping) and isinstance(u.get("text"), str):
        return str(u.get("title", "")), u["text"]
    raise TypeError(f"unit {i} must be a string or an object with a 'text' string")


def memory_variant(query: str, units: Sequence[Any], source_positions: Sequence[int] | None = None,
                   source_units: int | None = None, memory_id: str = "memory") -> Variant:
    """A new memory in the form the estimator reads; labels are placeholders, never used."""
    pairs = [unit_of(u, i) for i, u in enumerate(units)]
    positions = list(source_positions) if source_positions is not None else list(range(len(pairs)))
    if len(positions) != len(pairs):
        raise ValueError(f"{len(positions)} source positions for {len(pairs)} units")
    size = source_units if source_units is not None else max(len(pairs), max(positions, default=-1) + 1)
    mem = tuple(MemoryUnit(hashlib.sha256(f"{t}\x1f{x}".encode()).hexdigest()[:16], t, x, False, i, p)
                for i, ((t, x), p) in enumerate(zip(pairs, positions, strict=True)))
    return Variant(memory_id, memory_id, "user", "gate", COMPLETE, "test", 0, query, (), mem, 0, size)


def has_provenance(v: Variant) -> bool:
    """Whether a memory carries provenance the model can read: a memory whose source positions
    are its memory positions and whose history is itself looks to the model exactly like one
    given without provenance, so it is calibrated as one."""
    return v.source_units != len(v.units) or any(u.source_position != u.position for u in v.units)


def form_of(v: Variant) -> str:
    return FORMS[0] if has_provenance(v) else FORMS[1]


def temperatures(calibration: Mapping[str, Any] | None, form: str) -> tuple[float, float]:
    """The (unsafe, state) temperatures of one input form; 1 for a gate saved before format 3."""
    fitted = (calibration or {}).get("temperature", {}).get(form, {})
    return float(fitted.get("unsafe", 1.0)), float(fitted.get("state", 1.0))


def calibrate_scores(variants: Sequence[Variant], unsafe: np.ndarray, states: np.ndarray,
                     calibration: Mapping[str, Any] | None) -> tuple[np.ndarray, np.ndarray]:
    """Each memory's unsafe and state probabilities through the temperatures of its form."""
    unsafe, states = np.array(unsafe, dtype=float), np.array(states, dtype=float)
    for form in FORMS:
        rows = [i for i, v in enumerate(variants) if form_of(v) == form]
        if rows:
            t_unsafe, t_state = temperatures(calibration, form)
            unsafe[rows] = scale_binary(unsafe[rows], t_unsafe)
            states[rows] = scale_states(states[rows], t_state)
    return unsafe, states


class Gate:
    def __init__(self, config: dict[str, Any], encoders: tuple[FoldEncoder, FoldEncoder], bi: PretrainedRanker,
                 tokens: TokenBuilder, model: SetModel) -> None:
        self.config = config
        self.encoders = encoders
        for encoder in encoders:  # a gate only reads: its fingerprints are hashed once, not per chunk
            encoder.freeze()
        self.bi = bi
        self.tokens = tokens
        self.model = model

    # -- building and saving

    @classmethod
    def from_estimator(cls, estimator: MemSafe, encoders: tuple[FoldEncoder, FoldEncoder], bi: PretrainedRanker,
                       metadata: Mapping[str, Any]) -> Gate:
        if estimator.model is None or estimator.tokens is None:
            raise ValueError("the estimator is not fitted")
        config = {"format_version": FORMAT_VERSION, "encoder": asdict(encoders[0].config),
                  "set_model": asdict(estimator.model.config), "bridge": estimator.bridge,
                  "lexical": estimator.tokens.lexical, "seed": estimator.seed, "states": list(estimator.model.states),
                  "unit_dim": int(estimator.tokens.unit_scale.mean.shape[0]),  # type: ignore[union-attr]
                  "provenance_dim": int(estimator.tokens.provenance_scale.mean.shape[0]),  # type: ignore[union-attr]
                  **dict(metadata)}
        return cls(config, encoders, bi, estimator.tokens, estimator.model)

    def save(self, path: str | Path) -> Path:
        """Write the gate directory; each file is written atomically."""
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        tensors = {f"model.{k}": v.contiguous() for k, v in self.model.state_dict().items()}
        assert self.tokens.unit_scale is not None and self.tokens.provenance_scale is not None
        for name, scale in (("unit", self.tokens.unit_scale), ("provenance", self.tokens.provenance_scale)):
            tensors[f"scale.{name}.mean"] = torch.from_numpy(scale.mean)
            tensors[f"scale.{name}.std"] = torch.from_numpy(scale.std)
        with atomic_open(out / "set_model.safetensors", "wb") as fh:
            fh.write(save(tensors))
        for k, enc in enumerate(self.encoders):
            with atomic_open(out / f"encoder_fold{k}.safetensors", "wb") as fh:
                fh.write(save({n: t.contiguous() for n, t in enc.state_dict().items()}))
        config = dict(self.config)
        if self.tokens.featurizer is not None:
            config["featurizer"] = self.tokens.featurizer.state_dict()
        with atomic_open(out / "config.json", "w") as fh:
            json.dump(config, fh, indent=1, sort_keys=True)
        return out

    @staticmethod
    def read_config(path: str | Path) -> dict[str, Any]:
        """A gate directory's ``config.json``, checked for a format this code reads."""
        root = Path(path)
        cfg_file = root / "config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(
                f"{root} is not a gate directory (no config.json). Make one with "
                f"`memsafe train --dataset musique --scale smoke --out {root}` (a few minutes on a CPU; "
                "--scale cpu trains on all local data), or pass the directory `memsafe train` printed")
        config: dict[str, Any] = json.loads(cfg_file.read_text())
        if config.get("format_version") not in READS:
            raise DataFormatError(cfg_file, f"gate format {config.get('format_version')!r}, "
                                  f"this code reads {' and '.join(map(str, READS))}: train it again with "
                                  "`memsafe train`", field="format_version")
        return config

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", encoder_model: str | None = None) -> Gate:
        """Load a gate directory. ``encoder_model`` overrides where the encoder architecture
        and tokenizer come from (the weights always come from the gate)."""
        root = Path(path)
        config = cls.read_config(root)
        enc_cfg = EncoderConfig(**{**config["encoder"], "device": device,
                                   **({"model": encoder_model} if encoder_model else {})})
        encoders = []
        for k in (0, 1):  # the encoders load quietly (no "Loading weights" bar per load)
            enc = fold_encoder(enc_cfg, int(config["seed"]))
            enc.load_state_dict(load_file(root / f"encoder_fold{k}.safetensors"))
            encoders.append(enc.eval())
        bi = make_ranker(enc_cfg)
        tensors = load_file(root / "set_model.safetensors")
        scales = {name: Standardizer(tensors[f"scale.{name}.mean"].numpy(), tensors[f"scale.{name}.std"].numpy())
                  for name in ("unit", "provenance")}
        featurizer = UnitFeaturizer.from_state_dict(config["featurizer"]) if config.get("lexical") else None
        tokens = TokenBuilder(bool(config["bridge"]), bool(config["lexical"]), featurizer, scales["unit"],
                              scales["provenance"])
        model = SetModel(int(config["unit_dim"]), int(config["provenance_dim"]), SetModelConfig(**config["set_model"]),
                         tuple(config.get("states", STATES)))
        model.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")})
        return cls(config, (encoders[0], encoders[1]), bi, tokens, model.to(device).eval())

    # -- scoring

    @property
    def calibrated(self) -> bool:
        return bool((self.config.get("calibration") or {}).get("temperature"))

    @property
    def threshold(self) -> float:
        """The default answer/abstain threshold on the calibrated unsafe probability."""
        return float(self.config.get("threshold", {}).get("unsafe_prob", DEFAULT_THRESHOLD))

    def score_variants(self, variants: Sequence[Variant], progress: bool = False,
                       cache: EncodingCache | None = None, calibrate: bool = True) -> list[GateOutput]:
        """``cache``: pair encodings keyed by encoder weights and content, for callers that
        score the same memories with several gates sharing fold encoders (a benchmark).
        ``calibrate=False``: the set model's raw probabilities (what the temperatures were fitted on)."""
        # Every memory a gate sees is a test memory: the average of both fold encoders.
        as_test = [replace(v, split="test") for v in variants]
        enc = encode_with_folds(self.encoders, as_test, self.bi, cache, progress=progress)
        self.bi.forget()  # a stream's memory stays flat: no unit embedding outlives its chunk
        units, prov = self.tokens(variants, enc)
        out = predict_sets(self.model, units, prov)
        unsafe, states = np.asarray(out.unsafe_prob, dtype=float), np.asarray(out.state_prob, dtype=float)
        if calibrate:
            unsafe, states = calibrate_scores(variants, unsafe, states, self.config.get("calibration"))
        window = self.encoders[0].config.max_length
        cut = [int(self.encoders[0].truncated([Pair(v.question, unit_string(u.title, u.text))
                                                for u in v.units]).sum()) for v in variants]
        return [GateOutput(float(unsafe[i]), {s: float(p) for s, p in zip(out.states, states[i], strict=True)},
                           [float(x) for x in out.unit_prob[i]], float(out.missing_count[i]), cut[i], window)
                for i in range(len(variants))]

    def score(self, query: str, units: Sequence[Any], source_positions: Sequence[int] | None = None,
              source_units: int | None = None) -> GateOutput:
        """Score one memory: ``units`` are strings (text without a title) or
        ``{"title", "text"}`` objects, in memory order."""
        if not units:
            raise ValueError("a memory needs at least one unit")
        return self.score_variants([memory_variant(query, units, source_positions, source_units)])[0]

    def score_many(self, memories: Sequence[Mapping[str, Any]], progress: bool = False,
                   cache: EncodingCache | None = None) -> list[GateOutput]:
        variants = [memory_variant(m["query"], m["units"], m.get("source_positions"), m.get("source_units"),
                                   str(m.get("id", i))) for i, m in enumerate(memories)]
        return self.score_variants(variants, progress, cache)

    # -- deciding at a risk budget

    def risk_control(self, risk: float, delta: float = 0.1, with_provenance: bool = False) -> RiskControl:
        """The answer/abstain threshold whose evidence risk is at most ``risk`` with probability
        at least ``1 - delta`` (Learn-then-Test on the gate's validation memories, scored in the
        same form as the input: with or without provenance)."""
        calibration = self.config.get("calibration")
        if not calibration:
            raise ValueError("this gate has no calibration data (trained before format 2); train it again "
                             "with `memsafe train` to use --risk")
        key = "score" if with_provenance else "score_without_provenance"
        # the stored scores are raw; the gate's outputs are calibrated (a monotone map, so the
        # same memories are accepted either way, and the threshold is on the scale users read)
        scores = scale_binary(calibration[key], temperatures(calibration, FORMS[0] if with_provenance else FORMS[1])[0])
        # one memory per question: a question's memories are not independent (a gate saved
        # before groups were stored counts them as independent, which overstates the evidence)
        return ltt_threshold(calibration["unsafe"], scores, alpha=risk, delta=delta,
                             groups=calibration.get("group"))

    def decide(self, outputs: Sequence[GateOutput], control: RiskControl) -> list[str]:
        """``answer`` where the unsafe probability is at most the controlled threshold, else ``abstain``."""
        t = control.threshold
        return ["answer" if t is not None and o.unsafe_prob <= t else "abstain" for o in outputs]


OVERSIZE_FACTOR = 2
"""A memory with more than this many times the largest training memory's units is flagged:
the set model never saw one that size, so its score is an extrapolation."""


def oversized(unit_counts: Sequence[int], config: Mapping[str, Any]) -> list[int]:
    """Indices of memories far larger than any the gate trained on (none for a gate that did
    not record its training sizes)."""
    largest = config.get("train_memory_units", {}).get("max")
    if not largest:
        return []
    return [i for i, n in enumerate(unit_counts) if n > OVERSIZE_FACTOR * largest]


def abstain_reason(control: RiskControl) -> str:
    """Why no threshold met the risk budget, and what would: with zero unsafe memories among
    the n it accepts, the Learn-then-Test p-value is (1 - alpha)^n, which must reach delta/|grid|."""
    needed = math.ceil(math.log(control.level) / math.log(1 - control.alpha)) if 0 < control.level < 1 else None
    need = (f"even with no unsafe one among them, the guarantee needs at least {needed} accepted safe "
            "validation memories" if needed else "the guarantee cannot be met")
    return (f"no threshold meets risk {control.alpha:g} at delta {control.delta:g} on this gate's "
            f"{control.n_calibration} validation memories ({need}); abstaining on all. Use a gate trained "
            "on more data (e.g. `memsafe train --scale cpu`) or a looser --risk or --delta")


