"""One sizer per recipe source kind, found by the kind in :data:`SIZERS` (the interface is
:class:`~.sizing.Sizer`), and :func:`size_references`, which tries a recipe's sources in order exactly as the
fetch stage does (:func:`~vlmforge.tasks.fetch.acquire.fetch_batch`): a reference a source cannot answer goes
on to the next one.

Each sizer names an object as the run would (the store's upstream-index key: URL, ``s3://`` locator, zip
``URL#member``; a file or tar member for media read in place) and says how its size is known: from an index
(exact), or from a sample of HEAD requests (:func:`~.sizing.sampled`).
"""

from __future__ import annotations

from typing import Any

from ...schemas.recipe_match import MatchBudgetError
from ...schemas.recipes import (
    ArchiveSource,
    HfSource,
    HttpFilesSource,
    LocalSource,
    Recipe,
    ReleaseTarSource,
    S3Source,
    UnsetVariable,
    fill,
    ref_variables,
)
from ...schemas.source_registry import by_source_kind
from ..fetch import (
    MATCH_BUDGET,
    NO_SOURCE,
    NOT_FOUND,
    NOT_IN_ARCHIVE,
    SOURCE_ERROR,
    FetchError,
    Located,
    MissingMedia,
    ZipIndex,
    check_zip_entry,
    file_in,
    normalize_member,
    s3_filesystem,
)
from ..parse import normalize_ref, unsafe_ref_reason
from ..storage import is_local, url_to_fs
from .probes import IndexedReleaseMedia, file_size, fs_sizes, http_size, zip_directory
from .sizing import Answer, Miss, Sized, Sizer, SizingContext, locate_all, sampled

ZIP_LOCAL_HEADER = 30  # bytes of a zip member's local header before its name and extra field
MAX_BYTES = 512 * 1024 * 1024  # the fetch stage's cap on one object (FetchOptions.max_bytes)


class ReleaseTarSizer:
    """The subset's own media: loose files and media-tar members, by the run's resolver (member tables)."""

    kind = "release_tar"

    def size(self, source: ReleaseTarSource, located: Located, ctx: SizingContext) -> dict[str, Answer]:
        release = ctx.memo.get("release")
        if release is None:
            e = ctx.entry
            release = ctx.memo["release"] = IndexedReleaseMedia(
                e.path, e.media_tars, storage_options=e.storage_options
            )
        remote = not is_local(release.fs)
        out: dict[str, Answer] = {}
        for ref, variables in located.items():
            loc = release.where(variables["ref"])
            if isinstance(loc, MissingMedia):
                out[ref] = Miss(loc.failure, str(loc))
                continue
            if loc.offset is None:
                size = file_size(release.fs, str(release.fs._strip_protocol(loc.path)))
                name = loc.path
            else:
                size, name = int(loc.size or 0), f"{loc.path}#@{loc.offset}"
            out[ref] = Sized(name, self.kind, size, size if remote else 0)
        return out


class LocalSizer:
    """A folder holding the upstream layout (default: each ``--media-root``), sized on disk."""

    kind = "local"

    def size(self, source: LocalSource, located: Located, ctx: SizingContext) -> dict[str, Answer]:
        roots = [source.root] if source.root else list(ctx.media_roots)
        if not roots:
            return dict.fromkeys(located, Miss(NOT_FOUND, "no --media-root given"))
        return {ref: self._find(source, roots, v) for ref, v in located.items()}

    def _find(self, source: LocalSource, roots: list[str], variables: dict[str, str]) -> Answer:
        for root in roots:
            try:
                fs, base = url_to_fs(fill(root, variables), **source.storage_options)
                path = file_in(fs, base, fill(source.path, variables))
            except UnsetVariable as exc:
                return Miss(SOURCE_ERROR, f"local source skipped: {exc}")
            except MissingMedia as exc:
                return Miss(exc.failure, str(exc))
            if path is not None:
                size = file_size(fs, path)
                name = path if is_local(fs) else str(fs.unstrip_protocol(path))
                return Sized(name, self.kind, size, 0 if is_local(fs) else size)
        return Miss(NOT_FOUND, f"not under {', '.join(roots)}")


class HttpFilesSizer:
    """One URL per reference: sized by HEAD (or a one-byte ranged GET) on a seeded sample."""

    kind = "http_files"

    def size(self, source: HttpFilesSource, located: Located, ctx: SizingContext) -> dict[str, Answer]:
        locators, out = locate_all(located, lambda v: fill(source.url, v), self.kind)
        if source.max_concurrency and locators:
            from urllib.parse import urlsplit

            host = urlsplit(next(iter(locators.values()))).hostname
            if host:
                ctx.client.hosts.set_limit(host, source.max_concurrency)
        return out | sampled(ctx, self.kind, locators, lambda url: http_size(ctx.client, url))


def _listed(
    ctx: SizingContext, kind: str, locators: dict[str, str], fs: Any, path_of: Any, host_of: Any
) -> dict[str, Answer]:
    """Exact sizes from an object store: the store's index first, then listings or metadata requests."""
    out: dict[str, Answer] = {}
    todo: dict[str, str] = {}
    for ref, loc in locators.items():
        hit = ctx.cached(loc)
        if hit is not None:
            out[ref] = Sized(loc, kind, hit, 0, in_store=True)
        else:
            todo[ref] = loc
    by_host: dict[str, list[str]] = {}
    for loc in set(todo.values()):
        by_host.setdefault(host_of(path_of(loc)), []).append(loc)
    sizes: dict[str, int | FetchError] = {}
    for host, locs in by_host.items():
        got = fs_sizes(ctx.client, fs, [path_of(loc) for loc in locs], host)
        sizes |= {loc: got[path_of(loc)] for loc in locs}
    for ref, loc in todo.items():
        size = sizes[loc]
        out[ref] = (
            Miss(size.failure, size.detail)
            if isinstance(size, FetchError)
            else Sized(loc, kind, size, probed=True)
        )
    return out


class S3Sizer:
    """One S3 object per reference: sized by the bucket's listing (or HEAD for a few keys)."""

    kind = "s3"

    def size(self, source: S3Source, located: Located, ctx: SizingContext) -> dict[str, Answer]:
        fs = s3_filesystem(source)
        endpoint = source.endpoint_url.rstrip("/") if source.endpoint_url else None

        def locate(variables: dict[str, str]) -> str:  # the run's upstream locator (sources/s3.py)
            url = fill(source.url, variables)
            return f"{endpoint}/{url[5:]}" if endpoint else url

        def path_of(loc: str) -> str:
            return loc[len(endpoint) + 1 :] if endpoint else loc.split("://", 1)[1]

        locators, out = locate_all(located, locate, self.kind)
        return out | _listed(ctx, self.kind, locators, fs, path_of, lambda p: f"s3:{p.split('/', 1)[0]}")


class HfSizer:
    """One file per reference in a Hugging Face repo: sized by the repo folder's listing."""

    kind = "hf"

    def size(self, source: HfSource, located: Located, ctx: SizingContext) -> dict[str, Answer]:
        locators, out = locate_all(located, lambda v: source.fsspec_url(fill(source.path, v)), self.kind)
        if not locators:
            return out
        fs, _ = url_to_fs(next(iter(locators.values())))

        def path_of(loc: str) -> str:
            return str(url_to_fs(loc)[1])

        return out | _listed(ctx, self.kind, locators, fs, path_of, lambda _: f"hf:{source.repo}")


class ArchiveSizer:
    """A zip (its central directory, read by range: exact member sizes) or a tar (streamed whole by the
    run: its size is what the run transfers, the members' sizes are only bounded by it)."""

    kind = "archive"

    def size(self, source: ArchiveSource, located: Located, ctx: SizingContext) -> dict[str, Answer]:
        out: dict[str, Answer] = {}
        for ref, v in located.items():
            try:
                member = normalize_member(fill(source.member, v))
                shards = source.shards.values() if source.shards else [None]
                urls = [fill(source.url, v if s is None else v | {"shard": s}) for s in shards]
            except UnsetVariable as exc:
                out[ref] = Miss(SOURCE_ERROR, f"archive source skipped: {exc}")
                continue
            out[ref] = self._one(source, member, urls, ctx)
        return out

    def _one(self, source: ArchiveSource, member: str, urls: list[str], ctx: SizingContext) -> Answer:
        for url in urls:
            hit = ctx.cached(f"{url}#{member}")
            if hit is not None:
                return Sized(f"{url}#{member}", self.kind, hit, 0, in_store=True)
        last: Answer = Miss(NOT_IN_ARCHIVE, f"{member} is in none of {len(urls)} archives")
        for url in urls:
            if source.archive_format(url) != "zip":
                size = self._archive_size(source, url, ctx)
                if isinstance(size, Miss):
                    last = size
                    continue
                return Sized(f"{url}#{member}", self.kind, None, 0, bound=True)
            index = self._index(source, url, ctx)
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

    def _index(self, source: ArchiveSource, url: str, ctx: SizingContext) -> ZipIndex | Miss:
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


SIZERS: dict[str, Sizer] = by_source_kind(
    (ReleaseTarSizer(), LocalSizer(), HttpFilesSizer(), ArchiveSizer(), S3Sizer(), HfSizer()), "sizer"
)


def size_references(refs: list[str], recipe: Recipe, ctx: SizingContext) -> dict[str, Answer]:
    """One answer per distinct reference: each recipe source in turn sizes the references still open that
    its ``match`` accepts; the first object found wins (the fetch stage's order)."""

    out: dict[str, Answer] = {}
    misses: dict[str, Miss] = {}
    todo: list[str] = []
    for ref in dict.fromkeys(refs):
        bad = unsafe_ref_reason(ref)
        if bad:
            out[ref] = Miss(NO_SOURCE, f"unsafe reference ({bad})")
        else:
            todo.append(ref)
    for source in recipe.sources:
        match = source.compiled_match()
        located: Located = {}
        for ref in todo:
            try:
                variables = ref_variables(normalize_ref(ref), match)
            except MatchBudgetError as exc:  # the run rejects it the same way
                misses.setdefault(ref, Miss(MATCH_BUDGET, str(exc)))
                continue
            if variables is not None:
                located[ref] = variables
        if not located:
            continue
        for ref, answer in SIZERS[source.kind].size(source, located, ctx).items():
            if isinstance(answer, Sized):
                out[ref] = answer
            else:
                misses[ref] = answer
        todo = [r for r in todo if r not in out]
    for ref in todo:
        out[ref] = misses.get(ref, Miss(NO_SOURCE, "no recipe source applies to the reference"))
    return out
