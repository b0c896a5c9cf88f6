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
