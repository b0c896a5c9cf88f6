"""Fill the reproduction report's tables from the artifacts of a run.

``paper/REPORT.md`` is prose we write, with marked blocks that this module regenerates:

    <!-- memsafe:table cpu/01_construction_audit/controls_test.csv cols=dataset,model,unsafe_auroc -->
    ...generated markdown table...
    <!-- /memsafe:table -->

so every number in a table comes from a CSV written by a ledgered run, and re-running the
notebooks and ``memsafe report`` refreshes them without touching the prose. An optional
``where=col:v1,v2;col:v3`` keeps rows whose column takes one of the listed values (quote the
whole option when a value has spaces).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pandas as pd

from . import paths
from .io import write_text

BLOCK = re.compile(r"(<!-- memsafe:table (?P<spec>[^>]*?) -->\n)(?P<body>.*?)(<!-- /memsafe:table -->)", re.S)


def _format(value: object) -> str:
    if value is None or (isinstance(value, float) and pd.isna(value)) or value is pd.NA:
        return "–"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value).replace("|", "\\|")


def markdown_table(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(_format(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def render_block(spec: str, artifacts: Path) -> str:
    parts = shlex.split(spec)  # a value with spaces is quoted: where="step:notebook 01 at smoke"
    source = artifacts / parts[0]
    options = dict(p.split("=", 1) for p in parts[1:])
    if not source.exists():
        raise FileNotFoundError(f"report table source {source} not found; run the notebook at that scale first")
    frame = pd.read_csv(source).convert_dtypes()  # integer columns with gaps stay integers
    for clause in filter(None, options.get("where", "").split(";")):
        column, values = clause.split(":", 1)
        frame = frame[frame[column].astype(str).isin(values.split(","))]
    if "cols" in options:
        frame = frame[options["cols"].split(",")]
    return markdown_table(frame)


def render(text: str, artifacts: Path | None = None) -> str:
    artifacts = artifacts or paths.artifacts_dir()
    return BLOCK.sub(lambda m: m.group(1) + render_block(m.group("spec"), artifacts) + m.group(4), text)


REPORT = paths.REPO_ROOT / "paper" / "REPORT.md"
GENERATED_DOCUMENTS: tuple[Path, ...] = (REPORT, paths.REPO_ROOT / "README.md")
"""Files with generated blocks: the report and the README's time table."""


def update_report(report: Path | None = None, artifacts: Path | None = None, out: Path | None = None) -> Path:
    """Regenerate the tables of ``report`` from the recorded artifacts. The committed file is
    rewritten only in a reproduce run (:func:`paths.recording`); otherwise the refreshed copy
    goes to ``artifacts/scratch/<file name>``, for comparison."""
    report = report or REPORT
    if out is None:
        out = report if paths.recording() else paths.artifacts_dir() / paths.SCRATCH / report.name
    write_text(out, render(report.read_text(encoding="utf-8"), artifacts))
    return out


def update_documents(artifacts: Path | None = None) -> list[Path]:
    """``memsafe report``: every file of :data:`GENERATED_DOCUMENTS`."""
    return [update_report(doc, artifacts) for doc in GENERATED_DOCUMENTS]
