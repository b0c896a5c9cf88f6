"""Which gate to use in an agent: each single-dataset gate and the one trained on every QA
dataset, scored the way an agent calls them (no provenance).

    MEMSAFE_RECORD=1 .venv/bin/python bench/gate_comparison.py --scale cpu

Per gate: test unsafe AUROC on each QA dataset's test memories without provenance (the gate's
own dataset in distribution, the others out of it) and the ECE of its calibrated probabilities
there (``test_ece_*``; ``test_ece_raw_*``: before calibration); SQuAD 2.0 dev, native memories (another
dataset and construction, never trained on) with the share of units the gate read only in
part; the unsafe probability of each hand-written memory of ``examples/memories.jsonl``; the
gate's size on disk and the minutes it took to train (Stage A read from its cache when a
notebook run or another gate already tuned those fold encoders). A gate whose directory
holds the scale's current budget is reused, not trained again.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.config import FAMILY_A_DATASETS, ScaleConfig, scale_config
from memsafe_lib.encodings.encoders import EncodingCache
from memsafe_lib.estimators.controls import without_provenance
from memsafe_lib.gate import Gate, read_memories, train_gate
from memsafe_lib.measures.metrics import expected_calibration_error, unsafe_auroc
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import Variant
from memsafe_lib.variants.store import build

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "memories.jsonl"
GATE_SETS: tuple[tuple[str, ...], ...] = (*((d,) for d in FAMILY_A_DATASETS), tuple(sorted(FAMILY_A_DATASETS)))


def gate_for(datasets: tuple[str, ...], scale: ScaleConfig, seed: int) -> tuple[Path, float]:
    """The gate trained on ``datasets`` at ``scale`` (reused when its budget is the scale's),
    and the minutes training took (0 when reused)."""
    path = scale.output_dir(config.GATES) / f"{'+'.join(sorted(datasets))}-seed{seed}"
    if (path / "config.json").exists():
        training = json.loads((path / "config.json").read_text()).get("training", {})
        if training.get("budget") == _plain(asdict(scale.neural)) and training.get("seed") == seed:
            return path, 0.0
    start = time.perf_counter()
    train_gate(",".join(datasets), scale, seed, out=path)
    return path, (time.perf_counter() - start) / 60


def _plain(value: object) -> object:
    """A budget as it reads back from JSON (tuples as lists)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def bare_scores(gate: Gate, variants: list[Variant], cache: EncodingCache) -> dict[str, float]:
    """On the memories without provenance: AUROC, the ECE of the gate's calibrated probabilities
    and of its raw ones, and the share of units read only in part. ``cache``: gates sharing fold
    encoders (pooled Stage A) encode each pair once (and the raw pass reads them back)."""
    bare = [without_provenance(v) for v in variants]
    unsafe = [v.unsafe for v in bare]
    out = gate.score_variants(bare, progress=True, cache=cache)
    raw = gate.score_variants(bare, cache=cache, calibrate=False)
    units = sum(len(v.units) for v in bare)
    return {"auroc": unsafe_auroc(unsafe, [o.unsafe_prob for o in out]),
            "ece": expected_calibration_error(unsafe, [o.unsafe_prob for o in out]),
            "ece_raw": expected_calibration_error(unsafe, [o.unsafe_prob for o in raw]),
            "cut": sum(o.truncated_units for o in out) / max(units, 1)}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--seed", type=int, default=None, help="default: the scale's first seed")
    args = parser.parse_args()
    configure_threads()
    scale = scale_config(args.scale)
    seed = scale.seeds[0] if args.seed is None else args.seed
    tests = {d: [v for v in build(d, "size-matched", scale)[1].variants if v.split == "test"]
             for d in FAMILY_A_DATASETS}
    squad_load, squad = build("squad2", None, scale)
    examples = read_memories(EXAMPLES)
    rows, files = [], list(squad_load.files)
    cache = EncodingCache(scale.cache_dir(config.BENCH, "gate_comparison") / "pairs.sqlite")
    for d in FAMILY_A_DATASETS:
        files += build(d, "size-matched", scale)[0].files
    for datasets in GATE_SETS:
        path, minutes = gate_for(datasets, scale, seed)
        gate = Gate.load(path)
        row: dict[str, object] = {"gate": "+".join(datasets), "trained_on": ", ".join(datasets),
                                  "window_tokens": gate.encoders[0].config.max_length,
                                  "scorer": gate.encoders[0].config.scorer}
        for d, variants in tests.items():
            got = bare_scores(gate, variants, cache)
            row |= {f"test_auroc_{d}": got["auroc"], f"test_ece_{d}": got["ece"], f"test_ece_raw_{d}": got["ece_raw"]}
        got = bare_scores(gate, squad.variants, cache)
        row["squad2_dev_auroc"], row["squad2_units_cut"] = got["auroc"], got["cut"]
        for memory, out in zip(examples, gate.score_many(examples), strict=True):
            row[f"example_{memory['id']}"] = out.unsafe_prob
        row["size_mb"] = round(sum(f.stat().st_size for f in path.iterdir()) / 2**20, 1)
        row["minutes_to_train"] = round(minutes, 1)
        rows.append(row)
        print(row, flush=True)
    table = pd.DataFrame(rows)
    means = table[[f"test_auroc_{d}" for d in FAMILY_A_DATASETS]].mean(axis=1)
    table["test_auroc_mean"] = np.round(means, 6)
    save_report("gate_comparison", "gate_comparison", args, files,
                {"seed": seed, "squad2_memories": len(squad.variants), "rows": table.to_dict(orient="records")},
                table=table)


if __name__ == "__main__":
    main()
