"""Execute the jupytext notebooks with papermill, writing into ``artifacts/<scale>/<name>/``."""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from memsafe_lib import config, precision
from memsafe_lib.config import ScaleConfig
from memsafe_lib.io import canonical_json, file_lock, replace_row, sha256_bytes, sha256_file, write_csv, write_json
from memsafe_lib.ledger import code_fingerprint, cpu_model, record_run
from memsafe_lib.notebook_outputs import clean_executed, log_path
from memsafe_lib.progress import step


def available() -> list[str]:
    """Numbered notebooks present in ``notebooks/`` (e.g. ``01_construction_audit``)."""
    return sorted(p.stem for p in config.notebooks_dir().glob("[0-9][0-9]_*.py"))


def default_kernel() -> str:
    """The ``memsafe`` kernel when registered (``make install`` does it), else ``python3``."""
    from jupyter_client.kernelspec import KernelSpecManager  # lazy: the notebook stack loads only to run one

    return "memsafe" if "memsafe" in KernelSpecManager().find_kernel_specs() else "python3"


def _completion_marker(name: str, scale: ScaleConfig) -> Path:
    """Local, never committed (a fresh clone runs everything): ``<run dir>/<name>/.cache/``."""
    return scale.run_dir / name / ".cache" / "completed.json"


def _data_stamp() -> str:
    """Path, size and mtime of every file under the data directory: cheap, and it changes
    when a raw file is replaced (the ledger's sha256 is the exact check)."""
    root = config.data_dir()
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else []
    return sha256_bytes("\n".join(f"{p.relative_to(root)}\x1f{p.stat().st_size}\x1f{p.stat().st_mtime_ns}"
                                  for p in files).encode())


def _completion(name: str, scale: ScaleConfig, parameters: dict[str, object], output: Path) -> dict[str, str]:
    return {"notebook": name, "scale": scale.name, "code": code_fingerprint(), "data": _data_stamp(),
            "parameters": canonical_json(parameters), "executed": sha256_file(output) if output.is_file() else ""}


def up_to_date(name: str, scale: ScaleConfig, parameters: dict[str, object] | None = None) -> bool:
    """Whether this checkout already executed ``name`` at ``scale`` with the same code, data
    and parameters, and its executed notebook is untouched: ``memsafe notebook all`` then
    skips it, so a reproduction killed in notebook 5 resumes there."""
    marker = _completion_marker(name, scale)
    if not marker.is_file():
        return False
    output = scale.output_dir(name) / f"{name}.ipynb"
    params = {"scale": scale.name, **scale.notebook_parameters.get(name, {}), **(parameters or {})}
    return json.loads(marker.read_text()) == _completion(name, scale, params, output)


def run_notebook(name: str, scale: ScaleConfig, *, kernel: str | None = None, output: Path | None = None,
                 parameters: dict[str, object] | None = None) -> Path:
    """Convert ``notebooks/<name>.py`` to ipynb, execute it with ``scale`` injected, and
    atomically place the executed notebook at ``artifacts/<scale>/<name>/<name>.ipynb``.
    The kernel receives the scale's name (its parameter cell resolves the config again:
    a notebook is a run's starting point)."""
    import jupytext  # lazy: the notebook stack loads only to run one
    import papermill

    # The kernel runs in notebooks/; hand it absolute locations so relative settings still work.
    os.environ["MEMSAFE_DATA_DIR"] = str(config.data_dir())
    os.environ["MEMSAFE_ARTIFACTS_DIR"] = str(config.artifacts_dir())
    source = config.notebooks_dir() / f"{name}.py"
    if not source.exists():
        raise FileNotFoundError(f"no notebook {source}; available: {', '.join(available())}")
    default_output = scale.output_dir(name) / f"{name}.ipynb"
    output = output or default_output
    output.parent.mkdir(parents=True, exist_ok=True)
    params = {"scale": scale.name, **scale.notebook_parameters.get(name, {}), **(parameters or {})}
    _completion_marker(name, scale).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="memsafe-nb-") as tmp:
        src_ipynb = Path(tmp) / f"{name}.ipynb"
        jupytext.write(jupytext.read(source), src_ipynb)
        fd, partial = tempfile.mkstemp(prefix=f".{name}.", suffix=".ipynb", dir=output.parent)
        os.close(fd)
        try:
            # The kernel's stderr (our step lines with elapsed time, warnings) reaches this
            # terminal as it is written; papermill's cell bar only where a person watches.
            start = time.monotonic()
            with step(f"notebook {name} at scale {scale.name}"):
                papermill.execute_notebook(
                    str(src_ipynb), partial, parameters=params,
                    kernel_name=kernel or default_kernel(), cwd=str(config.notebooks_dir()),
                    progress_bar=sys.stderr.isatty(), stderr_file=sys.stderr,
                )
            seconds = time.monotonic() - start
            _relative_papermill_paths(Path(partial), source, output)
            _flatten_progress_widgets(Path(partial))
            log_path(output).unlink(missing_ok=True)  # this run's log only
            clean_executed(Path(partial), log_path(output))
            os.chmod(partial, 0o644)  # mkstemp creates 0600; artifacts are for everyone to read
            os.replace(partial, output)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    _record_run_time(name, scale, seconds, output)
    if output == default_output:
        marker = _completion_marker(name, scale)
        marker.parent.mkdir(parents=True, exist_ok=True)
        write_json(marker, _completion(name, scale, params, output))
    return output


def _record_run_time(name: str, scale: ScaleConfig, seconds: float, executed: Path) -> None:
    """Wall time of the notebook's last execution in ``run_times.csv`` (one row per notebook,
    for the README's and REPORT's time tables) and a ledger entry naming the executed notebook.
    Caches make a resumed run faster: the row says how long this execution took, no more.
    The CPU's model and whether it has bf16 units go with the time: Stage A computes in fp32
    without them and takes several times longer (:mod:`memsafe_lib.precision`)."""
    row = {"notebook": name, "scale": scale.name, "minutes": round(seconds / 60, 2), "cores": os.cpu_count() or 1,
           "fit_threads": config.fit_threads(), "torch_threads": config.torch_threads(),
           "finished_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "code": code_fingerprint()[:12],
           "cpu": cpu_model(), "bf16_units": precision.bf16_native("cpu"), "bf16_mode": precision.mode()}
    table = scale.run_dir / config.RUN_TIMES_FILE
    with file_lock(table):  # notebooks that share no inputs may finish side by side (make test)
        write_csv(table, replace_row(table, row, key="notebook").sort_values("notebook"))
    record_run(f"notebook-run:{name}", scale, settings={"notebook": name, "threads": [row["fit_threads"],
                                                                                      row["torch_threads"]]},
               outputs=[executed, table, *[p for p in [log_path(executed)] if p.is_file()]],
               metrics={"seconds": round(seconds, 1)})


def _relative_papermill_paths(notebook: Path, source: Path, output: Path) -> None:
    """Record repo-relative paths instead of this machine's temp paths in the metadata."""
    import nbformat  # lazy: its schema validator costs seconds at import, and only notebook runs need it

    nb = nbformat.read(notebook, as_version=4)
    meta = nb.metadata.get("papermill", {})
    meta["input_path"] = source.relative_to(config.REPO_ROOT).as_posix()
    out = output.resolve()
    meta["output_path"] = (out.relative_to(config.REPO_ROOT).as_posix() if out.is_relative_to(config.REPO_ROOT)
                           else output.name)
    nbformat.write(nb, notebook)


_WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def _flatten_progress_widgets(notebook: Path) -> None:
    """Replace tqdm progress widgets by one text line with their final state.

    A widget's rendering lives in ``metadata.widgets``; for the hundreds of progress bars of a
    training run that is ~1 MB of state nobody can interact with after the kernel is gone. The
    final bar ("fine-tune: 100%  250/250 [02:16<00:00]") is what a reader wants to see.
    Other widgets (e.g. the explorer) keep their state.
    """
    import nbformat  # lazy: its schema validator costs seconds at import, and only notebook runs need it

    nb = nbformat.read(notebook, as_version=4)
    state = nb.metadata.get("widgets", {}).get(_WIDGET_STATE, {}).get("state", {})
    if not state:
        return
    used: set[str] = set()

    def model(ref: str) -> dict:
        return state.get(ref.removeprefix("IPY_MODEL_"), {})

    def progress_text(model_id: str) -> str | None:
        box = state.get(model_id, {})
        children = box.get("state", {}).get("children", [])
        kinds = [model(c).get("model_name") for c in children]
        if box.get("model_name") != "HBoxModel" or kinds != ["HTMLModel", "FloatProgressModel", "HTMLModel"]:
            return None
        # tqdm writes "desc: 100%" into the left label and the counts/rates into the right one
        desc, _bar, tail = (model(c)["state"] for c in children)
        text = " ".join(t for t in (html.unescape(desc.get("value", "")), html.unescape(tail.get("value", ""))) if t)
        used.update([model_id, *(c.removeprefix("IPY_MODEL_") for c in children)])
        used.update(model(r).get("state", {}).get(k, "").removeprefix("IPY_MODEL_")
                    for r in [model_id, *children] for k in ("layout", "style"))
        return text.replace("\u2007", " ").strip()

    for cell in nb.cells:
        for i, out in enumerate(cell.get("outputs", [])):
            view = out.get("data", {}).get(_WIDGET_VIEW) if out.get("output_type") == "display_data" else None
            text = progress_text(view["model_id"]) if view else None
            if text is not None:
                cell.outputs[i] = nbformat.v4.new_output("stream", name="stderr", text=text + "\n")
    for model_id in used:
        state.pop(model_id, None)
    if not state:
        nb.metadata.pop("widgets")
    nbformat.write(nb, notebook)
