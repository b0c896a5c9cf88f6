"""Loaders for the official QA dataset files (MIMIC-IV comes with the clinical issue)."""

from memsafe_lib.data.loader import DATASETS, dataset_spec, discover_files, load_dataset
from memsafe_lib.data.records import BaseQuery, Exclusion, LoadResult, Provenance, RawFile, Unit

__all__ = [
    "DATASETS", "BaseQuery", "Exclusion", "LoadResult", "Provenance", "RawFile", "Unit",
    "dataset_spec", "discover_files", "load_dataset",
]
