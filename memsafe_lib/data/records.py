"""The record types every loader produces and every later stage consumes."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Unit:
    """One memory unit (a paragraph) as it appears in the source context."""

    unit_id: str
    title: str
    text: str
    is_evidence: bool
    source_position: int
    """Index of the unit in the original context (0-based)."""


@dataclass(frozen=True)
class Provenance:
    """Where a record came from: enough to open the raw file at the right place."""

    file: str
    """Path relative to the data directory."""
    record_index: int
    """0-based index of the record in its file (JSON arrays) or line number - 1 (JSON Lines)."""
    file_sha256: str


@dataclass(frozen=True)
class BaseQuery:
    """A question with its full context, before any memory is constructed from it."""

    id: str
    dataset: str
    question: str
    answers: tuple[str, ...]
    units: tuple[Unit, ...]
    answerable: bool
    provenance: Provenance
    meta: dict[str, Any] = field(default_factory=dict, compare=False)
    """Dataset-specific extras (hop count, question type, level, ...)."""

    @property
    def evidence(self) -> tuple[Unit, ...]:
        return tuple(u for u in self.units if u.is_evidence)

    @property
    def distractors(self) -> tuple[Unit, ...]:
        return tuple(u for u in self.units if not u.is_evidence)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Exclusion:
    """A raw record that was not used, and why. Nothing is ever dropped without one."""

    dataset: str
    record_id: str
    reason: str
    file: str
    record_index: int
    stage: str = "load"
    """``load`` (the record itself is unusable) or a construction name."""
    detail: str = ""


@dataclass(frozen=True)
class RawFile:
    """A raw file that was read, with its hash for the ledger."""

    path: str
    """Relative to the data directory."""
    sha256: str
    records: int


@dataclass
class LoadResult:
    """Everything a loader found in a dataset directory.

    ``raw_records == len(queries) + len(exclusions)`` always holds; a test checks it.
    """

    dataset: str
    files: list[RawFile]
    queries: list[BaseQuery]
    exclusions: list[Exclusion]
    warnings: list[str] = field(default_factory=list)
    """Kept records with a recorded oddity (e.g. a supporting-fact sentence index out of range)."""

    @property
    def raw_records(self) -> int:
        return sum(f.records for f in self.files)

    def summary(self) -> LoadSummary:
        return LoadSummary(self.dataset, list(self.files), list(self.exclusions), list(self.warnings))


@dataclass
class LoadSummary:
    """A load without its parsed queries: raw files (with hashes), the loader's exclusions and
    warnings. Stored variants carry it, so later steps cite their raw files without re-parsing."""

    dataset: str
    files: list[RawFile]
    exclusions: list[Exclusion]
    warnings: list[str] = field(default_factory=list)

    @property
    def raw_records(self) -> int:
        return sum(f.records for f in self.files)
