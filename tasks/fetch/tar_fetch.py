"""Fetch the referenced members of one tar into the store: the archive is streamed once, front to back
(resuming after dropped connections), under a store lock so two workers never stream the same tar.

When the recipe publishes the archive's sha256, the members are held until the whole stream has been hashed
and stored only if it matches; otherwise the stream stops as soon as every referenced member has passed.
With ``extract: all`` every member is stored and indexed on the way, so later batches need no stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...schemas.recipes import ArchiveSource
from ..archives import HashingReader, iter_tar
from ..http import HASH_MISMATCH, NOT_IN_ARCHIVE, SOURCE_ERROR, FetchError, classify_fs_error, stream
from ..storage import url_to_fs
from .batch_state import BatchRun
from .outcomes import Answers, FetchOutcome
from .store_writes import StoreSink

READ_CHUNK = 1024 * 1024


def fetch_tar_members(run: BatchRun, url: str, refs: dict[str, str], source: ArchiveSource) -> Answers:
    """Answer ``refs`` (reference -> member path) from the tar at ``url``."""
    with run.writer.store.lock(f"tar:{url}"):
        out: Answers = {}
        for ref, member in refs.items():  # another worker may have streamed it while we waited
            hit = run.writer.cached(ref, "archive", f"{url}#{member}")
            if hit is not None:
                out[ref] = hit
        pending = {ref: m for ref, m in refs.items() if ref not in out}
        if pending:
            out |= _stream_tar(run, url, pending, source)
        return out


@dataclass
class _Passage:
    """What one pass over the stream kept: members' bytes (until the archive hash is checked), their
    errors, and the archive's sha256."""

    held: dict[str, tuple[StoreSink, str]] = field(default_factory=dict)  # member -> (sink, upstream)
    errors: dict[str, FetchError] = field(default_factory=dict)
    sha256: str | None = None

    def seen(self, name: str) -> bool:
        return name in self.held or name in self.errors

    def discard(self) -> None:
        for sink, _ in self.held.values():
            sink.discard()


def _stream_tar(run: BatchRun, url: str, refs: dict[str, str], source: ArchiveSource) -> Answers:
    members: dict[str, list[str]] = {}  # member -> the refs naming it
    for ref, m in refs.items():
        members.setdefault(m, []).append(ref)
    expected_sha = source.expected_sha256(url)
    passage = _read_stream(run, url, source, members, verify=expected_sha is not None)
    if expected_sha is not None and passage.sha256 != expected_sha:
        passage.discard()
        got = passage.sha256 or ""
        mismatch = FetchError(
            HASH_MISMATCH,
            f"archive sha256 {got[:12]}... is not the published {expected_sha[:12]}...",
            url=url,
        )
        return dict.fromkeys(refs, mismatch)
    out = _store_held(run, passage, members)
    for ref, m in refs.items():
        if ref not in out:
            out[ref] = passage.errors.get(m) or FetchError(
                NOT_IN_ARCHIVE, f"{m} is not in the archive", url=url
            )
    return out


def _read_stream(
    run: BatchRun, url: str, source: ArchiveSource, members: dict[str, list[str]], *, verify: bool
) -> _Passage:
    """Pass over the stream once, holding the wanted members (every member with ``extract: all``); read
    to the end only when the archive hash is to be verified or every member kept."""
    keep_all = source.extract == "all"
    stop_early = not verify and not keep_all
    passage = _Passage()
    reader: HashingReader | None = None
    try:
        with _open_stream(run, url, source.storage_options, source.redirects) as raw:
            reader = HashingReader(raw)
            tar_stream: Any = reader
            wanted = None if keep_all else set(members)
            for tm in iter_tar(tar_stream, wanted, max_bytes=run.options.max_bytes, label=url):
                if passage.seen(tm.name):
                    continue  # duplicate name: the first one wins
                if tm.error is not None or tm.fileobj is None:
                    passage.errors[tm.name] = tm.error or FetchError(SOURCE_ERROR, "no data", url=url)
                else:
                    sink = run.writer.sink()
                    while chunk := tm.fileobj.read(READ_CHUNK):
                        sink.write(chunk)
                    passage.held[tm.name] = (sink, f"{url}#{tm.name}")
                if stop_early and len(passage.held) + len(passage.errors) >= len(members):
                    break  # every referenced member seen and nothing to verify: the rest is not read
            else:
                if verify:
                    reader.drain()
    except FetchError:
        passage.discard()
        raise
    finally:
        if reader is not None:
            run.count_bytes(reader.nbytes)
    passage.sha256 = reader.hexdigest() if reader is not None else None
    return passage


def _store_held(run: BatchRun, passage: _Passage, members: dict[str, list[str]]) -> Answers:
    """Publish the held members: each referenced one as its refs' answer, the others (``extract: all``)
    stored and indexed for later batches."""
    out: Answers = {}
    for name, (sink, upstream) in passage.held.items():
        refs_here = members.get(name)
        if not refs_here:
            run.writer.keep(upstream, sink)
            continue
        first = out[refs_here[0]] = run.writer.publish(refs_here[0], "archive", upstream, sink, 1)
        for ref in refs_here[1:]:
            out[ref] = (
                first
                if isinstance(first, FetchError)
                else FetchOutcome(ref, "ok", "archive", upstream, first.sha256, first.nbytes, attempts=1)
            )
    return out


def _open_stream(run: BatchRun, url: str, storage_options: dict[str, Any], redirects: str) -> Any:
    if url.startswith(("http://", "https://")):
        limit = run.options.max_archive_bytes
        return stream(run.client, url, max_bytes=limit, deadline=run.deadline, redirects=redirects)
    fs, path = url_to_fs(url, **storage_options)
    try:
        return fs.open(path, "rb")
    except Exception as exc:  # noqa: BLE001
        raise classify_fs_error(exc, url) from None
