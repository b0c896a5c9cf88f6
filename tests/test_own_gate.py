"""Your own data end to end: records -> `memsafe train --records` (a calibrated gate with its
card) -> `memsafe construct` -> `memsafe evaluate --gate` (scores, metrics, figures), and every
bad input stopping with file, line and field before anything is written."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from memsafe_lib.cli import main
from memsafe_lib.gate import Gate, memory_variant, read_labelled
from memsafe_lib.measures.calibration import scale_binary
from memsafe_lib.measures.metrics import expected_calibration_error, macro_f1

from .test_own_records import _record, _write


@dataclass
class OwnGate:
    records: Path
    gate: Path
    variants: Path
    printed: str


@pytest.fixture(scope="module")
def own_gate(tmp_path_factory: pytest.TempPathFactory) -> OwnGate:
    root = tmp_path_factory.mktemp("own")
    records = _write(root / "team.jsonl", [_record(i, ("train", "train", "train", "train", "validation",
                                                        "test")[i % 6]) for i in range(72)])
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as env, redirect_stdout(printed):
        env.setenv("MEMSAFE_ARTIFACTS_DIR", str(root / "artifacts"))
        assert main(["train", "--records", str(records), "--scale", "smoke", "--out", str(root / "gate")]) == 0
        assert main(["construct", "--records", str(records), "--out", str(root / "v.jsonl")]) == 0
    return OwnGate(records, root / "gate", root / "v.jsonl", printed.getvalue())


def test_a_records_gate_is_calibrated_on_validation_and_carries_its_card(own_gate: OwnGate) -> None:
    cfg = json.loads((own_gate.gate / "config.json").read_text())
    assert cfg["training"]["source"] == "records" and cfg["dataset"] == "records-team"
    assert cfg["split_sizes"]["train"]["questions"] == 48 and cfg["split_sizes"]["test"]["questions"] == 12
    cal = cfg["calibration"]
    for form in ("with_provenance", "without_provenance"):
        t = cal["temperature"][form]["unsafe"]
        raw = cal["score" if form == "with_provenance" else "score_without_provenance"]
        # the recorded ECEs are those of the stored validation scores, before and after T
        assert cal["ece"][form]["ece_before"] == pytest.approx(expected_calibration_error(cal["unsafe"], raw))
        assert cal["ece"][form]["ece_after"] == pytest.approx(
            expected_calibration_error(cal["unsafe"], scale_binary(raw, t)))
        assert cal["ece"][form]["ece_after"] <= cal["ece"][form]["ece_before"]
    assert "validation ECE with provenance" in own_gate.printed
    card = (own_gate.gate / "card.md").read_text()
    for needed in ("## Trained on", "## Calibration", "## Threshold", "## Test", "## Never seen", "32-token window"):
        assert needed in card
    assert f"{cfg['metrics']['test']['unsafe_auroc']:.3f}" in card


def test_gate_scores_are_its_raw_scores_through_the_temperature_of_their_form(own_gate: OwnGate) -> None:
    gate = Gate.load(own_gate.gate)
    plain = memory_variant("Where was the founder of company 3 born?", ["Company 3 was founded by person 3.",
                                                                        "Unrelated fact 1 about place 3."])
    located = memory_variant(plain.question, [u.text for u in plain.units], [5, 9], 20)
    for v, form in ((plain, "without_provenance"), (located, "with_provenance")):
        raw = gate.score_variants([v], calibrate=False)[0]
        cal = gate.score_variants([v])[0]
        t_unsafe, t_state = (gate.config["calibration"]["temperature"][form][k] for k in ("unsafe", "state"))
        assert cal.unsafe_prob == pytest.approx(float(scale_binary([raw.unsafe_prob], t_unsafe)[0]))
        assert sum(cal.state_probs.values()) == pytest.approx(1.0)
        assert cal.unit_evidence == raw.unit_evidence  # only the memory-level probabilities are calibrated


def test_evaluate_writes_scores_metrics_and_figures_that_agree_with_scikit_learn(own_gate: OwnGate,
                                                                                tmp_path: Path) -> None:
    out = tmp_path / "eval"
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["evaluate", "--gate", str(own_gate.gate), "--input", str(own_gate.variants), "--split", "test",
                     "--out", str(out), "--resamples", "200"]) == 0
    assert {p.name for p in out.iterdir()} == {"scores.jsonl", "metrics.json", "reliability.png", "risk_coverage.png"}
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    metrics = json.loads((out / "metrics.json").read_text())
    y = np.array([r["unsafe"] for r in rows])
    p = np.array([r["unsafe_prob"] for r in rows])
    assert len(rows) == metrics["n_memories"] == 36 and metrics["n_questions"] == 12
    assert metrics["unsafe_auroc"] == pytest.approx(roc_auc_score(y, p))
    assert metrics["unsafe_auroc_ci"]["lo"] <= metrics["unsafe_auroc"] <= metrics["unsafe_auroc_ci"]["hi"]
    assert metrics["macro_f1"] == pytest.approx(macro_f1([r["state"] for r in rows], [r["predicted_state"]
                                                                                      for r in rows]))
    assert metrics["ece"] == pytest.approx(expected_calibration_error(y, p))
    t = metrics["threshold"]
    assert t == 0.5 and metrics["coverage"] == pytest.approx(np.mean(p <= t))
    assert metrics["false_abstention_rate"] == pytest.approx(np.mean(p[~y] > t))
    # the held-out test memories as they are: what the gate's own recorded test AUROC measured
    recorded = json.loads((own_gate.gate / "config.json").read_text())["metrics"]["test"]["unsafe_auroc"]
    assert metrics["unsafe_auroc"] == pytest.approx(recorded, abs=1e-6)
    assert "unsafe AUROC" in printed.getvalue() and "false abstention rate" in printed.getvalue()


def test_evaluate_with_a_risk_budget_uses_the_learn_then_test_threshold(own_gate: OwnGate, tmp_path: Path) -> None:
    with redirect_stdout(io.StringIO()):
        assert main(["evaluate", "--gate", str(own_gate.gate), "--input", str(own_gate.variants), "--split", "test",
                     "--no-provenance", "--risk", "0.3", "--out", str(tmp_path / "e"), "--resamples", "50"]) == 0
    metrics = json.loads((tmp_path / "e" / "metrics.json").read_text())
    control = Gate.load(own_gate.gate).risk_control(0.3, 0.1, with_provenance=False)
    assert metrics["threshold"] == control.threshold and "Learn-then-Test" in metrics["threshold_rule"]


@pytest.mark.parametrize(("line", "field", "says"), [
    ('{"id": "a", "query": "q", "units": ["x"]}', "unsafe", "no label"),
    ('{"id": "a", "query": "q", "units": ["x"], "state": "complete", "unsafe": true}', "unsafe", "contradicts"),
    ('{"id": "m0", "query": "q", "units": ["x"], "unsafe": false}', "id", "already used"),
    ('{"id": "a", "query": "", "units": ["x"], "unsafe": false}', "query", "empty"),
    ('{"id": "a", "query": "q", "units": [], "unsafe": false}', "units", "non-empty"),
    ('{"id": "a", "query": "q", "units": [3], "unsafe": false}', "units", "string"),
    ("[1, 2]", None, "JSON object"),
    ("{not json", None, "not valid JSON"),
])
def test_a_bad_evaluate_input_names_file_line_and_field_and_writes_nothing(
        own_gate: OwnGate, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, field: str | None,
        says: str) -> None:
    good = json.dumps({"id": "m0", "query": "Where?", "units": ["a unit"], "unsafe": False})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good + "\n" + line + "\n")
    out = tmp_path / "e"
    assert main(["evaluate", "--gate", str(own_gate.gate), "--input", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl" in err and "line 2" in err and says in err and (field is None or field in err)
    assert not out.exists()


def test_read_labelled_takes_a_split_and_refuses_one_the_file_lacks(own_gate: OwnGate, tmp_path: Path) -> None:
    test = read_labelled(own_gate.variants, split="test")
    assert {v.state for v in test.variants} == {"complete", "missing", "relation_lost"} and test.has_states
    assert len(set(test.groups)) == 12
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"id": "a", "query": "q", "units": ["x"], "unsafe": True}) + "\n")
    assert not read_labelled(plain).has_states
    with pytest.raises(ValueError, match="no line has a 'split'"):
        read_labelled(plain, split="test")


def test_train_needs_validation_questions_in_the_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = _write(tmp_path / "only_train.jsonl", [_record(i, "train") for i in range(6)])
    assert main(["train", "--records", str(records), "--scale", "smoke", "--out", str(tmp_path / "g")]) == 2
    assert "no validation question" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()


def test_card_is_rewritten_from_config_alone(own_gate: OwnGate, tmp_path: Path) -> None:
    copy = tmp_path / "g"
    copy.mkdir()
    (copy / "config.json").write_text((own_gate.gate / "config.json").read_text())
    with redirect_stdout(io.StringIO()):
        assert main(["card", "--gate", str(copy)]) == 0
    assert (copy / "card.md").read_text() == (own_gate.gate / "card.md").read_text()


def test_scoring_ranks_each_memory_once_and_keeps_no_embedding_between_calls(own_gate: OwnGate) -> None:
    """Both fold encoders read the same ranked pairs (the ranker ran once per fold before), and a
    stream of chunks holds no unit embedding from an earlier chunk (it grew with the input)."""
    gate = Gate.load(own_gate.gate)
    calls: list[int] = []
    top_units = gate.bi.top_units
    gate.bi.top_units = lambda queries, memories, progress=False: calls.append(len(queries)) or top_units(  # type: ignore[method-assign]
        queries, memories, progress)
    memories = [{"query": f"Where was the founder of company {i} born?",
                 "units": [f"Company {i} was founded by person {i}.", f"Unrelated fact {i}."]} for i in range(3)]
    gate.score_many(memories)
    assert calls == [3]
    assert gate.bi._cache == {}  # type: ignore[attr-defined]
