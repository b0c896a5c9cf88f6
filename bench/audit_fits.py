"""Notebook 01's audit fits, before and after they ran side by side, in one run on this machine.

Before: every dataset's shortcut controls (audit) and question-blind controls (fit_controls) one
after another in this process, the question-blind set model embedding its units in bf16 in
memory (the old path, emulated by running it under bf16 autocast with no disk cache). After:
:func:`memsafe_lib.evaluation.audit.audit_side_by_side`, which embeds the units once in fp32
into the cache Stage A's ranker reads, then fits one dataset per worker. Then the ranker's part
of the next notebook: the seconds it takes to embed the same datasets' units with that cache
and without it (what notebook 02 paid before). Each arm starts with an empty cache; the
test AUROCs of the two paths are put side by side (the blind set model's move with the
precision of its embeddings; the other controls' do not move).

    MEMSAFE_RECORD=1 .venv/bin/python bench/audit_fits.py --scale cpu --datasets musique 2wikimultihopqa
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch
from report import save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib import config
from memsafe_lib.encodings.encoders import EncoderConfig, EncodingCache, make_ranker, unit_string
from memsafe_lib.estimators.context import pretrained_embeddings
from memsafe_lib.evaluation import audit as A
from memsafe_lib.ledger import cpu_model
from memsafe_lib.precision import use_bf16
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.store import build

SHORTCUT = ("majority", "paragraph_count", "text_length", "provenance_only", "lexset", "tfidf")
BLIND = ("blind_bow", "blind_unit", "blind_set", "question_only")
SHORTCUT_CONSTRUCTIONS = ("deletion", "size-matched", "blind-matched")
BLIND_CONSTRUCTIONS = ("size-matched", "blind-matched")


def _test_rows(audits: list[dict], fits: A.BlindFits, arm: str) -> list[dict]:
    rows = [{**r, "arm": arm} for a in audits for r in a["rows"]]
    rows += [{**r.row(d, c), "arm": arm} for (d, c), (_, fitted) in fits.items() for r in fitted if r.split == "test"]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--datasets", nargs="+", default=["musique", "2wikimultihopqa"])
    args = parser.parse_args()
    fit_threads, torch_threads = configure_threads()
    scale = config.scale_config(args.scale)
    results, raw = {}, {}
    for dataset in args.datasets:
        results[dataset] = {}
        for construction in SHORTCUT_CONSTRUCTIONS:
            loaded, results[dataset][construction] = build(dataset, construction, scale)
            raw.update({f.path: f for f in loaded.files})
    cache = pretrained_embeddings(scale, args.datasets[0])
    if cache.exists():  # a cold arm: the shared cache starts empty (set aside and put back after)
        kept = Path(tempfile.mkdtemp()) / cache.name
        shutil.move(cache, kept)
    else:
        kept = None
    try:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16(True, "cpu")):
            before_audits = [A.audit(results[d][c], SHORTCUT) for d in args.datasets for c in SHORTCUT_CONSTRUCTIONS]
            before_fits = {(d, c): A.fit_controls(results[d][c].variants, BLIND, where=f"{d}/{c}")
                           for d in args.datasets for c in BLIND_CONSTRUCTIONS}
        before = time.perf_counter() - start
        start = time.perf_counter()
        after_audits, after_fits = A.audit_side_by_side(results, SHORTCUT, SHORTCUT_CONSTRUCTIONS, BLIND,
                                                        BLIND_CONSTRUCTIONS, scale)
        after = time.perf_counter() - start
        texts = list(dict.fromkeys(unit_string(u.title, u.text) for d in args.datasets
                                   for c in BLIND_CONSTRUCTIONS for v in results[d][c].variants for u in v.units))
        encoder = EncoderConfig(model=scale.neural.encoder, max_length=scale.neural.max_length)
        ranker_seconds = {}
        for arm, store in (("ranker_with_cache", EncodingCache(cache)), ("ranker_without_cache", None)):
            start = time.perf_counter()
            make_ranker(encoder, store).embed(texts)
            ranker_seconds[arm] = time.perf_counter() - start
    finally:
        if kept is not None:
            cache.unlink(missing_ok=True)
            shutil.move(kept, cache)
    rows = pd.DataFrame(_test_rows(before_audits, before_fits, "before")
                        + _test_rows(after_audits, after_fits, "after"))
    table = rows.pivot_table(index=["dataset", "construction", "model"], columns="arm", values="unsafe_auroc")
    table = table.reset_index()[["dataset", "construction", "model", "before", "after"]]
    table["difference"] = table["after"] - table["before"]
    moved = table[table.difference.abs() > 1e-9]
    report = {"datasets": " ".join(args.datasets), "cpu": cpu_model(), "bf16_units": use_bf16(True, "cpu"),
              "fit_threads": fit_threads, "torch_threads": torch_threads, "fit_workers": config.fit_workers(),
              "minutes_before": before / 60, "minutes_after": after / 60,
              "texts": len(texts), "ranker_minutes_with_cache": ranker_seconds["ranker_with_cache"] / 60,
              "ranker_minutes_without_cache": ranker_seconds["ranker_without_cache"] / 60,
              "minutes_before_with_ranker": (before + ranker_seconds["ranker_without_cache"]) / 60,
              "minutes_after_with_ranker": (after + ranker_seconds["ranker_with_cache"]) / 60,
              "test_aurocs_moved": ", ".join(sorted(set(moved.model))) or "none",
              "largest_test_auroc_move": float(table.difference.abs().max())}
    print(table.to_string(index=False))
    save_report("audit-fits", "audit_fits", args, list(raw.values()), report)


if __name__ == "__main__":
    main()
