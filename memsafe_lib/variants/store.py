"""Memory variants built once and stored: every later step reads them instead of re-parsing
the raw files.

A stored construction is keyed by (dataset, construction, the scale's record cap, the raw
files' sha256, the source of the loaders and of the construction). A changed raw file or a
changed construction rule gives a new key, so the variants are rebuilt; anything else
(a new model, a notebook edit) reuses them. They live in
``artifacts/<scale>/variants/.cache/`` (never committed; delete the folder to rebuild):

* ``<dataset>-<construction>-<key>.variants.jsonl.gz``: one :class:`Variant` per line
  (``Variant.to_dict``), the format ``memsafe construct`` writes;
* ``<dataset>-<construction>-<key>.json``: the load summary (raw files with hashes, the
  loader's exclusions and warnings) and the construction's exclusions; written last, so its
  presence means the pair is complete.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict
from functools import cache
from pathlib import Path

from memsafe_lib import config
from memsafe_lib.config import ClinicalSetting, ScaleConfig
from memsafe_lib.data.loader import load_dataset, require_files
from memsafe_lib.data.mimic import CLINICAL_DATASETS, load_clinical
from memsafe_lib.data.records import Exclusion, LoadSummary, RawFile
from memsafe_lib.io import atomic_open, canonical_json, sha256_bytes, sha256_file, write_json
from memsafe_lib.progress import log
from memsafe_lib.variants.clinical import build_clinical
from memsafe_lib.variants.construction import ConstructionResult, Variant, construct, default_construction

FORMAT = 1


@cache
def construction_code() -> str:
    """sha256 of the source that turns raw files into variants (loaders and construction)."""
    lib = config.REPO_ROOT / "memsafe_lib"
    files = sorted([*lib.joinpath("data").glob("*.py"), lib / "variants" / "construction.py"])
    return sha256_bytes("\n".join(f"{p.relative_to(lib).as_posix()}\x1f{sha256_file(p)}" for p in files).encode())


def store_key(dataset: str, construction: str, scale: ScaleConfig, data_dir: Path | None = None) -> str:
    """The key of a stored construction; hashing the raw files costs far less than parsing them."""
    root = (data_dir or config.data_dir()).resolve()
    files = require_files(dataset, root)
    raw = [(p.relative_to(root).as_posix(), sha256_file(p)) for p in files]
    parts = {"format": FORMAT, "dataset": dataset, "construction": construction,
             "max_base_queries": scale.base_query_cap(dataset), "files": raw, "code": construction_code()}
    return sha256_bytes(canonical_json(parts).encode())[:16]


def _paths(dataset: str, construction: str, key: str, scale: ScaleConfig) -> tuple[Path, Path]:
    stem = scale.cache_dir(config.VARIANTS) / f"{dataset}-{construction}-{key}"
    return stem.with_suffix(".variants.jsonl.gz"), stem.with_suffix(".json")


def _write(variants_file: Path, meta_file: Path, loaded: LoadSummary, result: ConstructionResult) -> None:
    with atomic_open(variants_file, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz:
        for v in result.variants:
            gz.write((json.dumps(v.to_dict(), ensure_ascii=False, separators=(",", ":")) + "\n").encode())
    write_json(meta_file, {
        "format": FORMAT, "dataset": loaded.dataset, "construction": result.construction,
        "files": [asdict(f) for f in loaded.files],
        "load_exclusions": [asdict(e) for e in loaded.exclusions], "warnings": loaded.warnings,
        "construction_exclusions": [asdict(e) for e in result.exclusions[len(loaded.exclusions):]],
        "absent": [asdict(e) for e in result.absent], "n_variants": len(result.variants),
    })


def _read(variants_file: Path, meta_file: Path) -> tuple[LoadSummary, ConstructionResult]:
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    with gzip.open(variants_file, "rt", encoding="utf-8") as fh:
        variants = [Variant.from_dict(json.loads(line)) for line in fh]
    if len(variants) != meta["n_variants"]:
        raise ValueError(f"{variants_file}: {len(variants)} variants, its summary says {meta['n_variants']}; "
                         "delete the file to rebuild it")
    load_exclusions = [Exclusion(**e) for e in meta["load_exclusions"]]
    loaded = LoadSummary(meta["dataset"], [RawFile(**f) for f in meta["files"]], load_exclusions, meta["warnings"])
    result = ConstructionResult(meta["dataset"], meta["construction"], variants,
                                [*load_exclusions, *(Exclusion(**e) for e in meta["construction_exclusions"])],
                                [Exclusion(**e) for e in meta["absent"]])
    return loaded, result


def build(dataset: str, construction: str | None, scale: ScaleConfig, data_dir: Path | None = None,
          clinical: ClinicalSetting | None = None) -> tuple[LoadSummary, ConstructionResult]:
    """The variants of ``dataset`` under ``construction`` (default: size-matched; native for
    SQuAD 2.0) at ``scale``'s record cap: read from the store, or built from the raw files
    and stored. Raw = used + excluded holds for what is read as for what is built.

    Clinical datasets (MIMIC-IV) are built in memory every time and never stored: their
    memories hold a person's measurements, which must not be written under ``artifacts/``.
    ``clinical`` picks a clinical selection (patient fraction and question cap; default the
    scale's first setting for the dataset)."""
    if dataset in CLINICAL_DATASETS:
        return build_clinical_dataset(dataset, scale, data_dir, clinical)
    construction = construction or default_construction(dataset)
    key = store_key(dataset, construction, scale, data_dir)
    variants_file, meta_file = _paths(dataset, construction, key, scale)
    if meta_file.exists() and variants_file.exists():
        return _read(variants_file, meta_file)
    loaded = load_dataset(dataset, data_dir, max_base_queries=scale.base_query_cap(dataset))
    result = construct(loaded, construction)
    summary = loaded.summary()
    _write(variants_file, meta_file, summary, result)
    log(f"{dataset}/{construction}: {len(result.variants)} variants built and stored ({variants_file.name})")
    return summary, result


def build_clinical_dataset(dataset: str, scale: ScaleConfig, data_dir: Path | None = None,
                           setting: ClinicalSetting | None = None) -> tuple[LoadSummary, ConstructionResult]:
    """A clinical dataset under one selection (see :mod:`memsafe_lib.variants.clinical`), named
    by it: ``clinical-cap3000``, ``clinical-1in16-cap60000``."""
    setting = setting or scale.clinical.setting(dataset)
    if setting.dataset != dataset:
        raise ValueError(f"clinical setting {setting} is for {setting.dataset}, not {dataset}")
    load = load_clinical(dataset, data_dir, credentialed=scale.clinical.credentialed)
    result = build_clinical(load, memory_size=scale.clinical.memory_size(dataset),
                            patient_fraction=setting.patient_fraction, question_cap=setting.question_cap)
    result.construction = setting.construction
    summary = LoadSummary(dataset, load.files, list(load.exclusions), list(load.warnings))
    return summary, result
