"""Fetch the referenced members of one zip into the store: its central directory once (kept in the store
and in memory, so later batches and runs read no tail again), then the members in coalesced range requests
run in the batch's pool, each checked against the directory before and after it is read."""

from __future__ import annotations

import threading
from typing import Any

from ...schemas.redact import redact
from ..archives import (
    FsRangeSource,
    HttpRangeSource,
    RangeSource,
    ZipEntry,
    ZipIndex,
    check_zip_entry,
    normalize_member,
    plan_ranges,
    read_zip_group,
    read_zip_index,
)
from ..http import FetchError, HttpClient
from ..storage import ContentStore, url_to_fs
from .batch_state import BatchRun
from .outcomes import Answer, Answers

# Keyed by the store as well as the URL: a process may serve runs into several stores (the local executor's
# driver, a test session), and a central directory found in memory would never be recorded in the next one
# (its `catalog --estimate` then read the zip's tail again).
_ZIP_CACHE: dict[tuple[str, str], ZipIndex] = {}
_ZIP_CACHE_LOCK = threading.Lock()
_ZIP_CACHE_MAX = 8


def fetch_zip_members(
    run: BatchRun,
    url: str,
    refs: dict[str, str],
    storage_options: dict[str, Any],
    redirects: str = "same_host",
) -> Answers:
    """Answer ``refs`` (reference -> member path) from the zip at ``url`` (``redirects``: the source's
    redirect policy)."""
    source = range_source(run.client, url, storage_options, run.deadline, redirects)
    try:
        index = zip_index(run.writer.store, url, source)
    finally:
        run.count_bytes(source.bytes_read)
        source.bytes_read = 0
    out: Answers = {}
    by_entry: dict[int, list[str]] = {}  # header offset -> refs naming that member
    entries: dict[int, ZipEntry] = {}
    for ref, member in refs.items():
        entry = index.get(member)
        err = check_zip_entry(entry, member, run.options.max_bytes, url)
        if err is not None:
            out[ref] = err
            continue
        assert entry is not None  # check_zip_entry reports a missing member
        by_entry.setdefault(entry.header_offset, []).append(ref)
        entries[entry.header_offset] = entry
    groups = plan_ranges(entries.values(), gap=run.options.coalesce_gap)
    futures = [(g, run.pool.submit(_read_group, run, url, source, index, g, by_entry)) for g in groups]
    for group, fut in futures:
        try:
            answers: Answers = run.wait(fut)
            out |= answers
        except FetchError as err:
            out |= {ref: err for entry in group for ref in by_entry[entry.header_offset]}
    run.count_bytes(source.bytes_read)
    return out


def _read_group(
    run: BatchRun,
    url: str,
    source: RangeSource,
    index: ZipIndex,
    group: list[ZipEntry],
    by_entry: dict[int, list[str]],
) -> Answers:
    """One planned range request (a pool job): every member of ``group`` into the store."""
    res: dict[str, Answer] = {}
    try:
        for entry, data in read_zip_group(source, index, group):
            for ref in by_entry[entry.header_offset]:
                if isinstance(data, FetchError):
                    res[ref] = data
                    continue
                sink = run.writer.sink()
                sink.write(data)
                res[ref] = run.writer.publish(
                    ref, "archive", f"{url}#{normalize_member(entry.name)}", sink, 1
                )
    except FetchError as err:
        for entry in group:
            for ref in by_entry[entry.header_offset]:
                res.setdefault(ref, err)
    return res


def range_source(
    client: HttpClient,
    url: str,
    storage_options: dict[str, Any],
    deadline: float | None,
    redirects: str = "same_host",
) -> RangeSource:
    if url.startswith(("http://", "https://")):
        return HttpRangeSource(client, url, deadline=deadline, redirects=redirects)
    fs, path = url_to_fs(url, **storage_options)
    return FsRangeSource(fs, path, label=url)


def zip_index(store: ContentStore, url: str, source: RangeSource) -> ZipIndex:
    """The central directory of the zip at ``url``: from memory, from the store, or read (and kept)."""
    cache_key = (store.fs.unstrip_protocol(store.root), url)
    with _ZIP_CACHE_LOCK:
        index = _ZIP_CACHE.get(cache_key)
    if index is not None:
        return index
    key = f"zip-central-directory:{redact(url)}"  # recorded in the store: no credentials
    entry = store.lookup(key)
    if entry is not None:
        region = store.get(str(entry["sha256"]))
        index = read_zip_index(source, (int(entry["size"]), int(entry["region_start"]), region))
    else:
        index = read_zip_index(source)
        sha = store.put(index.region)
        record = {
            "sha256": sha,
            "bytes": len(index.region),
            "size": index.size,
            "region_start": index.region_start,
        }
        store.record(key, record)
    with _ZIP_CACHE_LOCK:
        if len(_ZIP_CACHE) >= _ZIP_CACHE_MAX:
            _ZIP_CACHE.pop(next(iter(_ZIP_CACHE)))
        _ZIP_CACHE[cache_key] = index
    return index


def forget_zip_indexes() -> None:
    """Drop the in-memory central directories (as a fresh worker process starts)."""
    with _ZIP_CACHE_LOCK:
        _ZIP_CACHE.clear()
