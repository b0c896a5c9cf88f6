"""Reading raw JSON / JSON Lines files with errors that point at the right line.

Official files are either one JSON array (HotpotQA, 2WikiMultiHopQA), one JSON object
(SQuAD 2.0) or JSON Lines (MuSiQue), optionally gzip-compressed. Whatever goes wrong
(truncation, a line that is not JSON, bytes that are not UTF-8, an empty file) is turned
into a :class:`DataFormatError` naming the file and line.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memsafe_lib.errors import DataFormatError
from memsafe_lib.io import open_maybe_gzip


def read_bytes(path: Path) -> bytes:
    try:
        with open_maybe_gzip(path) as fh:
            data = fh.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataFormatError(path, f"corrupt or truncated gzip stream ({exc})") from None
    if not data.strip():
        raise DataFormatError(path, "file is empty")
    return data


def decode_utf8(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DataFormatError(
            path, f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})", line=line
        ) from None


def read_json(path: Path) -> Any:
    """Parse a whole-file JSON document."""
    text = decode_utf8(path, read_bytes(path))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # Truncation shows as an error at the very end, or a string that never closes.
        truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        hint = "truncated JSON" if truncated else "invalid JSON"
        raise DataFormatError(path, f"{hint}: {exc.msg} (column {exc.colno})", line=exc.lineno) from None


def read_json_array(path: Path) -> list[Any]:
    data = read_json(path)
    if not isinstance(data, list):
        raise DataFormatError(path, f"expected a JSON array of records, found {type(data).__name__}")
    return data


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, record)`` for every non-blank line (line numbers are 1-based)."""
    data = read_bytes(path)
    lineno = 0
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataFormatError(path, f"not valid UTF-8 (offset {exc.start} in line)", line=lineno) from None
        try:
            yield lineno, json.loads(text)
        except json.JSONDecodeError as exc:
            message = f"line is not valid JSON: {exc.msg} (column {exc.colno})"
            raise DataFormatError(path, message, line=lineno) from None
