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
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig, encoder_seed_for
from memsafe_lib.data.mimic import independence_group
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
from memsafe_lib.estimators.controls import without_provenance
from memsafe_lib.estimators.lexset import UnitFeaturizer
from memsafe_lib.estimators.memsafe import MemSafe, Standardizer, TokenBuilder
from memsafe_lib.estimators.neural_context import build_context
from memsafe_lib.estimators.setmodel import SetModel, SetModelConfig, predict_sets
from memsafe_lib.estimators.split_metrics import EVAL_SPLITS, split_metrics
from memsafe_lib.io import atomic_open
from memsafe_lib.ledger import data_fingerprint, fingerprint, record_run
from memsafe_lib.measures.risk_control import RiskControl, ltt_threshold
from memsafe_lib.variants.construction import COMPLETE, STATES, ConstructionResult, MemoryUnit, Variant, by_split
from memsafe_lib.variants.store import build

FORMAT_VERSION = 2
"""2: config.json holds validation calibration scores (for ``--risk``)."""
GATE_PROVENANCE_DROPOUT = 0.5
"""Half the gate's training memories are shown without provenance (unit positions 0..n-1,
|M|/|H| = 1), the form in which an agent's memories usually arrive, so those inputs are in
distribution; its recorded metrics are given both with and without provenance."""


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


def _unit(u: Any, i: int) -> tuple[str, str]:
    if isinstance(u, str):
        return "", u
    if isinstance(u, Mapping) and isinstance(u.get("text"), str):
        return str(u.get("title", "")), u["text"]
    raise TypeError(f"unit {i} must be a string or an object with a 'text' string")


def memory_variant(query: str, units: Sequence[Any], source_positions: Sequence[int] | None = None,
                   source_units: int | None = None, memory_id: str = "memory") -> Variant:
    """A new memory in the form the estimator reads; labels are placeholders, never used."""
    pairs = [_unit(u, i) for i, u in enumerate(units)]
    positions = list(source_positions) if source_positions is not None else list(range(len(pairs)))
    if len(positions) != len(pairs):
        raise ValueError(f"{len(positions)} source positions for {len(pairs)} units")
    size = source_units if source_units is not None else max(len(pairs), max(positions, default=-1) + 1)
    mem = tuple(MemoryUnit(hashlib.sha256(f"{t}\x1f{x}".encode()).hexdigest()[:16], t, x, False, i, p)
                for i, ((t, x), p) in enumerate(zip(pairs, positions, strict=True)))
    return Variant(memory_id, memory_id, "user", "gate", COMPLETE, "test", 0, query, (), mem, 0, size)


class Gate:
    def __init__(self, config: dict[str, Any], encoders: tuple[FoldEncoder, FoldEncoder], bi: PretrainedRanker,
                 tokens: TokenBuilder, model: SetModel) -> None:
        self.config = config
        self.encoders = encoders
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

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", encoder_model: str | None = None) -> Gate:
        """Load a gate directory. ``encoder_model`` overrides where the encoder architecture
        and tokenizer come from (the weights always come from the gate)."""
        root = Path(path)
        cfg_file = root / "config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(
                f"{root} is not a gate directory (no config.json). Make one with "
                f"`memsafe train --dataset musique --scale smoke --out {root}` (a few minutes on a CPU; "
                "--scale cpu trains on all local data), or pass the directory `memsafe train` printed")
        config = json.loads(cfg_file.read_text())
        if config.get("format_version") not in (1, FORMAT_VERSION):
            raise DataFormatError(cfg_file, f"gate format {config.get('format_version')!r}, "
                                  f"this code reads {FORMAT_VERSION}", field="format_version")
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

    def score_variants(self, variants: Sequence[Variant], progress: bool = False,
                       cache: EncodingCache | None = None) -> list[GateOutput]:
        """``cache``: pair encodings keyed by encoder weights and content, for callers that
        score the same memories with several gates sharing fold encoders (a benchmark)."""
        # Every memory a gate sees is a test memory: the average of both fold encoders.
        as_test = [replace(v, split="test") for v in variants]
        enc = encode_with_folds(self.encoders, as_test, self.bi, cache, progress=progress)
        units, prov = self.tokens(variants, enc)
        out = predict_sets(self.model, units, prov)
        window = self.encoders[0].config.max_length
        cut = [int(self.encoders[0].truncated([Pair(v.question, unit_string(u.title, u.text))
                                                for u in v.units]).sum()) for v in variants]
        return [GateOutput(float(out.unsafe_prob[i]), {s: float(p) for s, p in zip(out.states, out.state_prob[i],
                                                                                    strict=True)},
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
        # one memory per question: a question's memories are not independent (a gate saved
        # before groups were stored counts them as independent, which overstates the evidence)
        return ltt_threshold(calibration["unsafe"], calibration[key], alpha=risk, delta=delta,
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


CALIBRATION_GROUP_SALT = "memsafe-gate-calibration-group-v1"


def calibration_groups(variants: Sequence[Variant]) -> list[str]:
    """Per validation memory, which memories it shares its question (on clinical data: patient)
    with, as a salted hash: risk control needs only equality, and a gate directory never holds
    a record's id."""
    return [hashlib.sha256(f"{CALIBRATION_GROUP_SALT}\x1f{independence_group(v.dataset, v.base_id)}".encode())
            .hexdigest()[:12] for v in variants]


def abstain_reason(control: RiskControl) -> str:
    """Why no threshold met the risk budget, and what would: with zero unsafe memories among
    the n it accepts, the Learn-then-Test p-value is (1 - alpha)^n, which must reach delta/|grid|."""
    needed = math.ceil(math.log(control.level) / math.log(1 - control.alpha)) if 0 < control.level < 1 else None
    need = (f"even with no unsafe one among them, the guarantee needs at least {needed} accepted safe "
            "validation memories" if needed else "the guarantee cannot be met")
    return (f"no threshold meets risk {control.alpha:g} at delta {control.delta:g} on this gate's "
            f"{control.n_calibration} validation memories ({need}); abstaining on all. Use a gate trained "
            "on more data (e.g. `memsafe train --scale cpu`) or a looser --risk or --delta")


def iter_memories(path: str | Path) -> Iterator[dict[str, Any]]:
    """JSON Lines of ``{"id"?, "query": str, "units": [str | {"title", "text"}], "source_positions"?,
    "source_units"?}``, one validated memory at a time (nothing is held: a file of any length
    streams); any other shape stops with file, line and field named."""
    seen = 0
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise DataFormatError(path, f"not valid JSON ({exc}); memsafe reads JSON Lines, one memory object "
                                      "per line (not a JSON array or a pretty-printed object)", line=n) from None
            rid = str(row.get("id")) if isinstance(row, dict) and "id" in row else None
            if not isinstance(row, dict):
                raise DataFormatError(path, "each line must be a JSON object", line=n)
            if not isinstance(row.get("query"), str) or not row["query"].strip():
                raise DataFormatError(path, "missing or empty string", line=n, record_id=rid, field="query")
            units = row.get("units")
            if not isinstance(units, list) or not units:
                raise DataFormatError(path, "must be a non-empty list", line=n, record_id=rid, field="units")
            for i, u in enumerate(units):
                try:
                    _unit(u, i)
                except TypeError as exc:
                    raise DataFormatError(path, str(exc), line=n, record_id=rid, field=f"units[{i}]") from None
            pos = row.get("source_positions")
            if pos is not None and (not isinstance(pos, list) or len(pos) != len(units)
                                    or not all(isinstance(p, int) and p >= 0 for p in pos)):
                raise DataFormatError(path, "must be a list of non-negative integers, one per unit", line=n,
                                      record_id=rid, field="source_positions")
            size = row.get("source_units")
            if size is not None and (not isinstance(size, int) or size < len(units)):
                raise DataFormatError(path, "must be an integer >= the number of units", line=n, record_id=rid,
                                      field="source_units")
            seen += 1
            yield row
    if not seen:
        raise DataFormatError(path, "no memories in the file")


def read_memories(path: str | Path) -> list[dict[str, Any]]:
    """Every memory of ``path`` (:func:`iter_memories`), held in a list."""
    return list(iter_memories(path))


@dataclass(frozen=True)
class MemoryScan:
    """What ``memsafe score`` learns from validating a file before it loads the gate."""

    memories: int
    with_provenance: int
    """Memories that carry ``source_positions`` (scored, and risk-controlled, in that form)."""


def scan_memories(path: str | Path) -> MemoryScan:
    """Validate every line of ``path`` (the first bad one stops with its file, line and field)
    and count memories in each form, holding none of them."""
    total = provenance = 0
    for row in iter_memories(path):
        total += 1
        provenance += "source_positions" in row
    return MemoryScan(total, provenance)


def batched(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    """Consecutive chunks of at most ``size`` rows."""
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# ---------------------------------------------------------------- training a gate


def per_dataset_metrics(estimator: MemSafe, splits: dict[str, list[Variant]],
                        datasets: Sequence[str]) -> dict[str, dict[str, Any]]:
    """A joint gate's validation and test metrics on each dataset's memories, with and without
    provenance (what it is worth on each source, not only on the pooled mix)."""
    out: dict[str, dict[str, Any]] = {}
    for dataset in datasets:
        for s in EVAL_SPLITS:
            part = [v for v in splits.get(s, []) if v.dataset == dataset]
            if part:
                bare = [without_provenance(v) for v in part]
                out.setdefault(dataset, {})[s] = split_metrics(part, estimator.predict(part))
                out[dataset][f"{s}_without_provenance"] = split_metrics(bare, estimator.predict(bare))
    return out


def gate_datasets(spec: str | Sequence[str]) -> tuple[str, ...]:
    """``musique`` or ``musique,hotpotqa,2wikimultihopqa`` (the order does not matter: one
    gate per set of datasets); each must be a QA dataset other than the transfer target."""
    names = [spec] if isinstance(spec, str) else list(spec)
    datasets = tuple(sorted({part.strip() for name in names for part in name.split(",") if part.strip()}))
    allowed = set(config.FAMILY_A_DATASETS)
    if not datasets or not set(datasets) <= allowed:
        raise ValueError(f"a gate trains on one or more of {sorted(allowed)} (comma-separated), not {spec!r}; "
                         "SQuAD 2.0 is the out-of-distribution test, never a training set")
    return datasets


def joint_result(datasets: Sequence[str], scale: ScaleConfig) -> tuple[list[Any], ConstructionResult]:
    """The size-matched memories of every dataset as one training set (each keeps its split
    and its hash fold, so the fold encoders stay cross-fitted), and what was read."""
    loads, results = zip(*(build(d, "size-matched", scale) for d in datasets), strict=True)
    if len(datasets) == 1:
        return list(loads), results[0]
    variants = [v for r in results for v in r.variants]
    return list(loads), ConstructionResult("+".join(datasets), "size-matched", variants,
                                           [e for r in results for e in r.exclusions],
                                           [e for r in results for e in r.absent])


def metrics_lines(metrics: Mapping[str, Any]) -> list[str]:
    """A trained gate's unsafe AUROC on its validation and test memories, with and without
    provenance (and per dataset for a joint gate), as printed by ``memsafe train``."""

    def row(name: str, block: Mapping[str, Any]) -> list[str]:
        out = []
        for split in EVAL_SPLITS:
            if split in block:
                bare = block.get(f"{split}_without_provenance", {}).get("unsafe_auroc")
                out.append(f"  {name + ' ' + split:<34} {block[split]['unsafe_auroc']:>8.3f} "
                           f"{'' if bare is None else f'{bare:>10.3f}'}   ({block[split]['n_variants']:,} memories)")
        return out

    lines = [f"  {'unsafe AUROC':<34} {'with':>8} {'without':>10}   provenance"]
    lines += row("all", metrics)
    for dataset, block in metrics.get("per_dataset", {}).items():
        lines += row(dataset, block)
    return lines


def unit_count_summary(variants: Sequence[Variant]) -> dict[str, float]:
    """Units per training memory, so `memsafe score` can flag a memory far outside them."""
    counts = np.array([len(v.units) for v in variants])
    return {"min": int(counts.min()), "median": float(np.median(counts)), "max": int(counts.max())}


def train_gate(dataset: str | Sequence[str], scale: ScaleConfig, seed: int | None = None, out: Path | None = None,
               device: str = "cpu", progress: bool = True) -> Path:
    """``memsafe train``: fit MemSafe on ``dataset`` (one QA dataset, or several trained as
    one: the fold encoders on every dataset's pairs, Stage B on every training memory; train
    split, selection on validation) and save it as a gate directory with its metrics (per
    dataset too) and fingerprint; returns the path."""
    datasets = gate_datasets(dataset)
    loads, result = joint_result(datasets, scale)
    files = [f for loaded in loads for f in loaded.files]
    name = result.dataset
    seed = scale.seeds[0] if seed is None else seed
    context = build_context(result, scale, [seed], device, progress)
    splits = by_split(result.variants)
    estimator = MemSafe(context.encodings(seed), seed, context.set_config(), device=device,
                        provenance_dropout=GATE_PROVENANCE_DROPOUT)
    estimator.fit(splits["train"], splits.get("validation"))
    metrics = {s: split_metrics(splits[s], estimator.predict(splits[s])) for s in EVAL_SPLITS if splits.get(s)}
    if len(datasets) > 1:
        metrics["per_dataset"] = per_dataset_metrics(estimator, splits, datasets)
    calibration: dict[str, list[Any]] = {}
    for s in EVAL_SPLITS:  # what an agent that passes no provenance gets
        if splits.get(s):
            bare = [without_provenance(v) for v in splits[s]]
            bare_pred = estimator.predict(bare)
            metrics[f"{s}_without_provenance"] = split_metrics(bare, bare_pred)
            if s == "validation":  # Learn-then-Test thresholds for `memsafe score --risk`
                calibration = {"unsafe": [bool(v.unsafe) for v in splits[s]],
                               "group": calibration_groups(splits[s]),
                               "score": [float(x) for x in estimator.predict(splits[s]).unsafe_prob],
                               "score_without_provenance": [float(x) for x in bare_pred.unsafe_prob]}
    settings = {"dataset": name, "datasets": list(datasets), "scale": scale.name, "seed": seed,
                "construction": "size-matched", "provenance_dropout": GATE_PROVENANCE_DROPOUT,
                "budget": asdict(context.budget), "stage_b": estimator.config, "data": data_fingerprint(files)}
    stage_a = context.stage_a[encoder_seed_for(seed, context.budget.encoder_seeds)]
    gate = Gate.from_estimator(estimator, stage_a.encoders, stage_a.bi,
                               {"dataset": name, "scale": scale.name, "calibration": calibration,
                                "train_memory_units": unit_count_summary(splits["train"]),
                                "fingerprint": fingerprint(files, settings),
                                "metrics": metrics, "training": settings})
    path = gate.save(out or scale.output_dir(config.GATES) / f"{name}-seed{seed}")
    record_run(f"train:{name}", scale, raw_files=files, settings=settings,
               outputs=[path / "config.json", path / "set_model.safetensors"], metrics=metrics)
    return path
