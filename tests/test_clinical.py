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


def synthetic_omr(root: Path, patients: int = 6, visits: int = 5, heights: bool = False) -> Path:
    """Synthetic patients (ids 9000+), a weight, a BMI and a blood pressure per visit (and a
    height on every other visit: a fourth measurement, so memories have fillers)."""
    rows = []
    for p in range(patients):
        for v in range(visits):
            day = f"2150-0{1 + v}-1{p % 9}"
            rows += [f"{9000 + p},{day},1,Weight (Lbs),{150 + p + v}", f"{9000 + p},{day},1,BMI (kg/m2),{20 + v}.5",
                     f"{9000 + p},{day},1,Blood Pressure,{110 + v}/{70 + p}"]
            if heights and v % 2 == 0:
                rows.append(f"{9000 + p},{day},1,Height (Inches),{60 + p}")
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


def _asked_days(v: object, measurement: str) -> list[int]:
    return [int(u.text.split(":")[0].split()[1]) for u in v.units  # type: ignore[attr-defined]
            if u.text.split(": ", 1)[1].startswith(measurement + " ")]


def test_clinical_states_follow_from_the_asked_measurements_events(tmp_path: Path) -> None:
    """Recomputed from each memory's texts: complete holds the asked measurement's newest value
    (and for change the one before), stale only an older one, relation-lost only the newest,
    missing none; one complete and two unsafe variants of one size per question."""
    synthetic_omr(tmp_path, patients=8, visits=6, heights=True)
    result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=4)
    by_base: dict[str, dict[str, object]] = {}
    for v in result.variants:
        by_base.setdefault(v.base_id, {})[v.state] = v
    assert len(by_base) > 20 and all(len({len(v.units) for v in states.values()}) == 1  # type: ignore[attr-defined]
                                     for states in by_base.values())
    for base, states in by_base.items():
        kind = base.rsplit("-", 1)[1]
        assert set(states) == ({"complete", "missing", "relation_lost"} if kind == "change"
                               else {"complete", "missing", "stale"})
        complete, missing = states["complete"], states["missing"]
        g = 2 if kind == "change" else 1
        assert complete.missing_count == 0 and sum(u.is_evidence for u in complete.units) == g  # type: ignore[attr-defined]
        assert missing.missing_count == g and not any(u.is_evidence for u in missing.units)  # type: ignore[attr-defined]
        measurement = _measurement(complete.question, kind)  # type: ignore[attr-defined]
        assert _asked_days(missing, measurement) == [] and len(_asked_days(complete, measurement)) == g
        newest = max(_asked_days(complete, measurement))
        if kind == "latest":  # stale: the newest value is gone, the one before it is there
            stale_days = _asked_days(states["stale"], measurement)
            assert len(stale_days) == 1 and stale_days[0] < newest
        else:  # relation-lost: only the newest value
            assert _asked_days(states["relation_lost"], measurement) == [newest]
            assert states["relation_lost"].missing_count == 1  # type: ignore[attr-defined]
        day = int(complete.question.split("day ")[1].split(",")[0])  # type: ignore[attr-defined]
        assert all(int(u.text.split(":")[0].split()[1]) < day for v in states.values() for u in v.units)  # type: ignore[attr-defined]
    splits = by_split(result.variants)
    patients = {s: {v.base_id.split("-")[0] for v in vs} for s, vs in splits.items()}
    assert all(not (patients[a] & patients[b]) for a in patients for b in patients if a < b)  # split by patient


def test_every_memory_is_complete_once_and_unsafe_twice(tmp_path: Path) -> None:
    """The blind-matching invariant: per split, every memory (as a question-blind model reads it)
    is complete for one question and unsafe for two, and every question has one complete and two
    unsafe variants; a question's memories share their days, positions and history size."""
    from memsafe_lib.variants.construction import memory_multiplicities, multiplicities

    synthetic_omr(tmp_path, patients=8, visits=6, heights=True)
    result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=4)
    for split, variants in by_split(result.variants).items():
        _, n_u, n_c = memory_multiplicities(variants)
        assert set(zip(n_u, n_c, strict=True)) == {(2, 1)}, split
        _, q_u, q_c = multiplicities(variants)
        assert set(zip(q_u, q_c, strict=True)) == {(2, 1)}, split
    by_base: dict[str, list] = {}
    for v in result.variants:
        by_base.setdefault(v.base_id, []).append(v)
    for variants in by_base.values():
        days = {tuple(u.text.split(":")[0] for u in v.units) for v in variants}
        positions = {tuple(u.source_position for u in v.units) for v in variants}
        assert len(days) == 1 and len(positions) == 1 and len({v.source_units for v in variants}) == 1


def test_surface_blind_and_question_only_controls_sit_at_one_half(tmp_path: Path) -> None:
    """Paragraph count, text length, provenance, measurement-blind recency, the blind controls
    and the question-only control, fitted on train: exactly 1/2 on every split (every score of the
    memory alone, or of the question alone). The earlier construction let a type-count model read
    0.70 and the question type 0.55."""
    from memsafe_lib.estimators.registry import make_model
    from memsafe_lib.measures.metrics import unsafe_auroc

    synthetic_omr(tmp_path, patients=16, visits=8, heights=True)
    result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=4)
    splits = by_split(result.variants)
    assert {v.state for v in splits["train"]} == {"complete", "missing", "stale", "relation_lost"}
    for control in ("paragraph_count", "provenance_only", "recency_only", "text_length", "blind_bow", "blind_unit",
                    "question_only"):
        model = make_model(control, 17).fit(splits["train"], splits.get("validation"))
        for split, variants in splits.items():
            auroc = unsafe_auroc([v.unsafe for v in variants], model.predict(variants).unsafe_prob)
            assert auroc == 0.5, (control, split, auroc)
    types = [float(len({u.text.split(": ", 1)[1].rsplit(" ", 2)[0] for u in v.units})) for v in result.variants]
    assert unsafe_auroc([v.unsafe for v in result.variants], types) == 0.5  # the old leak: distinct types
    kind = [float("change" in v.question) for v in result.variants]
    assert unsafe_auroc([v.unsafe for v in result.variants], kind) == 0.5  # the old leak: question type


def test_leftover_measurements_and_short_histories_are_excluded_with_reasons(tmp_path: Path) -> None:
    """Four measurements on each visit pair make one triple and one leftover; without a fourth
    measurement there is nothing to fill a memory with."""
    synthetic_omr(tmp_path, patients=4, visits=5, heights=True)
    load = M.load_clinical("mimic-omr", tmp_path)
    result = CL.build_clinical(load, memory_size=4)
    reasons = Counter(e.reason for e in result.exclusions if e.stage == "clinical")
    assert reasons[CL.NO_TRIPLE] > 0 and reasons[CL.NO_QUERY_DAY] > 0
    bare = tmp_path / "bare"
    synthetic_omr(bare, patients=4, visits=5)
    none = CL.build_clinical(M.load_clinical("mimic-omr", bare), memory_size=4)
    assert none.variants == [] and Counter(e.reason for e in none.exclusions)[CL.TOO_FEW_FILLERS] > 0
    assert CL.build_clinical(M.load_clinical("mimic-omr", bare), memory_size=3, kinds=("change",)).variants


def test_selection_does_not_depend_on_the_pseudonym_salt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentialed pseudonyms come from a private salt; sampling, caps, splits and memories read
    the cohort key, so two machines select the same questions with the same memories (only the
    pseudonyms in the ids differ)."""
    demo = synthetic_omr(tmp_path / "demo", patients=12, visits=6, heights=True)
    table = tmp_path / "cred" / "mimic-iv" / "3.1" / "hosp" / "omr.csv.gz"
    table.parent.mkdir(parents=True)
    demo.rename(table)
    monkeypatch.setenv("MEMSAFE_PRIVATE_CACHE", str(tmp_path / "private"))
    contents, owners = [], []
    for salt in ("machine-a", "machine-b"):
        monkeypatch.setenv("MEMSAFE_PSEUDONYM_SALT", salt)
        result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path / "cred"), memory_size=4,
                                   patient_fraction=0.6, question_cap=40)
        content = {v.variant_id: (v.split, v.state, v.question, tuple(u.text for u in v.units))
                   for v in result.variants}
        contents.append(set(content.values()))
        owners.append({c: vid.split(":")[2].split("-")[0] for vid, c in content.items()})
    assert contents[0] == contents[1] and len(contents[0]) > 40
    assert any(owners[0][c] != owners[1][c] for c in owners[0])  # the pseudonyms themselves differ


def test_question_cap_and_patient_fraction_are_deterministic(tmp_path: Path) -> None:
    synthetic_omr(tmp_path, patients=8, visits=6, heights=True)
    load = M.load_clinical("mimic-omr", tmp_path)
    a = CL.build_clinical(load, memory_size=4, question_cap=12)
    b = CL.build_clinical(load, memory_size=4, question_cap=12)
    assert [v.variant_id for v in a.variants] == [v.variant_id for v in b.variants]
    assert len({v.base_id for v in a.variants}) == 12  # two whole triples of six questions
    half = CL.build_clinical(load, memory_size=4, patient_fraction=0.5)
    assert 0 < len({v.base_id.split("-")[0] for v in half.variants}) < 8
    assert Counter(e.reason for e in half.exclusions)[CL.NOT_SAMPLED] >= 1


@pytest.mark.usefixtures("real_data")
def test_the_demo_builds_and_adds_up() -> None:
    """Aggregates only: every OMR row is used or excluded, and every state occurs."""
    load = M.load_clinical("mimic-omr")
    assert load.raw_records == len(load.events) + len(load.exclusions) > 2000
    result = CL.build_clinical(load, memory_size=4, question_cap=400)
    assert set(Counter(v.state for v in result.variants)) == {"complete", "missing", "stale", "relation_lost"}


def test_rule_and_clinical_features_read_what_the_construction_wrote(tmp_path: Path) -> None:
    from memsafe_lib.estimators.clinical import ClinicalRule, asked_units, parse_question, recency_age
    from memsafe_lib.estimators.registry import make_model
    from memsafe_lib.measures.metrics import unsafe_auroc

    synthetic_omr(tmp_path, patients=12, visits=7, heights=True)
    result = CL.build_clinical(M.load_clinical("mimic-omr", tmp_path), memory_size=4)
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
    assert all(recency_age(stale[v.base_id]) > recency_age(v) for v in complete if v.base_id in stale)  # older
    assert stale and set(stale) == {v.base_id for v in complete if v.base_id.endswith("-latest")}
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
    # bench/cold/parts/: a cold run's notebooks saved for the next machine (bench/cold/cold_parts.py)
    roots = [config.REPO_ROOT / "artifacts", config.REPO_ROOT / "paper", config.REPO_ROOT / "README.md",
             config.REPO_ROOT / "bench" / "cold" / "parts"]
    scanned, hits = 0, []
    for root in roots:
        for path in ([root] if root.is_file() else root.rglob("*")):
            if not path.is_file() or ".cache" in path.parts or path.suffix in {".png", ".safetensors", ".pkl", ".sqlite"}:
                continue
            try:
                raw = path.read_bytes()
            except FileNotFoundError:  # a temporary file of a write finishing beside this test (xdist)
                continue
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
    # the paper's three-row shape: a small OMR row, then OMR and laboratory events at the largest cap
    assert [s.dataset for s in cpu.settings] == ["mimic-omr", "mimic-omr", "mimic-labs"]
    assert cpu.settings[0].question_cap < cpu.settings[1].question_cap == cpu.settings[2].question_cap
    assert {s.patient_fraction for s in cpu.settings} == {1.0}


def test_paper_scale_reads_credentialed_mimic_and_refuses_the_demo(tmp_path: Path) -> None:
    """At ``paper`` the tables sample 1/64 and 1/16 of credentialed MIMIC-IV's patients; with the
    100-patient demo beside it, the demo must not be read (it would be, found first), and with
    the demo alone the run must stop naming the folder it expected."""
    from memsafe_lib import config
    from memsafe_lib.variants.store import build_clinical_dataset

    assert config.SCALES["paper"].clinical.credentialed
    dry = config.paper_dry_run(config.SCALES["paper"])
    assert not any(config.SCALES[s].clinical.credentialed for s in ("smoke", "cpu")) and not dry.clinical.credentialed
    synthetic_omr(tmp_path)  # the demo only
    with pytest.raises(FileNotFoundError) as err:
        M.load_clinical("mimic-omr", tmp_path, credentialed=True)
    assert str(tmp_path / "mimic-iv") + "/<version>/hosp/omr.csv" in str(err.value) and "demo" in str(err.value)
    with pytest.raises(FileNotFoundError, match="mimic-iv/<version>"):
        build_clinical_dataset("mimic-omr", config.SCALES["paper"], tmp_path)
    cred = tmp_path / "mimic-iv" / "3.1" / "hosp" / "omr.csv.gz"
    cred.parent.mkdir(parents=True)
    (tmp_path / "mimic-iv-demo" / "2.2" / "hosp" / "omr.csv.gz").rename(cred)
    synthetic_omr(tmp_path, patients=3)  # both present: the demo now holds fewer patients
    assert M.load_clinical("mimic-omr", tmp_path, credentialed=True).patients == 6
    assert M.load_clinical("mimic-omr", tmp_path).patients == 3  # cpu and smoke keep the demo


def test_fillers_are_ordered_only_for_the_triples_a_cap_keeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ordering a triple's fillers hashes every earlier event of its patient; on the demo's lab
    table that was 34 million hashes for 19,000 triples, of which a cap of 90 questions keeps 15.
    With a cap, only the kept triples' fillers are ordered, and the variants are the same as the
    uncapped build's for those triples (their fillers do not depend on the cap)."""
    synthetic_omr(tmp_path, patients=8, visits=6, heights=True)
    load = M.load_clinical("mimic-omr", tmp_path)
    full = CL.build_clinical(load, memory_size=4)
    calls: list[str] = []
    real_rank = CL.hash_rank
    monkeypatch.setattr(CL, "hash_rank", lambda text, salt: (calls.append(salt), real_rank(text, salt))[1])
    capped = CL.build_clinical(load, memory_size=4, question_cap=12)
    assert len({v.base_id for v in capped.variants}) == 12  # two whole triples of six questions
    longest_history = max(Counter(e.patient for e in load.events).values())
    # one ordering per kept triple, each hashing at most its patient's history; the uncapped
    # build ordered every triple's (far more: one per triple, several per patient)
    assert 0 < calls.count(CL.FILLER_SALT) <= 2 * longest_history
    by_id = {v.variant_id: v for v in full.variants}
    for v in capped.variants:
        assert [(u.unit_id, u.is_evidence) for u in v.units] == [(u.unit_id, u.is_evidence)
                                                                 for u in by_id[v.variant_id].units]
