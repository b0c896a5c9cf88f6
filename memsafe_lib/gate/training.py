"""Training a gate (``memsafe train``): MemSafe fitted on size-matched memories of one or more
QA datasets, or of a user's own records, through the same Stage A and Stage B code as the
notebooks; then calibrated on validation and saved with its metrics, card and fingerprint.

The Stage B point is the scale's selection (MuSiQue validation, as in the paper) for the QA
datasets; a records gate takes the paper's point (width 128, dropout 0.1, lr 3e-4: the one our
cpu grid also chose) rather than fitting MuSiQue's Stage A to choose it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig, encoder_seed_for
from memsafe_lib.data.mimic import independence_group
from memsafe_lib.data.own_records import load_records
from memsafe_lib.data.records import RawFile
from memsafe_lib.estimators.controls import Predictions, without_provenance
from memsafe_lib.estimators.memsafe import MemSafe
from memsafe_lib.estimators.neural_context import build_context
from memsafe_lib.estimators.setmodel import GRID
from memsafe_lib.estimators.split_metrics import EVAL_SPLITS, split_metrics
from memsafe_lib.gate.card import write_card
from memsafe_lib.gate.model import DEFAULT_THRESHOLD, FORMS, Gate, calibrate_scores
from memsafe_lib.ledger import data_fingerprint, fingerprint, record_run
from memsafe_lib.measures.calibration import MIN_CALIBRATION_MEMORIES, choose_temperature, fit_state_temperature
from memsafe_lib.measures.metrics import expected_calibration_error
from memsafe_lib.measures.risk_coverage import operating_point
from memsafe_lib.variants.construction import ConstructionResult, Variant, by_split, construct
from memsafe_lib.variants.store import build

GATE_PROVENANCE_DROPOUT = 0.5
"""Half the gate's training memories are shown without provenance (unit positions 0..n-1,
|M|/|H| = 1), the form in which an agent's memories usually arrive, so those inputs are in
distribution; its recorded metrics are given both with and without provenance."""
RECORDS_PREFIX = "records-"
"""A records file's memories carry ``records-<file stem>`` as their dataset, so a file named
after one of ours (``musique.jsonl``) never reads or pools with that dataset."""


CALIBRATION_GROUP_SALT = "memsafe-gate-calibration-group-v1"


def calibration_groups(variants: Sequence[Variant]) -> list[str]:
    """Per validation memory, which memories it shares its question (on clinical data: patient)
    with, as a salted hash: risk control needs only equality, and a gate directory never holds
    a record's id."""
    return [hashlib.sha256(f"{CALIBRATION_GROUP_SALT}\x1f{independence_group(v.dataset, v.base_id)}".encode())
            .hexdigest()[:12] for v in variants]



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


@dataclass(frozen=True)
class TrainingSet:
    """What a gate trains on: size-matched memories (each keeps its split and hash fold, so the
    fold encoders stay cross-fitted) and the raw files they came from."""

    name: str
    datasets: tuple[str, ...]
    result: ConstructionResult
    files: list[RawFile]
    stage_b: dict[str, Any] | None = None
    """The Stage B point when it is not the scale's MuSiQue selection."""
    source: str = "datasets"


def dataset_training_set(dataset: str | Sequence[str], scale: ScaleConfig) -> TrainingSet:
    datasets = gate_datasets(dataset)
    loads, result = joint_result(datasets, scale)
    return TrainingSet(result.dataset, datasets, result, [f for loaded in loads for f in loaded.files])


def records_training_set(path: str | Path) -> TrainingSet:
    """A user's records file built into size-matched memories (``memsafe construct`` does the
    same); it needs training and validation questions."""
    path = Path(path)
    loaded = load_records(path, RECORDS_PREFIX + path.name.removesuffix(".jsonl").removesuffix(".json"))
    result = construct(loaded, "size-matched")
    counts = {s: len({v.base_id for v in vs}) for s, vs in by_split(result.variants).items()}
    for split in ("train", "validation"):
        if not counts.get(split):
            raise ValueError(f"--records {path}: no {split} question left after construction ({counts or 'none'}; "
                             f"{len(result.exclusions)} excluded, see `memsafe construct --records`): a gate trains "
                             "on train and selects and calibrates on validation; give those records a \"split\" "
                             "or leave \"split\" out for the hash split (70/15/15)")
    return TrainingSet(result.dataset, (result.dataset,), result, list(loaded.files), dict(GRID[0]), "records")


def fit_calibration(estimator: MemSafe, validation: Sequence[Variant]) -> dict[str, Any]:
    """Temperatures per input form (the validation memories as they are, and without provenance),
    with the validation ECE before and after, and the raw scores Learn-then-Test reads."""
    bare = [without_provenance(v) for v in validation]
    unsafe = [bool(v.unsafe) for v in validation]
    states = [v.state for v in validation]
    labels = list(estimator.model.states) if estimator.model is not None else []
    out: dict[str, Any] = {"unsafe": unsafe, "group": calibration_groups(validation), "temperature": {}, "ece": {}}
    for form, variants in zip(FORMS, (validation, bare), strict=True):
        pred = estimator.predict(variants)
        chosen = choose_temperature(unsafe, pred.unsafe_prob)
        state_t = (fit_state_temperature(states, np.asarray(pred.extras["state_prob"]), labels)
                   if len(validation) >= MIN_CALIBRATION_MEMORIES else 1.0)
        out["temperature"][form] = {"unsafe": chosen.temperature, "state": state_t}
        out["ece"][form] = chosen.to_dict()
        out["score" if form == FORMS[0] else "score_without_provenance"] = [float(x) for x in pred.unsafe_prob]
    return out


def calibrated_metrics(variants: Sequence[Variant], pred: Predictions, calibration: Mapping[str, Any],
                       threshold: float) -> dict[str, Any]:
    """``split_metrics`` (ECE of the raw model) plus the calibrated ECE and the operating point at
    the gate's threshold, as a user of the gate meets them."""
    row = split_metrics(variants, pred)
    unsafe = [v.unsafe for v in variants]
    scores, _ = calibrate_scores(variants, pred.unsafe_prob, np.asarray(pred.extras["state_prob"]), calibration)
    row["ece_calibrated"] = expected_calibration_error(unsafe, scores)
    row["at_threshold"] = operating_point(unsafe, scores, threshold)
    return row


def evaluated(estimator: MemSafe, splits: Mapping[str, list[Variant]], calibration: Mapping[str, Any],
              threshold: float, datasets: Sequence[str]) -> dict[str, Any]:
    """Validation and test metrics with and without provenance, overall and (for a gate of
    several datasets) per dataset."""

    def block(variants: Sequence[Variant]) -> dict[str, Any]:
        out = {}
        for s in EVAL_SPLITS:
            part = [v for v in variants if v.split == s]
            if part:
                bare = [without_provenance(v) for v in part]
                out[s] = calibrated_metrics(part, estimator.predict(part), calibration, threshold)
                out[f"{s}_without_provenance"] = calibrated_metrics(bare, estimator.predict(bare), calibration,
                                                                    threshold)
        return out

    pool = [v for s in EVAL_SPLITS for v in splits.get(s, [])]
    metrics = block(pool)
    if len(datasets) > 1:
        metrics["per_dataset"] = {d: block([v for v in pool if v.dataset == d]) for d in datasets}
    return metrics


def calibration_lines(calibration: Mapping[str, Any]) -> list[str]:
    """Validation ECE before and after the temperature, per input form (``memsafe train`` prints them)."""
    lines = []
    for form in FORMS:
        ece = calibration.get("ece", {}).get(form)
        if ece:
            note = (f"too few validation memories to calibrate ({ece['n']} < {MIN_CALIBRATION_MEMORIES})"
                    if ece.get("n", MIN_CALIBRATION_MEMORIES) < MIN_CALIBRATION_MEMORIES
                    else f"temperature {ece['temperature']:.3g}")
            lines.append(f"  validation ECE {form.replace('_', ' '):<22} {ece['ece_before']:.4f} -> "
                         f"{ece['ece_after']:.4f}  ({note})")
    return lines


def train_gate(dataset: str | Sequence[str] | None, scale: ScaleConfig, seed: int | None = None,
               out: Path | None = None, device: str = "cpu", progress: bool = True, *,
               records: str | Path | None = None) -> Path:
    """``memsafe train``: fit MemSafe on ``dataset`` (one QA dataset, or several trained as
    one: the fold encoders on every dataset's pairs, Stage B on every training memory) or on a
    ``records`` file (train split, selection and calibration on validation) and save it as a
    gate directory with its calibration, metrics (per dataset too), card and fingerprint."""
    if (dataset is None) == (records is None):
        raise ValueError("give a dataset or a records file, not both or neither")
    data = records_training_set(records) if records is not None else dataset_training_set(dataset, scale)
    seed = scale.seeds[0] if seed is None else seed
    context = build_context(data.result, scale, [seed], device, progress, stage_b=data.stage_b)
    splits = by_split(data.result.variants)
    estimator = MemSafe(context.encodings(seed), seed, context.set_config(), device=device,
                        provenance_dropout=GATE_PROVENANCE_DROPOUT)
    estimator.fit(splits["train"], splits.get("validation"))
    calibration = fit_calibration(estimator, splits["validation"])
    metrics = evaluated(estimator, splits, calibration, DEFAULT_THRESHOLD, data.datasets)
    settings = {"dataset": data.name, "datasets": list(data.datasets), "source": data.source, "scale": scale.name,
                "seed": seed, "construction": "size-matched", "provenance_dropout": GATE_PROVENANCE_DROPOUT,
                "budget": asdict(context.budget), "stage_b": estimator.config, "data": data_fingerprint(data.files)}
    stage_a = context.stage_a[encoder_seed_for(seed, context.budget.encoder_seeds)]
    threshold = {"unsafe_prob": DEFAULT_THRESHOLD,
                 "validation": {form: metrics[key]["at_threshold"] for form, key in
                                zip(FORMS, ("validation", "validation_without_provenance"), strict=True)}}
    gate = Gate.from_estimator(estimator, stage_a.encoders, stage_a.bi,
                               {"dataset": data.name, "scale": scale.name, "calibration": calibration,
                                "threshold": threshold,
                                "train_memory_units": unit_count_summary(splits["train"]),
                                "split_sizes": {s: {"questions": len({v.base_id for v in vs}), "memories": len(vs)}
                                                for s, vs in splits.items()},
                                "fingerprint": fingerprint(data.files, settings),
                                "metrics": metrics, "training": settings})
    path = gate.save(out or scale.output_dir(config.GATES) / f"{data.name}-seed{seed}")
    card = write_card(path, gate.config)
    record_run(f"train:{data.name}", scale, raw_files=data.files, settings=settings,
               outputs=[path / "config.json", path / "set_model.safetensors", card], metrics=metrics)
    return path
