"""What an executed notebook keeps: its results, not its logs or the paths of the machine that ran it.

papermill stores everything a cell writes. The step lines, progress bars and library warnings a
run writes to stderr move to ``<name>.log`` beside the executed notebook, named by one markdown
line under papermill's injected parameters (which also says the scale this copy ran at, so a
reader is not misled by the ``parameters`` cell's default above it). Absolute paths of the
machine (the checkout, the data and artifacts folders, the temporary and home folders) are
written as placeholders in both.
"""

from __future__ import annotations

import datetime as dt
import re
import tempfile
from pathlib import Path
from typing import Any

from memsafe_lib import config
from memsafe_lib.config import ScaleConfig
from memsafe_lib.io import atomic_open, sha256_file
from memsafe_lib.ledger import append_entry, artifact_hashes, code_fingerprint, environment, read_ledger

RUN_NOTE_TAG = "memsafe-run-note"
"""Tag of the markdown cell the cleaner adds (so cleaning twice adds it once)."""


def path_placeholders() -> list[tuple[str, str]]:
    """(absolute path, placeholder), longest path first so a folder inside another is named by
    its own placeholder."""
    pairs = [(config.data_dir(), "$MEMSAFE_DATA_DIR"), (config.artifacts_dir(), "<repo>/artifacts"),
             (config.REPO_ROOT, "<repo>"), (Path(tempfile.gettempdir()), "$TMPDIR"), (Path.home(), "~")]
    seen: dict[str, str] = {}
    for path, name in pairs:
        text = str(path.resolve()) if path.exists() else str(path)
        if text not in ("/", "") and text not in seen:
            seen[text] = name
    return sorted(seen.items(), key=lambda item: -len(item[0]))


_CHECKOUT = re.compile(r"(?<![\w.~<>$/:+=,-])/(?:[\w.+-]+/)*?(?=(?:\.venv|artifacts)/)")
"""The root of some checkout, before its ``.venv/`` or ``artifacts/`` (another machine's clone)."""
_ABSOLUTE = re.compile(r"(?<![\w.~<>$/:+=,-])/(?:[\w.+-]+/)+(?=[\w.+-])")
"""The folders of any other absolute path (the file or last folder name is kept)."""


def scrub(value: Any, placeholders: list[tuple[str, str]]) -> Any:
    """``value`` (a string, or lists and dicts of them) with every listed path replaced by its
    placeholder, then any other machine's checkout by ``<repo>/`` and the folders of any other
    absolute path by ``.../`` (a log cleaned on another machine than the one that ran it)."""
    if isinstance(value, str):
        for path, name in placeholders:
            value = value.replace(path, name)
        return _ABSOLUTE.sub(".../", _CHECKOUT.sub("<repo>/", value))
    if isinstance(value, list):
        return [scrub(v, placeholders) for v in value]
    if isinstance(value, dict):
        return {k: scrub(v, placeholders) for k, v in value.items()}
    return value


TEXT_TYPES = ("text/plain", "text/html", "text/markdown", "text/latex")
"""The output types scrubbed; images and widget state are left byte for byte."""


def _scrub_output(output: Any, placeholders: list[tuple[str, str]]) -> bool:
    """Scrub the text of one output in place; whether it changed."""
    fields = [(output, "text")] if output.get("output_type") == "stream" else \
        [(output.get("data", {}), mime) for mime in TEXT_TYPES]
    changed = False
    for holder, key in fields:
        if key in holder:
            new = scrub(holder[key], placeholders)
            changed |= new != holder[key]
            holder[key] = new
    return changed


def _text(output: Any) -> str:
    text = output.get("text", "")
    return "".join(text) if isinstance(text, list) else str(text)


def log_path(executed: Path) -> Path:
    """Where the log of an executed notebook lives: ``<name>.log`` beside it."""
    return executed.with_suffix(".log")


def clean_executed(notebook: Path, log_file: Path | None = None) -> bool:
    """Move every stderr output of ``notebook`` into ``log_file`` (default :func:`log_path`),
    replace machine paths in what stays and in the log, and add the run note naming the log.
    Both files are replaced atomically; a notebook with nothing on stderr leaves the log as it
    is. Returns whether the notebook changed (a clean notebook is left untouched)."""
    import nbformat  # lazy: its schema validator costs seconds at import, and only notebook runs need it

    nb = nbformat.read(notebook, as_version=4)
    placeholders = path_placeholders()
    log: list[str] = []
    changed = False
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stderr":
                log.append(f"--- cell {index}\n{_text(output).rstrip()}\n")
                continue
            kept.append(output)
        changed |= len(kept) != len(cell.outputs)
        for output in kept:
            changed |= _scrub_output(output, placeholders)
        cell.outputs = kept
    log_file = log_file or log_path(notebook)
    if log:
        with atomic_open(log_file) as fh:
            fh.write(scrub("".join(log), placeholders))
    changed |= _add_run_note(nb, log_file.name if log_file.is_file() else None)
    if changed:
        with atomic_open(notebook) as fh:
            nbformat.write(nb, fh)
    return changed


def _add_run_note(nb: Any, log_name: str | None) -> bool:
    """Add the note, or bring an earlier one up to date (whether a log exists); whether it changed."""
    import nbformat

    scale = nb.metadata.get("papermill", {}).get("parameters", {}).get("scale")
    tags = [c.get("metadata", {}).get("tags", []) for c in nb.cells]
    injected = next((i for i, t in enumerate(tags) if "injected-parameters" in t), None)
    ran = (f"**This copy ran at scale `{scale}`**: the cell above, injected by papermill, replaced the "
           "defaults of the `parameters` cell before it. ") if scale else ""
    logged = (f"Its step lines, progress bars and warnings are in `{log_name}` beside this notebook."
              if log_name else "It wrote nothing to stderr.")
    earlier = next((c for c, t in zip(nb.cells, tags, strict=True) if RUN_NOTE_TAG in t), None)
    if earlier is not None:
        changed = earlier.source != ran + logged
        earlier.source = ran + logged
        return changed
    note = nbformat.v4.new_markdown_cell(ran + logged)
    note.metadata["tags"] = [RUN_NOTE_TAG]
    nb.cells.insert(0 if injected is None else injected + 1, note)
    return True


def clean_committed(scale: ScaleConfig) -> list[Path]:
    """Clean the executed notebooks of ``artifacts/<scale>/`` that were run before the cleaner
    existed, and return those it changed. Each gets a ledger entry ``notebook-clean:<name>``
    that keeps the fingerprint of the entry that wrote it (its results are that code's; the
    cleaner only moves stderr and replaces paths), names the cleaning code apart
    (``settings.cleaned_with``) and lists the notebook's hash before as its input."""
    entries = read_ledger(scale)
    changed = []
    for executed in sorted(scale.run_dir.glob("*/*.ipynb")):
        rel = executed.resolve().relative_to(config.artifacts_dir()).as_posix()
        writer = next((e for e in reversed(entries) if rel in e.get("outputs", {})), None)
        before = sha256_file(executed)
        if writer is None or writer["outputs"][rel] != before:
            raise ValueError(f"{executed}: not the notebook its ledger entry wrote (run `memsafe verify`)")
        if not clean_executed(executed):
            continue
        log = log_path(executed)
        append_entry(scale.ledger_path, {
            "kind": f"notebook-clean:{executed.stem}",
            "time_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "fingerprint": writer["fingerprint"],
            "settings": {"notebook": executed.stem, "scale": scale.name, "cleaned_with": code_fingerprint()},
            "raw_files": [], "inputs": {rel: before},
            "outputs": artifact_hashes([executed, *([log] if log.is_file() else [])]),
            "metrics": {}, "environment": environment(),
        })
        changed.append(executed)
    return changed
