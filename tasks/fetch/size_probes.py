"""How an object's size is learnt without its body, one way per kind of place it lives:

- an HTTP URL: HEAD (``Content-Length``), else a ranged GET of one byte (``bytes=0-0``, the total in
  ``Content-Range``), through the fetch stage's client (its host slots, breaker and retries);
- an object store (s3://, hf://): a listing of the folder (one request per thousand keys) or, for a few
  keys, one metadata request each, inside the same host slots the fetch stage uses;
- a zip anywhere: its central directory read by range (the fetch stage's own reader), never a member;
- the release's media tars: their member tables read header by header, seeking over the data.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import Any

from fsspec import AbstractFileSystem

from ...schemas.redact import redact
from ..archives import ZipIndex, read_zip_index
from ..http import (
    BAD_ARCHIVE,
    HTTP_404,
    NOT_FOUND,
    SOURCE_ERROR,
    FetchError,
    HttpClient,
    classify_fs_error,
    retry_call,
)
from ..storage import ContentStore
from .release_media import ReleaseMedia
from .zip_fetch import range_source

LIST_FROM = 16  # keys of one folder from which a listing is cheaper than one metadata request per key


def http_size(client: HttpClient, url: str) -> int:
    """The size of the object at ``url`` without its body; raises FetchError (``http_404``...)."""
    try:
        resp = client.head(url)
        length = resp.headers.get("content-length", "")
        if length.isdigit():
            return int(length)
    except FetchError as err:
        if err.failure == HTTP_404 or err.transient:
            raise
        # 405 / 501 / a server that refuses HEAD: the one-byte GET below
    resp = client.get(url, byte_range=(0, 0), max_bytes=1)
    if resp.total_size is None:
        raise FetchError(SOURCE_ERROR, "neither Content-Length nor a Content-Range total", url=url)
    return resp.total_size


def fs_sizes(
    client: HttpClient, fs: AbstractFileSystem, paths: Iterable[str], host: str
) -> dict[str, int | FetchError]:
    """Sizes of object-store ``paths`` (same filesystem): per folder, a listing when it holds at least
    :data:`LIST_FROM` of them, else one metadata request each, each inside ``host``'s slots and retries."""
    by_dir: dict[str, list[str]] = {}
    for p in paths:
        by_dir.setdefault(posixpath.dirname(p), []).append(p)
    out: dict[str, int | FetchError] = {}
    for folder, wanted in by_dir.items():
        if len(wanted) >= LIST_FROM:
            try:
                listed = _polite(client, host, folder, lambda f=folder: fs.ls(f, detail=True))
                sizes = {str(e["name"]).rstrip("/"): int(e.get("size") or 0) for e in listed}
            except FetchError as err:
                out |= dict.fromkeys(wanted, err)
                continue
            for p in wanted:
                size = sizes.get(p.rstrip("/"))
                out[p] = size if size is not None else FetchError(HTTP_404, "not in the listing", url=p)
            continue
        for p in wanted:
            try:
                out[p] = int(_polite(client, host, p, lambda p=p: fs.info(p))["size"])
            except FetchError as err:
                out[p] = err
    return out


def _polite(client: HttpClient, host: str, what: str, call: Any) -> Any:
    """``call()`` inside ``host``'s slot with the fetch stage's retry policy; errors classified."""

    def once() -> Any:
        with client.hosts.slot(host) as state:
            try:
                result = call()
            except Exception as exc:  # noqa: BLE001 - classified
                err = classify_fs_error(exc, what)
                client.hosts.record(state, err, host)
                raise err from None
            client.hosts.record(state, None, host)
            return result

    result, _ = retry_call(once, lambda exc: classify_fs_error(exc, what), client.retry)
    return result


def zip_directory(
    client: HttpClient, store: ContentStore | None, url: str, options: dict[str, Any]
) -> ZipIndex:
    """The central directory of the zip at ``url``: the one a run kept in the store, else read by range
    (the tail, plus the directory when it is longer); nothing is written."""
    source = range_source(client, url, options, None)
    if store is not None:
        entry = store.lookup(f"zip-central-directory:{redact(url)}")
        if entry is not None:
            cached = (int(entry["size"]), int(entry["region_start"]), store.get(str(entry["sha256"])))
            return read_zip_index(source, cached)
    return read_zip_index(source)


class IndexedReleaseMedia(ReleaseMedia):
    """The release's media as the run resolves them (:class:`ReleaseMedia`: the tars' member tables read
    by seeking from header to header), with no readahead on a remote filesystem (no member's bytes)."""

    remote_open_options = {"cache_type": "none"}


def file_size(fs: AbstractFileSystem, path: str) -> int:
    try:
        return int(fs.size(path))
    except FileNotFoundError:
        raise FetchError(NOT_FOUND, "no such file", url=path) from None
    except OSError as exc:
        raise FetchError(BAD_ARCHIVE if path.endswith(".tar") else SOURCE_ERROR, str(exc), url=path) from None
