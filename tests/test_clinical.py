"""MIMIC-IV readers and the clinical construction on synthetic tables in the official layout
(never real rows), and aggregate checks on the open demo when it is present."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

import pytest

from memsafe_lib.data import mimic as M
from memsafe_lib.errors import DataFormatError
from memsafe_lib.variants import clinical as CL
from memsafe_lib.variants.construction import by_split


def _write(path: Path, header: str, rows: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.write(header + "\n" + "".join(r + "\n" for r in rows))
    return path


def synthetic_omr(root: Path, patients: int = 6, visits: int = 5) -> Path:
    """Synthetic patients (ids 9000+), a weight, a BMI and a blood pressure per visit."""
    rows = []
    for p in range(patients):
        for v in range(visits):
            day = f"2150-0{1 + v}-1{p % 9}"
            rows += [f"{9000 + p},{day},1,Weight (Lbs),{150 + p + v}", f"{9000 + p},{day},1,BMI (kg/m2),{20 + v}.5",
                     f"{9000 + p},{day},1,Blood Pressure,{110 + v}/{70 + p}"]
    rows += ["9000,2150-01-10,2,Weight (Lbs),151", "9001,,1,Weight (Lbs),160", "9002,2150-02-11,1,Height (Inches),tall"]
    return _write(root / "mimic-iv-demo" / "2.2" / "hosp" / "omr.csv.gz",
                  "subject_id,chartdate,seq_num,result_name,result_value", rows)


def test_omr_rows_are_events_or_exclusions_with_reasons(tmp_path: Path) -> None:
    synthetic_omr(tmp_path)
    load = M.load_clinical("mimic-omr", tmp_path)
    assert load.raw_records == 6 * 5 * 3 + 3 == len(load.events) + len(load.exclusions)
    assert Counter(e.reason for e in load.exclusions) == {M.DUPLICATE: 1, M.MISSING_TIME: 1, M.NON_NUMERIC: 1}
    assert all(e.record_id.startswith("row ") for e in load.exclusions)  # rows, never persons
    bp = next(e for e in load.events if e.measurement == "Blood Pressure")
    assert bp.unit == "mmHg" and "/" in bp.text_value and bp.value >= 110
    weight = next(e for e in load.events if e.measurement == "Weight")
    assert weight.unit == "Lbs" and weight.text().startswith("Day ")
    assert {e.patient for e in load.events} == {f"p{i:03d}" for i in range(6)}  # pseudonyms only
    assert min(e.day for e in load.events if e.patient == "p000") == 0


def test_a_table_without_the_official_columns_names_file_and_field(tmp_path: Path) -> None:
    path = _write(tmp_path / "mimic-iv-demo" / "2.2" / "hosp" / "omr.csv.gz", "subject_id,chartdate,value", ["1,x,2"])
    with pytest.raises(DataFormatError) as err:
        M.load_clinical("mimic-omr", tmp_path)
    assert str(path) in str(err.value) and "seq_num" in str(err.value)
    with pytest.raises(FileNotFoundError, match="mimic-iv-demo"):
        M.load_clinical("mimic-labs", tmp_path / "nowhere")


def _measurement(question: str, kind: str) -> str:
    return (question.split("most recent ")[1].rstrip("?") if kind == "latest"
            else question.split("patient's ")[1].split(" change between")[0])


def test_clinical_states_are_size_matched_and_exact(tmp_path: Path) -> None:
    synthetic_omr(tmp_path, patients=8, visits=6)
    result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=5)
    by_base: dict[str, dict[str, object]] = {}
    for v in result.variants:
        by_base.setdefault(v.base_id, {})[v.state] = v
    assert by_base and all(len({len(v.units) for v in states.values()}) == 1 for states in by_base.values())
    for base, states in by_base.items():
        kind = base.rsplit("-", 1)[1]
        assert set(states) == ({"complete", "missing", "stale", "relation_lost"} if kind == "change"
                               else {"complete", "missing", "stale"})
        complete, stale, missing = states["complete"], states["stale"], states["missing"]
        g = 2 if kind == "change" else 1
        assert complete.missing_count == 0 and sum(u.is_evidence for u in complete.units) == g
        assert missing.missing_count == g and not any(u.is_evidence for u in missing.units)
        measurement = _measurement(complete.question, kind)

        def asked(v: object, m: str = measurement) -> list[int]:
            return [int(u.text.split(":")[0].split()[1]) for u in v.units  # type: ignore[attr-defined]
                    if u.text.split(": ", 1)[1].startswith(m + " ")]

        assert asked(missing) == []
        # complete: the newest value of the asked measurement; stale: it is gone, an older one is there
        assert len(asked(complete)) == g and len(asked(stale)) == g and max(asked(stale)) < max(asked(complete))
        day = int(complete.question.split("day ")[1].split(",")[0])
        assert all(int(u.text.split(":")[0].split()[1]) < day for v in states.values() for u in v.units)
        if kind == "change":
            rl = states["relation_lost"]
            assert rl.missing_count == 1 and sum(u.is_evidence for u in rl.units) == 1 and len(asked(rl)) == 1
    splits = by_split(result.variants)
    patients = {s: {v.base_id.split("-")[0] for v in vs} for s, vs in splits.items()}
    assert all(not (patients[a] & patients[b]) for a in patients for b in patients if a < b)  # split by patient


def test_every_state_of_a_question_shares_its_surface(tmp_path: Path) -> None:
    """The states differ only in which slots hold the asked measurement: same size, same unit
    days in the same memory order, same source positions and history size, text lengths
    within the stand-in gap per slot."""
    synthetic_omr(tmp_path, patients=8, visits=6)
    result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=5)
    by_base: dict[str, list] = {}
    for v in result.variants:
        by_base.setdefault(v.base_id, []).append(v)
    assert len(by_base) > 20
    for variants in by_base.values():
        days = {tuple(u.text.split(":")[0] for u in v.units) for v in variants}
        positions = {tuple(u.source_position for u in v.units) for v in variants}
        assert len(days) == 1 and len(positions) == 1 and len({v.source_units for v in variants}) == 1
        lengths = [sum(len(u.text) for u in v.units) for v in variants]
        assert max(lengths) - min(lengths) <= 2 * 3 * CL.MAX_LENGTH_GAP


def test_surface_controls_sit_at_chance(tmp_path: Path) -> None:
    """Paragraph count, text length, provenance and measurement-blind recency, fitted on
    train, score every split at chance (the old construction: provenance far above it, since a
    complete memory always held the history's newest event)."""
    from memsafe_lib.estimators.registry import make_model
    from memsafe_lib.measures.metrics import unsafe_auroc

    synthetic_omr(tmp_path, patients=16, visits=8)
    result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=5)
    train = [v for v in result.variants if v.split == "train"]
    assert train and {v.state for v in train} == {"complete", "missing", "stale", "relation_lost"}
    for control in ("paragraph_count", "provenance_only", "recency_only", "text_length"):
        preds = make_model(control, 17).fit(train).predict(result.variants)
        auroc = unsafe_auroc([v.unsafe for v in result.variants], preds.unsafe_prob)
        assert 0.45 <= auroc <= 0.55, (control, auroc)


def test_a_day_without_a_stand_in_excludes_the_question(tmp_path: Path) -> None:
    """Blood pressure's text is far longer than weight's or BMI's, so on the synthetic visits it
    has no stand-in within the gap: its questions are excluded with that reason."""
    synthetic_omr(tmp_path, patients=4, visits=5)
    result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=4)
    assert not any("Blood Pressure" in v.question for v in result.variants)
    assert any(e.reason == CL.NO_STAND_IN and e.stage == "clinical" for e in result.exclusions)
    wide = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=4, max_length_gap=100)
    assert any("Blood Pressure" in v.question for v in wide.variants)


def test_selection_does_not_depend_on_the_pseudonym_salt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentialed pseudonyms come from a private salt; sampling, caps, splits and memories read
    the cohort key, so two machines select the same questions with the same memories (only the
    pseudonyms in the ids differ)."""
    demo = synthetic_omr(tmp_path / "demo", patients=12, visits=6)
    table = tmp_path / "cred" / "mimic-iv" / "3.1" / "hosp" / "omr.csv.gz"
    table.parent.mkdir(parents=True)
    demo.rename(table)
    monkeypatch.setenv("MEMSAFE_PRIVATE_CACHE", str(tmp_path / "private"))
    contents, owners = [], []
    for salt in ("machine-a", "machine-b"):
        monkeypatch.setenv("MEMSAFE_PSEUDONYM_SALT", salt)
        result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path / "cred"), memory_size=5,
                                   patient_fraction=0.6, question_cap=40)
        content = {v.variant_id: (v.split, v.state, v.question, tuple(u.text for u in v.units))
                   for v in result.variants}
        contents.append(set(content.values()))
        owners.append({c: vid.split(":")[2].split("-")[0] for vid, c in content.items()})
    assert contents[0] == contents[1] and len(contents[0]) > 40
    assert any(owners[0][c] != owners[1][c] for c in owners[0])  # the pseudonyms themselves differ


def test_question_cap_and_patient_fraction_are_deterministic(tmp_path: Path) -> None:
    synthetic_omr(tmp_path, patients=8, visits=6)
    load = M.load_clinical("mimic-omr", tmp_path)
    a = CL.build_clinical(load, memory_size=5, question_cap=10)
    b = CL.build_clinical(load, memory_size=5, question_cap=10)
    assert [v.variant_id for v in a.variants] == [v.variant_id for v in b.variants]
    assert len({v.base_id for v in a.variants}) == 10
    half = CL.build_clinical(load, memory_size=5, patient_fraction=0.5)
    assert 0 < len({v.base_id.split("-")[0] for v in half.variants}) < 8
    assert Counter(e.reason for e in half.exclusions)[CL.NOT_SAMPLED] >= 1


@pytest.mark.usefixtures("real_data")
def test_the_demo_builds_and_adds_up() -> None:
    """Aggregates only: every OMR row is used or excluded, and every state occurs."""
    load = M.load_clinical("mimic-omr")
    assert load.raw_records == len(load.events) + len(load.exclusions) > 2000
    result = CL.build_clinical(load, memory_size=6, question_cap=400)
    assert set(Counter(v.state for v in result.variants)) == {"complete", "missing", "stale", "relation_lost"}


def test_rule_and_clinical_features_read_what_the_construction_wrote(tmp_path: Path) -> None:
    from memsafe_lib.estimators.clinical import ClinicalRule, asked_units, parse_question, recency_age
    from memsafe_lib.estimators.registry import make_model
    from memsafe_lib.measures.metrics import unsafe_auroc

    synthetic_omr(tmp_path, patients=12, visits=7)
    result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=5)
    for v in result.variants[:40]:
        q = parse_question(v.question)
        assert q is not None and q.kind in ("latest", "change")
        asked = asked_units(v)
        if v.state == "missing":
            assert asked == [] and recency_age(v) >= 10_000
        if v.state == "complete":
            assert len(asked) >= (2 if q.kind == "change" else 1)
    complete = [v for v in result.variants if v.state == "complete"]
    stale = {v.base_id: v for v in result.variants if v.state == "stale"}
    assert all(recency_age(stale[v.base_id]) > recency_age(v) for v in complete)  # stale is older, by construction
    rule = ClinicalRule().fit(result.variants)
    preds = rule.predict(result.variants)
    assert unsafe_auroc([v.unsafe for v in result.variants], preds.unsafe_prob) > 0.8
    lexset = make_model("lexset", 17).fit([v for v in result.variants if v.split == "train"])
    assert lexset._set_groups[-1].__name__ == "clinical_set_features"  # the clinical group joins on clinical data


@pytest.mark.usefixtures("real_data")
def test_no_demo_subject_id_in_artifacts_or_notebook_outputs() -> None:
    """Data-use rule: no MIMIC subject id in anything under artifacts/ (committed results,
    executed notebooks, the smoke run of this test session) or in the README and report."""
    import csv
    import re

    from memsafe_lib import config

    ids_file = M.find_table("omr").parents[1] / "demo_subject_id.csv"
    with open(ids_file, newline="") as fh:
        ids = sorted({row["subject_id"] for row in csv.DictReader(fh)})
    assert len(ids) == 100
    pattern = re.compile(r"(?<![\d.])(?:" + "|".join(map(re.escape, ids)) + r")(?!\d)")
    roots = [config.REPO_ROOT / "artifacts", config.REPO_ROOT / "paper", config.REPO_ROOT / "README.md"]
    scanned, hits = 0, []
    for root in roots:
        for path in ([root] if root.is_file() else root.rglob("*")):
            if not path.is_file() or ".cache" in path.parts or path.suffix in {".png", ".safetensors", ".pkl", ".sqlite"}:
                continue
            raw = path.read_bytes()
            if path.name.endswith(".gz"):
                raw = gzip.decompress(raw)
            scanned += 1
            if pattern.search(raw.decode("utf-8", errors="ignore")):
                hits.append(str(path.relative_to(config.REPO_ROOT)))
    assert scanned > 10 and hits == [], f"subject ids found in {hits}"


def test_paper_scale_runs_the_papers_clinical_settings() -> None:
    """Tables "clinical" and "clinical_curve" at paper scale: OMR at 1/64 with a 1k cap, OMR and
    laboratory events at 1/16 with a 60k cap; the OMR curve at 1/16 with caps 1k-20k."""
    from memsafe_lib import config

    paper = config.SCALES["paper"].clinical
    assert [(s.dataset, s.patient_fraction, s.question_cap) for s in paper.settings] == [
        ("mimic-omr", 1 / 64, 1000), ("mimic-omr", 1 / 16, 60_000), ("mimic-labs", 1 / 16, 60_000)]
    assert (paper.curve.dataset, paper.curve.patient_fraction) == ("mimic-omr", 1 / 16)
    assert [c.question_cap for c in paper.curve_settings()] == [1000, 2500, 5000, 10_000, 20_000]
    names = [(s.dataset, s.construction) for s in (*paper.settings, *paper.curve_settings())]
    assert len(set(names)) == len(names) and names[0][1] == "clinical-1in64-cap1000"
    assert paper.settings[1].label == "OMR, 1/16 patients, 60,000 cap"
    cpu = config.SCALES["cpu"].clinical  # the 100-patient demo: every patient, capped questions
    assert {s.patient_fraction for s in cpu.settings} == {1.0}
