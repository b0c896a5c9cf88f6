"""MIMIC-IV measurement events from the official ``hosp/`` tables: outpatient measurement
records (``omr.csv.gz``) and laboratory events (``labevents.csv.gz`` with ``d_labitems``).

The open demo (v2.2) and credentialed MIMIC-IV (3.1) share this layout, so the same reader
serves both: put the version folder under ``MEMSAFE_DATA_DIR/mimic-iv-demo/`` or
``MEMSAFE_DATA_DIR/mimic-iv/``. Every raw row becomes an :class:`Event` or an exclusion with
its reason; the counts add up.

Data-use rule: nothing here leaves the process with a person's identity. Patients get
pseudonyms (``p000``, ``p001``, … in salted-hash order of ``subject_id``), times become days
since the patient's first event in that table, and exclusions name the file row, never the
person. Measured values stay in memory, for the memories the estimators read.

Pseudonyms are committed (in predictions), so the salt decides who can reverse them; see
:func:`patient_salt`: the open demo's salt is in the code, every other table's is private.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from memsafe_lib import config
from memsafe_lib.data.loader import hash_rank
from memsafe_lib.data.records import Exclusion, RawFile
from memsafe_lib.errors import DataFormatError
from memsafe_lib.io import sha256_file

CLINICAL_DATASETS: dict[str, str] = {"mimic-omr": "omr", "mimic-labs": "labevents"}
"""Dataset name -> hosp table."""


def independence_group(dataset: str, base_id: str) -> str:
    """What a memory shares its dependence with: its base question, or on clinical data its
    patient (the part of the base id before the first '-': a patient's questions share events).
    Risk control tests one memory per group."""
    return base_id.split("-")[0] if dataset in CLINICAL_DATASETS else base_id

DEMO_ROOT = "mimic-iv-demo"
ROOTS: tuple[str, ...] = (DEMO_ROOT, "mimic-iv")
"""Where tables are looked for, in order, unless credentialed MIMIC-IV is required."""
PATIENT_SALT = "memsafe-mimic-patient-v1"
"""The open demo's salt only: its ids are public, and its committed results must reproduce anywhere."""
COHORT_SALT = "memsafe-mimic-cohort-v1"
"""Salt of :attr:`Event.cohort_key` (sampling and splits), public on purpose: the selection
must be reproducible wherever the data is."""
SALT_ENV = "MEMSAFE_PSEUDONYM_SALT"
"""A private salt given by the user (e.g. shared by the machines of one credentialed site)."""
SALT_FILE = "mimic-pseudonym-salt"
"""The private salt drawn once per machine, under :func:`memsafe_lib.config.private_cache_root`."""

NON_NUMERIC = "non-numeric value"
MISSING_TIME = "missing time"
MISSING_PATIENT = "missing subject_id"
DUPLICATE = "duplicate measurement at the same time (first kept)"
UNKNOWN_ITEM = "itemid not in d_labitems"

_BLOOD_PRESSURE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)\s*$")
_NAME_UNIT = re.compile(r"^(.*?)\s*\(([^)]*)\)\s*$")
REQUIRED = {"omr": ("subject_id", "chartdate", "seq_num", "result_name", "result_value"),
            "labevents": ("subject_id", "itemid", "charttime", "valuenum", "valueuom"),
            "d_labitems": ("itemid", "label", "fluid")}


@dataclass(frozen=True)
class Event:
    """One measurement of one (pseudonymous) patient."""

    patient: str
    day: int
    """Days since the patient's first event in this table."""
    order: int
    """Rank within the patient's history (time, then row): ties never reorder."""
    measurement: str
    value: float
    text_value: str
    unit: str
    row: int
    """Data row in its file (0 = first row after the header)."""
    cohort_key: str = ""
    """A hash of the subject id under a public salt (:data:`COHORT_SALT`), the same on every
    machine: patient sampling and splits read it, so a credentialed run selects the same
    patients everywhere although its pseudonyms are private. Never written anywhere (a public
    hash of a short id can be reversed). Empty for hand-made events (then the pseudonym serves)."""

    def text(self) -> str:
        return f"Day {self.day}: {self.measurement} {self.text_value}{' ' + self.unit if self.unit else ''}"


@dataclass
class ClinicalLoad:
    dataset: str
    files: list[RawFile]
    events: list[Event]
    exclusions: list[Exclusion]
    patients: int
    raw_records: int
    """Data rows of the measurement table (raw = events + excluded rows)."""
    warnings: list[str] = field(default_factory=list)


CREDENTIALED_ROOT = "mimic-iv"


def find_table(table: str, data_dir: Path | None = None, credentialed: bool = False) -> Path:
    """``<root>/<version>/hosp/<table>.csv[.gz]`` under the data directory, newest version first;
    the open demo before credentialed MIMIC-IV unless ``credentialed``, which reads only the
    latter (the paper's tables sample 1/64 and 1/16 of its patients; of the demo's 100 they
    would keep one or six)."""
    base = data_dir or config.data_dir()
    if credentialed:
        for version in sorted((base / CREDENTIALED_ROOT).glob("*"), reverse=True):
            for suffix in (".csv.gz", ".csv"):
                if (path := version / "hosp" / f"{table}{suffix}").exists():
                    return path
        demo = " (the open demo under {base}/{DEMO_ROOT}/ is not used at this scale)" if (base / DEMO_ROOT).exists() \
            else ""
        raise FileNotFoundError(f"this scale reads credentialed MIMIC-IV: no {base / CREDENTIALED_ROOT}/<version>/hosp/"
                                f"{table}.csv.gz{demo.format(base=base, DEMO_ROOT=DEMO_ROOT)}; see docs/running.md, "
                                "'With a GPU and the paper's data and models'")
    for root in ROOTS:
        for version in sorted((base / root).glob("*"), reverse=True):
            for suffix in (".csv.gz", ".csv"):
                path = version / "hosp" / f"{table}{suffix}"
                if path.exists():
                    return path
    raise FileNotFoundError(f"no MIMIC-IV hosp/{table}.csv.gz under {base}/{{{','.join(ROOTS)}}}/<version>/ "
                            "(the open demo: https://physionet.org/content/mimic-iv-demo/2.2/)")


def _read(path: Path, table: str) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise DataFormatError(path, f"not a readable CSV table ({type(exc).__name__}: {exc})") from None
    missing = [c for c in REQUIRED[table] if c not in frame.columns]
    if missing:
        raise DataFormatError(path, f"missing column(s) {missing} of the official {table} layout", field=missing[0])
    return frame


def is_demo(table: Path) -> bool:
    """Whether a table sits in the open demo's layout, ``mimic-iv-demo/<version>/hosp/<table>``."""
    return len(table.parts) >= 4 and table.parts[-4] == DEMO_ROOT


def private_salt() -> str:
    """``MEMSAFE_PSEUDONYM_SALT`` when set, else a random salt drawn once on this machine and
    kept in the private cache (never committed), so reruns here give the same pseudonyms."""
    if value := os.environ.get(SALT_ENV, "").strip():
        return value
    path = config.private_cache_root() / SALT_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{SALT_FILE}.", dir=path.parent)  # 0600: this user only
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
        try:
            os.link(tmp, path)  # fails if another process drew one first: theirs is kept
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    salt = path.read_text(encoding="utf-8").strip()
    if not salt:
        raise RuntimeError(f"{path} is empty; delete it to draw a new pseudonym salt (or set {SALT_ENV})")
    return salt


def patient_salt(table: Path) -> str:
    """The salt of a table's pseudonyms, chosen by its data root.

    The open demo (``mimic-iv-demo/``) keeps :data:`PATIENT_SALT`: its subject ids are public,
    so hiding the salt protects no one, and committed demo results stay reproducible
    anywhere. Any other table (credentialed MIMIC-IV under ``mimic-iv/``, which a paper-scale
    run reads) takes :func:`private_salt`, never the code's: with the code's salt anyone who
    holds the data could sort the ids by the same hash and reverse every committed pseudonym.
    The rule goes by the data, not the scale: the scale does not change whose ids they are."""
    return PATIENT_SALT if is_demo(table) else private_salt()


def pseudonyms(subject_ids: Sequence[str], salt: str) -> dict[str, str]:
    """``subject_id`` -> ``p000``, ``p001``, … in ``salt``-ed hash order (no id leaves this mapping)."""
    ordered = sorted(set(subject_ids), key=lambda s: (hash_rank(s, salt), s))
    return {s: f"p{i:03d}" for i, s in enumerate(ordered)}


def _events(dataset: str, path: Path, frame: pd.DataFrame, times: pd.Series, names: pd.Series, values: pd.Series,
            texts: pd.Series, units: pd.Series, reasons: pd.Series, tie: pd.Series
            ) -> tuple[list[Event], list[Exclusion]]:
    """Rows without a reason become events (duplicates of an earlier (patient, time, name)
    excluded); every other row an exclusion that names its file row."""
    exclusions = [Exclusion(dataset, f"row {i}", r, path.name, int(i), "load") for i, r in reasons.items() if r]
    ok = reasons == ""
    work = pd.DataFrame({"subject": frame.subject_id, "time": times, "name": names, "value": values, "text": texts,
                         "unit": units, "tie": tie})[ok]
    dup = work.duplicated(["subject", "time", "name"], keep="first")
    exclusions += [Exclusion(dataset, f"row {i}", DUPLICATE, path.name, int(i), "load") for i in work.index[dup]]
    work = work[~dup]
    ids = pseudonyms(work.subject.tolist(), patient_salt(path))
    work = work.assign(day=(work.time - work.groupby("subject").time.transform("min")).dt.days)
    work = work.sort_values(["subject", "time", "tie"], kind="stable")
    work["order"] = work.groupby("subject").cumcount()
    cohort = {s: f"{hash_rank(s, COHORT_SALT):016x}" for s in ids}
    events = [Event(ids[r.subject], int(r.day), int(r.order), r.name, float(r.value), r.text, r.unit, int(i),
                    cohort[r.subject]) for i, r in zip(work.index, work.itertuples(index=False), strict=True)]
    return events, exclusions


def load_omr(path: Path, dataset: str = "mimic-omr") -> tuple[list[Event], list[Exclusion], int]:
    """Outpatient measurements: numeric results, and blood pressure ``sys/dia`` (value = systolic)."""
    frame = _read(path, "omr")
    times = pd.to_datetime(frame.chartdate, errors="coerce")
    numeric = pd.to_numeric(frame.result_value, errors="coerce")
    bp = frame.result_value.str.extract(_BLOOD_PRESSURE)
    is_bp = bp[0].notna()
    values = numeric.where(~is_bp, pd.to_numeric(bp[0], errors="coerce"))
    split = frame.result_name.str.extract(_NAME_UNIT)
    names = split[0].where(split[0].notna(), frame.result_name).str.strip()
    units = split[1].fillna("").where(~is_bp, "mmHg")
    reasons = pd.Series("", index=frame.index)
    reasons[values.isna()] = NON_NUMERIC
    reasons[times.isna()] = MISSING_TIME
    reasons[frame.subject_id.str.strip() == ""] = MISSING_PATIENT
    tie = pd.to_numeric(frame.seq_num, errors="coerce").fillna(0)
    events, exclusions = _events(dataset, path, frame, times, names, values, frame.result_value.str.strip(), units,
                                 reasons, tie)
    return events, exclusions, len(frame)


def load_labevents(path: Path, items_path: Path, dataset: str = "mimic-labs"
                   ) -> tuple[list[Event], list[Exclusion], int]:
    """Laboratory events with a numeric value; the name is ``d_labitems.label (fluid)``."""
    frame = _read(path, "labevents")
    items = _read(items_path, "d_labitems").set_index("itemid")
    label = frame.itemid.map(items.label)
    fluid = frame.itemid.map(items.fluid)
    names = (label + " (" + fluid.fillna("") + ")").str.replace(r" \(\)$", "", regex=True)
    times = pd.to_datetime(frame.charttime, errors="coerce")
    values = pd.to_numeric(frame.valuenum, errors="coerce")
    reasons = pd.Series("", index=frame.index)
    reasons[values.isna()] = NON_NUMERIC
    reasons[label.isna()] = UNKNOWN_ITEM
    reasons[times.isna()] = MISSING_TIME
    reasons[frame.subject_id.str.strip() == ""] = MISSING_PATIENT
    texts = values.map(lambda v: f"{v:g}" if pd.notna(v) else "")
    tie = pd.Series(range(len(frame)), index=frame.index)
    events, exclusions = _events(dataset, path, frame, times, names.fillna(""), values, texts, frame.valueuom,
                                 reasons, tie)
    return events, exclusions, len(frame)


def load_clinical(dataset: str, data_dir: Path | None = None, credentialed: bool = False) -> ClinicalLoad:
    """Every row of the dataset's table, as events or exclusions (raw = events + excluded);
    ``credentialed``: from credentialed MIMIC-IV only (:func:`find_table`)."""
    if dataset not in CLINICAL_DATASETS:
        raise ValueError(f"unknown clinical dataset {dataset!r}; choose one of {sorted(CLINICAL_DATASETS)}")
    table = CLINICAL_DATASETS[dataset]
    path = find_table(table, data_dir, credentialed)
    base = path.parents[2]
    if table == "omr":
        events, exclusions, rows = load_omr(path, dataset)
        used = [path]
    else:
        items = find_table("d_labitems", data_dir, credentialed)
        events, exclusions, rows = load_labevents(path, items, dataset)
        used = [path, items]
    files = [RawFile(p.relative_to(base.parent).as_posix(), sha256_file(p), rows if p == path else 0) for p in used]
    return ClinicalLoad(dataset, files, events, exclusions, len({e.patient for e in events}), rows)
