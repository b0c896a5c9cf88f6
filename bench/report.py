"""What every benchmark shares: its command line (:func:`bench_parser`: the docstring's first
paragraph and ``--scale``) and its tail (:func:`save_report`: one-row JSON and CSV under
artifacts/<scale>/bench/, a ledger entry, and a readable print-out). The machine a row ran on
is named by :func:`memsafe_lib.ledger.cpu_model` (the ledger entry records it too), never by a
copy of it in a script."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from memsafe_lib import config
from memsafe_lib.data.records import RawFile
from memsafe_lib.io import write_csv, write_json
from memsafe_lib.ledger import record_run


def bench_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line: the first paragraph of its docstring as description, and
    ``--scale``, where its record goes."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--scale", default="cpu",
                        help="the record goes to artifacts/<scale>/bench/ with MEMSAFE_RECORD=1, else to scratch")
    return parser


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments as the ledger's JSON settings: a path is named from beside the checkout
    (``previous-cpu-run/artifacts/cpu``), or by its last part, never by this machine's root."""
    def plain(value: Any) -> Any:
        if not isinstance(value, Path):
            return value
        try:
            return value.resolve().relative_to(config.REPO_ROOT.parent).as_posix()
        except ValueError:
            return value.name
    return {key: plain(value) for key, value in vars(args).items()}


def save_report(kind: str, name: str, args: argparse.Namespace, raw_files: Iterable[RawFile],
                report: dict[str, Any], table: pd.DataFrame | None = None, inputs: Iterable[Path] = ()) -> None:
    """``table``: the CSV's rows (default: ``report`` as one row); ``inputs``: artifacts it read."""
    scale = config.scale_config(args.scale)
    stem = scale.output_dir(config.BENCH) / name
    out = write_json(stem.with_suffix(".json"), report)
    csv = write_csv(stem.with_suffix(".csv"), pd.DataFrame([report]) if table is None else table)
    record_run(f"bench:{kind}", scale, raw_files=raw_files, settings=settings_of(args), outputs=[out, csv],
               inputs=list(inputs), metrics=report)
    if table is not None:
        print(table.to_string(index=False))
        return
    for key, value in report.items():
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
