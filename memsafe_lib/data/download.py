"""``memsafe data download``: fetch the official QA files, verify them, then put them in place.

Files land as ``<dest_root>/<dataset>/<file>``, where the loaders look. Nothing unverified
ever reaches that path: every file is streamed to a hidden temporary file in the dataset
directory (the loaders skip dot-files), verified, and only then renamed into place with
``os.replace``. When any file of a dataset fails (HTTP error, checksum mismatch, wrong
record count, corrupt zip, missing member), every temporary file of that dataset is
removed, directories this run created are removed again if empty, and files that were
already there are left untouched. A file that is already present and verifies is skipped.

Verification of each file: its pinned ``sha256`` when the registry has one, else its
``git_blob_sha1`` when it has one (SQuAD's files are published in a git repository), else
no checksum; and always the expected record count of each extracted file when the
registry gives one. No official sha256 of these files is known, so none is pinned: the
download then says that only the record count was checked and prints the sha256 it
computed, so that it can be pinned after a trusted download.

The registry of sources (``sources.json`` beside this module)::

    {"datasets": {"<dataset>": {"files": [<file>, ...]}}}

    <file> = {
      "url":           official URL,
      "mirror_path":   "<dataset>/<name on mirror>"; fetched as <MEMSAFE_DATA_BASE_URL>/<mirror_path>
                       instead of "url" when that variable is set,
      "sha256":        hex | null   (checksum of the downloaded file),
      "git_blob_sha1": hex | null   (sha1(b"blob <size>\\0" + content), used when sha256 is null),
      "archive":       null | "zip",
      # "archive": null -- the download is the data file itself:
      "dest":          file name under the dataset directory,
      "records":       int | null   (expected record count),
      "format":        "jsonl" | "json_array" | "squad"   (squad: records = questions),
      # "archive": "zip" -- data files are extracted from it, the archive is not kept:
      "members": [{"member":  basename inside the zip (any folder in the zip matches),
                   "dest":    file name under the dataset directory,
                   "sha256":  hex | null (checksum of the extracted file; optional),
                   "records": int | null,
                   "format":  "jsonl" | "json_array" | "squad"}, ...]
    }

Environment: ``MEMSAFE_DATA_BASE_URL`` (a mirror, ``http(s)://`` or ``file://``) and
``MEMSAFE_DATA_SOURCES`` (path to another registry, e.g. one pinning fixture checksums).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import re
import shutil
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from memsafe_lib.config import data_dir
from memsafe_lib.data.readers import iter_jsonl, read_json, read_json_array
from memsafe_lib.errors import DataFormatError
from memsafe_lib.io import sha256_file
from memsafe_lib.progress import progress_bar

DEFAULT_SOURCES = Path(__file__).with_name("sources.json")
BASE_URL_ENV = "MEMSAFE_DATA_BASE_URL"
SOURCES_ENV = "MEMSAFE_DATA_SOURCES"
FORMATS: tuple[str, ...] = ("jsonl", "json_array", "squad")
ARCHIVES: tuple[str | None, ...] = (None, "zip")
TIMEOUT_S = 60.0
"""Socket timeout per connect/read; a stalled host fails instead of hanging forever."""
CHUNK = 1 << 20
USER_AGENT = "memsafe-data-download/0.1 (Python urllib)"

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_HEX40 = re.compile(r"[0-9a-fA-F]{40}")


class DownloadError(RuntimeError):
    """A fetch or a verification failed; the message names the url or file and what went wrong."""


@dataclass(frozen=True)
class Target:
    """One data file that ends up under the dataset directory, with what it must satisfy."""

    dest: str
    records: int | None
    format: str
    sha256: str | None = None
    git_blob_sha1: str | None = None
    member: str | None = None
    """Basename inside the archive; ``None`` when the download itself is the file."""


# ---------------------------------------------------------------- registry


def load_sources(path: Path | None = None) -> dict[str, Any]:
    """Read and validate the registry: ``path``, else ``$MEMSAFE_DATA_SOURCES``, else the packaged one.

    Validation happens up front so a typo in a registry fails before anything is fetched.
    """
    if path is None:
        env = os.environ.get(SOURCES_ENV)
        path = Path(env).expanduser() if env else DEFAULT_SOURCES
    path = Path(path)
    doc = read_json(path)
    _validate_sources(doc, path)
    return doc


def _validate_sources(doc: Any, path: Path) -> None:
    """Raise :class:`DataFormatError` naming the field of the first thing that is wrong."""
    if not isinstance(doc, dict) or not isinstance(doc.get("datasets"), dict) or not doc["datasets"]:
        raise DataFormatError(path, 'expected {"datasets": {"<name>": {"files": [...]}}}', field="datasets")
    for name, spec in doc["datasets"].items():
        where = f"datasets.{name}"
        files = spec.get("files") if isinstance(spec, dict) else None
        if not isinstance(files, list) or not files:
            raise DataFormatError(path, "expected a non-empty list", field=f"{where}.files")
        dests: set[str] = set()
        for i, entry in enumerate(files):
            at = f"{where}.files[{i}]"
            if not isinstance(entry, dict):
                raise DataFormatError(path, "expected a JSON object", field=at)
            for key in ("url", "mirror_path"):
                if not isinstance(entry.get(key), str) or not entry[key]:
                    raise DataFormatError(path, "expected a non-empty string", field=f"{at}.{key}")
            parts = PurePosixPath(entry["mirror_path"]).parts
            if len(parts) < 2 or parts[0] != name or ".." in parts:
                raise DataFormatError(path, f"expected '{name}/<file name on the mirror>'", field=f"{at}.mirror_path")
            _check_hex(entry.get("sha256"), _HEX64, path, f"{at}.sha256")
            _check_hex(entry.get("git_blob_sha1"), _HEX40, path, f"{at}.git_blob_sha1")
            archive = entry.get("archive")
            if archive not in ARCHIVES:
                raise DataFormatError(path, f"expected one of {list(ARCHIVES)}, found {archive!r}",
                                      field=f"{at}.archive")
            if archive is None:
                _check_target(entry, path, at, dests)
                continue
            members = entry.get("members")
            if not isinstance(members, list) or not members:
                raise DataFormatError(path, "an archive needs a non-empty list of members", field=f"{at}.members")
            for j, member in enumerate(members):
                mat = f"{at}.members[{j}]"
                if not isinstance(member, dict):
                    raise DataFormatError(path, "expected a JSON object", field=mat)
                if not _is_plain_name(member.get("member")):
                    raise DataFormatError(path, "expected a file name (basename inside the zip)", field=f"{mat}.member")
                _check_hex(member.get("sha256"), _HEX64, path, f"{mat}.sha256")
                _check_target(member, path, mat, dests)


def _check_hex(value: Any, pattern: re.Pattern[str], path: Path, field: str) -> None:
    if value is not None and not (isinstance(value, str) and pattern.fullmatch(value)):
        raise DataFormatError(path, f"expected null or a hex digest, found {value!r}", field=field)


def _is_plain_name(value: Any) -> bool:
    """A bare file name: no folders, no '..', not hidden (hidden names are our temp files)."""
    return isinstance(value, str) and bool(value) and "/" not in value and "\\" not in value \
        and not value.startswith(".")


def _check_target(spec: dict[str, Any], path: Path, at: str, dests: set[str]) -> None:
    dest = spec.get("dest")
    if not _is_plain_name(dest):
        raise DataFormatError(path, "expected a plain file name under the dataset directory", field=f"{at}.dest")
    if dest in dests:
        raise DataFormatError(path, f"two files of the dataset have dest {dest!r}", field=f"{at}.dest")
    dests.add(dest)
    records = spec.get("records")
    if records is not None and (not isinstance(records, int) or isinstance(records, bool) or records < 0):
        raise DataFormatError(path, f"expected null or a record count, found {records!r}", field=f"{at}.records")
    if spec.get("format") not in FORMATS:
        raise DataFormatError(path, f"expected one of {list(FORMATS)}, found {spec.get('format')!r}",
                              field=f"{at}.format")


def targets(entry: dict[str, Any]) -> list[Target]:
    """The data files one registry entry yields (one for a plain file, one per member of an archive)."""
    if entry.get("archive") is None:
        return [Target(entry["dest"], entry.get("records"), entry["format"],
                       sha256=entry.get("sha256"), git_blob_sha1=entry.get("git_blob_sha1"))]
    return [Target(m["dest"], m.get("records"), m["format"], sha256=m.get("sha256"), member=m["member"])
            for m in entry["members"]]


def resolve_url(entry: dict[str, Any], base_url: str | None) -> str:
    """The official url, or ``<base_url>/<mirror_path>`` when a mirror is given."""
    if not base_url:
        return str(entry["url"])
    return f"{base_url.rstrip('/')}/{urllib.parse.quote(entry['mirror_path'])}"


# ---------------------------------------------------------------- verification


def git_blob_sha1(path: Path) -> str:
    """``git hash-object`` of a file: sha1 of ``b"blob <size>\\0"`` + content.

    Files published in a git repository (SQuAD's GitHub pages) can be checked against the
    blob ids git shows, even though no sha256 was ever published for them.
    """
    digest = hashlib.sha1(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def count_records(path: Path, fmt: str) -> int:
    """Records in a file of the given format; raises :class:`DataFormatError` if it is not that format.

    For SQuAD a record is a question (the sum of ``qas`` over ``data[].paragraphs[]``), the
    unit the loaders produce.
    """
    if fmt == "jsonl":
        return sum(1 for _ in iter_jsonl(path))
    if fmt == "json_array":
        return len(read_json_array(path))
    if fmt != "squad":
        raise ValueError(f"unknown format {fmt!r}; choose one of {list(FORMATS)}")
    doc = read_json(path)
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise DataFormatError(path, 'expected a SQuAD document {"data": [...]}', field="data")
    count = 0
    for a, article in enumerate(data):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            raise DataFormatError(path, "expected a list", field=f"data[{a}].paragraphs")
        for p, para in enumerate(paragraphs):
            qas = para.get("qas") if isinstance(para, dict) else None
            if not isinstance(qas, list):
                raise DataFormatError(path, "expected a list", field=f"data[{a}].paragraphs[{p}].qas")
            count += len(qas)
    return count


def _html_hint(path: Path) -> str:
    """Hosts like Google Drive answer with an HTML page (quota, confirmation) instead of the file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(512).lstrip().lower()
    except OSError:
        return ""
    if head.startswith((b"<!doctype html", b"<html")):
        return ("; the server sent an HTML page instead of the file (a quota or confirmation page?): "
                "download it in a browser and place it under the data directory, or set " + BASE_URL_ENV)
    return ""


def _check_digests(path: Path, sha256: str | None, blob: str | None, label: str) -> tuple[str | None, str]:
    """Check the pinned checksum; return (what was verified or None if nothing pinned, the sha256)."""
    actual = sha256_file(path)
    if sha256:
        if actual != sha256.lower():
            raise DownloadError(f"{label}: sha256 mismatch: expected {sha256.lower()}, got {actual}{_html_hint(path)}")
        return f"sha256 {actual} verified", actual
    if blob:
        actual_blob = git_blob_sha1(path)
        if actual_blob != blob.lower():
            raise DownloadError(
                f"{label}: git blob sha1 mismatch: expected {blob.lower()}, got {actual_blob}{_html_hint(path)}"
            )
        return f"git blob sha1 {actual_blob} verified (sha256 {actual}, not pinned)", actual
    return None, actual


def _check_records(path: Path, target: Target, label: str) -> int:
    """Count records (which also proves the file parses); compare with the expected count."""
    try:
        found = count_records(path, target.format)
    except DataFormatError as exc:
        # Re-anchor the error on the url/member: the temp path means nothing to the user.
        located = DataFormatError(label, exc.reason + _html_hint(path), line=exc.line, record=exc.record,
                                  record_id=exc.record_id, field=exc.field)
        raise DownloadError(f"{located} (expected {target.format})") from None
    if target.records is not None and found != target.records:
        raise DownloadError(f"{label}: wrong record count: expected {target.records:,} records, found {found:,}")
    return found


def _verify(path: Path, target: Target, label: str) -> str:
    """Full verification of one data file; returns a line saying what was checked."""
    verified, actual = _check_digests(path, target.sha256, target.git_blob_sha1, label)
    found = _check_records(path, target, label)
    count = f"{found:,} records" + (" as expected" if target.records is not None else " (no expected count)")
    if verified:
        return f"{verified}, {count}"
    if target.records is None:
        return f"{count}; NOTHING was verified (no checksum, no count pinned); sha256 {actual}"
    return f"{count}; no checksum pinned, so only the record count was checked; sha256 {actual} (pin it)"


def _verified_in_place(path: Path, target: Target, say: Callable[[str], None], shown: str) -> bool:
    """Whether an existing file passes verification (then it is skipped, not downloaded again)."""
    try:
        note = _verify(path, target, str(path))
    except DownloadError as exc:
        say(f"{shown}: present but does not verify ({exc}); downloading again")
        return False
    say(f"{shown}: already present and verified ({note}); skipped")
    return True


# ---------------------------------------------------------------- fetching


class _NoBar:
    """Stands in for tqdm when there is no bar to draw."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress_bar(total: int | None, desc: str, enabled: bool) -> Any:
    if enabled:
        return progress_bar(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, leave=False)
    return _NoBar()


def _fetch(url: str, directory: Path, name: str, progress: bool) -> Path:
    """Stream ``url`` into a hidden temporary file in ``directory``; the caller owns (and removes) it."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".download.tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
            try:
                response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
            except urllib.error.HTTPError as exc:
                raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            except urllib.error.URLError as exc:
                raise DownloadError(f"{url}: cannot fetch ({exc.reason})") from None
            except (OSError, http.client.HTTPException) as exc:
                raise DownloadError(f"{url}: cannot fetch ({type(exc).__name__}: {exc})") from None
            with response:
                length = response.headers.get("Content-Length")
                total = int(length) if length and length.isdigit() else None
                bar = _progress_bar(total, name, progress)
                received = 0
                try:
                    while True:
                        try:
                            chunk = response.read(CHUNK)
                        except (OSError, http.client.HTTPException) as exc:
                            raise DownloadError(
                                f"{url}: connection lost after {received:,} bytes ({type(exc).__name__}: {exc})"
                            ) from None
                        if not chunk:
                            break
                        out.write(chunk)
                        received += len(chunk)
                        bar.update(len(chunk))
                finally:
                    bar.close()
            if total is not None and received != total:
                raise DownloadError(f"{url}: truncated download: received {received:,} of {total:,} bytes")
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _find_member(zf: zipfile.ZipFile, basename: str, label: str) -> zipfile.ZipInfo:
    """The one archive member with this basename, in whatever folder the archive puts it."""
    found = [
        info for info in zf.infolist()
        if not info.is_dir()
        and PurePosixPath(info.filename).name == basename
        and "__MACOSX" not in PurePosixPath(info.filename).parts
    ]
    if not found:
        names = [i.filename for i in zf.infolist() if not i.is_dir()]
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise DownloadError(f"{label}: member {basename!r} not found in the zip (it has: {shown or 'nothing'})")
    if len(found) > 1:
        raise DownloadError(f"{label}: member {basename!r} is ambiguous: {[i.filename for i in found]}")
    return found[0]


def _extract(archive: Path, wanted: list[Target], directory: Path, label: str) -> list[tuple[Path, Target]]:
    """Extract each wanted member to a hidden temporary file; on any failure none is left behind."""
    extracted: list[tuple[Path, Target]] = []
    try:
        try:
            zf = zipfile.ZipFile(archive)
        except (zipfile.BadZipFile, OSError) as exc:
            raise DownloadError(f"{label}: not a valid zip archive ({exc}){_html_hint(archive)}") from None
        with zf:
            for target in wanted:
                info = _find_member(zf, str(target.member), label)
                fd, tmp_name = tempfile.mkstemp(prefix=f".{target.dest}.", suffix=".tmp", dir=directory)
                extracted.append((Path(tmp_name), target))
                try:
                    with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                        shutil.copyfileobj(src, out, CHUNK)
                        out.flush()
                        os.fsync(out.fileno())
                except (zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError) as exc:
                    raise DownloadError(f"{label}: corrupt zip member {info.filename!r} ({exc})") from None
    except BaseException:
        for tmp, _ in extracted:
            tmp.unlink(missing_ok=True)
        raise
    return extracted


def _make_dirs(directory: Path) -> list[Path]:
    """Create ``directory`` and missing parents; return those created, outermost first."""
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    directory.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


# ---------------------------------------------------------------- public entry points


def download_dataset(
    name: str,
    dest_root: Path,
    *,
    base_url: str | None = None,
    sources: dict[str, Any] | None = None,
    progress: bool = True,
) -> list[Path]:
    """Fetch, verify and install every file of ``name`` under ``dest_root/name``; return their paths.

    ``base_url``/``sources`` default to ``$MEMSAFE_DATA_BASE_URL`` (else the official urls)
    and :func:`load_sources`. All files of the dataset are staged and verified before any
    is renamed into place, so a failure leaves the destination as it was; raises
    :class:`DownloadError` (or ``ValueError`` for an unknown dataset).
    """
    registry = sources if sources is not None else load_sources()
    datasets = registry["datasets"]
    if name not in datasets:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(datasets))}")
    if base_url is None:
        base_url = os.environ.get(BASE_URL_ENV) or None
    say: Callable[[str], None] = lambda line: print(line, flush=True)  # noqa: E731
    directory = Path(dest_root) / name
    created = _make_dirs(directory)
    staged: list[tuple[Path, Path]] = []  # (verified temp file, final path)
    result: list[Path] = []
    try:
        for entry in datasets[name]["files"]:
            url = resolve_url(entry, base_url)
            todo: list[Target] = []
            for target in targets(entry):
                final = directory / target.dest
                result.append(final)
                if not (final.is_file() and _verified_in_place(final, target, say, f"{name}/{target.dest}")):
                    todo.append(target)
            if not todo:
                continue
            say(f"{name}: fetching {url}")
            download = _fetch(url, directory, PurePosixPath(entry["mirror_path"]).name, progress)
            if entry.get("archive") is None:
                staged.append((download, directory / todo[0].dest))
                say(f"  {name}/{todo[0].dest}: {_verify(download, todo[0], url)}")
                continue
            try:
                verified, actual = _check_digests(download, entry.get("sha256"), entry.get("git_blob_sha1"), url)
                unpinned = f"no checksum pinned, only the members' record counts are checked; sha256 {actual} (pin it)"
                say(f"  archive: {verified or unpinned}")
                members = _extract(download, todo, directory, url)
                staged.extend((tmp, directory / target.dest) for tmp, target in members)
                for tmp, target in members:
                    say(f"  {name}/{target.dest}: {_verify(tmp, target, f'{url} [member {target.member}]')}")
            finally:
                download.unlink(missing_ok=True)
        for tmp, final in staged:
            os.replace(tmp, final)
            say(f"  saved {final}")
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        for folder in reversed(created):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only succeeds when empty, i.e. when nothing of ours is in it
        raise
    return result


def main_download(dataset: str | None, dest_root: Path) -> int:
    """CLI backend: download one dataset (or every one in the registry); 0 on success.

    Reads ``$MEMSAFE_DATA_BASE_URL`` and ``$MEMSAFE_DATA_SOURCES``. Each failure is one line
    on stderr naming the url or file and what failed; the other datasets are still tried.
    """
    try:
        registry = load_sources()
    except (OSError, ValueError) as exc:  # DataFormatError is a ValueError
        print(f"memsafe data download: error: cannot read the source registry: {exc}", file=sys.stderr)
        return 2
    names = [dataset] if dataset is not None else list(registry["datasets"])
    base_url = os.environ.get(BASE_URL_ENV) or None
    if base_url:
        print(f"fetching from the mirror {base_url} ({BASE_URL_ENV}) instead of the official urls")
    progress = sys.stderr.isatty()  # no carriage-return bars in logs
    failed: list[str] = []
    for name in names:
        try:
            files = download_dataset(name, dest_root, base_url=base_url, sources=registry, progress=progress)
        except (DownloadError, ValueError, OSError) as exc:
            message = " ".join(str(exc).split())
            print(f"memsafe data download: error: {name}: {message}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"{name}: {len(files)} file(s) ready under {Path(dest_root) / name}")
    if failed:
        print(f"memsafe data download: failed: {', '.join(failed)}; nothing partial was left behind",
              file=sys.stderr)
        return 1
    return 0


__all__ = [
    "BASE_URL_ENV", "DEFAULT_SOURCES", "FORMATS", "SOURCES_ENV", "DownloadError", "Target",
    "count_records", "download_dataset", "git_blob_sha1", "load_sources", "main_download",
    "resolve_url", "targets",
]

if __name__ == "__main__":  # pragma: no cover - convenience: python -m memsafe_lib.data.download [dataset]
    sys.exit(main_download(sys.argv[1] if len(sys.argv) > 1 else None, data_dir()))
