"""The ledger fingerprints what a step read: raw files, or the artifacts of earlier runs."""

from __future__ import annotations

import hashlib
from pathlib import Path

from memsafe_lib.config import SCALES
from memsafe_lib.data.records import RawFile
from memsafe_lib.ledger import data_fingerprint, read_ledger, record_run


def test_inputs_are_hashed_and_enter_the_data_fingerprint(isolated_artifacts: Path) -> None:
    metrics = isolated_artifacts / "cpu" / "evaluate" / "metrics.csv"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("model,auroc\na,0.7\n")
    first = record_run("summarize", SCALES["cpu"], inputs=[metrics])
    assert first["inputs"] == {"cpu/evaluate/metrics.csv": hashlib.sha256(b"model,auroc\na,0.7\n").hexdigest()}
    assert first["fingerprint"]["data"] != data_fingerprint([])  # not the fingerprint of nothing

    metrics.write_text("model,auroc\na,0.8\n")
    second = record_run("summarize", SCALES["cpu"], inputs=[metrics])
    assert second["fingerprint"]["data"] != first["fingerprint"]["data"]
    assert [e["kind"] for e in read_ledger(SCALES["cpu"])] == ["summarize", "summarize"]


def test_without_inputs_the_data_fingerprint_is_the_raw_files_alone() -> None:
    raw = [RawFile("musique/dev.jsonl", "ab" * 32, 10)]
    entry = record_run("evaluate:musique", SCALES["cpu"], raw_files=raw)
    assert entry["fingerprint"]["data"] == data_fingerprint(raw)
    assert "inputs" not in entry


def test_entries_record_the_numeric_packages_and_cpu() -> None:
    import importlib.metadata

    from memsafe_lib.ledger import environment

    env = environment()
    assert env["packages"]["numpy"] == importlib.metadata.version("numpy")
    assert env["packages"]["scikit-learn"] == importlib.metadata.version("scikit-learn")
    assert env["python"] and env["platform"] and "cpu" in env


def test_entries_record_the_thread_counts_in_effect() -> None:
    import torch

    from memsafe_lib import config
    from memsafe_lib.ledger import environment

    threads = environment()["threads"]
    assert threads == {"fit": config.fit_threads(), "torch": torch.get_num_threads()}


def _append_many(args: tuple[str, int, int]) -> None:
    from memsafe_lib.ledger import append_entry

    path, writer, n = args
    for i in range(n):
        append_entry(Path(path), {"writer": writer, "i": i})


def test_concurrent_writers_lose_no_entry(tmp_path: Path) -> None:
    """Two notebooks running at once once raced (read, add, replace): with the lock every
    entry of both processes is in the file, each line whole."""
    import json
    import multiprocessing

    path = tmp_path / "ledger.jsonl"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        pool.map(_append_many, [(str(path), w, 40) for w in (0, 1)])
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted((e["writer"], e["i"]) for e in entries) == [(w, i) for w in (0, 1) for i in range(40)]


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / "memsafe_lib" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_module_fingerprint_follows_imports_and_nothing_else(tmp_path: Path, monkeypatch) -> None:
    from memsafe_lib import config
    from memsafe_lib.ledger import module_files, module_fingerprint

    _package(tmp_path, {"__init__.py": "", "a.py": "from memsafe_lib.sub.b import thing\n",
                        "sub/__init__.py": "", "sub/b.py": "import memsafe_lib.c\nthing = 1\n",
                        "c.py": "import numpy\n", "unrelated.py": "x = 1\n"})
    monkeypatch.setattr(config, "REPO_ROOT", tmp_path)
    names = [p.relative_to(tmp_path / "memsafe_lib").as_posix() for p in module_files("memsafe_lib.a")]
    assert names == ["__init__.py", "a.py", "c.py", "sub/__init__.py", "sub/b.py"]
    before = module_fingerprint("memsafe_lib.a")
    (tmp_path / "memsafe_lib" / "unrelated.py").write_text("x = 2\n")
    assert module_fingerprint("memsafe_lib.a") == before  # not imported: not in the key
    (tmp_path / "memsafe_lib" / "c.py").write_text("import numpy  # edited\n")
    assert module_fingerprint("memsafe_lib.a") != before  # imported two steps away: in the key


def test_stage_b_code_excludes_notebooks_reports_and_readers() -> None:
    from memsafe_lib import config
    from memsafe_lib.estimators.neural_context import STAGE_B_CODE
    from memsafe_lib.ledger import module_files

    files = {p.relative_to(config.REPO_ROOT).as_posix() for p in module_files(STAGE_B_CODE)}
    assert {"memsafe_lib/estimators/setmodel.py", "memsafe_lib/estimators/selection.py",
            "memsafe_lib/measures/metrics.py"} <= files
    assert not {f for f in files if f.startswith(("memsafe_lib/reporting", "memsafe_lib/evaluation", "notebooks"))}
    assert "memsafe_lib/estimators/reader.py" not in files


def _count_up(path: str, times: int) -> None:
    from memsafe_lib.io import file_lock

    for _ in range(times):
        with file_lock(Path(path)):
            value = int(Path(path).read_text()) if Path(path).exists() else 0
            Path(path).write_text(str(value + 1))


def test_file_lock_lets_processes_change_one_file_in_turn(tmp_path: Path) -> None:
    """Two notebooks finishing at once (make test runs 01 and 07 beside 02-06) each read, change
    and replace run_times.csv and the hypotheses table: under the lock no change is lost."""
    import multiprocessing

    path = tmp_path / "counter.txt"
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_count_up, args=(str(path), 200)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert [w.exitcode for w in workers] == [0, 0]
    assert int(path.read_text()) == 400
