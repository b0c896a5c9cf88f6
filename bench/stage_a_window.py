"""Stage A at the paper's 256-token window: how many pairs each window cuts, and the learning
rate and pair budget re-decided for the window on validation only.

``shares``: per dataset, split (all, test), window (128, 256) and pair kind (plain, bridge), the
share of the pairs Stage B reads (one per unit of every size-matched memory) that lose tokens,
lose tokens of the unit, or lose bridge context, under the library's bridge-first rule and, for
comparison, under plain longest-first truncation. Exact tokenization; the bridge unit u_top is
picked by the pretrained ranker reading at that window, as Stage A picks it. No forward pass
but the ranker's.

``grid``: one pooled fold-0 encoder per point (training fold 0 of MuSiQue, HotpotQA and 2Wiki,
each under the pair cap, as the cpu scale's pooled Stage A builds it), then every unit of every
*validation* memory of the three datasets scored as evidence or not by its relevance logit
(AUROC, AUPRC; plain and bridge pairs). Test memories are never read. One seed (17).

    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_a_window.py shares
    python3 bench/stage_a_window.py grid --device cuda --rows-out rows.jsonl    # on a GPU machine
    MEMSAFE_RECORD=1 .venv/bin/python bench/stage_a_window.py grid --from-rows gpu/stage_a_window_h200.json \
        --rows-code 8ca4ad91b637    # its rows (kept in bench/gpu/ as JSON), recorded with the code that computed them

Each finished grid point is cached (``.cache/stage_a_window/``, keyed by the point, budget,
device and code) and, with ``--rows-out``, appended there as it finishes, so a killed run
keeps what it did.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.config import FAMILY_A_DATASETS, scale_config
from memsafe_lib.encodings.encoders import (
    CrossEncoder,
    EncoderConfig,
    EncodingCache,
    PretrainedRanker,
    encode_pairs,
    make_ranker,
    variant_pairs,
)
from memsafe_lib.encodings.finetune import FinetuneConfig, finetune, training_pairs
from memsafe_lib.encodings.window import window_counts
from memsafe_lib.io import sha256_file, write_json
from memsafe_lib.ledger import code_fingerprint
from memsafe_lib.measures.metrics import average_precision, unsafe_auroc
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import by_split, train_fold
from memsafe_lib.variants.store import build

WINDOWS = (128, 256)

POINTS: dict[str, dict[str, object]] = {
    "128 tok; 4k pairs; lr 1e-4 (cpu scale before)": {"max_length": 128},
    "256 tok; 4k pairs; lr 5e-5": {"lr": 5e-5},
    "256 tok; 4k pairs; lr 1e-4": {},
    "256 tok; 4k pairs; lr 2e-4": {"lr": 2e-4},
    "256 tok; 8k pairs; lr 1e-4": {"max_pairs": 8000},
    "256 tok; 8k pairs; lr 2e-4": {"max_pairs": 8000, "lr": 2e-4},
}
"""Overrides of the pooled cpu Stage A (per dataset per fold: 4,000 balanced pairs, lr 1e-4) at
256 tokens, with the 128-token point the cpu scale used before as the reference."""


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def shares(args: argparse.Namespace) -> None:
    scale = scale_config(args.scale)
    cache_dir = scale.output_dir(config.BENCH) / ".cache" / "stage_a_window"
    cache_dir.mkdir(parents=True, exist_ok=True)
    rows, files = [], []
    for dataset in FAMILY_A_DATASETS:
        loaded, result = build(dataset, "size-matched", scale)
        files += list(loaded.files)
        populations = {"all": list(result.variants), "test": by_split(result.variants)["test"]}
        for window in WINDOWS:
            ranker = make_ranker(EncoderConfig(model=scale.neural.encoder, max_length=window),
                                 EncodingCache(cache_dir / "ranker.sqlite"))
            tokenizer = CrossEncoder(EncoderConfig(model=scale.neural.encoder, max_length=window)).tokenizer
            for split, variants in populations.items():
                plain, bridge, _ = variant_pairs(variants, ranker)
                for kind, pairs in (("plain", plain), ("bridge", bridge)):
                    ours = window_counts(tokenizer, pairs, window)
                    longest = window_counts(tokenizer, pairs, window, rule="longest-first")
                    rows.append({"dataset": dataset, "split": split, "window": window, "pair": kind,
                                 "memories": len(variants), "pairs": ours["pairs"],
                                 "share_cut": ours["share_cut"], "share_unit_cut": ours["share_unit_cut"],
                                 "share_bridge_cut": ours["share_bridge_cut"],
                                 "share_unit_cut_longest_first": longest["share_unit_cut"]})
                    print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    save_report("stage_a_window", "stage_a_window_shares", args, files,
                {"rows": table.to_dict(orient="records"), "cpu": cpu_name()}, table=table)


def grid(args: argparse.Namespace) -> None:
    scale = scale_config(args.scale)
    budget = scale.neural
    data = {d: build(d, "size-matched", scale) for d in FAMILY_A_DATASETS}
    files = [f for loaded, _ in data.values() for f in loaded.files]
    splits = {d: by_split(result.variants) for d, (_, result) in data.items()}
    cache = scale.output_dir(config.BENCH) / ".cache" / "stage_a_window"
    device_name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else cpu_name()
    if args.from_rows is not None:  # adopt the rows a run on another machine (a GPU) appended
        text = args.from_rows.read_text(encoding="utf-8")
        rows = (json.loads(text)["rows"] if args.from_rows.suffix == ".json"  # kept: {"what", "rows"}
                else [json.loads(line) for line in text.splitlines() if line.strip()])  # as --rows-out appends
        table = pd.DataFrame(rows)
        save_report("stage_a_window", "stage_a_window_grid", args, files,
                    {"rows": rows, "rows_code": args.rows_code, "rows_sha256": sha256_file(args.from_rows)},
                    table=table)
        return
    rows = []
    rankers: dict[int, PretrainedRanker] = {}  # one per window: u_top does not depend on the point's training
    for name in args.points:
        cached = cache / f"{re.sub(r'[^a-z0-9]+', '_', name.lower()).strip('_')}.json"
        settings = {"point": POINTS[name], "budget": repr(budget), "device": args.device,
                    "code": code_fingerprint()}
        if cached.exists() and (done := json.loads(cached.read_text()))["settings"] == settings:
            print(f"{name}: cached", flush=True)
            rows.append(done["row"])
            continue
        point = dict(POINTS[name])
        max_length = int(point.pop("max_length", 256))  # type: ignore[call-overload]
        encoder = EncoderConfig(model=budget.encoder, max_length=max_length, device=args.device)
        tune = replace(FinetuneConfig(lr=budget.finetune_lr, max_pairs=budget.finetune_max_pairs,
                                      head_lr=budget.finetune_head_lr), **point)
        if max_length not in rankers:
            rankers[max_length] = make_ranker(encoder)
        ranker = rankers[max_length]
        pairs, labels = [], []
        for dataset in sorted(FAMILY_A_DATASETS):  # as stagea._fold_job: dataset name order, each capped
            members = [v for v in splits[dataset]["train"] if train_fold(v.base_id) == 0]
            p, y = training_pairs(members, ranker, tune.include_bridge, tune.max_pairs, tune.balanced_cap)
            pairs += p
            labels.append(y)
        model = CrossEncoder(encoder, seed=17)
        start = time.perf_counter()
        finetune(model, pairs, np.concatenate(labels), tune, seed=17, progress=False)
        tuned = time.perf_counter() - start
        row: dict[str, object] = {"point": name, "pairs_per_fold": len(pairs), "max_length": max_length,
                                  "lr": tune.lr, "device": device_name}
        start = time.perf_counter()
        for dataset in FAMILY_A_DATASETS:
            validation = splits[dataset]["validation"]
            plain, bridge, _ = variant_pairs(validation, ranker)
            evidence = np.array([u.is_evidence for v in validation for u in v.units])
            for kind, kind_pairs in (("plain", plain), ("bridge", bridge)):
                logits = encode_pairs(model, kind_pairs, None, progress=False)[1]
                row[f"{dataset}_{kind}_auroc"] = float(unsafe_auroc(evidence, logits))
                row[f"{dataset}_{kind}_auprc"] = float(average_precision(evidence, logits))
        row["mean_bridge_auprc"] = float(np.mean([row[f"{d}_bridge_auprc"] for d in FAMILY_A_DATASETS]))
        row["mean_plain_auprc"] = float(np.mean([row[f"{d}_plain_auprc"] for d in FAMILY_A_DATASETS]))
        row["minutes_finetune_one_fold"] = tuned / 60
        row["minutes_encode_validation"] = (time.perf_counter() - start) / 60
        rows.append(row)
        write_json(cached, {"settings": settings, "row": row})
        if args.rows_out:
            with open(args.rows_out, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
        print(row, flush=True)
    table = pd.DataFrame(rows)
    save_report("stage_a_window", "stage_a_window_grid", args, files, {"rows": table.to_dict(orient="records")},
                table=table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["shares", "grid"])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--points", nargs="+", default=list(POINTS), choices=list(POINTS), metavar="POINT")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--rows-out", type=Path, default=None, help="append each finished grid row here (JSON lines)")
    parser.add_argument("--from-rows", type=Path, default=None,
                        help="grid: record the rows another run appended with --rows-out instead of computing them")
    parser.add_argument("--rows-code", default=None,
                        help="with --from-rows: the code fingerprint of the run that computed them")
    args = parser.parse_args()
    configure_threads()
    (shares if args.part == "shares" else grid)(args)


if __name__ == "__main__":
    main()
