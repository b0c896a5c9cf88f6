"""Executed notebooks keep results, not logs or the paths of the machine that ran them."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import nbformat
import pytest

from memsafe_lib import config
from memsafe_lib.ledger import read_ledger, record_run
from memsafe_lib.notebook_outputs import RUN_NOTE_TAG, clean_committed, clean_executed, log_path

ROOT = Path(__file__).resolve().parent.parent
MACHINE_PATH = re.compile(r"(?<![\w.~<>$/-])/(?:home|root|tmp|work|Users|private|var|mnt|opt|srv|scratch)/[\w.-]+")
"""An absolute path of some machine (the test's own: not the library's placeholders)."""


def _executed(path: Path, scale: str = "cpu") -> Path:
    """A small executed notebook as papermill leaves it: injected parameters, a cell whose stderr
    holds step lines and a warning, outputs that name this machine's folders."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["papermill"] = {"parameters": {"scale": scale}}
    params = nbformat.v4.new_code_cell('scale = "smoke"')
    params.metadata["tags"] = ["parameters"]
    injected = nbformat.v4.new_code_cell(f'scale = "{scale}"')
    injected.metadata["tags"] = ["injected-parameters"]
    work = nbformat.v4.new_code_cell("run()")
    work.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text=f"[memsafe 10:00:00 +1.0 s] reading {config.data_dir()}/musique\n"),
        nbformat.v4.new_output("stream", name="stdout", text=f"wrote {config.REPO_ROOT}/artifacts/cpu/x.csv\n"),
        nbformat.v4.new_output("stream", name="stderr", text=f"{config.REPO_ROOT}/.venv/lib/torch.py:1: FutureWarning\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": f"PosixPath('{Path.home()}/models')"},
                               execution_count=3),
    ]
    nb.cells = [nbformat.v4.new_markdown_cell("# title"), params, injected, work]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def test_stderr_moves_to_the_log_and_machine_paths_become_placeholders(tmp_path: Path) -> None:
    notebook = _executed(tmp_path / "02_training.ipynb")
    assert clean_executed(notebook)
    nb = nbformat.read(notebook, as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert [o.get("name") for o in outputs if o.output_type == "stream"] == ["stdout"]
    assert outputs[0].text == "wrote <repo>/artifacts/cpu/x.csv\n"
    assert outputs[1].data["text/plain"] == "PosixPath('~/models')"
    log = log_path(notebook).read_text()
    assert log_path(notebook).name == "02_training.log"
    assert "[memsafe 10:00:00 +1.0 s] reading $MEMSAFE_DATA_DIR/musique" in log and "<repo>/.venv/lib" in log
    assert str(config.REPO_ROOT) not in log + notebook.read_text()
    # the note sits right under papermill's injected cell and names the scale and the log
    note = nb.cells[3]
    assert RUN_NOTE_TAG in note.metadata["tags"] and "scale `cpu`" in note.source and "02_training.log" in note.source
    assert "injected-parameters" in nb.cells[2].metadata["tags"]
    before = notebook.read_bytes(), log_path(notebook).read_bytes()
    assert not clean_executed(notebook)  # clean already: nothing changes, the log stays
    assert (notebook.read_bytes(), log_path(notebook).read_bytes()) == before
    log_path(notebook).unlink()  # a note that names a log no longer there is brought up to date
    assert clean_executed(notebook)
    assert "It wrote nothing to stderr." in nbformat.read(notebook, as_version=4).cells[3].source


def test_committed_notebooks_are_cleaned_under_their_writers_fingerprint(tmp_path: Path) -> None:
    """Notebooks executed before the cleaner: cleaned in place, each with a ledger entry that
    keeps its writer's code fingerprint, names the cleaning code and the hash it replaced."""
    scale = config.scale_config("cpu")
    notebook = _executed(scale.run_dir / "02_training" / "02_training.ipynb")
    writer = record_run("notebook-run:02_training", scale, outputs=[notebook])
    (rel, before), = writer["outputs"].items()  # cpu/02_training/... (scratch/cpu/... unrecorded)
    assert clean_committed(scale) == [notebook]
    entry = read_ledger(scale)[-1]
    assert entry["kind"] == "notebook-clean:02_training"
    assert entry["fingerprint"] == writer["fingerprint"] and entry["settings"]["cleaned_with"]
    assert entry["inputs"] == {rel: before} and rel.endswith("02_training/02_training.ipynb")
    assert set(entry["outputs"]) == {rel, rel.replace(".ipynb", ".log")}
    assert clean_committed(scale) == []  # clean: no second entry
    notebook.write_text(notebook.read_text() + " ")
    with pytest.raises(ValueError, match="not the notebook its ledger entry wrote"):
        clean_committed(scale)


def _committed_notebooks() -> list[Path]:
    return sorted(p for p in (ROOT / "artifacts").glob("*/*/*.ipynb") if "scratch" not in p.parts)


@pytest.mark.parametrize("notebook", _committed_notebooks(), ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_executed_notebooks_hold_no_log_and_no_machine_path(notebook: Path) -> None:
    """Every executed notebook under artifacts/ (the committed cpu run, and a smoke run a test
    session left): no stderr output, no absolute path of the machine that ran it."""
    assert_clean(notebook)


def assert_clean(notebook: Path) -> None:
    """No stderr output and no machine path in ``notebook``, nor in the log beside it."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    for index, cell in enumerate(cells):
        for output in cell.get("outputs", []):
            assert not (output.get("output_type") == "stream" and output.get("name") == "stderr"), \
                f"{notebook.name} cell {index}: stderr output (belongs in {log_path(notebook).name})"
            text = json.dumps(output)
            found = MACHINE_PATH.findall(text) + [p for p in (str(config.REPO_ROOT), tempfile.gettempdir())
                                                  if len(p) > 1 and p in text]
            assert not found, f"{notebook.name} cell {index}: machine paths {found[:3]}"
    log = log_path(notebook)
    if log.is_file():
        assert not MACHINE_PATH.findall(log.read_text(encoding="utf-8")), f"{log.name}: machine paths"
