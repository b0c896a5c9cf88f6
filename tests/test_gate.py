"""Stage A end to end (resume from caches), the saved gate (round trip, Python API) and
`memsafe score` (output and bad input)."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from memsafe_lib import cli
from memsafe_lib import config as config_module
from memsafe_lib.cli import main
from memsafe_lib.encodings import stagea
from memsafe_lib.encodings.encoders import EncoderConfig, Pair
from memsafe_lib.encodings.finetune import FinetuneConfig
from memsafe_lib.errors import DataFormatError
from memsafe_lib.estimators.memsafe import MemSafe
from memsafe_lib.estimators.setmodel import SetModelConfig
from memsafe_lib.gate import Gate, abstain_reason, memory_variant, oversized, read_memories
from memsafe_lib.measures.risk_control import ltt_threshold
from memsafe_lib.variants import construction as C

from .test_finetune import query

CONFIG = stagea.StageAConfig(EncoderConfig(bf16=False, max_length=48, batch_size=16),
                             FinetuneConfig(max_pairs=16, batch_size=8, bf16=False))


@dataclass
class Trained:
    variants: list[C.Variant]
    result: stagea.StageAResult
    estimator: MemSafe
    gate_dir: Path
    cache_dir: Path


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Trained:
    variants = C.build_size_matched([query(i) for i in range(40)]).variants
    cache = tmp_path_factory.mktemp("stage_a")
    result = stagea.run_stage_a(variants, CONFIG, seed=17, cache_dir=cache, progress=False)
    train = [v for v in variants if v.split == "train"]
    val = [v for v in variants if v.split == "validation"]
    estimator = MemSafe(result.encodings, seed=17, base=SetModelConfig(width=32, heads=2, epochs=3)).fit(train, val)
    gate_dir = Gate.from_estimator(estimator, result.encoders, result.bi, {"dataset": "synthetic"}).save(
        tmp_path_factory.mktemp("gate") / "g")
    return Trained(variants, result, estimator, gate_dir, cache)


@dataclass
class JointGate:
    directory: Path
    printed: str
    """What ``memsafe train`` printed."""
    artifacts: Path
    """The artifacts root it trained under (its Stage A caches)."""
    scale: config_module.ScaleConfig
    """The scale it trained at: smoke on fewer questions (see :func:`joint_gate`)."""


@pytest.fixture(scope="module")
def joint_gate(tmp_path_factory: pytest.TempPathFactory) -> JointGate:
    """One smoke gate trained on MuSiQue and HotpotQA by the CLI, shared by the tests that need a
    gate trained on real data (training one is the slowest step of this module; the README's
    snippet test trains the one-dataset gate). Smoke on its first 30 questions per dataset
    instead of 60: Stage A's encoding is most of the cost and these tests check what the gate
    does, not how well (half the questions took the fixture from 180 to about 90 s)."""
    out = tmp_path_factory.mktemp("joint") / "g"
    artifacts = tmp_path_factory.mktemp("joint_artifacts")
    scale = replace(config_module.SCALES["smoke"], max_base_queries=30)
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as env, contextlib.redirect_stdout(printed):
        env.setenv("MEMSAFE_ARTIFACTS_DIR", str(artifacts))  # module scope: the autouse one is not set yet
        env.setitem(config_module.SCALES, "smoke", scale)
        assert main(["train", "--dataset", "musique,hotpotqa", "--scale", "smoke", "--out", str(out)]) == 0
    return JointGate(out, printed.getvalue(), artifacts, scale)


def test_stage_a_counts_pairs_and_encodes_each_once(trained: Trained) -> None:
    s = trained.result.stats
    assert s.encoded == s.unique < s.requested  # shared units were encoded once
    assert trained.result.train_pairs == (16, 16)
    assert set(trained.result.encodings) == {v.variant_id for v in trained.variants}


def test_stage_a_resumes_from_its_caches(trained: Trained, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("fine-tuning ran again although its encoder was saved")

    monkeypatch.setattr(stagea, "finetune", no_training)
    again = stagea.run_stage_a(trained.variants, CONFIG, seed=17, cache_dir=trained.cache_dir, progress=False)
    assert again.stats.encoded == 0 and again.stats.from_cache == again.stats.unique
    for vid, enc in trained.result.encodings.items():
        np.testing.assert_array_equal(again.encodings[vid].plain, enc.plain)


def test_saved_gate_scores_like_the_estimator(trained: Trained) -> None:
    test = [v for v in trained.variants if v.split != "train"]
    expected = trained.estimator.predict(test)
    gate = Gate.load(trained.gate_dir)
    got = gate.score_variants(test)
    np.testing.assert_allclose([g.unsafe_prob for g in got], expected.unsafe_prob, atol=1e-5)
    for g, units in zip(got, expected.unit_scores or [], strict=True):
        np.testing.assert_allclose(g.unit_evidence, units, atol=1e-5)
    assert json.loads((trained.gate_dir / "config.json").read_text())["dataset"] == "synthetic"


def test_gate_score_is_the_gates_own_scoring_of_the_same_memory(trained: Trained) -> None:
    """``Gate.score`` on a memory passed as plain units and positions equals ``score_variants``
    on the same variant, unit by unit; and the gate reads evidence: the complete test memories
    with their evidence units removed score less safe, on average, than as they are."""
    gate = Gate.load(trained.gate_dir)
    test = [v for v in trained.variants if v.split == "test"]
    own = gate.score_variants(test)
    for v, expected in zip(test, own, strict=True):
        got = gate.score(v.question, [{"title": u.title, "text": u.text} for u in v.units],
                         [u.source_position for u in v.units], v.source_units)
        assert got.unsafe_prob == pytest.approx(expected.unsafe_prob, abs=1e-6)
        np.testing.assert_allclose(got.unit_evidence, expected.unit_evidence, atol=1e-6)
    complete = [v for v in test if not v.unsafe]
    whole = [gate.score(v.question, [u.text for u in v.units]).unsafe_prob for v in complete]
    bare = [gate.score(v.question, [u.text for u in v.units if not u.is_evidence]).unsafe_prob for v in complete]
    assert np.mean(bare) > np.mean(whole) + 0.05


def test_gate_python_api(trained: Trained) -> None:
    gate = Gate.load(trained.gate_dir)
    out = gate.score("What do we know about the glacier ice melting?",
                     ["A page about glacier ice melting.", {"title": "Harbor", "text": "Ships carry cargo."}])
    assert 0.0 <= out.unsafe_prob <= 1.0 and len(out.unit_evidence) == 2
    assert sum(out.state_probs.values()) == pytest.approx(1.0, abs=1e-5)
    assert out.missing_count >= 0.0
    with pytest.raises(ValueError, match="at least one unit"):
        gate.score("q?", [])
    v = memory_variant("q?", ["a", "b"], source_positions=[3, 9], source_units=12)
    assert [u.source_position for u in v.units] == [3, 9] and v.source_units == 12


def test_a_loaded_gate_hashes_its_encoders_once_not_per_chunk(trained: Trained,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from memsafe_lib.encodings import encoders as E

    gate = Gate.load(trained.gate_dir)
    hashed: list[str] = []
    real = E.weights_fingerprint
    monkeypatch.setattr(E, "weights_fingerprint", lambda module, settings="": hashed.append(settings) or real(module, settings))
    memory = {"query": "What do we know about the glacier ice melting?", "units": ["A page about glacier ice."]}
    for _ in range(3):  # three chunks of `memsafe score`
        gate.score_many([memory])
    assert len(hashed) <= len(gate.encoders)  # at most once per encoder, whatever the number of chunks
    assert not any(p.requires_grad for encoder in gate.encoders for p in encoder.parameters())


def test_cli_score_writes_one_line_per_memory(trained: Trained, tmp_path: Path) -> None:
    src = tmp_path / "memories.jsonl"
    src.write_text(json.dumps({"id": "m1", "query": "What about the comet orbit?", "units": ["Comets orbit."]}) + "\n"
                   + json.dumps({"id": "m2", "query": "Orchids?", "units": [{"title": "Orchid", "text": "A flower."},
                                                                          "Lava flows."]}) + "\n")
    out = tmp_path / "scores.jsonl"
    assert main(["score", "--gate", str(trained.gate_dir), "--input", str(src), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["m1", "m2"] and [len(r["unit_evidence"]) for r in rows] == [1, 2]
    assert set(rows[0]) == {"id", "unsafe_prob", "state_probs", "unit_evidence", "missing_count", "truncated_units",
                            "max_length"}


def test_cli_score_streams_bounded_chunks_and_writes_lines_as_they_are_scored(
        trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Memory must not grow with the input: ``memsafe score`` reads and scores at most
    ``SCORE_CHUNK`` memories at a time and prints each chunk's lines before reading the next."""
    memories = [{"id": f"m{i}", "query": f"What about the comet {i}?", "units": ["Comets orbit.", f"Lava {i}."]}
                for i in range(5)]
    src = tmp_path / "memories.jsonl"
    src.write_text("".join(json.dumps(m) + "\n" for m in memories))
    monkeypatch.setattr(cli, "SCORE_CHUNK", 2)
    calls: list[tuple[int, int]] = []
    printed: list[str] = []
    score_many = Gate.score_many

    errors: list[str] = []

    def spy(self: Gate, chunk: list[dict], progress: bool = False) -> list:
        got = capsys.readouterr()
        printed.extend(got.out.splitlines())
        errors.append(got.err)
        calls.append((len(chunk), len(printed)))
        return score_many(self, chunk, progress)

    def control(self: Gate, risk: float, delta: float = 0.1, with_provenance: bool = False) -> object:
        calls.append(("risk", len(printed)))  # this fixture gate has no calibration of its own
        return ltt_threshold(np.arange(40) % 4 == 0, np.linspace(0, 1, 40), alpha=risk, delta=delta)

    monkeypatch.setattr(Gate, "score_many", spy)
    monkeypatch.setattr(Gate, "risk_control", control)
    assert main(["score", "--gate", str(trained.gate_dir), "--input", str(src), "--risk", "0.2"]) == 0
    got = capsys.readouterr()
    printed.extend(got.out.splitlines())
    errors.append(got.err)
    # the threshold first, then chunks of 2, each chunk's lines out before the next is read
    assert calls == [("risk", 0), (2, 0), (2, 2), (1, 4)]
    assert "Loading weights" not in "".join(errors)  # no progress bar per model load
    rows = [json.loads(line) for line in printed]
    whole = score_many(Gate.load(trained.gate_dir), memories)
    assert [r["id"] for r in rows] == [m["id"] for m in memories]
    np.testing.assert_allclose([r["unsafe_prob"] for r in rows], [o.unsafe_prob for o in whole], atol=1e-6)
    assert len({r["threshold"] for r in rows}) == 1  # one threshold, fixed before the first chunk


@pytest.mark.parametrize(("line", "where"), [
    ('{"id": "a", "units": ["x"]}', "line 2, id 'a', field 'query'"),
    ('{"query": "q", "units": []}', "line 2, field 'units'"),
    ('{"query": "q", "units": ["x", 3]}', "line 2, field 'units[1]'"),
    ('{"query": "q", "units": ["x"], "source_positions": [1, 2]}', "line 2, field 'source_positions'"),
    ('{"query": "q", "units": ["x"', "line 2: not valid JSON"),
])
def test_cli_score_rejects_bad_memories(trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        line: str, where: str) -> None:
    src = tmp_path / "bad.jsonl"
    src.write_text('{"query": "fine", "units": ["ok"]}\n' + line + "\n")
    out = tmp_path / "scores.jsonl"
    assert main(["score", "--gate", str(trained.gate_dir), "--input", str(src), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{src}, {where}" in err
    assert not out.exists()  # nothing half-written


def test_gate_reports_units_longer_than_its_window(trained: Trained, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    gate = Gate.load(trained.gate_dir)
    long_unit = "glacier ice " * 200  # far beyond the 48-token window of this gate
    out = gate.score("What about glacier ice?", ["Short unit.", long_unit])
    assert (out.truncated_units, out.max_length) == (1, 48)
    assert gate.score("What about glacier ice?", ["Short unit."]).truncated_units == 0
    src = tmp_path / "memories.jsonl"
    src.write_text(json.dumps({"query": "What about glacier ice?", "units": ["Short.", long_unit]}) + "\n")
    assert main(["score", "--gate", str(trained.gate_dir), "--input", str(src), "--out", str(tmp_path / "o")]) == 0
    assert "1 of 2 units in 1 of 1 memories are longer than the encoder's 48-token window" in capsys.readouterr().err


def test_loading_a_missing_gate_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="memsafe train --dataset musique --scale smoke --out"):
        Gate.load(tmp_path)


def test_without_provenance_is_how_a_plain_memory_reaches_the_gate() -> None:
    """Training with provenance dropped shows the model exactly what `memsafe score` builds
    from a plain {query, units} memory, so such memories are in distribution."""
    from memsafe_lib.estimators.controls import provenance_stats, without_provenance
    from memsafe_lib.estimators.memsafe import provenance_rows

    variants = C.build_size_matched([query(i) for i in range(40)]).variants
    for v in variants[:10]:
        plain = memory_variant(v.question, [{"title": u.title, "text": u.text} for u in v.units])
        assert provenance_stats(without_provenance(v)) == provenance_stats(plain)
        assert provenance_stats(v) != provenance_stats(plain) or v.source_units == len(v.units)
    rows = provenance_rows(variants, 0.5)
    dropped = [r.tolist() == provenance_stats(without_provenance(v)) and r.tolist() != provenance_stats(v)
               for r, v in zip(rows, variants, strict=True)]
    assert 0.25 < sum(dropped) / len(variants) < 0.75
    assert provenance_rows(variants, 0.0).tolist() == [provenance_stats(v) for v in variants]


@pytest.mark.usefixtures("real_data")
def test_plain_real_memories_score_like_the_gates_own_test_split(joint_gate: JointGate, tmp_path: Path) -> None:
    """A smoke gate scores MuSiQue test memories passed as plain {query, units} JSON (no
    provenance) with the AUROC of its in-process no-provenance metric, and the same memories
    with their provenance with the AUROC of its in-process with-provenance metric. (It used to
    assert that a paired bootstrap over six test questions could not tell the two apart: that
    held on an AVX2-only EPYC and failed on a Xeon with bf16 units, where provenance moved the
    smoke gate's AUROC by 0.2; whether provenance helps is not what this test is about.)"""
    from memsafe_lib.measures.metrics import unsafe_auroc
    from memsafe_lib.variants.store import build

    smoke = joint_gate.scale
    gate_dir = joint_gate.directory
    recorded = json.loads((gate_dir / "config.json").read_text())["metrics"]["per_dataset"]["musique"]
    test = [v for v in build("musique", None, smoke)[1].variants if v.split == "test"]
    memories = tmp_path / "memories.jsonl"
    memories.write_text("".join(json.dumps({"id": v.variant_id, "query": v.question,
                                            "units": [{"title": u.title, "text": u.text} for u in v.units]}) + "\n"
                                for v in test))
    assert main(["score", "--gate", str(gate_dir), "--input", str(memories), "--out", str(tmp_path / "s.jsonl")]) == 0
    plain = [json.loads(line)["unsafe_prob"] for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    unsafe = [v.unsafe for v in test]
    assert unsafe_auroc(unsafe, plain) == pytest.approx(recorded["test_without_provenance"]["unsafe_auroc"], abs=0.01)
    with_provenance = [o.unsafe_prob for o in Gate.load(gate_dir).score_variants(test)]
    assert unsafe_auroc(unsafe, with_provenance) == pytest.approx(recorded["test"]["unsafe_auroc"], abs=0.01)


def test_cli_score_with_a_risk_budget_answers_only_below_the_controlled_threshold(
        trained: Trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from memsafe_lib.measures.risk_control import ltt_threshold

    config_file = trained.gate_dir / "config.json"
    original = config_file.read_text()
    gate_dir = tmp_path / "gate"
    gate_dir.mkdir()
    for f in trained.gate_dir.iterdir():
        (gate_dir / f.name).write_bytes(f.read_bytes())
    # 600 validation memories: complete ones score low, unsafe ones high, so a threshold exists
    rng = np.random.default_rng(0)
    unsafe = [bool(i % 3) for i in range(600)]
    scores = [float(rng.uniform(0.55, 1.0) if u else rng.uniform(0.0, 0.5)) for u in unsafe]
    config = json.loads(original)
    config["calibration"] = {"unsafe": unsafe, "score": scores, "score_without_provenance": scores}
    (gate_dir / "config.json").write_text(json.dumps(config))
    expected = ltt_threshold(unsafe, scores, alpha=0.05, delta=0.1).threshold
    assert expected is not None
    src = tmp_path / "memories.jsonl"
    src.write_text("".join(json.dumps({"id": f"m{i}", "query": "What about the comet orbit?",
                                       "units": ["Comets orbit.", "Lava flows."][: 1 + i % 2]}) + "\n"
                           for i in range(4)))
    out = tmp_path / "scores.jsonl"
    assert main(["score", "--gate", str(gate_dir), "--input", str(src), "--out", str(out), "--risk", "0.05"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["threshold"] == expected for r in rows)
    assert all(r["decision"] == ("answer" if r["unsafe_prob"] <= expected else "abstain") for r in rows)
    assert "probability >= 0.9" in capsys.readouterr().err
    # a gate without calibration data says what to do
    assert main(["score", "--gate", str(trained.gate_dir), "--input", str(src), "--risk", "0.05"]) == 2
    assert "train it again" in capsys.readouterr().err


def test_one_gate_trains_on_several_datasets_with_shared_fold_encoders(joint_gate: JointGate,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``memsafe train --dataset musique,hotpotqa``: the fold encoders train on both datasets'
    pairs (each under the cap), the set model on both training splits, and the gate reports
    each dataset's metrics with and without provenance beside the pooled ones."""
    from memsafe_lib.estimators.neural_context import stage_a_dir
    from memsafe_lib.measures.metrics import unsafe_auroc
    from memsafe_lib.variants.store import build

    smoke = joint_gate.scale
    monkeypatch.setenv("MEMSAFE_ARTIFACTS_DIR", str(joint_gate.artifacts))
    config = json.loads((joint_gate.directory / "config.json").read_text())
    printed = joint_gate.printed
    for name, block in (("all", config["metrics"]), *config["metrics"]["per_dataset"].items()):
        line = next(x for x in printed.splitlines() if x.strip().startswith(f"{name} test "))
        assert line.split()[2:4] == [f"{block['test']['unsafe_auroc']:.3f}",
                                     f"{block['test_without_provenance']['unsafe_auroc']:.3f}"]
    assert config["training"]["datasets"] == ["hotpotqa", "musique"] and config["dataset"] == "hotpotqa+musique"
    stage_a = json.loads((stage_a_dir(smoke, "hotpotqa+musique") / "stage_a-17.json").read_text())
    cap = smoke.neural.finetune_max_pairs
    assert stage_a["train_pairs_per_fold"] == [2 * cap, 2 * cap]  # both datasets' pairs, each capped
    per = config["metrics"]["per_dataset"]
    assert set(per) == {"hotpotqa", "musique"}
    tests = {d: [v for v in build(d, None, smoke)[1].variants if v.split == "test"] for d in per}
    assert sum(len(t) for t in tests.values()) == config["metrics"]["test"]["n_variants"]
    musique = tests["musique"]
    scored = Gate.load(joint_gate.directory).score_variants(musique)
    assert unsafe_auroc([v.unsafe for v in musique], [o.unsafe_prob for o in scored]) == pytest.approx(
        per["musique"]["test"]["unsafe_auroc"], abs=0.01)
    assert "test_without_provenance" in per["musique"]


def test_train_refuses_the_transfer_target_and_unknown_datasets(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("squad2", "musique,squad2", "mimic-omr", ","):
        with pytest.raises(SystemExit):
            main(["train", "--dataset", bad, "--scale", "smoke"])
        assert "SQuAD 2.0 is the out-of-distribution test" in capsys.readouterr().err


def test_a_json_array_input_is_told_json_lines_is_expected(tmp_path: Path) -> None:
    path = tmp_path / "memories.json"
    path.write_text(json.dumps([{"query": "q", "units": ["a"]}], indent=2))
    with pytest.raises(DataFormatError, match="JSON Lines, one memory object per line"):
        read_memories(path)


def test_loading_and_scoring_a_gate_prints_no_library_noise(trained: Trained,
                                                             capfd: pytest.CaptureFixture[str]) -> None:
    gate = Gate.load(trained.gate_dir)
    gate.encoders[0].truncated([Pair("q", "word " * 2000)])  # longer than the model's 512 positions
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "Token indices" not in err
    from transformers.utils import logging as hf_logging
    assert hf_logging.is_progress_bar_enabled()  # the user's own setting is left as it was


def test_an_abstain_on_all_budget_says_how_many_memories_it_would_need() -> None:
    control = ltt_threshold([False] * 6, [0.1] * 6, alpha=0.05, delta=0.1)
    assert control.threshold is None
    # zero errors among n accepted memories: binomial p-value (1 - alpha)^n must reach delta / |grid|
    needed = next(n for n in range(1, 10_000) if 0.95**n <= control.level)
    text = abstain_reason(control)
    assert f"{needed} " in text and "6 validation memories" in text and "--scale cpu" in text


def test_memories_far_larger_than_the_training_ones_are_flagged() -> None:
    assert oversized([3, 12, 80], {"train_memory_units": {"max": 20}}) == [2]
    assert oversized([3, 12, 80], {}) == []  # a gate trained before sizes were recorded


def test_work_under_a_second_draws_no_progress_bar(trained: Trained, capfd: pytest.CaptureFixture[str]) -> None:
    """An agent scoring a few memories reads one line per step: bars appear only for work that
    lasts over a second (tqdm's ``delay``), here asked for explicitly with ``progress=True``."""
    gate = Gate.load(trained.gate_dir)
    capfd.readouterr()
    gate.score_many([{"query": "Who built the bridge?", "units": ["Anna built the bridge.", "Cats sleep."]}],
                    progress=True)
    assert "it/s" not in capfd.readouterr().err


def test_gates_sharing_encoder_weights_encode_a_pair_once_with_a_cache(trained: Trained, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Gates trained on pooled Stage A share their fold encoders; scored with one cache (keyed
    by weights and pair content, as Stage A's), the second gate reads every pair back."""
    from memsafe_lib.encodings import encoders as E

    memories = [v for v in trained.variants if v.split == "test"][:6]
    cache = E.EncodingCache(tmp_path / "pairs.sqlite")
    first = Gate.load(trained.gate_dir).score_variants(memories, cache=cache)
    monkeypatch.setattr(E, "_buckets", lambda *a, **k: pytest.fail("a pair was encoded twice"))
    second = Gate.load(trained.gate_dir).score_variants(memories, cache=cache)
    assert [o.unsafe_prob for o in first] == [o.unsafe_prob for o in second]


@pytest.mark.parametrize(("every_s", "lines"), [(0.0, 3), (3600.0, 1)])
def test_cli_score_reports_progress_at_most_every_few_seconds(trained: Trained, tmp_path: Path, every_s: float,
                                                              lines: int, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A line per chunk of 16 is a line every few seconds on 10,000 memories: progress lines
    come at most every ``SCORE_PROGRESS_S`` seconds, and always once at the end."""
    src = tmp_path / "memories.jsonl"
    src.write_text("".join(json.dumps({"query": f"Comet {i}?", "units": ["Comets orbit."]}) + "\n" for i in range(5)))
    monkeypatch.setattr(cli, "SCORE_CHUNK", 2)
    monkeypatch.setattr(cli, "SCORE_PROGRESS_S", every_s)
    capsys.readouterr()
    assert main(["score", "--gate", str(trained.gate_dir), "--input", str(src)]) == 0
    progress = [line for line in capsys.readouterr().err.splitlines() if "memsafe: scored" in line]
    assert len(progress) == lines and progress[-1].startswith("memsafe: scored 5 of 5")


def test_risk_control_tests_one_validation_memory_per_question(trained: Trained, tmp_path: Path) -> None:
    """A question's memories are not independent: with groups stored, Learn-then-Test counts one
    memory per question (200 here, not 600); a gate saved without them counts all 600."""
    gate_dir = tmp_path / "gate"
    gate_dir.mkdir()
    for f in trained.gate_dir.iterdir():
        (gate_dir / f.name).write_bytes(f.read_bytes())
    rng = np.random.default_rng(1)
    unsafe = [bool(i % 3) for i in range(600)]
    scores = [float(rng.uniform(0.55, 1.0) if u else rng.uniform(0.0, 0.5)) for u in unsafe]
    groups = [f"q{i // 3}" for i in range(600)]
    config = json.loads((trained.gate_dir / "config.json").read_text())
    config["calibration"] = {"unsafe": unsafe, "score": scores, "score_without_provenance": scores, "group": groups}
    (gate_dir / "config.json").write_text(json.dumps(config))
    control = Gate.load(gate_dir).risk_control(0.05)
    assert control.n_calibration == 200
    assert control.threshold == ltt_threshold(unsafe, scores, alpha=0.05, delta=0.1, groups=groups).threshold
    del config["calibration"]["group"]
    (gate_dir / "config.json").write_text(json.dumps(config))
    assert Gate.load(gate_dir).risk_control(0.05).n_calibration == 600


def test_trained_gate_stores_question_groups_not_ids(joint_gate: JointGate) -> None:
    calibration = json.loads((joint_gate.directory / "config.json").read_text())["calibration"]
    groups = calibration["group"]
    assert len(groups) == len(calibration["unsafe"]) > 0
    sizes = pd.Series(groups).value_counts()
    assert sizes.max() <= 3 and len(sizes) < len(groups)  # a question's variants share a group
    assert all(len(g) == 12 and int(g, 16) >= 0 for g in groups)  # salted hashes, never a record's id
