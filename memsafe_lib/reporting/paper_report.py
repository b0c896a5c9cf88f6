"""Fill the reproduction report's tables from the artifacts of a run.

``paper/REPORT.md`` is prose we write, with marked blocks that this module regenerates:

    <!-- memsafe:table cpu/01_construction_audit/controls_test.csv cols=dataset,model,unsafe_auroc -->
    ...generated markdown table...
    <!-- /memsafe:table -->

so every number in a table comes from a CSV written by a ledgered run, and re-running the
notebooks and ``memsafe report`` refreshes them without touching the prose. An optional
``where=col:v1,v2;col:v3`` keeps rows whose column takes one of the listed values (quote the
whole option when a value has spaces).

Numbers inside the prose are generated the same way, one marker each:

    reaches <!-- memsafe:value cpu/02_training/main_table.csv model=memsafe musique_auroc .3f -->
    0.709<!-- /memsafe:value -->          (one line in the document)

The marker names the CSV, filters (``column=value[,value]``; a value with spaces is quoted),
the column, and optionally ``agg=min|max|mean|sum|count`` (required when several rows match),
``abs`` and a Python format spec (``.3f``, ``+.3f``, ``.1%``, ``,d``; default ``.4f``).

``<!-- memsafe:index cpu -->`` ... ``<!-- /memsafe:index -->`` holds the index of the paper's
tables and figures (:mod:`memsafe_lib.reporting.paper_index`), its numbers read the same way.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pandas as pd

from memsafe_lib import config
from memsafe_lib.io import write_text
from memsafe_lib.reporting import paper_index

SPEC = r"(?P<spec>(?:(?!-->)[^\n])*?)"  # up to the marker's own "-->": a quoted cell may hold '>' ("x >= 0.03")
BLOCK = re.compile(r"(<!-- memsafe:table " + SPEC + r" -->\n)(?P<body>.*?)(<!-- /memsafe:table -->)", re.S)


ONE_DECIMAL = re.compile(r"(^|_)(seconds|minutes|hours|mb|gb|rss|wall|per_s|per_second|speedup)(_|$)")
"""Columns in seconds, minutes, MB and rates: one decimal is their precision."""
AS_WRITTEN = re.compile(r"(^|_)(lr|learning_rate|dropout|weight_decay)$")
"""Settings, printed as written (0.1, 0.0003, 1e-05), not padded to four places."""


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and pd.isna(value))


def column_format(name: str, values: pd.Series) -> str:
    """The format a column's unit wants: integers (and whole-number floats, which a gap turns
    into floats) with thousands separators, seconds/MB/rates and any column with a value
    beyond 1 (minutes, tokens, ratios) to one decimal, settings as written, and everything in
    [-1, 1] (AUROC, F1, shares, differences) to four places."""
    present = [v for v in values if not _missing(v)]
    if present and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in present):
        return ",d"
    floats = [float(v) for v in present if isinstance(v, float | np.floating)]
    if not floats or len(floats) != len(present):
        return "s"
    if AS_WRITTEN.search(name.lower()):
        return "g"
    if ONE_DECIMAL.search(name.lower()):
        return ",.1f"
    if all(v.is_integer() for v in floats) and max(abs(v) for v in floats) >= 1:
        return ",.0f"
    if max(abs(v) for v in floats) > 1:  # not an AUROC, F1 or share: minutes, tokens, ratios
        return ",.1f"
    return ".4f"


def _format(value: object, fmt: str = "s") -> str:
    if _missing(value):
        return "–"
    if fmt == ".4f" and 0 < abs(float(value)) < 5e-5:  # type: ignore[arg-type]
        return f"{float(value):.2e}"  # type: ignore[arg-type]
    if fmt == ",d":
        return f"{int(value):,}"  # type: ignore[call-overload]
    if fmt != "s":
        return format(float(value), fmt)  # type: ignore[arg-type]
    return str(value).replace("|", "\\|")


def markdown_table(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    formats = [column_format(str(c), frame[c]) for c in frame.columns]
    rows = ["| " + " | ".join(_format(v, f) for v, f in zip(row, formats, strict=True)) + " |"
            for row in frame.itertuples(index=False)]
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


VALUE = re.compile(r"(<!-- memsafe:value " + SPEC + r" -->)(?P<body>[^<]*)(<!-- /memsafe:value -->)")
AGGREGATES = {"min": "min", "max": "max", "mean": "mean", "sum": "sum", "count": "count"}
_CSV_CACHE: dict[Path, pd.DataFrame] = {}


def _frame(source: Path) -> pd.DataFrame:
    if source not in _CSV_CACHE:
        if not source.exists():
            raise FileNotFoundError(f"report value source {source} not found; run the notebook at that scale first")
        if source.suffix == ".json":  # a run summary: its scalar keys as one row, a dict's as key.sub
            data = json.loads(source.read_text(encoding="utf-8"))
            row = {k: v for k, v in data.items() if not isinstance(v, list | dict)}
            row.update({f"{k}.{sub}": v for k, d in data.items() if isinstance(d, dict)
                        for sub, v in d.items() if not isinstance(v, list | dict)})
            _CSV_CACHE[source] = pd.DataFrame([row])
        else:
            _CSV_CACHE[source] = pd.read_csv(source)
    return _CSV_CACHE[source]


def render_value(spec: str, artifacts: Path) -> str:
    """One number of the prose, from one cell (or an aggregate over the selected cells)."""
    parts = shlex.split(spec)
    frame = _frame(artifacts / parts[0])
    column, agg, fmt, absolute = None, None, ".4f", False
    for part in parts[1:]:
        if "=" in part:
            key, value = part.split("=", 1)
            if key == "agg":
                if value not in AGGREGATES:
                    raise ValueError(f"report value {spec!r}: agg must be one of {sorted(AGGREGATES)}")
                agg = value
            else:
                if key not in frame.columns:
                    raise ValueError(f"report value {spec!r}: no column {key!r} in {parts[0]}")
                cells = frame[key].astype(str)
                # a value that is itself a cell ("set model, frozen encoder") is not a list
                frame = frame[cells == value] if (cells == value).any() else frame[cells.isin(value.split(","))]
        elif part == "abs":
            absolute = True
        elif column is None and part in frame.columns:
            column = part
        else:
            fmt = part
    if column is None:
        raise ValueError(f"report value {spec!r}: name a column of {parts[0]}")
    values = frame[column]
    if agg is None and len(values) != 1:
        raise ValueError(f"report value {spec!r}: {len(values)} rows match; filter to one or give agg=")
    value = values.abs() if absolute else values
    number = getattr(value, AGGREGATES[agg])() if agg else value.iloc[0]
    if isinstance(number, float) and number.is_integer() and fmt.endswith("d"):
        number = int(number)
    return format(number, fmt)


INDEX = re.compile(r"(<!-- memsafe:index (?P<scale>[\w-]+) -->\n)(?P<body>.*?)(<!-- /memsafe:index -->)", re.S)


def render_index(scale: str, artifacts: Path) -> str:
    """The report's index of the paper's tables and figures (:mod:`paper_index`): where each is
    regenerated, and its headline number from the artifacts beside the paper's."""
    rows = []
    stage_a = paper_index.stage_a_setting(scale, artifacts)
    for item in paper_index.ITEMS:
        where = "; ".join(f"`{nb}` §{section.split(' · ')[0]}" for nb, section in item.sections) or "–"
        files = ", ".join(f"`{Path(a).name}`" for a in item.artifacts) or "–"
        ours = theirs = what = "–"
        if item.headline:
            line = item.headline
            what, spec = line.what, f"{scale}/{line.ours}"
            ours = render_value(f"{spec} {line.fmt}", artifacts)
            if line.paper and line.paper.startswith("ref:"):
                theirs = format(paper_index.reference_value(line.paper[4:]), line.fmt)
            elif line.paper:  # col:<name>: the paper column of the same row
                row_filter = spec.rsplit(" ", 1)[0]
                theirs = render_value(f"{row_filter} {line.paper.removeprefix('col:')} {line.fmt}", artifacts)
        rows.append({"paper": f"`{item.label}`", "shows": item.shows, "regenerated by": where, "artifacts": files,
                     "REPORT": f"§{item.report}" if item.report else "–", "headline": what, "ours": ours,
                     "paper value": theirs, "what differs": item.differs.replace(paper_index.STAGE_A, stage_a)})
    return markdown_table(pd.DataFrame(rows))


def render(text: str, artifacts: Path | None = None) -> str:
    artifacts = artifacts or config.artifacts_dir()
    _CSV_CACHE.clear()  # a run may have rewritten the sources since the last call
    text = BLOCK.sub(lambda m: m.group(1) + render_block(m.group("spec"), artifacts) + m.group(4), text)
    text = INDEX.sub(lambda m: m.group(1) + render_index(m.group("scale"), artifacts) + m.group(4), text)
    return VALUE.sub(lambda m: m.group(1) + render_value(m.group("spec"), artifacts) + m.group(4), text)


REPORT = config.REPO_ROOT / "paper" / "REPORT.md"
GENERATED_DOCUMENTS: tuple[Path, ...] = (REPORT, config.REPO_ROOT / "README.md",
                                         *sorted(p for p in (config.REPO_ROOT / "docs").glob("*.md")
                                                 if "<!-- memsafe:" in p.read_text(encoding="utf-8")))
"""Files with generated blocks: the report, the README's headline numbers and gate table, and
every document under ``docs/`` that holds a marker (a new one is filled without registering it)."""


def update_report(report: Path | None = None, artifacts: Path | None = None, out: Path | None = None) -> Path:
    """Regenerate the tables of ``report`` from the recorded artifacts. The committed file is
    rewritten only in a reproduce run (:func:`config.recording`); otherwise the refreshed copy
    goes to ``artifacts/scratch/<file name>``, for comparison."""
    report = report or REPORT
    if out is None:
        out = report if config.recording() else config.artifacts_dir() / config.SCRATCH / report.name
    write_text(out, render(report.read_text(encoding="utf-8"), artifacts))
    return out


def update_documents(artifacts: Path | None = None) -> list[Path]:
    """``memsafe report``: every file of :data:`GENERATED_DOCUMENTS`."""
    return [update_report(doc, artifacts) for doc in GENERATED_DOCUMENTS]
