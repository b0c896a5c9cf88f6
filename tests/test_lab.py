"""`make lab`, as a user meets it: the server ``memsafe_lib.lab`` starts (loopback only, a token,
bounded in time) on the real repository, not a copy of it. Saving writes the tracked notebook
files themselves; each test restores their bytes whatever happens."""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from memsafe_lib import config
from memsafe_lib.lab import NEWS_PLUGIN, START_FOLDER, kernel_language_info, lab_argv, overrides_file, write_settings
from memsafe_lib.notebooks import available

TOKEN = "memsafe-test"
EXECUTED = "artifacts/cpu/02_training/02_training.ipynb"
"""A committed executed copy (any scale's would do; cpu's are in every clone)."""


@dataclass(frozen=True)
class Lab:
    port: int

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def request(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url(path), data=data, method="GET" if body is None else "PUT",
                                         headers={"Authorization": f"token {TOKEN}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())


def _lab_overrides() -> Path:
    return Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def test_the_environment_turns_off_jupyterlabs_news_prompt_and_keeps_the_jupytext_viewer(tmp_path: Path) -> None:
    settings = overrides_file(tmp_path)
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "J"}},
                                    NEWS_PLUGIN: {"doNotDisturbMode": True}}))
    written = json.loads(write_settings(tmp_path).read_text())
    assert written[NEWS_PLUGIN] == {"doNotDisturbMode": True, "fetchNews": "false", "checkForUpdates": False}
    assert written["@jupyterlab/docmanager-extension:plugin"] == {"defaultViewers": {"python": "J"}}
    if _lab_overrides().exists():  # this environment, as `make install` left it
        assert json.loads(_lab_overrides().read_text()).get(NEWS_PLUGIN, {}).get("fetchNews") == "false"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if not _lab_overrides().exists():
        pytest.skip("JupyterLab settings not installed in this environment (make install writes them)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = tmp_path_factory.mktemp("home")  # no user settings of this machine leak in
    server = subprocess.Popen(lab_argv(port=port, token=TOKEN, open_browser=False), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "HOME": str(home)})
    running = Lab(port)
    # JupyterLab keeps a checkpoint beside every notebook it opens or saves (git-ignored); the
    # tests remove the checkpoint folders they created
    checkpoint_dirs = [config.notebooks_dir() / ".ipynb_checkpoints",
                       (config.REPO_ROOT / EXECUTED).parent / ".ipynb_checkpoints"]
    existed = {d: d.exists() for d in checkpoint_dirs}
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                running.request("/api/status")
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)
        yield running
    finally:
        server.terminate()
        server.wait(timeout=30)
        for folder, was_there in existed.items():
            if not was_there:
                shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture()
def notebook_bytes() -> Iterator[dict[Path, bytes]]:
    """The notebooks' bytes before a test, written back after it."""
    before = {p: p.read_bytes() for p in sorted(config.notebooks_dir().glob("[0-9][0-9]_*.py"))}
    try:
        yield before
    finally:
        for path, data in before.items():
            if path.read_bytes() != data:
                path.write_bytes(data)


def test_lab_serves_py_notebooks_as_notebooks_with_our_kernel(lab: Lab) -> None:
    settings = lab.request("/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    assert settings["schema"]["properties"]["defaultViewers"]["default"]["python"] == "Jupytext Notebook"
    model = lab.request(f"/api/contents/{START_FOLDER}/01_construction_audit.py?type=notebook&content=1")
    assert model["type"] == "notebook" and model["content"]["metadata"]["kernelspec"]["name"] == "memsafe"
    assert "memsafe" in lab.request("/api/kernelspecs")["kernelspecs"]


def test_saving_every_notebook_from_the_lab_keeps_the_committed_bytes(lab: Lab,
                                                                      notebook_bytes: dict[Path, bytes]) -> None:
    """What JupyterLab's save does (read the notebook model, write it back) leaves each file
    byte for byte as it was: no jupytext version header, no reformatting."""
    for name in available():
        path = f"/api/contents/{START_FOLDER}/{name}.py"
        model = lab.request(f"{path}?type=notebook&content=1")
        lab.request(path, {"type": "notebook", "format": "json", "content": model["content"]})
        source = config.notebooks_dir() / f"{name}.py"
        assert source.read_bytes() == notebook_bytes[source], f"saving {name} changed the file"


def test_text_notebooks_carry_the_kernels_language_info(lab: Lab) -> None:
    """Without it JupyterLab sets it when the kernel starts and marks the notebook modified
    (the browser test below sees that; this one runs wherever the server does)."""
    expected = kernel_language_info()
    assert expected["name"] == "python" and expected["version"] == platform.python_version()
    for name in available():
        model = lab.request(f"/api/contents/{START_FOLDER}/{name}.py?type=notebook&content=1")
        assert model["content"]["metadata"].get("language_info") == expected, name


def test_the_executed_copies_open_beside_the_sources(lab: Lab) -> None:
    model = lab.request(f"/api/contents/{EXECUTED}?type=notebook&content=1")
    assert model["type"] == "notebook" and model["content"]["cells"]
    assert any(c.get("outputs") for c in model["content"]["cells"] if c["cell_type"] == "code")
    with urllib.request.urlopen(lab.url(f"/?token={TOKEN}"), timeout=30) as response:  # follows the redirect
        assert response.url.split("?")[0].endswith(f"/lab/tree/{START_FOLDER}")


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="headless Chromium not installed (make test installs it as root)")
def test_in_a_browser_every_notebook_opens_unmodified_and_saving_keeps_the_file(
        lab: Lab, notebook_bytes: dict[Path, bytes], tmp_path: Path) -> None:
    """A user's round trip in headless Chromium: each notebook of notebooks/ opens without the
    unsaved mark once its kernel is up (the mark is on the document's tab in the main area, not
    on the sidebar's current tab), Ctrl+S leaves the file as committed, and an executed copy
    opens with its outputs."""
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright not installed (make test installs it)")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        for name in available():
            source = config.notebooks_dir() / f"{name}.py"
            page.goto(lab.url(f"/lab/tree/{START_FOLDER}/{source.name}?reset&token={TOKEN}"))  # this tab only
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
            page.wait_for_timeout(1_500)  # the kernel's info has reached the model by now
            tab = page.locator("#jp-main-dock-panel .lm-TabBar-tab", has_text=source.name).first
            assert "jp-mod-dirty" not in (tab.get_attribute("class") or ""), f"{name} opens as modified"
        saved_before = source.stat().st_mtime_ns
        page.locator(".jp-Notebook").first.click()
        page.keyboard.press("Control+s")
        deadline = time.monotonic() + 30
        while source.stat().st_mtime_ns == saved_before and time.monotonic() < deadline:
            page.wait_for_timeout(250)
        assert source.stat().st_mtime_ns != saved_before, "Ctrl+S did not save"
        assert source.read_bytes() == notebook_bytes[source], "saving from the browser changed the file"
        page.goto(lab.url(f"/lab/tree/{EXECUTED}?token={TOKEN}"))
        page.wait_for_selector(".jp-Notebook .jp-OutputArea-output", timeout=90_000)
        page.screenshot(path=str(tmp_path / "executed.png"))
        browser.close()
