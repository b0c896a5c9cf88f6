"""Does the concatenated cross-encoder learn? Its learning curve on validation, beside relevance
aggregation on the same Stage A.

Per QA dataset (size-matched construction) and seed: the concatenated cross-encoder as the scale
builds it (``concat_start``, window, epochs) trained on 25%, 50% and 100% of the training memories
(whole base questions in salted-hash order, so the states stay balanced), its validation unsafe
AUROC and macro F1, its fit minutes; and relevance aggregation's validation AUROC on the scale's
fine-tuned Stage A of that seed (the bar the issue set: above it on at least two datasets). Only
validation is read. The 100% point is notebook 02's own fit when its caches are on this machine
(the fine-tuned weights and encodings are cached by content), so after a cpu run it costs the
25% and 50% fits only; a fit read back from the cache has no minutes in the table
(``read_from_cache``), its minutes are in the log of the run that trained it.

    MEMSAFE_RECORD=1 .venv/bin/python bench/concat_curve.py --scale cpu --seed 17

``--window-only`` writes ``concat_window.csv`` instead, no fit: per dataset, how many tokens a
validation memory serialised with its question takes and the share the window cuts (exact
tokenization), which is how much of a memory the model can read at all.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd
from report import bench_parser, save_report  # bench/report.py (scripts run from bench/)

from memsafe_lib.config import FAMILY_A_DATASETS, scale_config
from memsafe_lib.data.records import RawFile
from memsafe_lib.encodings.encoders import CrossEncoder, EncoderConfig
from memsafe_lib.estimators.concat import ConcatCrossEncoder, capped, pair
from memsafe_lib.estimators.neural_context import build_context
from memsafe_lib.estimators.registry import make_model
from memsafe_lib.ledger import cpu_model
from memsafe_lib.measures.metrics import macro_f1, unsafe_auroc
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import by_split
from memsafe_lib.variants.store import build

FRACTIONS = (0.25, 0.5, 1.0)


def _weight_files(model: ConcatCrossEncoder) -> set[str]:
    """The tuned-weight files in the model's cache (one per finished fit, named by its key)."""
    return {p.name for p in model.cache_dir.glob("concat-*.safetensors")} if model.cache_dir else set()


def curve_rows(dataset: str, scale_name: str, seed: int, fractions: tuple[float, ...]
               ) -> tuple[list[dict[str, object]], list[RawFile]]:
    """The curve's rows for one dataset, and the raw files its construction read."""
    scale = scale_config(scale_name)
    loaded, result = build(dataset, "size-matched", scale)
    splits = by_split(result.variants)
    train, validation = splits["train"], splits["validation"]
    context = build_context(result, scale, [seed])
    labels = [v.unsafe for v in validation]
    states = [v.state for v in validation]
    bar = make_model("relevance_agg", seed, context).fit(train, validation).predict(validation)
    bar_auroc = unsafe_auroc(labels, bar.unsafe_prob)
    rows = []
    for fraction in fractions:
        base = make_model("concat_ce", seed, context)
        assert isinstance(base, ConcatCrossEncoder)
        scale_cap = base.settings.max_train  # 100% is the scale's own fit (all memories at cpu)
        cap = scale_cap if fraction >= 1 else round(fraction * len(capped(train, scale_cap)))
        model = replace(base, settings=replace(base.settings, max_train=cap))
        before = _weight_files(model)
        start = time.perf_counter()
        model.fit(train, validation)
        minutes = (time.perf_counter() - start) / 60
        read_back = _weight_files(model) == before  # no new weights: the fit was read from the cache
        preds = model.predict(validation)
        rows.append({"dataset": dataset, "seed": seed, "fraction": fraction,
                     "train_memories": len(capped(train, cap)), "of_train_memories": len(train),
                     "val_unsafe_auroc": round(unsafe_auroc(labels, preds.unsafe_prob), 4),
                     "val_macro_f1": round(macro_f1(states, list(preds.state)), 4),
                     "relevance_agg_val_auroc": round(bar_auroc, 4),
                     # a fit read back from an earlier run's cache has no minutes of its own here
                     "minutes": None if read_back else round(minutes, 1), "read_from_cache": read_back,
                     "start": model.config["start"], "epochs": model.settings.epochs,
                     "max_length": model.settings.max_length, "cpu": cpu_model()})
        print(rows[-1], flush=True)
    return rows, list(loaded.files)


def window_rows(dataset: str, scale_name: str) -> tuple[dict[str, object], list[RawFile]]:
    """One row: the validation memories' token counts (question + serialised memory, untruncated)
    against the concatenated cross-encoder's window, and the raw files read."""
    scale = scale_config(scale_name)
    loaded, result = build(dataset, "size-matched", scale)
    validation = by_split(result.variants)["validation"]
    window = scale.neural.concat_max_length  # the window make_model gives concat_ce (registry)
    encoder = CrossEncoder(EncoderConfig(model=scale.neural.encoder, max_length=window))
    pairs = [pair(v) for v in validation]
    tokens = np.array([len(encoder.tokenizer(p.first(), p.unit)["input_ids"]) for p in pairs])
    # cut as the encoder itself decides it (CrossEncoder.truncated), not a second rule here
    return {"dataset": dataset, "window": window, "validation_memories": len(validation),
            "median_tokens": int(np.median(tokens)), "share_cut": round(float(np.mean(encoder.truncated(pairs))), 4),
            "median_share_read": round(float(np.median(np.minimum(1.0, window / tokens))), 4),
            "cpu": cpu_model()}, list(loaded.files)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--datasets", nargs="+", default=list(FAMILY_A_DATASETS))
    parser.add_argument("--fractions", nargs="+", type=float, default=list(FRACTIONS))
    parser.add_argument("--window-only", action="store_true", help="write concat_window.csv (no fit)")
    parser.add_argument("--name", default="concat_curve",
                        help="the table's name under artifacts/<scale>/bench/ (a later dataset beside an earlier run)")
    args = parser.parse_args()
    configure_threads()
    if args.window_only:
        done = [window_rows(dataset, args.scale) for dataset in args.datasets]
        table = pd.DataFrame([row for row, _ in done])
        save_report("concat_window", "concat_window", args, [f for _, read in done for f in read],
                    {"rows": table.to_dict("records"), "cpu": cpu_model()}, table=table)
        return
    rows: list[dict[str, object]] = []
    files: list[RawFile] = []
    for dataset in args.datasets:
        more, read = curve_rows(dataset, args.scale, args.seed, tuple(args.fractions))
        rows += more
        files += read
    save_report("concat_curve", args.name, args, files, {"rows": rows, "cpu": cpu_model()},
                table=pd.DataFrame(rows))


if __name__ == "__main__":
    main()
