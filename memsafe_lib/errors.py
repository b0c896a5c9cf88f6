"""One error type for bad input, so every caller can report file, record and field alike."""

from __future__ import annotations

from pathlib import Path


class DataFormatError(ValueError):
    """A raw or processed file does not have the shape we expect.

    The message always names the file and, where known, the line (JSON Lines) or
    record index (JSON arrays), the record id and the offending field, so a user can
    open the file at the right place.
    """

    def __init__(
        self,
        path: str | Path,
        message: str,
        *,
        line: int | None = None,
        record: int | None = None,
        record_id: str | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.record = record
        self.record_id = record_id
        self.field = field
        self.reason = message
        where = [self.path]
        if line is not None:
            where.append(f"line {line}")
        if record is not None:
            where.append(f"record {record}")
        if record_id is not None:
            where.append(f"id {record_id!r}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}")
