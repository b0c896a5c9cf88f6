"""Patient pseudonyms: the open demo keeps the salt in the code (its ids are public, committed
results stay reproducible); credentialed MIMIC-IV takes a private salt, so nobody holding the
data can reverse a committed pseudonym. Synthetic tables in the official layout only."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from memsafe_lib.data import mimic as M
from memsafe_lib.data.loader import hash_rank

SALT_ENV = "MEMSAFE_PSEUDONYM_SALT"
IDS = [str(9000 + p) for p in range(6)]
"""Synthetic subjects (no real id)."""


def synthetic_omr(data_dir: Path, root: str) -> Path:
    """``<root>/<version>/hosp/omr.csv.gz``: subject 900p weighs 150 + p + visit pounds."""
    path = data_dir / root / ("2.2" if root == "mimic-iv-demo" else "3.1") / "hosp" / "omr.csv.gz"
    path.parent.mkdir(parents=True)
    rows = [f"{s},2150-0{1 + v}-10,1,Weight (Lbs),{150 + p + v}" for p, s in enumerate(IDS) for v in range(3)]
    with gzip.open(path, "wt") as fh:
        fh.write("subject_id,chartdate,seq_num,result_name,result_value\n" + "".join(r + "\n" for r in rows))
    return path


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "private"
    monkeypatch.setenv("MEMSAFE_PRIVATE_CACHE", str(path))
    monkeypatch.delenv(SALT_ENV, raising=False)
    return path


def expected_mapping(salt: str) -> dict[str, str]:
    """pNNN in salted-hash order of the subject id, computed here from the rule."""
    ordered = sorted(IDS, key=lambda s: (hash_rank(s, salt), s))
    return {s: f"p{i:03d}" for i, s in enumerate(ordered)}


def pseudonym_of_9000(path: Path) -> str:
    """The lightest weight (150) is subject 9000's first visit."""
    events, _, _ = M.load_omr(path)
    return min(events, key=lambda e: e.value).patient


def test_the_open_demo_keeps_the_salt_in_the_code(tmp_path: Path, private_cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = synthetic_omr(tmp_path / "data", "mimic-iv-demo")
    monkeypatch.setenv(SALT_ENV, "not-for-the-demo")
    assert M.patient_salt(path) == M.PATIENT_SALT
    assert pseudonym_of_9000(path) == expected_mapping(M.PATIENT_SALT)["9000"]
    assert not private_cache.exists() or not any(private_cache.rglob("*salt*"))  # nothing private written


def test_credentialed_data_takes_a_private_salt_kept_on_the_machine(tmp_path: Path, private_cache: Path) -> None:
    path = synthetic_omr(tmp_path / "data", "mimic-iv")
    salt = M.patient_salt(path)
    assert salt != M.PATIENT_SALT and len(salt) >= 32
    assert M.patient_salt(path) == salt  # reused: runs on this machine stay deterministic
    assert [p for p in private_cache.rglob("*") if p.is_file() and p.read_text().strip() == salt]
    assert pseudonym_of_9000(path) == expected_mapping(salt)["9000"]
    assert M.load_clinical("mimic-omr", tmp_path / "data").patients == 6


def test_credentialed_pseudonyms_follow_the_private_salt_not_the_codes(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = synthetic_omr(tmp_path / "data", "mimic-iv")
    monkeypatch.setenv(SALT_ENV, "a-site-secret")
    assert M.patient_salt(path) == "a-site-secret"
    assert M.pseudonyms(IDS, M.patient_salt(path)) == expected_mapping("a-site-secret")
    assert pseudonym_of_9000(path) == expected_mapping("a-site-secret")["9000"]


def test_two_machines_without_a_shared_secret_get_different_salts(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = synthetic_omr(tmp_path / "data", "mimic-iv")
    here = M.patient_salt(path)
    monkeypatch.setenv("MEMSAFE_PRIVATE_CACHE", str(tmp_path / "elsewhere"))
    assert M.patient_salt(path) not in (here, M.PATIENT_SALT)
