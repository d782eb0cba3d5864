"""One code path for every release source: a local folder, a ``file://`` URL, and ``s3://`` on a real S3
server on loopback (moto in server mode, started here). hf:// needs the network: its URL handling is
covered in test_catalog.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vlmforge.schemas.records import Record, SubsetEntry
from vlmforge.tasks.catalog.release_catalog import catalog_release
from vlmforge.tasks.fetch.release_media import MediaResolver
from vlmforge.tasks.parse.jsonl_batch import parse_batch
from vlmforge.tasks.storage import url_to_fs


@pytest.fixture(scope="module")
def s3(moto_s3: str) -> dict[str, Any]:
    return {"endpoint_url": moto_s3}


@pytest.fixture(scope="module")
def s3_release(s3: dict[str, Any], sample_release: Path) -> str:
    import s3fs

    fs = s3fs.S3FileSystem(**s3)
    fs.mkdir("releases")
    fs.put(str(sample_release), "releases/v3", recursive=True)
    return "s3://releases/v3"


def _comparable(e: SubsetEntry) -> tuple[Any, ...]:
    return (
        e.subset,
        e.readme_sha256,
        e.jsonl_sha256,
        e.jsonl_bytes,
        e.rows,
        e.license,
        e.license_text,
        len(e.media_tars),
        e.batch_offsets,
        e.media_sources,
        e.duplicate_rows,
        e.id_conflicts,
    )


def _records(entry: SubsetEntry) -> list[Any]:
    fs, path = url_to_fs(entry.jsonl, **entry.storage_options)
    out: list[Any] = []
    for i in range(len(entry.batch_offsets) - 1):
        start, end = entry.batch_offsets[i], entry.batch_offsets[i + 1]
        with fs.open(path, "rb") as f:
            f.seek(start)
            out += parse_batch(f.read(end - start), i * 4 + 1, subset=entry.subset)
    return out


def test_local_folder_and_file_url_catalog_alike(sample_release: Path) -> None:
    local = catalog_release(str(sample_release), batch_lines=4)
    via_url = catalog_release(f"file://{sample_release}", batch_lines=4)
    assert [_comparable(e) for e in via_url] == [_comparable(e) for e in local]
    assert [_records(e) for e in via_url] == [_records(e) for e in local]


def test_s3_release_catalogs_and_reads_like_the_local_copy(
    s3: dict[str, Any], s3_release: str, sample_release: Path
) -> None:
    local = catalog_release(str(sample_release), batch_lines=4)
    remote = catalog_release(s3_release, batch_lines=4, storage_options=s3)
    assert [_comparable(e) for e in remote] == [_comparable(e) for e in local]
    for e in remote:
        assert e.jsonl == f"{s3_release}/{e.subset}/{e.subset}.jsonl"
        assert e.storage_options == s3 and e.release == s3_release
        assert all(t.startswith(f"{s3_release}/{e.subset}/media/") for t in e.media_tars)
    assert [_records(e) for e in remote] == [_records(e) for e in local]


def test_s3_media_resolve_from_loose_files_and_release_tars(s3: dict[str, Any], s3_release: str) -> None:
    entries = {e.subset: e for e in catalog_release(s3_release, storage_options=s3)}
    for subset, expect_tar in (("photo_vqa", True), ("multi_image", False)):
        e = entries[subset]
        resolver = MediaResolver(e.path, e.media_tars, storage_options=e.storage_options)
        recs = [r for r in _records(e) if isinstance(r, Record)]
        ref = recs[0].media[0].ref
        got = resolver.resolve(ref)
        assert got.source.startswith("tar:") == expect_tar
        assert got.data[:2] in (b"\xff\xd8", b"\x89P")  # a JPEG or PNG, read from the S3 server


def test_s3_errors_are_readable(s3: dict[str, Any]) -> None:
    from vlmforge.tasks.errors import ReleaseError

    with pytest.raises(ReleaseError, match="not a folder"):
        catalog_release("s3://releases/does-not-exist", storage_options=s3)
