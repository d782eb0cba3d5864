"""``archive``: a zip or a tar at a URL (http(s), s3://, hf://, or a local path), the member path as a
template, optionally one archive per ``{shard}``. Only referenced members are read (:mod:`..zip_fetch`,
:mod:`..tar_fetch`) and stored; a member already in the upstream index is not read again. Sized from a zip's
central directory (read by range: exact member sizes) or a tar's size (streamed whole by the run: its members'
sizes are only bounded by it)."""

from __future__ import annotations

from ....schemas.recipes import ArchiveSource, UnsetVariable, check_expanded, fill
from ...archives import ZipIndex, check_zip_entry, normalize_member
from ...http import NOT_IN_ARCHIVE, SOURCE_ERROR, FetchError, check_url, classify_fs_error
from ...storage import url_to_fs
from ..batch_state import BatchRun
from ..outcomes import Answers, FetchOutcome, Located
from ..size_probes import file_size, http_size, zip_directory
from ..sizing import Miss, SizeAnswer, Sized, SizingContext
from ..tar_fetch import fetch_tar_members
from ..zip_fetch import fetch_zip_members

Wanted = dict[str, tuple[str, list[str]]]  # reference -> (member path, the archives that may hold it)
ZIP_LOCAL_HEADER = 30  # bytes of a zip member's local header before its name and extra field
MAX_BYTES = 512 * 1024 * 1024  # the run's default cap on one object (FetchOptions.max_bytes)


class Archive:
    kind = "archive"

    def answer(self, source: ArchiveSource, located: Located, run: BatchRun) -> Answers:
        out, wanted = self._plan(source, located, run)
        if wanted:
            run.limit_host(next(iter(wanted.values()))[1][0], source.max_concurrency)
        # Archives in the order they are first named; each sees only the references still unresolved.
        for url in dict.fromkeys(u for _, urls in wanted.values() for u in urls):
            refs = {ref: m for ref, (m, urls) in wanted.items() if url in urls and ref not in out}
            if refs:
                for ref, answer in self._read_archive(source, url, refs, run).items():
                    # sharded: a member missing from one shard may be in the next
                    if isinstance(answer, FetchOutcome) or not (
                        source.shards and answer.failure == NOT_IN_ARCHIVE
                    ):
                        out[ref] = answer
        for ref, (member, urls) in wanted.items():  # sharded: not in any shard
            out.setdefault(ref, FetchError(NOT_IN_ARCHIVE, f"{member} is in none of {len(urls)} archives"))
        return out

    def _plan(self, source: ArchiveSource, located: Located, run: BatchRun) -> tuple[Answers, Wanted]:
        """Each reference's member and candidate archives; the ones the upstream index answers already."""
        out: Answers = {}
        wanted: Wanted = {}
        for ref, v in located.items():
            try:
                check_expanded(source.storage_options)
                member, urls = _member_and_urls(source, v)
            except UnsetVariable as exc:
                out[ref] = FetchError(SOURCE_ERROR, f"archive source skipped: {exc}")
                continue
            hits = (run.writer.cached(ref, self.kind, f"{u}#{member}") for u in urls)
            hit = next((h for h in hits if h is not None), None)
            if hit is not None:
                out[ref] = hit
            else:
                wanted[ref] = (member, urls)
        return out, wanted

    def _read_archive(self, source: ArchiveSource, url: str, refs: dict[str, str], run: BatchRun) -> Answers:
        try:
            check_url(url, source.allow_private, run.client.options.resolver)  # before anything is sent
        except FetchError as err:
            return dict.fromkeys(refs, err)
        try:
            if source.archive_format(url) == "zip":
                return fetch_zip_members(run, url, refs, source.storage_options, source.redirects)
            return fetch_tar_members(run, url, refs, source)
        except Exception as exc:  # noqa: BLE001 - the archive as a whole failed (404, not a zip, cut...)
            return dict.fromkeys(refs, classify_fs_error(exc, url))

    def size(self, source: ArchiveSource, located: Located, ctx: SizingContext) -> dict[str, SizeAnswer]:
        out: dict[str, SizeAnswer] = {}
        for ref, v in located.items():
            try:
                member, urls = _member_and_urls(source, v)
            except UnsetVariable as exc:
                out[ref] = Miss(SOURCE_ERROR, f"archive source skipped: {exc}")
                continue
            out[ref] = self._size_member(source, member, urls, ctx)
        return out

    def _size_member(
        self, source: ArchiveSource, member: str, urls: list[str], ctx: SizingContext
    ) -> SizeAnswer:
        for url in urls:
            hit = ctx.cached(f"{url}#{member}")
            if hit is not None:
                return Sized(f"{url}#{member}", self.kind, hit, 0, in_store=True)
        last: SizeAnswer = Miss(NOT_IN_ARCHIVE, f"{member} is in none of {len(urls)} archives")
        for url in urls:
            if source.archive_format(url) != "zip":
                size = self._archive_size(source, url, ctx)
                if isinstance(size, Miss):
                    last = size
                    continue
                return Sized(f"{url}#{member}", self.kind, None, 0, bound=True)
            index = self._zip_index(source, url, ctx)
            if isinstance(index, Miss):
                last = index
                continue
            entry = index.get(member)
            err = check_zip_entry(entry, member, MAX_BYTES, url)
            if err is not None:
                last = Miss(err.failure, err.detail)
                if err.failure == NOT_IN_ARCHIVE:
                    continue
                return last
            assert entry is not None
            transfer = ZIP_LOCAL_HEADER + entry.name_len + entry.extra_len + entry.compress_size
            name = f"{url}#{normalize_member(entry.name)}"
            return Sized(name, self.kind, entry.file_size, transfer, probed=True)
        return last

    def _zip_index(self, source: ArchiveSource, url: str, ctx: SizingContext) -> ZipIndex | Miss:
        key = f"zip:{url}"
        if key not in ctx.memo:
            try:
                ctx.memo[key] = zip_directory(ctx.client, ctx.store, url, source.storage_options)
            except FetchError as err:
                ctx.memo[key] = Miss(err.failure, err.detail)
            except Exception as exc:  # noqa: BLE001 - the archive as a whole cannot be read
                ctx.memo[key] = Miss(SOURCE_ERROR, f"{type(exc).__name__}: {exc}")
        found: ZipIndex | Miss = ctx.memo[key]
        return found

    def _archive_size(self, source: ArchiveSource, url: str, ctx: SizingContext) -> int | Miss:
        if url not in ctx.streamed:
            try:
                if url.startswith(("http://", "https://")):
                    ctx.streamed[url] = http_size(ctx.client, url)
                else:
                    fs, path = url_to_fs(url, **source.storage_options)
                    ctx.streamed[url] = file_size(fs, path)
            except FetchError as err:
                return Miss(err.failure, err.detail)
        return ctx.streamed[url]


def _member_and_urls(source: ArchiveSource, variables: dict[str, str]) -> tuple[str, list[str]]:
    """The member a reference names, and the archive URLs that may hold it (one per shard); UnsetVariable
    when the recipe reads a variable the reference does not give."""
    member = normalize_member(fill(source.member, variables))
    shards = source.shards.values() if source.shards else [None]
    return member, [fill(source.url, variables if s is None else variables | {"shard": s}) for s in shards]
