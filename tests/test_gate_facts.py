"""bench/gate_facts.py reads a gate's test AUROC and ECE as an agent meets them: the block
without provenance, per dataset for a joint gate, the whole test block for a one-dataset gate."""

from __future__ import annotations

import importlib

import pytest

from memsafe_lib import config


@pytest.fixture
def gate_facts(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(config.REPO_ROOT / "bench"))
    return importlib.import_module("gate_facts")


def block(auroc: float, ece: float, calibrated: float) -> dict[str, float]:
    return {"unsafe_auroc": auroc, "ece": ece, "ece_calibrated": calibrated}


def test_a_joint_gate_reads_each_dataset_without_provenance(gate_facts) -> None:
    per = {d: {"test": block(0.9, 0.5, 0.5), "test_without_provenance": block(0.7 + i / 10, 0.1 * (i + 1), 0.01 * (i + 1))}
           for i, d in enumerate(("a", "b"))}
    gate = {"metrics": {"test": block(0.99, 0.9, 0.9), "test_without_provenance": block(0.98, 0.8, 0.8),
                        "per_dataset": per}}
    assert gate_facts.test_calibration(gate, ("a", "b")) == {
        "test_auroc_a": 0.7, "test_ece_raw_a": 0.1, "test_ece_calibrated_a": 0.01,
        "test_auroc_b": 0.8, "test_ece_raw_b": 0.2, "test_ece_calibrated_b": 0.02}


def test_a_one_dataset_gate_reads_its_own_test_block(gate_facts) -> None:
    gate = {"metrics": {"test": block(0.9, 0.3, 0.2), "test_without_provenance": block(0.61234, 0.123456, 0.045678)}}
    assert gate_facts.test_calibration(gate, ("musique",)) == {
        "test_auroc_musique": 0.6123, "test_ece_raw_musique": 0.1235, "test_ece_calibrated_musique": 0.0457}
