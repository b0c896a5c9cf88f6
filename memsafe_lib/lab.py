"""``make lab``: JupyterLab on the repository, opened at ``notebooks/``.

The server's root is the repository, not ``notebooks/``: jupytext looks for its configuration
from a notebook's folder upwards but not above the server's root, so only from here does it read
``jupytext.toml`` (which keeps a saved notebook byte for byte as committed), and only from here
are the executed copies under ``artifacts/`` reachable beside the sources.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from memsafe_lib import config

START_FOLDER = "notebooks"
"""Where the browser opens; every folder of the repository is one click away."""


def lab_argv(*, port: int | None = None, token: str | None = None, open_browser: bool = True) -> list[str]:
    """The command ``make lab`` runs (tests start the same server on a free port with a token)."""
    argv = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={config.REPO_ROOT}",
            f"--LabApp.default_url=/lab/tree/{START_FOLDER}"]
    if port is not None:
        argv += [f"--port={port}", "--ip=127.0.0.1"]
    if token is not None:
        argv.append(f"--IdentityProvider.token={token}")
    if not open_browser:
        argv.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-root")  # containers run as root; JupyterLab refuses it otherwise
    return argv


def main(argv: Sequence[str] | None = None) -> None:
    """Replace this process with JupyterLab (extra arguments are passed on)."""
    command = [*lab_argv(), *(sys.argv[1:] if argv is None else argv)]
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
