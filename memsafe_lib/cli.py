"""memsafe command line: check and fetch data, construct memories, audit shortcuts, run notebooks.

Every command exits non-zero with a one-line message naming the file, record and field
when its input is bad, and writes its outputs atomically (nothing half-written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import pandas as pd

from memsafe_lib import config
from memsafe_lib.config import FAMILY_A_DATASETS, ScaleConfig
from memsafe_lib.data.download import main_download
from memsafe_lib.data.loader import DATASETS, discover_files, load_dataset
from memsafe_lib.data.own_records import load_records
from memsafe_lib.encodings.encoders import default_device
from memsafe_lib.errors import DataFormatError
from memsafe_lib.estimators.blind import blind_set_config
from memsafe_lib.estimators.registry import BLIND, SHALLOW, model_group
from memsafe_lib.evaluation.audit import AUDIT_CONTROLS, CHANCE_BAND, audit, blind_rows, blind_verdict
from memsafe_lib.evaluation.compare import DEFAULT_K, compare_trees
from memsafe_lib.evaluation.runs import run_evaluation
from memsafe_lib.evaluation.summary import summarize
from memsafe_lib.gate import (
    OVERSIZE_FACTOR,
    Gate,
    abstain_reason,
    batched,
    calibration_lines,
    gate_datasets,
    iter_memories,
    metrics_lines,
    oversized,
    read_labelled,
    scan_memories,
    train_gate,
    write_card,
)
from memsafe_lib.gate.evaluation import evaluate_gate, summary_lines, write_evaluation
from memsafe_lib.io import atomic_open, write_json, write_jsonl
from memsafe_lib.ledger import read_ledger, record_run
from memsafe_lib.notebooks import available, run_notebook, up_to_date
from memsafe_lib.reporting.paper_report import update_documents
from memsafe_lib.retire import retire, run_prefix, stale_results
from memsafe_lib.threads import configure_threads
from memsafe_lib.variants.construction import CONSTRUCTIONS, accounting, construct, default_construction
from memsafe_lib.variants.files import read_variant_file
from memsafe_lib.variants.store import build
from memsafe_lib.verify import verify


def _scale(args: argparse.Namespace) -> ScaleConfig:
    """The run's one configuration object, resolved where the run starts."""
    return config.scale_config(args.scale).with_encoder(getattr(args, "encoder", None))


def _add_scale(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", choices=sorted(config.SCALES), default=config.DEFAULT_SCALE,
                   help="smoke (CI subsets), cpu (all local data), paper (full data, GPU) or paper-dry (paper "
                        "settings on a few questions, stand-in models: a dry run); default %(default)s")
    _add_record(p)


def _add_record(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record", action="store_true",
                   help="write the committed results (artifacts/<scale>/, its ledger, paper/REPORT.md), as "
                        "`make reproduce` does; without it outputs go to artifacts/scratch/<scale>/")


def cmd_data_check(args: argparse.Namespace) -> int:
    """Parses the raw files afresh (not the variant store): checking them is the point."""
    scale = _scale(args)
    data_dir = config.data_dir()
    names = [args.dataset] if args.dataset else list(DATASETS)
    print(f"data dir: {data_dir}  (scale {args.scale})")
    report, raw_files, ok = [], [], True
    for name in names:
        files, ignored = discover_files(name, data_dir)
        print(f"\n== {name}")
        if not files:
            print(f"   no files (expected {DATASETS[name].official} under {data_dir / name}/)")
            continue
        loaded = load_dataset(name, data_dir, max_base_queries=scale.base_query_cap(name))
        raw_files += loaded.files
        for f in loaded.files:
            print(f"   {f.path}  records={f.records}  sha256={f.sha256[:16]}…")
        for f in ignored:
            print(f"   (not a data file, ignored) {f.relative_to(data_dir)}")
        result = construct(loaded, default_construction(name))
        acc = accounting(loaded, result)
        balanced = acc["raw_records"] == acc["used_records"] + acc["excluded"]
        ok &= balanced
        print(f"   construction {acc['construction']}: raw={acc['raw_records']} used={acc['used_records']} "
              f"excluded={acc['excluded']}  {'(adds up)' if balanced else '(DOES NOT ADD UP)'}")
        for reason, n in acc["excluded_by_reason"].items():
            print(f"     excluded {n:>6}  {reason}")
        print(f"   base questions={acc['base_questions']} variants={acc['variants']} "
              f"by state {acc['variants_by_state']}")
        for reason, n in acc["absent_states"].items():
            print(f"     {n} base questions lack a state: {reason}")
        if loaded.warnings:
            print(f"   {len(loaded.warnings)} kept records with warnings, e.g. {loaded.warnings[0]}")
        report.append({**acc, "warnings": len(loaded.warnings)})
    record_run("data-check", scale, raw_files=raw_files, settings={"datasets": names}, metrics={"report": report})
    return 0 if ok else 1


def cmd_data_download(args: argparse.Namespace) -> int:
    return main_download(args.dataset, config.data_dir())


RECORDS_CONSTRUCTIONS: tuple[str, ...] = ("size-matched", "blind-matched", "blind-hard", "deletion")
"""The constructions a user's own records can be built with (family B and native are datasets' own)."""


def cmd_construct(args: argparse.Namespace) -> int:
    scale = _scale(args)
    if args.records:
        construction = args.construction or "size-matched"
        if construction not in RECORDS_CONSTRUCTIONS:
            raise ValueError(f"--construction {construction}: records are built with one of "
                             f"{', '.join(RECORDS_CONSTRUCTIONS)}")
        loaded = load_records(args.records)
        result = construct(loaded, construction)
    else:
        loaded, result = build(args.dataset, args.construction, scale)
    out = Path(args.out)
    exclusions = out.with_name(out.name.removesuffix(".jsonl") + ".exclusions.jsonl")
    summary = out.with_name(out.name.removesuffix(".jsonl") + ".summary.json")
    acc = accounting(loaded, result)
    write_jsonl(exclusions, [e.__dict__ for e in [*result.exclusions, *result.absent]])
    write_json(summary, acc)
    write_jsonl(out, (v.to_dict() for v in result.variants))  # last: its presence means success
    record_run("construct", scale, raw_files=loaded.files,
               settings={"dataset": args.dataset or f"records:{loaded.dataset}", "construction": result.construction},
               outputs=[out, exclusions, summary], metrics=acc)
    print(json.dumps({"out": str(out), "exclusions": str(exclusions), **acc}, indent=2))
    return 0


def _print_blind(rows: list[dict[str, object]]) -> bool:
    """The blind audit as a table and a verdict; True when every control sits at chance on test."""
    table = pd.DataFrame(rows)
    cols = [c for c in ("model", "role", "split", "n_variants", "unsafe_auroc", "within_chance",
                        "auroc_complete_vs_missing", "auroc_complete_vs_relation_lost", "unseen_memories",
                        "unseen_memory_auroc", "unit_auroc_seen", "unit_auroc_unseen") if c in table]
    print(table[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    test = table[table.split == "test"].iloc[0]
    print(f"Proposition 1 on test: every score of the memory alone within {test.memory_bound:.4f} of 1/2, every "
          f"score of the question alone within {test.question_bound:.4f}")
    clean, leaks = blind_verdict(rows)
    lo, hi = CHANCE_BAND
    print(f"verdict: {'clean' if clean else 'LEAKS'}: "
          + (f"every blind and surface control within {lo}-{hi} test AUROC (the shallow question-aware ones "
             "read the question: compare them with size-matched memories)" if clean else
             f"outside {lo}-{hi} test AUROC: {', '.join(leaks)} (a model that never reads the question, or never "
             "reads the memory, reads the label)"))
    return clean


def _controls(text: str | None) -> list[str]:
    """``--controls``: names or the groups ``surface``, ``blind`` and ``shallow``; default every control."""
    if not text:
        return list(AUDIT_CONTROLS)
    groups = {"surface": [c for c in AUDIT_CONTROLS if c not in (*BLIND, *SHALLOW)], "blind": list(BLIND),
              "shallow": list(SHALLOW)}
    out = [c for part in text.split(",") for c in groups.get(part.strip(), [part.strip()])]
    unknown = [c for c in out if c not in AUDIT_CONTROLS]
    if unknown:
        raise ValueError(f"unknown control(s) {unknown}; choose from {list(AUDIT_CONTROLS)} "
                         "or 'surface', 'blind', 'shallow'")
    return out


def cmd_audit(args: argparse.Namespace) -> int:
    if args.blind is not None:  # a user's own variant file: print only, nothing written
        if args.dataset is not None:
            raise ValueError("give --dataset or --blind FILE, not both")
        variants = read_variant_file(args.blind)
        rows = blind_rows(variants, _controls(args.controls), dataset=Path(args.blind).name, construction="file")
        return 0 if _print_blind(rows) else 1
    if args.dataset is None:
        raise ValueError("give --dataset (one of ours) or --blind FILE.jsonl (your own variants)")
    scale = _scale(args)
    loaded, result = build(args.dataset, args.construction, scale)
    report = audit(result, controls=_controls(args.controls), blind_config=blind_set_config(scale))
    report.pop("rows")
    record_run("audit", scale, raw_files=loaded.files,
               settings={"dataset": args.dataset, "construction": result.construction}, metrics=report)
    print(json.dumps(report, indent=2, sort_keys=True))
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    if args.gate is not None:
        return cmd_evaluate_gate(args)
    if args.dataset is None or args.input is not None or args.out is not None:
        raise ValueError("give --dataset (fit and score our models on one of our datasets) or --gate DIR --input "
                         "FILE --out DIR2 (judge a trained gate on your labelled memories)")
    scale = _scale(args)
    models = [m for part in args.models.split(",") if part.strip() for m in model_group(part.strip())]
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(scale.seeds)
    files = run_evaluation(args.dataset, models, seeds, scale, args.construction, device=args.device)
    print(json.dumps({k: str(v) for k, v in files.items()}, indent=2))
    return 0


def _check_risk(args: argparse.Namespace) -> None:
    for option, value in (("--risk", args.risk), ("--delta", args.delta)):
        if value is not None and not 0 < value < 1:
            raise ValueError(f"{option} must lie strictly between 0 and 1; got {value:g}")


def _check_gate_dir(path: str) -> None:
    if not Path(path).is_dir():
        raise FileNotFoundError(f"--gate {path}: no such directory (write one with `memsafe train`)")


def cmd_evaluate_gate(args: argparse.Namespace) -> int:
    """Labels are read and checked before the gate loads; metrics.json is written last."""
    if args.input is None or args.out is None or args.dataset is not None:
        raise ValueError("--gate needs --input FILE.jsonl (labelled memories) and --out DIR, and no --dataset")
    _check_risk(args)
    _check_gate_dir(args.gate)
    memories = read_labelled(args.input, provenance=not args.no_provenance, split=args.split)
    gate = Gate.load(args.gate, device=args.device or "cpu", encoder_model=args.encoder)
    if not gate.calibrated:
        print("memsafe: note: this gate has no calibration (saved before gates were calibrated); its ECE is the "
              "set model's own", file=sys.stderr)
    outputs, metrics = evaluate_gate(gate, memories, args.risk, args.delta, args.resamples)
    metrics = {"gate": str(args.gate), "input": str(args.input), **metrics}
    write_evaluation(args.out, memories, outputs, metrics)
    print("\n".join(summary_lines(metrics)))
    print(f"(scores, reliability.png, risk_coverage.png and metrics.json in {args.out})")
    return 0


def _gate_datasets(text: str) -> tuple[str, ...]:
    try:
        return gate_datasets(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def stage_a_notice(datasets: Sequence[str], scale: ScaleConfig) -> str | None:
    """The first line of ``memsafe train`` when Stage A reads more than the gate's datasets."""
    pool = tuple(scale.neural.stage_a_pool)
    if not pool or set(pool) <= set(datasets) or not set(datasets) <= set(pool):
        return None
    return (f"memsafe train: at scale {scale.name} Stage A's fold encoders tune on the training questions of "
            f"{', '.join(pool)} together (shared by every gate and notebook 02, cached once tuned), not on "
            f"{', '.join(datasets)} alone; a first gate pays for that Stage A")


def cmd_train(args: argparse.Namespace) -> int:
    scale = _scale(args)
    notice = stage_a_notice(args.dataset, scale) if args.dataset else None
    if notice:
        print(notice, flush=True)
    path = train_gate(args.dataset, scale, args.seed, Path(args.out) if args.out else None,
                      device=args.device or default_device(), records=args.records)
    saved = json.loads((path / "config.json").read_text())
    print(f"saved gate: {path}  (its card: {path / 'card.md'})")
    print("\n".join(metrics_lines(saved["metrics"])))
    print("\n".join(calibration_lines(saved["calibration"])))
    print(f"(every metric: \"metrics\" in {path / 'config.json'})")
    return 0


def cmd_card(args: argparse.Namespace) -> int:
    _check_gate_dir(args.gate)
    cfg = Gate.read_config(args.gate)
    print(write_card(args.gate, cfg))
    return 0


SCORE_CHUNK = 64
"""Memories ``memsafe score`` reads and scores at a time: its memory does not grow with the input.
The encoders' working set grows with the chunk (peak RSS with the smoke gate on 256 HotpotQA
memories, 2-core Xeon: 1.06 GB at 8, 1.16 at 16, 1.37 at 32, 1.71 at 64; bench/score_stream.py),
and so does the speed of a gate at the 256-token window: a chunk's pairs are bucketed by length
together, so a larger chunk pads less and calls the encoders fewer times (with the smoke gate
16 was within 7% of 64; with the cpu gate at 256 tokens 64 reads 85% of the encoders' ceiling
and 16 read 73%: bench/score_speed.py, whose rows compare code versions)."""
SCORE_PROGRESS_S = 10.0
"""At most one progress line per this many seconds (and one at the end)."""


def cmd_score(args: argparse.Namespace) -> int:
    """Stream memories through the gate: the whole file is validated first (a bad line stops
    before the model loads and before anything is written), the ``--risk`` threshold is fixed
    before the first memory is scored, then chunks of :data:`SCORE_CHUNK` go in and their
    lines come out as they are scored (``--out`` is renamed into place only when complete)."""
    _check_risk(args)
    if not Path(args.input).is_file():
        raise FileNotFoundError(f"--input {args.input}: no such file")
    _check_gate_dir(args.gate)
    scan = scan_memories(args.input)
    gate = Gate.load(args.gate, device=args.device or "cpu", encoder_model=args.encoder)
    controls = {}
    if args.risk is not None:
        for form, count in ((True, scan.with_provenance), (False, scan.memories - scan.with_provenance)):
            if not count:
                continue  # calibrated on validation memories in the input's own form
            control = controls[form] = gate.risk_control(args.risk, args.delta, with_provenance=form)
            print(f"memsafe: --risk {args.risk:g}: {control.guarantee}; threshold "
                  f"{'none (abstain on all)' if control.threshold is None else control.threshold} for "
                  f"{count} memories {'with' if form else 'without'} provenance", file=sys.stderr)
            if control.threshold is None:
                print(f"memsafe: {abstain_reason(control)}", file=sys.stderr)
    big: list[str] = []
    units = cut_units = cut_memories = window = done = 0
    start = last = time.perf_counter()
    with (atomic_open(Path(args.out), "w") if args.out else nullcontext(sys.stdout)) as fh:
        for chunk in batched(iter_memories(args.input), SCORE_CHUNK):
            outputs = gate.score_many(chunk)
            for memory, out in zip(chunk, outputs, strict=True):
                decision: dict[str, object] = {}
                if controls:
                    control = controls["source_positions" in memory]
                    decision = {"decision": gate.decide([out], control)[0], "threshold": control.threshold}
                fh.write(json.dumps({"id": memory.get("id"), **out.to_dict(), **decision}) + "\n")
                units += len(memory["units"])
                cut_units += out.truncated_units
                cut_memories += out.truncated_units > 0
                window = out.max_length
            fh.flush()
            big += [str(chunk[i].get("id", done + i)) for i in oversized([len(m["units"]) for m in chunk], gate.config)]
            done += len(chunk)
            now = time.perf_counter()
            if scan.memories > SCORE_CHUNK and (now - last >= SCORE_PROGRESS_S or done == scan.memories):
                last = now  # more than one chunk: a line every SCORE_PROGRESS_S seconds and at the end
                rate = done / max(now - start, 1e-9)
                print(f"memsafe: scored {done:,} of {scan.memories:,} memories ({rate:.1f} a second)", file=sys.stderr)
    if big:
        print(f"memsafe: warning: {len(big)} of {scan.memories} memories hold more than {OVERSIZE_FACTOR}x the units "
              f"of the largest training memory ({gate.config['train_memory_units']['max']}); their scores "
              f"extrapolate (first: {big[0]})", file=sys.stderr)
    if cut_units:
        print(f"memsafe: warning: {cut_units} of {units} units in {cut_memories} of {scan.memories} memories are "
              f"longer than the encoder's {window}-token window with the query; the gate read only their "
              "beginning (per memory: truncated_units)", file=sys.stderr)
    return 0


def cmd_summarize(args: argparse.Namespace) -> int:
    scale = _scale(args)
    files = summarize(scale, n_resamples=args.resamples)
    print(json.dumps({k: str(v) for k, v in files.items()}, indent=2))
    return 0


def cmd_notebook(args: argparse.Namespace) -> int:
    scale = _scale(args)
    names = available() if args.name == "all" else [args.name]
    for name in names:
        if args.name == "all" and not args.force and up_to_date(name, scale):
            print(f"{name} at scale {args.scale}: up to date (same code, data and parameters; --force runs it)")
            continue
        out = run_notebook(name, scale, kernel=args.kernel)
        print(f"executed {name} at scale {args.scale}: {out}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    result = verify(_scale(args))
    print(result.report())
    return 0 if result.ok else 1


def cmd_retire(args: argparse.Namespace) -> int:
    """List (``--stale``) or retire results no current notebook writes (:mod:`memsafe_lib.retire`)."""
    scale = _scale(args)
    if args.stale:
        for rel in stale_results(run_prefix(scale), read_ledger(scale)):
            print(rel)
        return 0
    entry = retire(scale, args.paths, args.reason or "")
    print(f"retired {len(entry['retired'])} files ({args.reason}); ledger: {scale.ledger_path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """Exit 0 when every reference table is identical or within tolerance in the other tree."""
    for root in (args.reference, args.other):
        if not root.is_dir():
            print(f"memsafe compare: {root} is not a folder of artifacts", file=sys.stderr)
            return 2
    table = compare_trees(args.reference, args.other, args.k)
    if table.empty:
        print(f"memsafe compare: no tables under {args.reference}", file=sys.stderr)
        return 2
    with_width = table.assign(differences=table["differences"].str.slice(0, 160))
    print(with_width.to_string(index=False))
    counts = table["status"].value_counts()
    print("; ".join(f"{n} {status}" for status, n in counts.items())
          + f" (tolerance: {args.k:g} seed SDs of the reference run, rounding where it has no spread)")
    return 0 if set(table["status"]) <= {"identical", "within tolerance"} else 1


def cmd_report(args: argparse.Namespace) -> int:
    for out in update_documents():
        print(f"updated {out}")
    if not config.recording():
        print("(paper/REPORT.md, README.md and docs/ themselves change only with --record)")
    return 0


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="torch device for the neural models (default: cuda if available)")
    p.add_argument("--encoder", default=None, metavar="PATH_OR_ID",
                   help=f"Stage A start: a local model directory, a hub id or {config.PACKAGED_ENCODER} "
                        f"(default: the scale's; paper: {config.PAPER_ENCODER})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memsafe", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    data_parser = sub.add_parser("data", help="inspect or fetch the raw datasets")
    data = data_parser.add_subparsers(dest="data_cmd", required=True)
    p = data.add_parser("check", help="files found and raw/used/excluded counts per dataset")
    p.add_argument("--dataset", choices=sorted(DATASETS), help="one dataset (default: every one)")
    _add_scale(p)
    p.set_defaults(func=cmd_data_check)
    p = data.add_parser("download", help="fetch the official files into MEMSAFE_DATA_DIR (needs internet)")
    p.add_argument("--dataset", choices=sorted(DATASETS), help="one dataset (default: every one)")
    p.set_defaults(func=cmd_data_download)

    p = sub.add_parser("construct", help="write the memory variants of a dataset, or of your own records, as "
                                         "JSON Lines")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", choices=sorted(DATASETS), help="the dataset under MEMSAFE_DATA_DIR")
    source.add_argument("--records", metavar="FILE.jsonl", default=None,
                        help="your own questions, one per line: id, question, evidence, distractors, and optionally "
                             "answers and split (docs/records.schema.json)")
    p.add_argument("--construction", choices=CONSTRUCTIONS, default=None,
                   help="default: size-matched (native for squad2)")
    p.add_argument("--out", required=True, help="output .jsonl; exclusions and a summary are written beside it")
    _add_scale(p)
    p.set_defaults(func=cmd_construct)

    p = sub.add_parser("audit", help="test AUROC of the surface and blind controls on one of our constructions "
                                     "(JSON), or of the blind audit on your own variant file (--blind)")
    p.add_argument("--dataset", choices=sorted(DATASETS), help="the dataset to audit (or give --blind)")
    p.add_argument("--construction", choices=CONSTRUCTIONS, default=None,
                   help="default: size-matched (native for squad2)")
    p.add_argument("--controls", default=None, metavar="NAMES",
                   help="comma-separated controls or the groups 'surface', 'blind' and 'shallow' (default: every one)")
    p.add_argument("--blind", metavar="FILE.jsonl", default=None,
                   help="fit the surface and blind controls on your own variants (train/validation/test from each "
                        "line's 'split') and print their AUROC with a verdict; exit 0 clean, 1 leaky, 2 bad input")
    _add_scale(p)
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("evaluate", help="fit and score our models on a dataset (--dataset: one metrics row per "
                                         "(model, seed, split)), or judge a trained gate on your labelled memories "
                                         "(--gate DIR --input FILE --out DIR2)")
    p.add_argument("--dataset", choices=sorted(DATASETS), help="the dataset under MEMSAFE_DATA_DIR")
    p.add_argument("--gate", default=None, help="a gate directory written by `memsafe train`: judge it on --input")
    p.add_argument("--input", default=None, metavar="FILE.jsonl",
                   help='with --gate: what `memsafe construct` writes, or JSON Lines of {"id", "query", "units", '
                        '"unsafe" (or "state"), "base_id"?}')
    p.add_argument("--out", default=None, metavar="DIR",
                   help="with --gate: writes scores.jsonl, metrics.json, reliability.png and risk_coverage.png")
    p.add_argument("--risk", type=float, default=None, metavar="ALPHA",
                   help="with --gate: judge it at the Learn-then-Test threshold for evidence risk <= ALPHA instead "
                        "of its own threshold")
    p.add_argument("--delta", type=float, default=0.1, help="failure probability of --risk (default %(default)s)")
    p.add_argument("--split", default=None, choices=("train", "validation", "test"),
                   help="with --gate: only the memories of this split (`memsafe construct` writes every split; "
                        "judge a gate trained on the same records on test)")
    p.add_argument("--no-provenance", action="store_true",
                   help="with --gate: ignore source positions in --input (score memories as an agent without "
                        "provenance passes them)")
    p.add_argument("--resamples", type=int, default=1000,
                   help="with --gate: bootstrap resamples over questions for the AUROC interval (default %(default)s)")
    p.add_argument("--models", default="all",
                   help="comma-separated names or groups: 'baselines' (lexical + controls), 'neural', 'all' "
                        "(default %(default)s)")
    p.add_argument("--seeds", default=None, help="comma-separated; default: the scale's seeds")
    p.add_argument("--construction", choices=CONSTRUCTIONS, default="size-matched", help="default %(default)s")
    _add_device(p)
    _add_scale(p)
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("train", help="fit MemSafe on one or more QA datasets and save it as a gate "
                                      "(safetensors + config)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", type=_gate_datasets, metavar="DATASET[,DATASET...]",
                        help=f"one of {', '.join(FAMILY_A_DATASETS)}, or several comma-separated: one gate trained "
                             "on all of them (fold encoders and set model)")
    source.add_argument("--records", default=None, metavar="FILE.jsonl",
                        help="your own questions (docs/records.schema.json): a gate trained on their size-matched "
                             "memories' train split, calibrated on validation")
    p.add_argument("--seed", type=int, default=None, help="default: the scale's first seed")
    p.add_argument("--out", default=None, help="gate directory (default: artifacts/<scale>/gates/<dataset>-seed<k>)")
    _add_device(p)
    _add_scale(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("score", help="score memories (JSON Lines) with a saved gate; JSON Lines out")
    p.add_argument("--gate", required=True, help="gate directory written by `memsafe train`")
    p.add_argument("--input", required=True,
                   help='JSON Lines: {"id"?, "query": str, "units": [str | {"title", "text"}], '
                        '"source_positions"?, "source_units"?}')
    p.add_argument("--out", default=None, help="output .jsonl (default: stdout)")
    p.add_argument("--risk", type=float, default=None, metavar="ALPHA",
                   help="add answer/abstain per memory at evidence risk <= ALPHA with probability >= 1 - DELTA "
                        "(Learn-then-Test on the gate's validation memories)")
    p.add_argument("--delta", type=float, default=0.1,
                   help="failure probability of the --risk guarantee (default %(default)s)")
    _add_device(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("card", help="write a gate's card.md again from its config.json")
    p.add_argument("--gate", required=True, help="gate directory written by `memsafe train`")
    p.set_defaults(func=cmd_card)

    p = sub.add_parser("summarize", help="seed means, bootstrap intervals, Wilcoxon, gates and H1-H5 of evaluate runs")
    p.add_argument("--resamples", type=int, default=1000,
                   help="bootstrap resamples per interval (default %(default)s)")
    _add_scale(p)
    p.set_defaults(func=cmd_summarize)

    p = sub.add_parser("notebook", help="execute a numbered notebook with papermill")
    p.add_argument("name", help="e.g. 01_construction_audit, or 'all'")
    p.add_argument("--kernel", default="memsafe",
                   help="Jupyter kernel (default %(default)s: this environment, installed by `make install`; "
                        "the launcher's 'Python 3' kernel may lack the library)")
    p.add_argument("--force", action="store_true",
                   help="with 'all': run notebooks this checkout already executed with the same code, data "
                        "and parameters (skipped by default, so a killed reproduction resumes)")
    _add_scale(p)
    p.set_defaults(func=cmd_notebook)

    p = sub.add_parser("verify", help="check that artifacts/<scale>/ match the ledger, cover the scale's runs, and "
                                      "that the report's generated blocks are current")
    p.add_argument("--scale", choices=sorted(config.SCALES), default=config.DEFAULT_SCALE,
                   help="the run to check, artifacts/<scale>/ (default %(default)s)")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("retire", help="remove results no current notebook writes, with a ledger entry naming "
                                      "each file and the reason (verify then requires them absent)")
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="files relative to artifacts/, as the ledger names them (e.g. cpu/03_ablations/x.csv)")
    p.add_argument("--reason", help="why these files are no longer results (kept in the ledger)")
    p.add_argument("--stale", action="store_true",
                   help="only list the results the latest notebook run did not write again")
    _add_scale(p)
    p.set_defaults(func=cmd_retire)

    p = sub.add_parser("compare", help="check a reproduction against a reference run, table by table, within "
                                       "the reference run's seed spread")
    p.add_argument("reference", type=Path, help="the reference run, e.g. artifacts/cpu (the committed one)")
    p.add_argument("other", type=Path, help="the run to check, e.g. a clone's artifacts/cpu")
    p.add_argument("--k", type=float, default=DEFAULT_K, help="tolerance in seed standard deviations (default 3)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("report", help="refresh the generated tables in paper/REPORT.md, README.md and "
                                      "docs/ from artifacts/")
    p.add_argument("--record", action="store_true",
                   help="write the refreshed documents in place (without it they go to artifacts/scratch/)")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        configure_threads()  # before any model library starts its pools (MEMSAFE_THREADS)
        if getattr(args, "record", False):
            os.environ[config.RECORD_ENV] = "1"  # notebook kernels inherit it
        return int(args.func(args))
    except DataFormatError as exc:
        print(f"memsafe: bad input: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as exc:
        print(f"memsafe: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
