"""One table of H1-H5 and the smoke gates, each row taken from the notebook that tests it.

The run dir is built by hand the way notebooks 02 and 03 (``summarize``), 04 (``h3.json``)
and 07 (``h5.json``) leave it, with metrics chosen so the verdicts are known in advance:
H4 fails in notebook 03 (2WikiMultiHopQA does better without the bridge) and H5 passes in
notebook 07 (MemSafe above LexSet on the clinical data)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from memsafe_lib import config
from memsafe_lib.config import SCALES
from memsafe_lib.evaluation import hypotheses as H
from memsafe_lib.evaluation import summary as S
from memsafe_lib.io import write_json
from memsafe_lib.ledger import read_ledger

SMOKE = SCALES["smoke"]
QA = ("musique", "hotpotqa", "2wikimultihopqa")


def _metrics(folder: str, dataset: str, rows: dict[tuple[str, str], float]) -> None:
    """metrics.csv of one evaluation folder, the same value for seeds 17 and 29."""
    out = SMOKE.output_dir(folder, dataset, "size-matched")
    frame = pd.DataFrame([{"dataset": dataset, "construction": "size-matched", "model": m, "seed": s, "split": split,
                           "unsafe_auroc": v, "macro_f1": v - 0.2, "deterministic": False}
                          for (m, split), v in rows.items() for s in (17, 29)])
    frame.to_csv(out / "metrics.csv", index=False)
    (out / "predictions.csv.gz").write_bytes(b"")  # summarize ledgers it; the bootstrap is stubbed


@pytest.fixture
def run_dir(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Notebook 02's evaluate runs, notebook 03's no-bridge ablation, both summarized, and
    notebook 07's h5.json as it writes it; no family B (H3 untested, as at cpu scale)."""
    monkeypatch.setattr(S, "data_invariants_hold", lambda datasets, scale: True)
    monkeypatch.setattr(S, "bootstrap_intervals",
                        lambda d, comparisons, n, random_state=0: pd.DataFrame(columns=list(S.INTERVAL_COLUMNS)))
    for d in QA:
        _metrics(config.EVALUATE, d, {("memsafe", "test"): 0.80, ("mean_pool", "test"): 0.75,
                                      ("lexset", "test"): 0.60, ("tfidf", "test"): 0.62,
                                      ("text_length", "test"): 0.52, ("paragraph_count", "test"): 0.50,
                                      ("memsafe", "validation"): 0.80, ("lexset", "validation"): 0.60})
    _metrics(config.NB03_ABLATIONS, "musique", {("memsafe_no_bridge", "test"): 0.70})  # 0.80 > 0.70: holds
    _metrics(config.NB03_ABLATIONS, "2wikimultihopqa", {("memsafe_no_bridge", "test"): 0.85})  # 0.80 < 0.85: fails
    S.summarize(SMOKE, n_resamples=10)  # notebook 02
    S.summarize(SMOKE, n_resamples=10, sources=(config.EVALUATE, config.NB03_ABLATIONS),
                folder=config.NB03_ABLATIONS, comparisons=S.ABLATION_COMPARISONS)  # notebook 03
    write_json(SMOKE.output_dir(config.NB07_CLINICAL) / "h5.json",  # notebook 07, verbatim
               {"id": "H5", "status": "pass", "statement": H.STATEMENTS["H5"],
                "evidence": "mimic-omr test unsafe_auroc: memsafe 0.9000 - lexset 0.8000 = +0.1000 (ok > 0)"})
    H.write_hypotheses_table(SMOKE)  # whichever notebook contributes last
    return SMOKE.run_dir


def test_the_one_table_takes_each_status_from_the_notebook_that_tests_it(run_dir: Path) -> None:
    table = pd.read_csv(run_dir / config.HYPOTHESES_FILE).set_index("id")
    assert table.loc["H4", "status"] == "fail"
    assert table.loc["H4", "notebook"] == config.NB03_ABLATIONS
    assert table.loc["H4", "source"] == f"{config.NB03_ABLATIONS}/h4.json"
    assert "memsafe_no_bridge 0.8500" in table.loc["H4", "evidence"]
    assert (table.loc["H5", "status"], table.loc["H5", "notebook"]) == ("pass", config.NB07_CLINICAL)
    assert table.loc["H5", "source"] == f"{config.NB07_CLINICAL}/h5.json"
    # H1: no bootstrap interval here, so untested; H2 holds (0.80 > 0.60, 0.62 on both metrics)
    assert table.loc["H2", "status"] == "pass" and table.loc["H2", "notebook"] == config.NB02_TRAINING
    assert table.loc["H3", "status"] == "untested" and table.loc["H3", "notebook"] == config.NB04_TRANSFER
    assert f"{config.NB04_TRANSFER}/h3.json" in table.loc["H3", "evidence"]  # says what is missing
    assert list(table.index) == ["H1", "H2", "H3", "H4", "H5", "H6", "H7", "G2", "G3", "G4", "G5"]
    assert table.loc["G3", "status"] == "pass" and table.loc["G5", "status"] == "pass"  # 0.50 <= 0.60; +0.20


def test_no_second_table_disagrees(run_dir: Path) -> None:
    """Every other file under the run dir that states a verdict (a CSV with id and status
    columns, a JSON with id and status keys) agrees with the one table."""
    table = pd.read_csv(run_dir / config.HYPOTHESES_FILE).set_index("id")["status"].to_dict()
    seen = 0
    for path in sorted(run_dir.rglob("*")):
        if path.name == config.HYPOTHESES_FILE and path.parent == run_dir:
            continue
        if path.suffix == ".csv":
            frame = pd.read_csv(path)
            rows = dict(zip(frame["id"], frame["status"], strict=True)) if {"id", "status"} <= set(frame) else {}
        elif path.suffix == ".json":
            data = json.loads(path.read_text())
            rows = {data["id"]: data["status"]} if isinstance(data, dict) and {"id", "status"} <= set(data) else {}
        else:
            continue
        for check_id, status in rows.items():
            seen += 1
            assert table.get(check_id) == status, f"{path.relative_to(run_dir)} says {check_id} {status}"
    assert seen == len(table) - 1  # one verdict file per row, H3's aside (notebook 04 did not run)


def test_the_table_is_ledgered_with_its_inputs(run_dir: Path) -> None:
    entry = read_ledger(SMOKE)[-1]
    assert entry["kind"] == "hypotheses"
    assert [Path(p).name for p in entry["outputs"]] == [config.HYPOTHESES_FILE]
    assert any(p.endswith(f"smoke/{config.NB07_CLINICAL}/h5.json") for p in entry["inputs"])
    assert entry["metrics"]["hypotheses"]["H4"] == "fail" and entry["metrics"]["hypotheses"]["H5"] == "pass"


def test_a_missing_verdict_is_untested_and_names_the_file(tmp_path: Path) -> None:
    write_json(tmp_path / config.NB03_ABLATIONS / "h4.json", {"id": "H4", "status": "fail", "evidence": "e"})
    table = H.hypotheses_table(tmp_path).set_index("id")
    assert table.loc["H4", "status"] == "fail" and table.loc["H4", "statement"] == H.STATEMENTS["H4"]
    assert table.loc["H1", "status"] == "untested"
    assert table.loc["H1", "evidence"] == f"no {config.EVALUATE}/h1.json (notebook {config.NB02_TRAINING} not run)"
    assert "G1" not in table.index  # dropped, see hypotheses.smoke_gates


def test_a_verdict_file_for_another_check_is_refused(tmp_path: Path) -> None:
    write_json(tmp_path / config.NB03_ABLATIONS / "h4.json", {"id": "H5", "status": "pass", "evidence": "e"})
    with pytest.raises(ValueError, match="h4.json"):
        H.hypotheses_table(tmp_path)


def test_retired_tables_become_verdict_files_of_their_own_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree from before the one table: evaluate/ says H1 pass and H4 untested (not its check),
    03_ablations/ says H4 fail; 07 already wrote h5.json. After the migration the table takes
    H1 from evaluate, H4 from 03, keeps 07's H5, and the retired tables are gone."""
    run = SMOKE.run_dir
    rows = {"H1": "pass", "H2": "fail", "H3": "untested", "H4": "untested", "H5": "untested"}
    SMOKE.output_dir(config.EVALUATE)
    pd.DataFrame([{"id": i, "statement": H.STATEMENTS[i], "status": s, "evidence": f"e{i}"} for i, s in rows.items()]
                 ).to_csv(run / config.EVALUATE / "hypotheses.csv", index=False)
    pd.DataFrame([{"id": "G2", "statement": "", "status": "pass", "evidence": "invariants"}]
                 ).to_csv(run / config.EVALUATE / "smoke_gates.csv", index=False)
    SMOKE.output_dir(config.NB03_ABLATIONS)
    pd.DataFrame([{"id": "H4", "statement": H.STATEMENTS["H4"], "status": "fail", "evidence": "no bridge wins"},
                  {"id": "H1", "statement": H.STATEMENTS["H1"], "status": "fail", "evidence": "other runs"}]
                 ).to_csv(run / config.NB03_ABLATIONS / "hypotheses.csv", index=False)
    write_json(SMOKE.output_dir(config.NB07_CLINICAL) / "h5.json",
               {"id": "H5", "status": "pass", "statement": H.STATEMENTS["H5"], "evidence": "clinical"})
    written = H.migrate_retired_tables(SMOKE)
    assert {p.name for p in written} == {"h1.json", "h2.json", "g2.json", "h4.json"}
    assert not any((run / rel).exists() for rel in H.RETIRED_TABLES)
    table = pd.read_csv(H.write_hypotheses_table(SMOKE), keep_default_na=False).set_index("id")
    assert table.loc["H1", "status"] == "pass" and table.loc["H1", "source"] == "evaluate/h1.json"
    assert table.loc["H4", "status"] == "fail" and table.loc["H4", "source"] == "03_ablations/h4.json"
    assert table.loc["H5", "status"] == "pass" and table.loc["G2", "status"] == "pass"
    assert "from evaluate/hypotheses.csv" in table.loc["H1", "evidence"]
    assert H.disagreements(run) == []
    assert H.migrate_retired_tables(SMOKE) == []  # nothing left to migrate
