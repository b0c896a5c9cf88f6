"""Execute the jupytext notebooks with papermill, writing into ``artifacts/<scale>/<name>/``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from . import paths


def available() -> list[str]:
    """Numbered notebooks present in ``notebooks/`` (e.g. ``01_construction_audit``)."""
    return sorted(p.stem for p in paths.notebooks_dir().glob("[0-9][0-9]_*.py"))


def default_kernel() -> str:
    """The ``memsafe`` kernel when registered (``make install`` does it), else ``python3``."""
    from jupyter_client.kernelspec import KernelSpecManager

    return "memsafe" if "memsafe" in KernelSpecManager().find_kernel_specs() else "python3"


def run_notebook(name: str, scale: str, *, kernel: str | None = None, output: Path | None = None,
                 parameters: dict[str, object] | None = None) -> Path:
    """Convert ``notebooks/<name>.py`` to ipynb, execute it with ``scale`` injected, and
    atomically place the executed notebook at ``artifacts/<scale>/<name>/<name>.ipynb``."""
    import jupytext
    import papermill

    paths.scale_config(scale)  # fail early on an unknown scale
    # The kernel runs in notebooks/; hand it absolute locations so relative settings still work.
    os.environ["MEMSAFE_DATA_DIR"] = str(paths.data_dir())
    os.environ["MEMSAFE_ARTIFACTS_DIR"] = str(paths.artifacts_dir())
    source = paths.notebooks_dir() / f"{name}.py"
    if not source.exists():
        raise FileNotFoundError(f"no notebook {source}; available: {', '.join(available())}")
    output = output or paths.output_dir(scale, name) / f"{name}.ipynb"
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memsafe-nb-") as tmp:
        src_ipynb = Path(tmp) / f"{name}.ipynb"
        jupytext.write(jupytext.read(source), src_ipynb)
        fd, partial = tempfile.mkstemp(prefix=f".{name}.", suffix=".ipynb", dir=output.parent)
        os.close(fd)
        try:
            papermill.execute_notebook(
                str(src_ipynb), partial, parameters={"scale": scale, **(parameters or {})},
                kernel_name=kernel or default_kernel(), cwd=str(paths.notebooks_dir()), progress_bar=False,
            )
            _relative_papermill_paths(Path(partial), source, output)
            os.replace(partial, output)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    return output


def _relative_papermill_paths(notebook: Path, source: Path, output: Path) -> None:
    """Record repo-relative paths instead of this machine's temp paths in the metadata."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    meta = nb.metadata.get("papermill", {})
    meta["input_path"] = source.relative_to(paths.REPO_ROOT).as_posix()
    out = output.resolve()
    meta["output_path"] = (out.relative_to(paths.REPO_ROOT).as_posix() if out.is_relative_to(paths.REPO_ROOT)
                           else output.name)
    nbformat.write(nb, notebook)
