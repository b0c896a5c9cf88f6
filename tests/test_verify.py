"""memsafe verify: a clean tree passes; each kind of tampering fails naming the file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from memsafe_lib import config
from memsafe_lib.cli import main
from memsafe_lib.config import SCALES
from memsafe_lib.evaluation import hypotheses as H
from memsafe_lib.evaluation.runs import write_predictions
from memsafe_lib.io import sha256_bytes, write_csv, write_json
from memsafe_lib.ledger import read_ledger, record_run
from memsafe_lib.retire import retire, stale_results
from memsafe_lib.verify import recompute_metrics, verify

SMOKE = SCALES["smoke"]


@pytest.fixture
def tree(isolated_artifacts: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(config.RECORD_ENV, "1")
    out = SMOKE.output_dir(config.NB05_SELECTIVE)
    pd.DataFrame({"model": ["memsafe"], "aurc": [0.31]}).to_csv(out / "selective.csv", index=False)
    record_run("notebook:05_selective", SMOKE, outputs=[out / "selective.csv"])
    return out


def check(**kwargs: object) -> list[str]:
    return verify(SMOKE, main_datasets=[], notebooks=[], documents=[], **kwargs).problems  # type: ignore[arg-type]


def test_a_clean_tree_passes(tree: Path) -> None:
    assert check() == []


def test_an_edited_artifact_fails_naming_it(tree: Path) -> None:
    (tree / "selective.csv").write_text("model,aurc\nmemsafe,0.10\n")
    (problem,) = check()
    assert "selective.csv" in problem and "sha256 differs" in problem


def test_a_missing_artifact_and_an_orphan_fail(tree: Path) -> None:
    (tree / "selective.csv").unlink()
    (tree / "extra.csv").write_text("a\n1\n")
    problems = check()
    assert any("selective.csv" in p and "missing" in p for p in problems)
    assert any("extra.csv" in p and "no ledger entry" in p for p in problems)


def test_checkpoints_jupyterlab_writes_beside_an_opened_executed_copy_are_not_results(tree: Path) -> None:
    """Opening an executed notebook in `make lab` leaves a git-ignored .ipynb_checkpoints/ copy."""
    checkpoints = tree / ".ipynb_checkpoints"
    checkpoints.mkdir()
    (checkpoints / "05_selective-checkpoint.ipynb").write_text("{}")
    (checkpoints / "selective-checkpoint.csv").write_text("a\n1\n")
    assert check() == []


def test_an_entry_without_fingerprints_fails(tree: Path) -> None:
    ledger = SMOKE.ledger_path
    ledger.write_text(ledger.read_text() + json.dumps({"kind": "hand-made", "outputs": {}}) + "\n")
    assert any("hand-made" in p and "fingerprint" in p for p in check())


def test_a_missing_run_or_notebook_fails(tree: Path) -> None:
    problems = verify(SMOKE, main_datasets=["musique"], notebooks=["03_ablations"], documents=[]).problems
    assert any("03_ablations" in p for p in problems)
    assert any("promised runs" in p and "musique/memsafe/seed 17" in p for p in problems)


def test_a_stale_report_block_fails(tree: Path, tmp_path: Path) -> None:
    doc = tmp_path / "REPORT.md"
    block = "<!-- memsafe:table smoke/05_selective/selective.csv -->\n{}<!-- /memsafe:table -->\n"
    doc.write_text(block.format("| model | aurc |\n|---|---|\n| memsafe | 0.3100 |\n"))
    assert verify(SMOKE, main_datasets=[], notebooks=[], documents=[doc]).problems == []
    doc.write_text(block.format("| model | aurc |\n|---|---|\n| memsafe | 0.2000 |\n"))
    (problem,) = verify(SMOKE, main_datasets=[], notebooks=[], documents=[doc]).problems
    assert str(doc) in problem and "memsafe report --record" in problem


def test_an_absent_gate_checkpoint_is_noted_but_an_edited_one_fails(tree: Path) -> None:
    gate_dir = SMOKE.output_dir(config.GATES, "musique-seed17")
    (gate_dir / "config.json").write_text("{}")
    record_run("train:musique", SMOKE, outputs=[gate_dir / "config.json"])
    assert check() == []
    (gate_dir / "config.json").write_text('{"edited": true}')
    (problem,) = check()
    assert "config.json" in problem and "sha256 differs" in problem
    (gate_dir / "config.json").unlink()  # a clean clone: gates/ is git-ignored
    result = verify(SMOKE, main_datasets=[], notebooks=[], documents=[])
    assert result.problems == [] and any("not committed" in n for n in result.notes)


def _verdict(folder: str, check_id: str, status: str) -> Path:
    return write_json(SMOKE.output_dir(folder) / f"{check_id.lower()}.json",
                      {"id": check_id, "status": status, "statement": H.STATEMENTS[check_id], "evidence": "e"})


def test_the_one_hypotheses_table_passes_when_it_agrees_with_its_sources(tree: Path) -> None:
    h4 = _verdict(config.NB03_ABLATIONS, "H4", "fail")
    record_run("summarize:03_ablations", SMOKE, outputs=[h4])
    H.write_hypotheses_table(SMOKE)
    assert check() == []


def test_a_hypotheses_table_that_contradicts_its_source_fails(tree: Path) -> None:
    h4 = _verdict(config.NB03_ABLATIONS, "H4", "fail")
    table = SMOKE.run_dir / config.HYPOTHESES_FILE
    pd.DataFrame([{"id": "H4", "statement": "s", "status": "pass", "evidence": "e",
                   "notebook": config.NB03_ABLATIONS, "source": f"{config.NB03_ABLATIONS}/h4.json"}]).to_csv(
        table, index=False)
    record_run("hypotheses", SMOKE, outputs=[h4, table])
    (problem,) = check()
    assert config.HYPOTHESES_FILE in problem and "H4 pass" in problem and "h4.json says fail" in problem


def test_a_second_hypotheses_table_that_disagrees_fails_and_may_be_removed(tree: Path) -> None:
    """The per-folder tables notebooks 02 and 03 wrote before the one table (H4 untested in
    evaluate/, H5 untested beside notebook 07's pass): tolerated until the one table exists,
    then a disagreement fails, and deleting them is what fixes it."""
    legacy = SMOKE.output_dir(config.EVALUATE) / "hypotheses.csv"
    pd.DataFrame([{"id": "H4", "statement": "s", "status": "untested", "evidence": "e"}]).to_csv(legacy, index=False)
    record_run("summarize", SMOKE, outputs=[legacy])
    assert check() == []  # the old layout, as committed today
    record_run("summarize:03_ablations", SMOKE, outputs=[_verdict(config.NB03_ABLATIONS, "H4", "fail")])
    H.write_hypotheses_table(SMOKE)
    (problem,) = check()
    assert "evaluate/hypotheses.csv" in problem and "H4 untested" in problem
    legacy.unlink()  # retired: its ledger entry no longer requires it
    assert check() == []


def _record_with_code(kind: str, path: Path, code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ledger entry as a run of another code version would have written it."""
    with monkeypatch.context() as m:
        m.setattr("memsafe_lib.ledger.code_fingerprint", lambda: code)
        path.write_text("a\n1\n")
        record_run(kind, SMOKE, outputs=[path])


def test_committed_results_from_two_code_versions_fail_naming_both(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = SMOKE.output_dir(config.NB07_CLINICAL) / "clinical.csv"
    _record_with_code("notebook:07_clinical", other, "f" * 64, monkeypatch)
    (problem,) = check()
    assert "code versions" in problem and "ffffffff" in problem and "07_clinical" in problem
    assert "05_selective" in problem  # the other version, named by what it wrote


def test_benchmarks_and_overwritten_results_do_not_count_as_another_code_version(
        tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _record_with_code("bench", SMOKE.output_dir("bench") / "timing.csv", "e" * 64, monkeypatch)
    stale = SMOKE.output_dir(config.NB07_CLINICAL) / "clinical.csv"
    _record_with_code("notebook:07_clinical", stale, "d" * 64, monkeypatch)
    stale.write_text("a\n1\n")
    record_run("notebook:07_clinical", SMOKE, outputs=[stale])  # rerun on this code: the latest writer counts
    result = verify(SMOKE, main_datasets=[], notebooks=[], documents=[])
    assert result.problems == []
    assert any("one code version" in n and "this checkout's code" in n for n in result.notes)


def test_a_run_from_other_code_than_the_checkout_is_noted(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("memsafe_lib.verify.code_fingerprint", lambda: "c" * 64)
    result = verify(SMOKE, main_datasets=[], notebooks=[], documents=[])
    assert result.problems == []
    assert any("differs from this checkout's code" in n for n in result.notes)


# ---------------------------------------------------------------- retiring results no notebook writes

def _old_curve_and_a_rerun(monkeypatch: pytest.MonkeyPatch) -> Path:
    """An old run wrote a curve table and a notebook's executed copy; the rerun on this code
    rewrote the executed copy only (its notebook no longer draws the curve)."""
    folder = SMOKE.output_dir(config.NB03_ABLATIONS)
    curve = folder / "learning_curve.csv"
    _record_with_code("notebook:03_ablations", curve, "d" * 64, monkeypatch)
    executed = folder / "03_ablations.ipynb"
    executed.write_text("{}")
    record_run("notebook-run:03_ablations", SMOKE, outputs=[executed])
    return curve


def test_a_result_the_rerun_did_not_write_is_listed_as_stale_and_fails_one_version(
        tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    curve = _old_curve_and_a_rerun(monkeypatch)
    assert stale_results("smoke", read_ledger(SMOKE)) == [f"smoke/{config.NB03_ABLATIONS}/{curve.name}"]
    (problem,) = check()
    assert "2 code versions" in problem and "memsafe retire" in problem


def test_a_retired_result_passes_when_absent_and_fails_when_present(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    curve = _old_curve_and_a_rerun(monkeypatch)
    rel = f"smoke/{config.NB03_ABLATIONS}/{curve.name}"
    entry = retire(SMOKE, [rel], "no learning curve at this scale")
    assert not curve.exists() and curve.parent.is_dir()  # the folder still holds the executed copy
    assert entry["retired"] == {rel: sha256_bytes(b"a\n1\n")} and entry["outputs"] == {}
    result = verify(SMOKE, main_datasets=[], notebooks=[], documents=[])
    assert result.problems == [] and any("1 earlier results retired" in n for n in result.notes)
    curve.write_text("a\n1\n")  # brought back by hand: the ledger says it is gone
    (problem,) = check()
    assert str(curve) in problem and "retired" in problem and "no learning curve" in problem


def test_retire_refuses_before_writing_anything(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    curve = _old_curve_and_a_rerun(monkeypatch)
    rel = f"smoke/{config.NB03_ABLATIONS}/{curve.name}"
    before = SMOKE.ledger_path.read_text()
    edited = f"smoke/{config.NB05_SELECTIVE}/selective.csv"
    (tree / "selective.csv").write_text("model,aurc\nmemsafe,0.10\n")
    for paths, reason, message in [([rel], " ", "reason"), ([], "x", "at least one"),
                                   ([rel, "smoke/05_selective/nothing.csv"], "x", "not an output"),
                                   ([rel, "cpu/05_selective/selective.csv"], "x", "not an output"),
                                   ([rel, edited], "x", "differs from what its ledger entry recorded")]:
        with pytest.raises(ValueError, match=message):
            retire(SMOKE, paths, reason)
    assert SMOKE.ledger_path.read_text() == before and curve.exists()
    retire(SMOKE, [rel], "gone")
    with pytest.raises(ValueError, match="already retired"):
        retire(SMOKE, [rel], "again")


def test_retire_on_the_command_line(tree: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    curve = _old_curve_and_a_rerun(monkeypatch)
    rel = f"smoke/{config.NB03_ABLATIONS}/{curve.name}"
    assert main(["retire", "--scale", "smoke", "--record", "--stale"]) == 0
    assert capsys.readouterr().out.split() == [rel]
    assert main(["retire", "--scale", "smoke", "--record", "--reason", "no curve", rel]) == 0
    assert not curve.exists() and check() == []
    assert main(["retire", "--scale", "smoke", "--record", "--reason", "again", rel]) == 2


def test_a_result_deleted_by_hand_is_retired_with_its_recorded_hash(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    curve = _old_curve_and_a_rerun(monkeypatch)
    rel = f"smoke/{config.NB03_ABLATIONS}/{curve.name}"
    curve.unlink()
    assert any("missing" in p for p in check())
    entry = retire(SMOKE, [rel], "removed with the clone's results")
    assert entry["retired"] == {rel: sha256_bytes(b"a\n1\n")}
    assert check() == []


def _run_folder(out: Path, scores: list[float], auroc: float | None = None) -> Path:
    """A results folder as `memsafe evaluate` writes it: metrics from the scores, and the scores."""
    unsafe = [i % 2 == 0 for i in range(len(scores))]
    states = ["missing" if u else "complete" for u in unsafe]
    pred = pd.DataFrame({"model": "lexset", "seed": 17, "split": "test", "variant_id": [f"v{i}" for i in range(len(scores))],
                         "state": states, "unsafe": unsafe, "unsafe_prob": scores, "pred_state": states})
    metrics = pd.DataFrame([{"model": "lexset", "seed": 17, "split": "test", "macro_f1": 1.0,
                             "unsafe_auroc": roc_auc_score(unsafe, scores) if auroc is None else auroc}])
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / "metrics.csv", metrics)
    write_predictions(out / "predictions.csv.gz", pred)
    record_run("evaluate:lexset", SMOKE, outputs=[out / "metrics.csv", out / "predictions.csv.gz"])
    return out


# scores near 1 that ten significant digits would tie (as LexSet's clinical scores did)
NEAR_ONE = [1 - k * 1e-12 * (1 + (k % 3)) for k in range(40)]


def test_stored_predictions_reproduce_their_metrics_exactly(tree: Path) -> None:
    out = _run_folder(SMOKE.output_dir(config.EVALUATE, "lexset-fixture"), NEAR_ONE)
    (worst, _), exact = recompute_metrics(out)
    assert exact and worst <= 1e-12
    assert check() == []


def test_metrics_that_the_predictions_do_not_give_fail_naming_the_file(tree: Path) -> None:
    unsafe = [i % 2 == 0 for i in range(len(NEAR_ONE))]
    _run_folder(SMOKE.output_dir(config.EVALUATE, "lexset-fixture"), NEAR_ONE,
                auroc=roc_auc_score(unsafe, NEAR_ONE) + 1e-6)
    (problem,) = check()
    assert "predictions.csv.gz" in problem and "unsafe_auroc of lexset seed 17 test" in problem
