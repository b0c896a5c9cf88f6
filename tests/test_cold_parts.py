"""bench/cold/cold_parts.py carries a cold run's finished notebooks from one machine to the next:
checked on hand-made git repositories, the expected files written out by hand, and closed by
the same adoption the last part uses."""

from __future__ import annotations

import importlib
import json
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from memsafe_lib import config
from memsafe_lib.reporting.adopt import adopt

HEADER = "notebook,scale,minutes,code\n"


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                   capture_output=True)


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def cold_parts(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench" / "cold"))
    return importlib.import_module("cold_parts")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "main"
    _write(root, "artifacts/cpu/ledger.jsonl", '{"n": 1}\n')
    _write(root, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,60,old\n03_c,cpu,9,old\n")
    _write(root, "artifacts/cpu/02_b/table.csv", "y\n1\n")
    _write(root, "artifacts/cpu/02_b/stale.csv", "s\n1\n")
    _write(root, "artifacts/cpu/03_c/table.csv", "z\n1\n")
    _git("init", "-q", cwd=root)
    _git("add", ".", cwd=root)
    _git("commit", "-qm", "start", cwd=root)
    return root


def _clone(checkout: Path, name: str) -> Path:
    clone = checkout.parent / name
    _git("clone", "-q", str(checkout), str(clone), cwd=checkout.parent)
    return clone


def _save_02_b(cold_parts, checkout: Path, log_text: str) -> tuple[Path, Path]:
    """A first part: a clone whose notebook 02_b finished, saved with ``log_text`` and committed."""
    clone = _clone(checkout, "cold-1")
    _write(clone, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n03_c,cpu,9,old\n")
    log = checkout.parent / "cold-1.log"
    log.write_text(log_text)
    cold_parts.save(clone, checkout, "cpu", log)
    _git("add", ".", cwd=checkout)
    _git("commit", "-qm", "part 1", cwd=checkout)
    return clone, log


def test_a_part_saved_on_one_machine_joins_the_next_and_both_are_adopted(cold_parts, checkout: Path) -> None:
    # machine 1: notebook 02 on code "new" rewrites a table, adds a figure, removes a file
    first = _clone(checkout, "cold-1")
    _write(first, "artifacts/cpu/02_b/table.csv", "y\n2\n")
    _write(first, "artifacts/cpu/02_b/fig.png", "png")
    (first / "artifacts/cpu/02_b/stale.csv").unlink()
    _write(first, "artifacts/cpu/ledger.jsonl", '{"n": 1}\n{"n": "nb02"}\n')
    _write(first, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n03_c,cpu,9,old\n")
    _write(first, "artifacts/scratch/cpu_busy.txt", "t1 2\n")
    log_1 = checkout.parent / "cold-1.log"
    log_1.write_text("cold run of 02_b at cpu on abc\n02_b start\nend\n")
    manifest = cold_parts.save(first, checkout, "cpu", log_1)
    saved = checkout / "bench/cold/parts/cpu"
    assert manifest["changed"] == ["artifacts/cpu/02_b/fig.png", "artifacts/cpu/02_b/table.csv"]
    assert manifest["deleted"] == ["artifacts/cpu/02_b/stale.csv"]
    assert manifest["ledger_lines"] == ['{"n": "nb02"}']
    assert manifest["code"] == ["new"]
    assert (saved / "files/artifacts/cpu/02_b/table.csv").read_text() == "y\n2\n"
    assert (saved / "part-1.log").read_text() == log_1.read_text()
    assert (saved / "part-1.busy").read_text() == "t1 2\n"
    # the checkout's own tree is untouched: it still verifies as the run being replaced
    assert (checkout / "artifacts/cpu/02_b/table.csv").read_text() == "y\n1\n"
    _git("add", ".", cwd=checkout)
    _git("commit", "-qm", "part 1", cwd=checkout)

    # machine 2: a fresh clone; restore, then notebook 03 runs and the sampler appends
    second = _clone(checkout, "cold-2")
    with pytest.raises(ValueError, match="other code"):
        cold_parts.restore(second, second, "cpu", code="other")
    _, logs = cold_parts.restore(second, second, "cpu", code="new")
    assert (second / "artifacts/cpu/02_b/table.csv").read_text() == "y\n2\n"
    assert not (second / "artifacts/cpu/02_b/stale.csv").exists()
    assert (second / "artifacts/cpu/ledger.jsonl").read_text() == '{"n": 1}\n{"n": "nb02"}\n'
    times = pd.read_csv(second / "artifacts/cpu/run_times.csv").set_index("notebook")
    assert times.loc["02_b", "code"] == "new" and times.loc["03_c", "code"] == "old"
    assert logs == log_1.read_text()
    _write(second, "artifacts/cpu/03_c/table.csv", "z\n2\n")
    _write(second, "artifacts/cpu/ledger.jsonl", '{"n": 1}\n{"n": "nb02"}\n{"n": "nb03"}\n')
    _write(second, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n03_c,cpu,8,new\n")
    _write(second, "artifacts/scratch/cpu_busy.txt", "t1 2\nt2 1\n")
    log_2 = checkout.parent / "cold-2.log"
    log_2.write_text("cold run of 03_c at cpu on def\ninstall\n" + logs + "03_c start\nend\n")
    manifest = cold_parts.save(second, checkout, "cpu", log_2)
    assert [p["notebooks"] for p in manifest["logs"]] == [["02_b"], ["03_c"]]
    saved = checkout / "bench/cold/parts/cpu"
    assert (saved / "part-2.log").read_text() == "cold run of 03_c at cpu on def\ninstall\n03_c start\nend\n"
    assert (saved / "part-2.busy").read_text() == "t2 1\n"
    assert json.loads((saved / "manifest.json").read_text())["ledger_lines"] == ['{"n": "nb02"}', '{"n": "nb03"}']
    with pytest.raises(ValueError, match="no notebook finished since"):
        cold_parts.save(second, checkout, "cpu", log_2)

    # the last part's clone holds both notebooks: one adoption takes them
    done = adopt(second, checkout, "cpu", code="new")
    assert sorted(done.notebooks) == ["02_b", "03_c"]
    assert (checkout / "artifacts/cpu/02_b/table.csv").read_text() == "y\n2\n"
    assert (checkout / "artifacts/cpu/03_c/table.csv").read_text() == "z\n2\n"
    assert not (checkout / "artifacts/cpu/02_b/stale.csv").exists()
    assert (checkout / "artifacts/cpu/ledger.jsonl").read_text() == '{"n": 1}\n{"n": "nb02"}\n{"n": "nb03"}\n'


def test_a_clone_without_the_saved_parts_is_refused(cold_parts, checkout: Path) -> None:
    first = _clone(checkout, "cold-1")
    _write(first, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n03_c,cpu,9,old\n")
    log = checkout.parent / "cold.log"
    log.write_text("02_b start\n")
    cold_parts.save(first, checkout, "cpu", log)
    _git("add", ".", cwd=checkout)
    _git("commit", "-qm", "part 1", cwd=checkout)
    other = _clone(checkout, "cold-2")  # never restored: it would drop notebook 02's part
    _write(other, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,60,old\n03_c,cpu,8,new\n")
    with pytest.raises(ValueError, match="lacks the saved 02_b"):
        cold_parts.save(other, checkout, "cpu", log)


def test_a_notebook_still_running_in_the_clone_is_not_saved(cold_parts, checkout: Path) -> None:
    """Its partial tables and ledger lines would be carried as if finished: save refuses while
    the log's last notebook started and neither finished, paused nor ended."""
    first = _clone(checkout, "cold-1")
    _write(first, "artifacts/cpu/02_b/table.csv", "y\n2\n")
    _write(first, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n03_c,cpu,9,old\n")
    log = checkout.parent / "cold-1.log"
    log.write_text("cold run of 02_b 03_c at cpu on abc\n02_b start 2026-12-02T10:00:00Z\n"
                   "[memsafe] notebook 02_b at scale cpu: done in 50.0 min\n03_c start 2026-12-02T10:50:00Z\n")
    with pytest.raises(ValueError, match="03_c is still running"):
        cold_parts.save(first, checkout, "cpu", log)
    log.write_text(log.read_text().rsplit("03_c start", 1)[0] + "paused before 03_c 2026-12-02T10:50:00Z\n")
    assert cold_parts.save(first, checkout, "cpu", log)["logs"][-1]["notebooks"] == ["02_b"]


def test_a_saved_log_names_no_path_of_the_machine_it_ran_on(cold_parts, checkout: Path) -> None:
    """The log is committed: the clone, the folder beside it (data, caches) and temporary files
    are named by placeholders, as the repository names no machine's paths."""
    first = _clone(checkout, "cold-1")
    _write(first, "artifacts/cpu/02_b/table.csv", "y\n2\n")
    _write(first, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n03_c,cpu,9,old\n")
    log = checkout.parent / "cold-1.log"
    log.write_text(f"cold run of 02_b at cpu on abc, data {checkout.parent}/shared/data\n"
                   f"  {tempfile.gettempdir()}/pip-build-env-x/setuptools.py: warning\n"
                   f"executed 02_b at scale cpu: {first}/artifacts/cpu/02_b/02_b.ipynb\nend\n")
    cold_parts.save(first, checkout, "cpu", log)
    saved = (checkout / "bench/cold/parts/cpu/part-1.log").read_text()
    assert str(checkout.parent) not in saved and tempfile.gettempdir() + "/" not in saved
    assert "data <beside the clone>/shared/data" in saved
    assert "executed 02_b at scale cpu: <clone>/artifacts/cpu/02_b/02_b.ipynb" in saved


def test_a_restored_log_that_differs_from_the_saved_one_is_still_cut_out(cold_parts, checkout: Path) -> None:
    """A part saved again after a later clone restored it (paths made portable) no longer matches
    the text that clone's log holds: the block of the same length just before restore's summary
    line is cut instead, so the new part's log holds only its own lines."""
    old_text = (f"cold run of 02_b at cpu on abc, data {checkout.parent}/data\n02_b start 2026-12-02T10:00:00Z\n"
                "[memsafe] notebook 02_b at scale cpu: done in 50.0 min\nend\n")
    _save_02_b(cold_parts, checkout, old_text)
    second = _clone(checkout, "cold-2")
    cold_parts.restore(second, second, "cpu", code="new")
    _write(second, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n03_c,cpu,8,new\n")
    own = "03_c start 2026-12-02T11:00:00Z\n[memsafe] notebook 03_c at scale cpu: done in 8.0 min\nend\n"
    log_2 = checkout.parent / "cold-2.log"
    log_2.write_text("cold run of 03_c at cpu on def\ninstall\n" + old_text
                     + "cold_parts restore: 02_b (1 files, 0 ledger lines, 1 logs)\n" + own)
    cold_parts.save(second, checkout, "cpu", log_2)
    part_2 = (checkout / "bench/cold/parts/cpu/part-2.log").read_text()
    assert "02_b start" not in part_2 and part_2.endswith(own)
    assert "cold_parts restore: 02_b" in part_2


def test_the_checkout_is_the_scripts_repository_and_another_library_is_refused(cold_parts, tmp_path: Path) -> None:
    # Seen: `CLONE/.venv/bin/python bench/cold/cold_parts.py save CLONE` imported the clone's memsafe_lib,
    # took the clone for the checkout and said "nothing to save" about a finished notebook.
    main, clone = tmp_path / "main", tmp_path / "cold"
    script = main / "bench" / "cold" / "cold_parts.py"
    assert cold_parts.checkout_root(script, main) == main.resolve()
    with pytest.raises(ValueError) as refused:
        cold_parts.checkout_root(script, clone)
    assert str(main.resolve()) in str(refused.value) and str(clone.resolve()) in str(refused.value)
    assert "PYTHONPATH" in str(refused.value)


def test_a_second_save_from_the_same_clone_keeps_only_what_ran_since_the_first(cold_parts, checkout: Path) -> None:
    """Seen: a clone paused, saved, resumed (bench/cold/cold_resume.sh appends to the same log) and
    paused again; the first save's log sits in this log with restore's line inside it, so neither
    earlier cut applies. The part saved from this very log ends at its 'paused before' line: the
    new part is what follows it."""
    first = (f"cold run of 02_b 03_c at cpu on abc, data {checkout.parent}/data\n02_b start 2026-12-02T10:00:00Z\n"
             "[memsafe] notebook 02_b at scale cpu: done in 50.0 min\npaused before 03_c 2026-12-02T10:50:00Z\n")
    clone, log = _save_02_b(cold_parts, checkout, first)
    _write(clone, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n03_c,cpu,8,new\n")
    own = ("cold run resumed at cpu on abc: 03_c\n03_c start 2026-12-02T11:00:00Z\n"
           "[memsafe] notebook 03_c at scale cpu: done in 8.0 min\npaused before 04_d 2026-12-02T11:08:00Z\n")
    log.write_text(first + own)
    cold_parts.save(clone, checkout, "cpu", log)
    parts = checkout / "bench/cold/parts/cpu"
    assert (parts / "part-2.log").read_text() == own
    assert "02_b start" in (parts / "part-1.log").read_text()
    manifest = json.loads((parts / "manifest.json").read_text())
    assert [p["notebooks"] for p in manifest["logs"]] == [["02_b"], ["03_c"]]


FIT = "artifacts/cpu/evaluate/d/size-matched/.cache/concat_ce-17-abc.pkl"


def test_a_notebook_too_long_for_one_machine_carries_its_fits_but_not_its_partial_tables(cold_parts,
                                                                                         checkout: Path) -> None:
    """save-midway: machine 1 runs 02_b alone and is recycled midway; its cached fits and log so
    far go to the parts (its half-written table does not), machine 2 restores them, runs 02_b
    again (marked resumed, reusing the fits) and saves it whole, which drops the carried fits."""
    (checkout / ".gitignore").write_text((config.REPO_ROOT / ".gitignore").read_text())  # caches are ignored
    _git("add", ".", cwd=checkout)
    _git("commit", "-qm", "ignore", cwd=checkout)
    first = _clone(checkout, "cold-1")
    _write(first, "artifacts/cpu/02_b/table.csv", "half\n")  # a partial table of the running notebook
    _write(first, FIT, "fit")
    _write(first, "artifacts/cpu/evaluate/d/size-matched/metrics.csv", "partial\n")
    log_1 = checkout.parent / "cold-1.log"
    head = "cold run of 02_b at cpu on abc\n02_b start 2026-12-02T10:00:00Z\n"
    log_1.write_text(head + "[memsafe 10:40:00 +40.0 min] d: concat_ce seed 17: fit and predict: done in 40.0 min\n")
    with pytest.raises(ValueError, match="other code"):
        (checkout / "bench/cold/parts/cpu").mkdir(parents=True)
        (checkout / "bench/cold/parts/cpu/manifest.json").write_text(json.dumps(
            {"code": ["old"], "logs": [], "run_times": []}))
        cold_parts.save_midway(first, checkout, "cpu", log_1, code="new")
    (checkout / "bench/cold/parts/cpu/manifest.json").unlink()
    manifest = cold_parts.save_midway(first, checkout, "cpu", log_1, code="new")
    saved = checkout / "bench/cold/parts/cpu"
    assert manifest["fits"] == [FIT] and manifest["changed"] == [] and manifest["run_times"] == []
    assert manifest["logs"] == [{"log": "part-1.log", "samples": "part-1.busy", "notebooks": [], "midway": "02_b"}]
    assert (saved / "files" / FIT).read_text() == "fit"
    assert not (saved / "files/artifacts/cpu/02_b/table.csv").exists()
    with pytest.raises(ValueError, match="is still running"):
        cold_parts.save(first, checkout, "cpu", log_1)  # a plain save still refuses the running notebook
    _git("add", ".", cwd=checkout)
    _git("commit", "-qm", "02_b midway", cwd=checkout)

    second = _clone(checkout, "cold-2")
    manifest, logs = cold_parts.restore(second, second, "cpu", code="new")
    assert (second / FIT).read_text() == "fit" and logs == log_1.read_text()
    assert (second / "artifacts/cpu/02_b/table.csv").read_text() == "y\n1\n"
    _write(second, "artifacts/cpu/02_b/table.csv", "y\n2\n")
    _write(second, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,70,new\n03_c,cpu,9,old\n")
    own = ("cold_parts restore: (0 files, 0 ledger lines, 1 logs)\n02_b start 2026-12-03T09:00:00Z (resumed run on def)\n"
           "[memsafe] notebook 02_b at scale cpu: done in 70.0 min\nend\n")
    log_2 = checkout.parent / "cold-2.log"
    log_2.write_text("cold run of 02_b at cpu on def\n" + logs + own)
    manifest = cold_parts.save(second, checkout, "cpu", log_2)
    assert [p["notebooks"] for p in manifest["logs"]] == [[], ["02_b"]]
    assert "fits" not in manifest and not (saved / "files" / FIT).exists()
    assert (saved / "part-1.log").read_text() == log_1.read_text()
    assert (saved / "part-2.log").read_text() == "cold run of 02_b at cpu on def\n" + own


def test_save_midway_refuses_without_a_running_notebook_or_with_an_unsaved_finished_one(cold_parts,
                                                                                        checkout: Path) -> None:
    first = _clone(checkout, "cold-1")
    _write(first, FIT, "fit")
    log = checkout.parent / "cold-1.log"
    log.write_text("cold run of 02_b at cpu on abc\n02_b start 2026-12-02T10:00:00Z\n"
                   "[memsafe] notebook 02_b at scale cpu: done in 50.0 min\nend\n")
    with pytest.raises(ValueError, match="no notebook is running"):
        cold_parts.save_midway(first, checkout, "cpu", log, code="new")
    _write(first, "artifacts/cpu/run_times.csv", HEADER + "01_a,cpu,3,old\n02_b,cpu,50,new\n03_c,cpu,9,old\n")
    log.write_text(log.read_text().replace("end\n", "03_c start 2026-12-02T10:50:00Z\n"))
    with pytest.raises(ValueError, match="02_b finished there but is not saved"):
        cold_parts.save_midway(first, checkout, "cpu", log, code="new")
