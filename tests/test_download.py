"""``memsafe data download`` against a real local HTTP server serving tiny official-format fixtures.

Nothing here touches the real hosts: every file is fetched from ``MEMSAFE_DATA_BASE_URL``
(a ThreadingHTTPServer on 127.0.0.1) and checked against a test registry that pins the
fixtures' real checksums and record counts.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import shutil
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from memsafe_lib import config
from memsafe_lib.data.download import (
    BASE_URL_ENV,
    SOURCES_ENV,
    DownloadError,
    count_records,
    download_dataset,
    git_blob_sha1,
    load_sources,
    main_download,
)
from memsafe_lib.errors import DataFormatError
from memsafe_lib.io import sha256_file

FIXTURES = Path(__file__).parent / "fixtures" / "download"
HOTPOT = FIXTURES / "hotpotqa" / "hotpot_dev_distractor_v1.json"
MUSIQUE_ZIP = FIXTURES / "musique" / "musique_v1.0.zip"
SQUAD = FIXTURES / "squad2" / "dev-v2.0.json"
SQUAD_BLOB_SHA1 = "24a5f5e15444d67939eb03109dabea67e4840e1e"
"""``git hash-object tests/fixtures/download/squad2/dev-v2.0.json``, computed once by hand."""
UNREACHABLE = "http://127.0.0.1:9"
"""Official urls of the test registry: never contacted while a mirror is set."""


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A real HTTP server on a free loopback port, serving the fixture folder as a mirror."""
    handler = functools.partial(_QuietHandler, directory=str(FIXTURES))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def mirror(server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the downloader at the local server; keep any proxy settings away from loopback."""
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv(BASE_URL_ENV, server)
    return server


def good_registry() -> dict[str, Any]:
    """A registry for the fixtures, pinning what each dataset would pin for real."""
    return {
        "datasets": {
            "hotpotqa": {"files": [{
                "url": f"{UNREACHABLE}/hotpot_dev_distractor_v1.json",
                "mirror_path": "hotpotqa/hotpot_dev_distractor_v1.json",
                "sha256": sha256_file(HOTPOT), "git_blob_sha1": None, "archive": None,
                "dest": "hotpot_dev_distractor_v1.json", "records": 2, "format": "json_array",
            }]},
            "musique": {"files": [{
                "url": f"{UNREACHABLE}/musique_v1.0.zip",
                "mirror_path": "musique/musique_v1.0.zip",
                "sha256": None, "git_blob_sha1": None, "archive": "zip",
                "members": [
                    {"member": "musique_ans_v1.0_dev.jsonl", "dest": "musique_ans_v1.0_dev.jsonl",
                     "sha256": None, "records": 2, "format": "jsonl"},
                    {"member": "musique_full_v1.0_dev.jsonl", "dest": "musique_full_v1.0_dev.jsonl",
                     "sha256": None, "records": 2, "format": "jsonl"},
                ],
            }]},
            "squad2": {"files": [{
                "url": f"{UNREACHABLE}/dev-v2.0.json",
                "mirror_path": "squad2/dev-v2.0.json",
                "sha256": None, "git_blob_sha1": SQUAD_BLOB_SHA1, "archive": None,
                "dest": "dev-v2.0.json", "records": 3, "format": "squad",
            }]},
        }
    }


def use_registry(doc: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "sources.test.json"
    path.write_text(json.dumps(doc, indent=2))
    monkeypatch.setenv(SOURCES_ENV, str(path))
    return path


def all_files(root: Path) -> list[Path]:
    """Everything under ``root``, hidden temp files included."""
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def zip_member(name: str) -> bytes:
    with zipfile.ZipFile(MUSIQUE_ZIP) as zf:
        return zf.read(f"data/{name}")


# ---------------------------------------------------------------- the packaged registry


def test_packaged_registry_lists_the_official_sources_without_invented_checksums(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SOURCES_ENV, raising=False)
    datasets = load_sources()["datasets"]
    assert list(datasets) == list(config.QA_DATASETS)
    counts: dict[str, int | None] = {}
    for name, spec in datasets.items():
        for entry in spec["files"]:
            assert entry["mirror_path"].startswith(f"{name}/")
            assert entry["sha256"] is None  # no official sha256 is known: none may be made up
            for member in entry.get("members", []):
                assert member["sha256"] is None
                counts[f"{name}/{member['dest']}"] = member["records"]
            if entry["archive"] is None:
                counts[f"{name}/{entry['dest']}"] = entry["records"]
    assert counts == {
        "musique/musique_ans_v1.0_train.jsonl": 19938, "musique/musique_ans_v1.0_dev.jsonl": 2417,
        "musique/musique_full_v1.0_train.jsonl": 39876, "musique/musique_full_v1.0_dev.jsonl": 4834,
        "hotpotqa/hotpot_train_v1.1.json": 90447, "hotpotqa/hotpot_dev_distractor_v1.json": 7405,
        "2wikimultihopqa/train.json": 167454, "2wikimultihopqa/dev.json": 12576, "2wikimultihopqa/test.json": 12576,
        "squad2/train-v2.0.json": 130319, "squad2/dev-v2.0.json": 11873,
    }
    blobs = {e["dest"]: e["git_blob_sha1"] for e in datasets["squad2"]["files"]}
    assert blobs == {"dev-v2.0.json": "c6fa1a89a12c90b7fbfa8f6fb437cfff27af41ca",
                     "train-v2.0.json": "312f804dbf85888fdce3299eaa58d6ec3f0bb6b7"}
    assert datasets["musique"]["files"][0]["url"] == (
        "https://drive.google.com/uc?export=download&id=1tGdADlNjWFaHLeZZGShh2IRcpO6Lv24h&confirm=t")


def test_bad_registry_is_rejected_naming_the_field(tmp_path: Path) -> None:
    doc = good_registry()
    doc["datasets"]["hotpotqa"]["files"][0]["sha256"] = "not-a-digest"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataFormatError, match=r"datasets\.hotpotqa\.files\[0\]\.sha256"):
        load_sources(path)
    doc = good_registry()
    doc["datasets"]["musique"]["files"][0]["members"][0]["format"] = "csv"
    path.write_text(json.dumps(doc))
    with pytest.raises(DataFormatError, match=r"members\[0\]\.format"):
        load_sources(path)


# ---------------------------------------------------------------- successful downloads


def test_plain_json_file_lands_verified_by_sha256(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_registry(good_registry(), tmp_path, monkeypatch)
    dest = tmp_path / "data"
    got = download_dataset("hotpotqa", dest, progress=False)
    final = dest / "hotpotqa" / "hotpot_dev_distractor_v1.json"
    assert got == [final]
    assert final.read_bytes() == HOTPOT.read_bytes()
    assert all_files(dest) == [final]  # no temp file left over
    out = capsys.readouterr().out
    assert f"{mirror}/hotpotqa/hotpot_dev_distractor_v1.json" in out
    assert f"sha256 {sha256_file(HOTPOT)} verified" in out


def test_zip_members_are_extracted_flat_and_the_archive_is_not_kept(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_registry(good_registry(), tmp_path, monkeypatch)
    dest = tmp_path / "data"
    got = download_dataset("musique", dest, progress=False)
    names = ["musique_ans_v1.0_dev.jsonl", "musique_full_v1.0_dev.jsonl"]
    assert got == [dest / "musique" / n for n in names]
    for name in names:
        assert (dest / "musique" / name).read_bytes() == zip_member(name)
    assert all_files(dest) == sorted(got)
    out = capsys.readouterr().out
    # Nothing pinned: it must say so and print the sha256s to pin.
    assert "only the record count was checked" in out
    assert sha256_file(MUSIQUE_ZIP) in out
    assert hashlib.sha256(zip_member(names[0])).hexdigest() in out


def test_squad_is_verified_by_git_blob_sha1_and_counted_in_questions(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_registry(good_registry(), tmp_path, monkeypatch)
    dest = tmp_path / "data"
    download_dataset("squad2", dest, progress=False)
    assert (dest / "squad2" / "dev-v2.0.json").read_bytes() == SQUAD.read_bytes()
    assert count_records(SQUAD, "squad") == 3
    out = capsys.readouterr().out
    assert f"git blob sha1 {SQUAD_BLOB_SHA1} verified" in out
    assert "3 records as expected" in out


def test_main_download_fetches_every_dataset_of_the_registry_where_the_loaders_look(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from memsafe_lib.data.loader import load_dataset

    use_registry(good_registry(), tmp_path, monkeypatch)
    dest = tmp_path / "data"
    assert main_download(None, dest) == 0
    assert capsys.readouterr().err == ""
    assert sorted(p.name for p in dest.iterdir()) == ["hotpotqa", "musique", "squad2"]
    # The fixtures are in the official layouts: the project's loaders read every record.
    for name, raw in [("hotpotqa", 2), ("musique", 4), ("squad2", 3)]:
        assert load_dataset(name, dest).raw_records == raw


def test_git_blob_sha1_matches_git_hash_object(tmp_path: Path) -> None:
    assert git_blob_sha1(SQUAD) == SQUAD_BLOB_SHA1
    sample = tmp_path / "sample.bin"
    for content in [b"", b"hello\n", bytes(range(256)) * 5000]:
        sample.write_bytes(content)
        expected = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
        assert git_blob_sha1(sample) == expected
    sample.write_bytes(b"")
    assert git_blob_sha1(sample) == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # git's empty blob
    git = shutil.which("git")
    if git is None:
        pytest.skip("git not installed; checked against the hand-computed values only")
    for path in [SQUAD, sample]:
        done = subprocess.run([git, "hash-object", str(path)], capture_output=True, text=True, check=True)
        assert git_blob_sha1(path) == done.stdout.strip()


# ---------------------------------------------------------------- failures leave nothing behind


def test_sha256_mismatch_fails_and_leaves_the_destination_empty(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = good_registry()
    doc["datasets"]["hotpotqa"]["files"][0]["sha256"] = "0" * 64
    use_registry(doc, tmp_path, monkeypatch)
    dest = tmp_path / "data"
    dest.mkdir()
    assert main_download("hotpotqa", dest) != 0
    err = capsys.readouterr().err
    assert f"{mirror}/hotpotqa/hotpot_dev_distractor_v1.json: sha256 mismatch" in err
    assert all_files(dest) == []
    assert list(dest.iterdir()) == []  # the dataset folder this run created is gone again


def test_git_blob_mismatch_fails(mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = good_registry()
    doc["datasets"]["squad2"]["files"][0]["git_blob_sha1"] = "1" * 40
    use_registry(doc, tmp_path, monkeypatch)
    with pytest.raises(DownloadError, match="git blob sha1 mismatch"):
        download_dataset("squad2", tmp_path / "data", progress=False)
    assert all_files(tmp_path / "data") == []


def test_failed_run_keeps_files_from_an_earlier_successful_run_untouched(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_registry(good_registry(), tmp_path, monkeypatch)
    dest = tmp_path / "data"
    download_dataset("hotpotqa", dest, progress=False)
    final = dest / "hotpotqa" / "hotpot_dev_distractor_v1.json"
    before = (final.read_bytes(), final.stat().st_mtime_ns)
    doc = good_registry()  # upstream "changed": the pinned checksum no longer matches anything served
    doc["datasets"]["hotpotqa"]["files"][0]["sha256"] = "f" * 64
    use_registry(doc, tmp_path, monkeypatch)
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        download_dataset("hotpotqa", dest, progress=False)
    assert (final.read_bytes(), final.stat().st_mtime_ns) == before
    assert all_files(dest) == [final]


def test_wrong_record_count_fails_and_writes_no_member(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = good_registry()
    doc["datasets"]["musique"]["files"][0]["members"][1]["records"] = 3  # the first member is fine
    use_registry(doc, tmp_path, monkeypatch)
    dest = tmp_path / "data"
    assert main_download("musique", dest) == 1
    err = capsys.readouterr().err
    assert "member musique_full_v1.0_dev.jsonl" in err
    assert "expected 3 records, found 2" in err
    assert all_files(dest) == []  # not even the member that verified, nor the zip


def test_http_404_names_the_url_and_writes_nothing(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = good_registry()
    doc["datasets"]["hotpotqa"]["files"][0]["mirror_path"] = "hotpotqa/no_such_file.json"
    use_registry(doc, tmp_path, monkeypatch)
    dest = tmp_path / "data"
    with pytest.raises(DownloadError, match="HTTP 404") as info:
        download_dataset("hotpotqa", dest, progress=False)
    assert f"{mirror}/hotpotqa/no_such_file.json" in str(info.value)
    assert main_download("hotpotqa", dest) == 1
    err = capsys.readouterr().err
    error_lines = [line for line in err.splitlines() if "error:" in line]
    assert len(error_lines) == 1 and f"{mirror}/hotpotqa/no_such_file.json: HTTP 404" in error_lines[0]
    assert all_files(dest) == []


def test_corrupt_zip_and_missing_member_fail_cleanly(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "data"
    doc = good_registry()
    doc["datasets"]["musique"]["files"][0]["mirror_path"] = "musique/musique_v1.0.truncated.zip"
    use_registry(doc, tmp_path, monkeypatch)
    with pytest.raises(DownloadError, match="truncated.zip: not a valid zip archive"):
        download_dataset("musique", dest, progress=False)
    assert all_files(dest) == []

    doc = good_registry()
    doc["datasets"]["musique"]["files"][0]["members"][0]["member"] = "musique_ans_v1.0_train.jsonl"
    use_registry(doc, tmp_path, monkeypatch)
    with pytest.raises(DownloadError, match="'musique_ans_v1.0_train.jsonl' not found in the zip"):
        download_dataset("musique", dest, progress=False)
    assert all_files(dest) == []


def test_wrong_format_is_reported_against_the_url(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = good_registry()
    doc["datasets"]["hotpotqa"]["files"][0].update(sha256=None, format="squad")
    use_registry(doc, tmp_path, monkeypatch)
    with pytest.raises(DownloadError, match=r"hotpot_dev_distractor_v1\.json.*SQuAD document") as info:
        download_dataset("hotpotqa", tmp_path / "data", progress=False)
    assert ".tmp" not in str(info.value)  # the message names the url, not our temp file
    assert all_files(tmp_path / "data") == []


# ---------------------------------------------------------------- reruns and bad names


def test_second_run_skips_verified_files_without_fetching(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_registry(good_registry(), tmp_path, monkeypatch)
    dest = tmp_path / "data"
    assert main_download(None, dest) == 0
    stamps = {p: p.stat().st_mtime_ns for p in all_files(dest)}
    capsys.readouterr()
    monkeypatch.setenv(BASE_URL_ENV, UNREACHABLE)  # a fetch would now fail
    assert main_download(None, dest) == 0
    out = capsys.readouterr().out
    assert out.count("already present and verified") == 4
    assert ": fetching " not in out
    assert {p: p.stat().st_mtime_ns for p in all_files(dest)} == stamps


def test_a_present_file_that_does_not_verify_is_replaced(
    mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_registry(good_registry(), tmp_path, monkeypatch)
    final = tmp_path / "data" / "squad2" / "dev-v2.0.json"
    final.parent.mkdir(parents=True)
    final.write_text('{"data": []}')
    download_dataset("squad2", tmp_path / "data", progress=False)
    assert final.read_bytes() == SQUAD.read_bytes()
    assert "present but does not verify" in capsys.readouterr().out


def test_unknown_dataset_is_an_error_listing_the_known_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(SOURCES_ENV, raising=False)
    with pytest.raises(ValueError, match="unknown dataset 'nq'.*2wikimultihopqa, hotpotqa, musique, squad2"):
        download_dataset("nq", tmp_path, progress=False)
    assert main_download("nq", tmp_path) != 0
    assert "unknown dataset 'nq'" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_registry_given_as_argument_and_explicit_base_url(server: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BASE_URL_ENV, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    registry = copy.deepcopy(good_registry())
    got = download_dataset("squad2", tmp_path / "d", base_url=server + "/", sources=registry, progress=False)
    assert [p.read_bytes() for p in got] == [SQUAD.read_bytes()]
