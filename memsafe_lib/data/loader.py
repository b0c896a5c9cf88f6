"""Find every file of a dataset under ``MEMSAFE_DATA_DIR/<dataset>/`` and load it.

Complete official files and the ``subsets/`` (or any other sub-folder) are read
alike and de-duplicated by record id. Each raw record ends up either as a
:class:`BaseQuery` or as an :class:`Exclusion` with its reason; the counts add up.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memsafe_lib import config
from memsafe_lib.data import formats
from memsafe_lib.data.fields import Where
from memsafe_lib.data.records import BaseQuery, Exclusion, LoadResult, Provenance, RawFile
from memsafe_lib.errors import DataFormatError
from memsafe_lib.io import canonical_json, sha256_file
from memsafe_lib.progress import progress_bar

SIDE_CAR_SUFFIXES = (".sources.json", ".notes.json")
SCALE_CAP = "not sampled at this scale (per-dataset cap)"


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    suffixes: tuple[str, ...]
    iter_records: Callable[[Path], Iterator[formats.RawRecord]]
    parse: Callable[[Any, Where, Provenance], formats.Parsed]
    official: str
    """Human description of the official files, printed by ``memsafe data check``."""


DATASETS: dict[str, DatasetSpec] = {
    "musique": DatasetSpec(
        "musique", (".jsonl", ".jsonl.gz"), formats.iter_musique, formats.parse_musique,
        "musique_{ans,full}_v1.0_{train,dev}.jsonl",
    ),
    "hotpotqa": DatasetSpec(
        "hotpotqa", (".json", ".json.gz"), formats.iter_json_array, formats.parse_hotpotqa,
        "hotpot_train_v1.1.json, hotpot_dev_distractor_v1.json",
    ),
    "2wikimultihopqa": DatasetSpec(
        "2wikimultihopqa", (".json", ".json.gz"), formats.iter_json_array, formats.parse_2wiki,
        "train.json, dev.json, test.json",
    ),
    "squad2": DatasetSpec(
        "squad2", (".json", ".json.gz"), formats.iter_squad, formats.parse_squad,
        "train-v2.0.json, dev-v2.0.json",
    ),
}


def dataset_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; choose one of {sorted(DATASETS)}") from None


def discover_files(name: str, data_dir: Path | None = None) -> tuple[list[Path], list[Path]]:
    """Return ``(data_files, ignored_files)`` under ``<data_dir>/<name>/``.

    Files directly in the dataset folder (complete official files) come before files in
    sub-folders (subsets), so on duplicate ids the complete file is the one we cite.
    """
    spec = dataset_spec(name)
    root = (data_dir or config.data_dir()) / name
    if not root.is_dir():
        return [], []
    found, ignored = [], []
    for path in root.rglob("*"):
        if not path.is_file() or path.name.startswith("."):
            continue
        if path.name.endswith(spec.suffixes) and not path.name.endswith(SIDE_CAR_SUFFIXES):
            found.append(path)
        else:
            ignored.append(path)
    order = lambda p: (len(p.relative_to(root).parts), str(p.relative_to(root)))  # noqa: E731
    return sorted(found, key=order), sorted(ignored, key=order)


def hash_rank(text: str, salt: str) -> int:
    """Deterministic pseudo-random rank of ``text`` (salted SHA-256, first 64 bits)."""
    return int.from_bytes(hashlib.sha256(f"{salt}\x1f{text}".encode()).digest()[:8], "big")


def require_files(name: str, data_dir: Path) -> list[Path]:
    """The data files of ``name``, or an error that says where they were expected and how to get them."""
    files, _ = discover_files(name, data_dir)
    if not files:
        origin = f" ({config.data_dir_origin()})" if data_dir == config.data_dir() else ""
        raise FileNotFoundError(
            f"no {name} files under {data_dir / name}{origin}; expected {dataset_spec(name).official}. "
            f"Set MEMSAFE_DATA_DIR to the folder that holds {name}/, or run `memsafe data download --dataset {name}`"
        )
    return files


def load_dataset(
    name: str,
    data_dir: Path | None = None,
    *,
    max_base_queries: int | None = None,
    progress: bool = False,
) -> LoadResult:
    """Load every raw record of ``name``; see the module docstring for the guarantees."""
    spec = dataset_spec(name)
    data_dir = (data_dir or config.data_dir()).resolve()
    files = require_files(name, data_dir)
    raw_files: list[RawFile] = []
    queries: list[BaseQuery] = []
    exclusions: list[Exclusion] = []
    warnings: list[str] = []
    seen: dict[str, tuple[str, str, int]] = {}  # dedupe key -> (content hash, file, index)
    for path in progress_bar(files, desc=f"load {name}", disable=not progress, leave=False):
        rel = str(path.relative_to(data_dir))
        digest = sha256_file(path)
        count = 0
        for where, index, raw in spec.iter_records(path):
            count += 1
            content = hashlib.sha256(canonical_json(raw).encode()).hexdigest()
            parsed = spec.parse(raw, where, Provenance(rel, index, digest))
            earlier = seen.get(parsed.dedupe_key)
            if earlier is not None:
                if earlier[0] != content:
                    raise DataFormatError(
                        path,
                        f"duplicate id with different content (first seen in {earlier[1]} record {earlier[2]})",
                        line=where.line, record=where.record, record_id=parsed.record_id, field="id",
                    )
                exclusions.append(
                    Exclusion(name, parsed.record_id, formats.DUPLICATE, rel, index,
                              detail=f"{earlier[1]} record {earlier[2]}")
                )
                continue
            seen[parsed.dedupe_key] = (content, rel, index)
            warnings.extend(parsed.warnings)
            if isinstance(parsed.result, formats.Skip):
                exclusions.append(
                    Exclusion(name, parsed.record_id, parsed.result.reason, rel, index, detail=parsed.result.detail)
                )
            else:
                queries.append(parsed.result)
        raw_files.append(RawFile(rel, digest, count))
    result = LoadResult(name, raw_files, queries, exclusions, warnings)
    if max_base_queries is not None:
        result = apply_cap(result, max_base_queries)
    return result


def apply_cap(result: LoadResult, max_base_queries: int) -> LoadResult:
    """Keep the ``max_base_queries`` base ids first in salted-hash order; exclude the rest.

    Twins sharing an id (MuSiQue-Full answerable/unanswerable) are kept or dropped together.
    """
    ids = sorted({q.id for q in result.queries}, key=lambda i: (hash_rank(i, "memsafe-scale-cap-v1"), i))
    keep = set(ids[:max_base_queries])
    kept = [q for q in result.queries if q.id in keep]
    capped = [
        Exclusion(result.dataset, q.id, SCALE_CAP, q.provenance.file, q.provenance.record_index, stage="scale")
        for q in result.queries
        if q.id not in keep
    ]
    return LoadResult(result.dataset, result.files, kept, result.exclusions + capped, result.warnings)
