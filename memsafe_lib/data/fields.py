"""Typed field access that fails with the file, record and field named."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from memsafe_lib.errors import DataFormatError

T = TypeVar("T")

_TYPE_NAMES = {str: "string", int: "integer", bool: "boolean", list: "list", dict: "object"}


@dataclass(frozen=True)
class Where:
    """Location of the record being parsed, carried into every error message."""

    path: Path
    line: int | None = None
    record: int | None = None
    record_id: str | None = None
    prefix: str = ""
    """Path of the record inside the file (SQuAD nests questions in articles and paragraphs)."""

    def error(self, message: str, field: str | None = None) -> DataFormatError:
        if self.prefix:
            field = f"{self.prefix}.{field}" if field else self.prefix
        return DataFormatError(
            self.path, message, line=self.line, record=self.record, record_id=self.record_id, field=field
        )

    def with_id(self, record_id: str) -> Where:
        return Where(self.path, self.line, self.record, record_id, self.prefix)


def _is(value: Any, kind: type) -> bool:
    if kind is int:  # bool is a subclass of int; a boolean is never a valid count or index
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def require(record: Any, name: str, kind: type[T], where: Where, *, path: str | None = None) -> T:
    """Return ``record[name]``, checking presence and type."""
    label = path or name
    if not isinstance(record, dict):
        raise where.error(f"expected a JSON object, found {type(record).__name__}", field=path)
    if name not in record:
        raise where.error("missing required field", field=label)
    value = record[name]
    if not _is(value, kind):
        raise where.error(
            f"expected {_TYPE_NAMES.get(kind, kind.__name__)}, found {type(value).__name__} ({value!r:.60})",
            field=label,
        )
    return value


def optional(record: dict[str, Any], name: str, kind: type[T], where: Where, default: T) -> T:
    if name not in record or record[name] is None:
        return default
    return require(record, name, kind, where)


def check(value: Any, kind: type[T], where: Where, field: str) -> T:
    if not _is(value, kind):
        raise where.error(f"expected {_TYPE_NAMES.get(kind, kind.__name__)}, found {type(value).__name__}", field=field)
    return value
