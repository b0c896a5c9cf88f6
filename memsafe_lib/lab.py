"""``make lab``: JupyterLab on the repository, opened at ``notebooks/``.

The server's root is the repository, not ``notebooks/``: jupytext looks for its configuration
from a notebook's folder upwards but not above the server's root, so only from here does it read
``jupytext.toml`` (which keeps a saved notebook byte for byte as committed), and only from here
are the executed copies under ``artifacts/`` reachable beside the sources.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jupytext import AsyncTextFileContentsManager

from memsafe_lib import config
from memsafe_lib.io import atomic_open

START_FOLDER = "notebooks"
"""Where the browser opens; every folder of the repository is one click away."""


def kernel_language_info() -> dict[str, Any]:
    """What the ``memsafe`` kernel (this environment's Python through ipykernel) reports as its
    language when it starts."""
    from ipykernel.ipkernel import IPythonKernel  # lazy: only the lab server needs it

    return json.loads(json.dumps(IPythonKernel.language_info))


class NotebookContents(AsyncTextFileContentsManager):
    """jupytext's contents manager, with the kernel's ``language_info`` in every text notebook it
    reads. A ``.py`` notebook does not store it (jupytext.toml keeps the header as committed), so
    JupyterLab set it when the kernel started and marked the notebook modified before anything
    was typed; with the kernel's own value already there, nothing changes, and saving still
    writes the header without it."""

    async def get(self, path: str, content: bool = True, type: str | None = None,  # noqa: A002 - the API's name
                  format: str | None = None, **kwargs: Any) -> dict[str, Any]:  # noqa: A002
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if content and model.get("type") == "notebook" and not str(path).endswith(".ipynb"):
            model["content"]["metadata"].setdefault("language_info", kernel_language_info())
        return model


def lab_argv(*, port: int | None = None, token: str | None = None, open_browser: bool = True) -> list[str]:
    """The command ``make lab`` runs (tests start the same server on a free port with a token)."""
    argv = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={config.REPO_ROOT}",
            f"--LabApp.default_url=/lab/tree/{START_FOLDER}",
            f"--ServerApp.contents_manager_class=memsafe_lib.lab.{NotebookContents.__name__}"]
    if port is not None:
        argv += [f"--port={port}", "--ip=127.0.0.1"]
    if token is not None:
        argv.append(f"--IdentityProvider.token={token}")
    if not open_browser:
        argv.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")  # containers run as root; JupyterLab refuses it otherwise
    return argv


NEWS_PLUGIN = "@jupyterlab/apputils-extension:notification"
QUIET_NEWS: dict[str, Any] = {"fetchNews": "false", "checkForUpdates": False}
"""No "Would you like to get notified about official Jupyter news?" prompt and no update check
when JupyterLab first opens (the prompt covers a corner of the screen; the check needs the internet)."""


def overrides_file(prefix: str | Path = sys.prefix) -> Path:
    """This environment's JupyterLab settings overrides (not the user's ``~/.jupyter``)."""
    return Path(prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def with_quiet_news(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with :data:`QUIET_NEWS` for the notification plugin, everything else kept."""
    out = dict(settings)
    out[NEWS_PLUGIN] = {**out.get(NEWS_PLUGIN, {}), **QUIET_NEWS}
    return out


def write_settings(prefix: str | Path = sys.prefix) -> Path:
    """Merge :func:`with_quiet_news` into the environment's overrides (``make install`` runs it
    after jupytext's viewer default)."""
    path = overrides_file(prefix)
    current = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w") as fh:
        fh.write(json.dumps(with_quiet_news(current), indent=2) + "\n")
    return path


def main(argv: Sequence[str] | None = None) -> None:
    """Replace this process with JupyterLab (extra arguments are passed on); ``--settings`` only
    writes this environment's settings (:func:`write_settings`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["--settings"]:
        write_settings()
        return
    command = [*lab_argv(), *args]
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
