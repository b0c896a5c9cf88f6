"""Every numbered notebook executes at smoke scale with papermill.

The executed notebooks land in ``artifacts/smoke/<name>/`` (not committed), where the second
step of ``make test`` checks them with ``pytest --nbval-lax``.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from memsafe_lib import config
from memsafe_lib.config import SCALES
from memsafe_lib.ledger import read_ledger
from memsafe_lib.notebook_outputs import RUN_NOTE_TAG, log_path
from memsafe_lib.notebooks import available, run_notebook
from tests.test_notebook_outputs import assert_clean


def test_every_notebook_has_a_literal_parameters_cell() -> None:
    import ast

    import jupytext

    assert available(), "no notebooks found"
    for name in available():
        nb = jupytext.read(config.notebooks_dir() / f"{name}.py")
        cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(cells) == 1, name
        for node in ast.parse(cells[0].source).body:
            assert isinstance(node, ast.Assign), f"{name}: parameters cell holds only assignments"
            ast.literal_eval(node.value)  # literal values only (papermill overrides them)
        assert any("NBVAL_CHECK_OUTPUT" in c.source for c in nb.cells), f"{name}: no checked summary cell"


def _widget(model_name: str, **state: object) -> dict:
    return {"model_name": model_name, "model_module": "@jupyter-widgets/controls", "state": state}


def test_progress_widgets_become_one_text_line_and_other_widgets_keep_state(tmp_path: Path) -> None:
    from memsafe_lib.notebooks import _flatten_progress_widgets

    state = {
        "box": _widget("HBoxModel", children=["IPY_MODEL_d", "IPY_MODEL_p", "IPY_MODEL_t"], layout="IPY_MODEL_l"),
        "d": _widget("HTMLModel", value="fine-tune: 100%"), "p": _widget("FloatProgressModel", value=250, max=250),
        "t": _widget("HTMLModel", value="\u2007250/250\u2007[02:27&lt;00:00]"), "l": _widget("LayoutModel"),
        "slider": _widget("IntSliderModel", value=3),
    }
    nb = nbformat.v4.new_notebook()
    view = "application/vnd.jupyter.widget-view+json"
    nb.cells = [nbformat.v4.new_code_cell("x", outputs=[
        nbformat.v4.new_output("display_data", data={view: {"model_id": "box"}, "text/plain": "0%"}),
        nbformat.v4.new_output("display_data", data={view: {"model_id": "slider"}, "text/plain": "IntSlider"})])]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": state}}
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    _flatten_progress_widgets(path)
    out = nbformat.read(path, as_version=4)
    first, second = out.cells[0].outputs
    assert first.output_type == "stream" and first.text == "fine-tune: 100%  250/250 [02:27<00:00]\n"  # figure spaces made plain
    assert second.data[view]["model_id"] == "slider"
    assert set(out.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]) == {"slider"}


QA = ("musique", "hotpotqa", "2wikimultihopqa")
BLIND = ("blind_bow", "blind_unit", "blind_set", "question_only")


def _test_auroc_from_predictions(folder: Path, model: str) -> float:
    """Seed mean of the test unsafe AUROC recomputed by scikit-learn from a run's predictions."""
    predictions = pd.read_csv(folder / "predictions.csv.gz")
    test = predictions[(predictions.model == model) & (predictions.split == "test")]
    return float(np.mean([roc_auc_score(g.unsafe, g.unsafe_prob) for _, g in test.groupby("seed")]))


def _check_01(out: Path) -> None:
    """Proposition 1 holds, deletion leaks paragraph count, blind matching (and blind-hard) leaves
    every question-blind control exactly 1/2 (Proposition 1 over memories); the shallow
    question-aware controls are reported apart from them."""
    summary = json.loads((out / "summary.json").read_text())
    for ds in QA:
        assert summary["within_prop1_bound"][ds]
        assert summary["paragraph_count_auroc"][f"{ds}/deletion"] > 0.9
        for construction in ("blind-matched", "blind-hard"):
            assert summary["blind_matched_memory_bound"][f"{ds}/{construction}"] == 0
            for model in BLIND:
                assert summary["blind_controls_test_auroc"][f"{ds}/{construction}/{model}"] == 0.5
        for model in ("qu_tfidf", "title_named", "retrieval_sim"):  # read the question: not held to 1/2
            assert f"{ds}/blind-hard/{model}" in summary["shallow_controls_test_auroc"]
            assert f"{ds}/blind-hard/{model}" not in summary["blind_controls_test_auroc"]


def _check_02(out: Path) -> None:
    """Table main's MemSafe AUROC recomputed from the written predictions; the blind controls at
    exactly 1/2 on blind-matched; Stage A encodes each unique pair once."""
    main = pd.read_csv(out / "main_table.csv").set_index("model")
    expected = {"memsafe", "mean_pool", "relevance_agg", "concat_ce", "joint_8k", "tfidf", "sc_tfidf", "lexset",
                "lexset_no_title", "lexset_logistic", "retrieval_sim", "text_length", "paragraph_count",
                "provenance_only", "majority", *BLIND}
    assert expected <= set(main.index)
    for ds in QA:
        folder = out.parent / config.EVALUATE / ds / "size-matched"
        assert main.loc["memsafe", f"{ds}_auroc"] == pytest.approx(_test_auroc_from_predictions(folder, "memsafe"),
                                                                   abs=1e-9)
        assert main.loc["memsafe", f"{ds}_paper_auroc"] > 0.9  # the paper's value beside ours
    for table in ("blind_matched_table.csv", "blind_hard_table.csv"):
        blind = pd.read_csv(out / table).set_index("model")
        for ds in QA:
            assert (blind.loc[list(BLIND), f"{ds}_auroc"] == 0.5).all(), table
    hard = pd.read_csv(out / "blind_hard_table.csv").set_index("model")
    assert {"qu_tfidf", "title_named", "retrieval_sim", "memsafe", "lexset"} <= set(hard.index)
    per_state = pd.read_csv(out / "per_state.csv")
    memsafe = per_state[per_state.model == "memsafe"]
    assert {(d, c) for d, c in zip(memsafe.dataset, memsafe.construction, strict=True)} == {
        (d, c) for d in QA for c in ("size-matched", "blind-matched", "blind-hard")}
    judge = pd.read_csv(out / "llm_judge.csv")
    assert {"llm_judge", "memsafe"} <= set(judge.model) and set(judge.dataset) == set(QA)
    stage_a = pd.read_csv(out / "stage_a.csv")
    assert (stage_a.pairs_unique <= stage_a.pairs_requested).all() and (stage_a.dedupe_ratio > 1).all()


def _check_03(out: Path) -> None:
    """Table ablation's full-model row recomputed from notebook 03's own predictions."""
    ablation = pd.read_csv(out / "ablation.csv").set_index("model")
    recomputed = _test_auroc_from_predictions(out / "musique" / "size-matched", "memsafe")
    assert ablation.loc["memsafe", "unsafe_auroc"] == pytest.approx(recomputed, abs=1e-9)


def _check_04(out: Path) -> None:
    """On SQuAD 2.0 every memory is one paragraph, so the paragraph count scores exactly 1/2."""
    squad = pd.read_csv(out / "squad.csv").set_index("model")
    assert squad.loc["paragraph_count", "unsafe_auroc"] == 0.5


def _check_05(out: Path) -> None:
    """MemSafe's error rate in the taxonomy recomputed from notebook 02's predictions."""
    taxonomy = pd.read_csv(out / "taxonomy.csv")
    for ds in QA:
        predictions = pd.read_csv(out.parent / config.EVALUATE / ds / "size-matched" / "predictions.csv.gz")
        test = predictions[(predictions.model == "memsafe") & (predictions.split == "test")]
        rate = float(np.mean([(g.state != g.pred_state).mean() for _, g in test.groupby("seed")]))
        row = taxonomy[(taxonomy.dataset == ds) & (taxonomy.model == "memsafe") & (taxonomy.quantity == "error_rate")]
        assert float(row.value.iloc[0]) == pytest.approx(rate, abs=1e-9)


def _check_06(out: Path) -> None:
    """Answering everything errs as often as the reader's written answers are wrong."""
    answers = pd.read_csv(out / "reader_answers.csv.gz")
    reader = pd.read_csv(out / "reader.csv").set_index("gate")
    errors = reader.loc["answer_all", [c for c in reader.columns if c.startswith("error_at_") and not c.endswith("_sd")]]
    np.testing.assert_allclose(errors.astype(float), answers.wrong.mean(), rtol=0, atol=1e-9)


def _check_07(out: Path) -> None:
    """Every surface and blind control reads the memory alone or the question alone: on the
    blind-matched clinical memories exactly 1/2 on test."""
    controls = pd.read_csv(out / "clinical_controls.csv")
    controls = controls[controls.role == "control"]
    assert {*BLIND, "text_length"} <= set(controls.model)
    assert (controls.test_auroc == 0.5).all(), controls[["setting", "model", "test_auroc"]]


SMOKE_CHECKS = {"01_construction_audit": _check_01, "02_training": _check_02, "03_ablations": _check_03,
                "04_transfer": _check_04, "05_selective": _check_05, "06_reader_gating": _check_06,
                "07_clinical": _check_07}
"""Per notebook, an assertion against an independent value (scikit-learn on the written
predictions, Proposition 1, a closed form), run on the outputs the same test just produced."""


SMOKE_APART: tuple[str, ...] = ("01_construction_audit", "07_clinical")
"""Smoke notebooks that read nothing another notebook writes (the rest read notebook 02's fits):
``tests/test_notebooks_apart.py`` runs them, so that under ``--dist loadfile`` they run on the
other worker beside the chain 02-06, which runs here in order."""


@pytest.mark.parametrize("name", [n for n in available() if n not in SMOKE_APART])
def test_notebook_runs_at_smoke_scale(real_data: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    check_smoke_run(name, monkeypatch)


def check_smoke_run(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``name`` at smoke into ``artifacts/smoke/`` (what nbval then checks) and test what it wrote."""
    monkeypatch.setenv("MEMSAFE_ARTIFACTS_DIR", str(config.REPO_ROOT / "artifacts"))
    monkeypatch.setenv(config.RECORD_ENV, "1")  # a reproduce run of smoke: artifacts/smoke/, checked by nbval
    executed = run_notebook(name, SCALES["smoke"])
    assert executed == config.REPO_ROOT / "artifacts" / "smoke" / name / f"{name}.ipynb"
    nb = nbformat.read(executed, as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    produced = {p.suffix for p in executed.parent.iterdir()}
    assert {".csv", ".png", ".json"} <= produced
    # this notebook's own last two entries (another notebook may be writing beside it), in order
    ledger = read_ledger(SCALES["smoke"])
    kinds = [e["kind"] for e in ledger]
    at = [len(kinds) - 1 - kinds[::-1].index(kind) for kind in (f"notebook:{name}", f"notebook-run:{name}")]
    assert at[0] < at[1]
    entry, timing = ledger[at[0]], ledger[at[1]]
    assert all(Path(config.artifacts_dir(), k).exists() for k in [*entry["outputs"], *timing["outputs"]])
    SMOKE_CHECKS[name](executed.parent)
    assert_clean(executed)  # stderr went to the log beside it, named under the injected scale
    note = [c.source for c in nbformat.read(executed, as_version=4).cells if RUN_NOTE_TAG in c.metadata.get("tags", [])]
    assert len(note) == 1 and (log_path(executed).name in note[0]) == log_path(executed).is_file()
    times = pd.read_csv(config.REPO_ROOT / "artifacts" / "smoke" / "run_times.csv").set_index("notebook")
    assert times.loc[name, "minutes"] == pytest.approx(timing["metrics"]["seconds"] / 60, abs=0.01)


@pytest.mark.paper_dry
def test_every_notebook_runs_at_the_paper_settings_dry_run(real_data: Path) -> None:
    """`--scale paper-dry`: five Stage B seeds, three encoder seeds, the full Stage B grid, the
    judge, reader and clinical paths of a GPU user's paper run, on 24 questions per dataset
    (into a temporary artifacts tree: nothing here is a result)."""
    scale = SCALES["paper-dry"]
    for name in available():
        executed = run_notebook(name, scale)
        nb = nbformat.read(executed, as_version=4)
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
                  if o.output_type == "error"]
        assert not errors, name
    main = pd.read_csv(scale.run_dir / config.NB02_TRAINING / "main_table.csv")
    memsafe = main.set_index("model").loc["memsafe"]
    assert all(memsafe[f"{ds}_seeds"] == 5 for ds in ("musique", "hotpotqa", "2wikimultihopqa"))
    grid = pd.read_csv(scale.run_dir / config.NB02_TRAINING / "stage_b_grid.csv")
    assert len(grid) == 8  # the full grid was searched
    # the paper's rows that only its scale runs: the 8k joint encoder (three seeds, MuSiQue and
    # HotpotQA, by the stand-in) and the second reader (by the packaged 1.5B)
    joint = main.set_index("model").loc["joint_8k"]
    assert joint["musique_seeds"] == joint["hotpotqa_seeds"] == 3 and pd.isna(joint["2wikimultihopqa_seeds"])
    second = pd.read_csv(scale.run_dir / config.NB06_READER / "reader_second.csv").set_index("gate")
    assert {"answer_all", "memsafe", "confidence"} <= set(second.index)
    assert second.loc["memsafe", "paper_error_at_0.1"] == 0.8296


def test_a_scale_can_narrow_a_notebook_through_its_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_notebook injects the scale's notebook_parameters (then explicit ones) after `scale`."""
    import shutil
    from dataclasses import replace

    import papermill

    seen: dict[str, object] = {}

    def fake_execute(source: str, output: str, parameters: dict[str, object], **kwargs: object) -> None:
        seen.update(parameters)
        shutil.copyfile(source, output)

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    scale = replace(SCALES["smoke"], notebook_parameters={"05_selective": {"models": ["memsafe"], "alpha": 0.1}})
    run_notebook("05_selective", scale, parameters={"alpha": 0.2})
    assert seen == {"scale": "smoke", "models": ["memsafe"], "alpha": 0.2}


def test_notebook_all_skips_what_this_checkout_already_ran_unchanged(monkeypatch: pytest.MonkeyPatch,
                                                                     isolated_artifacts: Path, qa_fixtures: Path
                                                                     ) -> None:
    """A reproduction killed after notebook 1 resumes at notebook 2; any change reruns."""
    import shutil
    from argparse import Namespace

    import papermill

    from memsafe_lib import cli, notebooks

    ran: list[str] = []

    def fake_execute(source: str, output: str, parameters: dict[str, object], **kwargs: object) -> None:
        ran.append(Path(source).stem)
        shutil.copyfile(source, output)

    monkeypatch.setattr(papermill, "execute_notebook", fake_execute)
    monkeypatch.setattr(notebooks, "available", lambda: ["04_transfer", "05_selective"])
    monkeypatch.setattr(cli, "available", lambda: ["04_transfer", "05_selective"])
    monkeypatch.setenv(config.RECORD_ENV, "1")
    scale = SCALES["smoke"]
    run_notebook("04_transfer", scale)  # then the process is killed
    assert notebooks.up_to_date("04_transfer", scale) and not notebooks.up_to_date("05_selective", scale)
    assert not notebooks.up_to_date("04_transfer", scale, parameters={"seeds": [17]})  # other parameters

    args = Namespace(name="all", scale="smoke", kernel="python3", force=False)
    cli.cmd_notebook(args)
    assert ran == ["04_transfer", "05_selective"]  # the first one was not run again
    cli.cmd_notebook(args)
    assert ran == ["04_transfer", "05_selective"]  # nothing left to do
    executed = scale.output_dir("05_selective") / "05_selective.ipynb"
    executed.write_text(executed.read_text() + " ")  # an edited executed notebook is not up to date
    cli.cmd_notebook(args)
    assert ran[-1] == "05_selective" and len(ran) == 3
    cli.cmd_notebook(Namespace(**{**vars(args), "force": True}))
    assert ran[-2:] == ["04_transfer", "05_selective"]
