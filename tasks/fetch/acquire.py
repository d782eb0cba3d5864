"""Fetch stage: turn a batch of media references into objects in the content-addressed store.

For each reference the recipe's sources are tried in order (see ``schemas/recipes.py``); the first one
that yields the object wins. ``release_tar`` and ``local`` answer in place (the bytes are read where they
are, as the pipeline always did); remote sources (``http_files``, ``archive``, ``s3``, ``hf``) stream the
object into the store (``<store>/<sha[:2]>/<sha>``, published by rename) and record its upstream locator in
the store's upstream index (``<store>/upstream/``), so an object is fetched once, whichever subsets, batches
or runs reference it, and a killed run resumes without fetching anything twice.

A failed reference is an outcome with a failure class (``tasks/http.py``), never an exception; the batch
reports its counts (bytes, files/s, failures by class) in :class:`FetchStats` and one log line.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import posixpath
import queue
import tarfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, BinaryIO

from fsspec import AbstractFileSystem

from ...schemas.recipes import (
    ArchiveSource,
    HfSource,
    HttpFilesSource,
    LocalSource,
    Recipe,
    S3Source,
    UnsetVariable,
    fill,
    parse_recipe,
    ref_variables,
)
from ..errors import ConfigError, VlmforgeError
from ..parse.records import normalize_ref, unsafe_ref_reason
from ..storage import ContentStore, url_to_fs
from .archives import (
    FsRangeSource,
    HashingReader,
    HttpRangeSource,
    RangeSource,
    ZipIndex,
    check_zip_entry,
    iter_tar,
    normalize_member,
    open_tar_stream,
    plan_ranges,
    read_zip_group,
    read_zip_index,
)
from .http import (
    CONNECT_ERROR,
    HASH_MISMATCH,
    HTTP_4XX,
    HTTP_5XX,
    HTTP_404,
    NO_SOURCE,
    NOT_FOUND,
    NOT_IN_ARCHIVE,
    SOURCE_ERROR,
    TIMEOUT,
    TRANSIENT,
    TRUNCATED,
    UNSAFE_MEMBER,
    FetchError,
    HttpClient,
    HttpOptions,
    redact,
    retry_call,
)

log = logging.getLogger("vlmforge.fetch")

LOCAL_KINDS = frozenset({"release_tar", "local"})
_READ_CHUNK = 1024 * 1024


class RecipeError(VlmforgeError):
    """A recipe cannot be used: invalid YAML or fields (with their location), or still a draft."""


# ------------------------------------------------------------------------------------------- recipes


def builtin_catalog_dir() -> Path:
    """The recipes shipped with vlmforge (``catalog/*.yaml``)."""
    try:
        from importlib.resources import files

        path = Path(str(files("vlmforge.catalog")))
        if path.is_dir():
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[1] / "catalog"


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate one recipe file; errors name the file, the field path and the value."""
    import yaml
    from pydantic import ValidationError

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecipeError(f"{p}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise RecipeError(f"{p}: not valid YAML: {exc}") from None
    try:
        recipe = parse_recipe(data)
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            loc = ".".join(str(x) for x in e["loc"])
            value = repr(e.get("input"))[:80]
            problems.append(f"{loc or '(top)'}: {e['msg']} (got {value})")
        raise RecipeError(f"{p}: invalid recipe:\n  " + "\n  ".join(problems)) from None
    if recipe.subset != p.stem:
        raise RecipeError(
            f"{p}: subset is {recipe.subset!r} but the file is named {p.name} (name it {recipe.subset}.yaml)"
        )
    return recipe


def find_recipe(subset: str, catalogs: Sequence[str | Path] = ()) -> Recipe | None:
    """The recipe of ``subset`` from the first catalog folder holding ``<subset>.yaml`` (the given folders,
    then the shipped catalog), or None."""
    for folder in [*map(Path, catalogs), builtin_catalog_dir()]:
        path = folder / f"{subset}.yaml"
        if path.is_file():
            return load_recipe(path)
    return None


def recipe_for(subset: str, catalogs: Sequence[str | Path] = ()) -> Recipe:
    """The subset's recipe, or the default one (media roots, then the release's own media)."""
    return find_recipe(subset, catalogs) or Recipe.default(subset)


# ----------------------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class LocalLocation:
    """Where a ``local`` / ``release_tar`` object lives: a file, or a byte range of a release tar."""

    path: str
    offset: int | None = None
    size: int | None = None


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    """What happened to one reference. ``status`` is ``ok`` or a failure class."""

    ref: str
    status: str
    source: str | None = None  # kind of the recipe source that answered (or failed last)
    upstream: str | None = None  # URL, s3://..., hf://..., archive URL#member, local path, tar#member
    sha256: str | None = None  # object in the store (remote sources)
    nbytes: int | None = None
    detail: str | None = None
    attempts: int = 0
    cached: bool = False  # answered by the store's upstream index: nothing was fetched
    location: LocalLocation | None = None  # local sources: read in place

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def transient(self) -> bool:
        return self.status in TRANSIENT

    def reason(self) -> str:
        """Readable reject reason (``<class>: <detail>``) for the media manifest."""
        return f"{self.status}: {self.detail}" if self.detail else self.status


@dataclass
class FetchStats:
    """Counts of one fetch call; ``+`` merges batches (datatrove-style)."""

    refs: int = 0
    ok: int = 0
    cached: int = 0  # ok from the upstream index
    local: int = 0  # ok from release_tar / local sources
    fetched: int = 0  # ok and transferred now
    failed: int = 0
    bytes_fetched: int = 0  # transferred over the network (bodies, ranges, central directories, streams)
    bytes_stored: int = 0  # new objects' bytes
    seconds: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)

    def __add__(self, other: FetchStats) -> FetchStats:
        out = FetchStats()
        for f in fields(self):
            if f.name == "failures":
                merged = dict(self.failures)
                for k, v in other.failures.items():
                    merged[k] = merged.get(k, 0) + v
                out.failures = merged
            else:
                setattr(out, f.name, getattr(self, f.name) + getattr(other, f.name))
        return out

    @property
    def files_per_s(self) -> float:
        return self.fetched / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        failures = ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items())) or "none"
        return (
            f"{self.refs} refs: {self.ok} ok ({self.fetched} fetched, {self.cached} cached, "
            f"{self.local} local), "
            f"{self.failed} failed ({failures}); {self.bytes_fetched / 1e6:.1f} MB in {self.seconds:.1f} s, "
            f"{self.files_per_s:.0f} files/s"
        )


@dataclass
class FetchResult:
    outcomes: dict[str, FetchOutcome]
    stats: FetchStats


@dataclass(frozen=True)
class FetchOptions:
    """Knobs of the fetch stage (the HTTP client has its own, :class:`HttpOptions`)."""

    concurrency: int = 16  # threads of one batch (per-host limits apply on top)
    max_bytes: int = 512 * 1024 * 1024  # one media object
    max_archive_bytes: int = 1 << 40  # one streamed tar
    spill_bytes: int = 8 * 1024 * 1024  # larger objects are streamed to a temp file, not held in memory
    coalesce_gap: int = 256 * 1024  # zip members closer than this are read in one range request
    http: HttpOptions = field(default_factory=HttpOptions)
    # Wall-clock bound of one fetch_batch call (None: unbounded). No request, retry or backoff starts past
    # it, bodies still arriving are cut there, and references not done by then end as ``timeout`` (a later
    # run retries them), so a batch never hangs on a slow or stalled host.
    batch_timeout: float | None = None
    # Batches fetching at the same time across the run (the flow's share of the cluster). Per-host limits
    # (``http.per_host``, a source's ``max_concurrency``) are for the whole run: each batch gets this share
    # of them, at least one request, so a 64-CPU cluster does not open 64 x the limit to one host.
    host_share: int = 1

    def host_limit(self, limit: int) -> int:
        return max(1, limit // max(1, self.host_share))


@dataclass(frozen=True)
class FetchContext:
    """The run and subset facts the local sources need."""

    subset_path: str | None = None  # release folder of the subset
    media_tars: tuple[str, ...] = ()
    media_roots: tuple[str, ...] = ()


FAILED_REFS_SQL = (
    "SELECT subset, ref, upstream, fetch_status, fetch_detail FROM media "
    "WHERE fetch_status IS NOT NULL AND fetch_status <> 'ok' ORDER BY subset, ref"
)


def outcome_columns(outcome: FetchOutcome) -> dict[str, Any]:
    """The :data:`MEDIA_FETCH_FIELDS` values of one outcome (deterministic: no timings or cache flags)."""
    return {"upstream": outcome.upstream, "fetch_status": outcome.status, "fetch_detail": outcome.detail}


# -------------------------------------------------------------------------------------------- sinks


class _StoreSink:
    """Receives one object's bytes, hashing them; small objects stay in memory, large ones spill to a
    temp file in the store's incoming folder. Nothing is visible in the store until :meth:`publish`."""

    def __init__(self, store: ContentStore, spill_bytes: int) -> None:
        self.store, self.spill_bytes = store, spill_bytes
        self._sha = hashlib.sha256()
        self._parts: list[bytes] = []
        self._file: BinaryIO | None = None
        self._path: str | None = None
        self.nbytes = 0

    def write(self, data: bytes) -> None:
        self._sha.update(data)
        self.nbytes += len(data)
        if self._file is None and self.nbytes > self.spill_bytes:
            self._path = os.path.join(self.store.incoming_dir(), f"{uuid.uuid4().hex}.part")
            self._file = open(self._path, "wb")  # noqa: SIM115 - closed in finish/reset
            for p in self._parts:
                self._file.write(p)
            self._parts.clear()
        if self._file is not None:
            self._file.write(data)
        else:
            self._parts.append(data)

    def reset(self) -> None:
        self.discard()
        self._sha = hashlib.sha256()
        self.nbytes = 0

    def digest(self) -> str:
        return self._sha.hexdigest()

    def publish(self) -> str:
        sha = self.digest()
        if self._file is not None and self._path is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            self.store.put_file(self._path, sha)
            self._path = None
        else:
            self.store.put(b"".join(self._parts), sha)
            self._parts.clear()
        return sha

    def discard(self) -> None:
        self._parts.clear()
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._path)
            self._path = None


# ------------------------------------------------------------------------------------------- fetcher


def _classify_fs_error(exc: BaseException, url: str) -> FetchError:
    """Failure class of an fsspec (s3fs / HfFileSystem) error."""
    if isinstance(exc, FetchError):
        return exc
    text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
    if isinstance(exc, FileNotFoundError):
        if "://" not in url or url.startswith("file://"):
            return FetchError(NOT_FOUND, f"no such file ({text})", url=url)
        return FetchError(HTTP_404, f"no such object ({text})", url=url)
    if isinstance(exc, PermissionError):
        return FetchError(HTTP_4XX, f"access denied ({text})", url=url)
    if isinstance(exc, TimeoutError) or "timeout" in text.lower():
        return FetchError(TIMEOUT, text, url=url)
    low = text.lower()
    if "slowdown" in low or "503" in low or "internalerror" in low or " 500" in low:
        return FetchError(HTTP_5XX, text, url=url)
    if isinstance(exc, ConnectionError) or "connect" in low:
        return FetchError(CONNECT_ERROR, text, url=url)
    return FetchError(SOURCE_ERROR, text, url=url)


_DEADLINE_GRACE = 2.0  # seconds a batch waits past its deadline for threads finishing a socket read
_ZIP_CACHE: dict[str, ZipIndex] = {}
_ZIP_CACHE_LOCK = threading.Lock()
_ZIP_CACHE_MAX = 8
_FS_CACHE: dict[tuple[Any, ...], AbstractFileSystem] = {}


class _Batch:
    """The state of one :func:`fetch_batch` call."""

    def __init__(
        self,
        recipe: Recipe,
        store: ContentStore,
        context: FetchContext,
        client: HttpClient,
        options: FetchOptions,
        expected: Mapping[str, str],
        on_ready: Callable[[FetchOutcome], None] | None = None,
    ) -> None:
        self.recipe, self.store, self.context, self.client = recipe, store, context, client
        self.options, self.expected = options, expected
        self.stats = FetchStats()
        self._lock = threading.Lock()
        self._release_index: dict[str, LocalLocation] | None = None
        self._release_tar_errors: list[str] = []
        timeout = options.batch_timeout
        self.deadline: float | None = None if timeout is None else time.monotonic() + timeout
        self.timed_out = False  # a future was abandoned at the deadline (its thread is not waited for)
        self.on_ready = on_ready
        self._announced: set[str] = set()

    def ready(self, outcome: FetchOutcome) -> None:
        """Announce an ok outcome to ``on_ready`` once, as soon as it is final (from any thread): an ok
        answer from a source ends the search for that reference."""
        if self.on_ready is None or not outcome.ok:
            return
        with self._lock:
            if outcome.ref in self._announced:
                return
            self._announced.add(outcome.ref)
        self.on_ready(outcome)

    def wait(self, fut: Future[Any]) -> Any:
        """``fut.result()``, bounded by the batch deadline (plus a short grace for threads that are
        finishing their last socket read); raises FetchError(timeout) past it."""
        if self.deadline is None:
            return fut.result()
        try:
            return fut.result(timeout=max(0.0, self.deadline - time.monotonic()) + _DEADLINE_GRACE)
        except FutureTimeout:
            self.timed_out = True
            fut.cancel()
            raise FetchError(
                TIMEOUT, f"batch deadline of {self.options.batch_timeout:g} s reached while fetching"
            ) from None

    def count_bytes(self, n: int) -> None:
        with self._lock:
            self.stats.bytes_fetched += n

    # ------------------------------------------------------------------------------------- entry point

    def run(self, refs: Iterable[str], pool: ThreadPoolExecutor) -> dict[str, FetchOutcome]:
        order: list[str] = list(dict.fromkeys(refs))
        outcomes: dict[str, FetchOutcome] = {}
        errors: dict[str, list[tuple[str, FetchError]]] = {r: [] for r in order}
        todo: list[str] = []
        for ref in order:
            bad = unsafe_ref_reason(ref)
            if bad:
                outcomes[ref] = FetchOutcome(ref, NO_SOURCE, detail=f"unsafe reference ({bad})")
            else:
                todo.append(ref)
        for source in self.recipe.sources:
            if not todo:
                break
            located: dict[str, Any] = {}
            for ref in todo:
                variables = ref_variables(normalize_ref(ref), source.compiled_match())
                if variables is not None:
                    located[ref] = variables
            if not located:
                continue
            handler: Callable[[Any, dict[str, Any], ThreadPoolExecutor], dict[str, FetchOutcome | FetchError]]
            handler = getattr(self, f"_src_{source.kind}")
            results = handler(source, located, pool)
            for ref, res in results.items():
                if isinstance(res, FetchOutcome):
                    outcomes[ref] = res
                    self.ready(res)  # sources that do not announce their answers as they come
                else:
                    errors[ref].append((source.kind, res))
            todo = [r for r in todo if r not in outcomes]
        for ref in todo:
            outcomes[ref] = _final_failure(ref, errors[ref])
        return {ref: outcomes[ref] for ref in order}

    # ----------------------------------------------------------------------------------- local sources

    def _src_release_tar(
        self, source: Any, located: dict[str, Any], pool: ThreadPoolExecutor
    ) -> dict[str, Any]:
        ctx = self.context
        out: dict[str, Any] = {}
        if ctx.subset_path is None:
            return {ref: FetchError(NOT_FOUND, "no release folder given") for ref in located}
        fs, subset = url_to_fs(ctx.subset_path)
        # Symlinks in the release are followed only while they stay in the subset folder (see resolve.py).
        jail = os.path.realpath(subset) if _is_local_fs(fs) else None
        for ref, v in located.items():
            rel = v["ref"]
            hit = None
            escaped = False
            for folder in (subset, f"{subset}/media"):
                path = _inside(folder, rel)
                if path is not None and _isfile(fs, path):
                    if jail is not None and not _within(os.path.realpath(path), jail):
                        escaped = True
                        break
                    hit = LocalLocation(path)
                    break
            if escaped:
                out[ref] = FetchError(
                    UNSAFE_MEMBER, f"symlink in the release leads outside the subset folder: {rel}"
                )
                continue
            if hit is None:
                hit = self._release_tars().get(rel)
            if hit is None:
                bad = self._release_tar_errors
                more = f"; unreadable media tar(s): {'; '.join(bad)}" if bad else ""
                out[ref] = FetchError(NOT_FOUND, f"not in the subset folder, media/ or the media tars{more}")
                continue
            upstream = hit.path if hit.offset is None else f"{hit.path}#{rel}"
            out[ref] = FetchOutcome(ref, "ok", "release_tar", upstream, nbytes=hit.size, location=hit)
        return out

    def _release_tars(self) -> dict[str, LocalLocation]:
        if self._release_index is None:
            index: dict[str, LocalLocation] = {}
            if self.context.subset_path is not None:
                fs, _ = url_to_fs(self.context.subset_path)
                for tar_path in self.context.media_tars:
                    try:
                        with fs.open(tar_path, "rb") as f, open_tar_stream(f, "r|") as tf:
                            for m in tf:
                                if (
                                    not m.isreg()
                                    or unsafe_ref_reason(m.name)
                                    or normalize_ref(m.name).startswith("../")
                                ):
                                    continue  # links, devices and members escaping their folder: never served
                                index.setdefault(
                                    normalize_ref(m.name), LocalLocation(tar_path, m.offset_data, m.size)
                                )
                    except (tarfile.TarError, OSError, EOFError, zlib.error, RecursionError) as exc:
                        # members indexed before the damage stay available; the rest are reported missing
                        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
                        self._release_tar_errors.append(f"{tar_path.rsplit('/', 1)[-1]}: {detail}")
            self._release_index = index
        return self._release_index

    def _src_local(
        self, source: LocalSource, located: dict[str, Any], pool: ThreadPoolExecutor
    ) -> dict[str, Any]:
        roots = [source.root] if source.root else list(self.context.media_roots)
        out: dict[str, Any] = {}
        if not roots:
            return {ref: FetchError(NOT_FOUND, "no --media-root given") for ref in located}
        for ref, v in located.items():
            found = None
            for root in roots:
                try:
                    fs, base = url_to_fs(fill(root, v), **source.storage_options)
                    path = _inside(base, fill(source.path, v))
                except UnsetVariable as exc:
                    out[ref] = FetchError(SOURCE_ERROR, f"local source skipped: {exc}")
                    break
                if path is not None and _isfile(fs, path):
                    found = LocalLocation(path if _is_local_fs(fs) else fs.unstrip_protocol(path))
                    break
            if found is not None:
                out[ref] = FetchOutcome(ref, "ok", "local", found.path, location=found)
            elif ref not in out:
                out[ref] = FetchError(NOT_FOUND, f"not under {', '.join(roots)}")
        return out

    # ---------------------------------------------------------------------------------- remote objects

    def _cached(self, ref: str, kind: str, upstream: str) -> FetchOutcome | None:
        upstream = redact(upstream)  # recorded (index, manifests) without credentials
        entry = self.store.lookup(upstream)
        if entry is None:
            return None
        sha = str(entry["sha256"])
        want = self.expected.get(ref)
        if want is not None and want != sha:
            return None  # refetch and report the mismatch with the fresh bytes
        return FetchOutcome(ref, "ok", kind, upstream, sha, int(entry.get("bytes", 0)), cached=True)

    def _publish(
        self, ref: str, kind: str, upstream: str, sink: _StoreSink, attempts: int
    ) -> FetchOutcome | FetchError:
        upstream = redact(upstream)  # recorded (index, manifests) without credentials
        sha = sink.digest()
        want = self.expected.get(ref)
        if want is not None and want != sha:
            sink.discard()
            return FetchError(
                HASH_MISMATCH, f"sha256 {sha[:12]}... differs from the expected {want[:12]}...", url=upstream
            )
        nbytes = sink.nbytes
        existed = self.store.has(sha)
        sink.publish()
        self.store.record(upstream, {"sha256": sha, "bytes": nbytes})
        with self._lock:
            if not existed:
                self.stats.bytes_stored += nbytes
        return FetchOutcome(ref, "ok", kind, upstream, sha, nbytes, attempts=attempts)

    def _objects(
        self,
        kind: str,
        located: dict[str, Any],
        pool: ThreadPoolExecutor,
        locate: Callable[[dict[str, str]], str],
        fetch_one: Callable[[str, _StoreSink], int],
    ) -> dict[str, Any]:
        """Shared path of one-object-per-reference sources: index lookup, then fetches in the pool."""
        out: dict[str, Any] = {}
        jobs: dict[str, Future[FetchOutcome | FetchError]] = {}
        same: dict[str, list[str]] = {}  # upstream -> further refs naming the same object
        job_upstream: dict[str, str] = {}
        for ref, v in located.items():
            try:
                upstream = locate(v)
            except UnsetVariable as exc:
                out[ref] = FetchError(SOURCE_ERROR, f"{kind} source skipped: {exc}")
                continue
            hit = self._cached(ref, kind, upstream)
            if hit is not None:
                out[ref] = hit
                self.ready(hit)
                continue
            if upstream in same:
                same[upstream].append(ref)
                continue
            same[upstream] = []

            def job(ref: str = ref, upstream: str = upstream) -> FetchOutcome | FetchError:
                sink = _StoreSink(self.store, self.options.spill_bytes)
                try:
                    attempts = fetch_one(upstream, sink)
                    outcome = self._publish(ref, kind, upstream, sink, attempts)
                    if isinstance(outcome, FetchOutcome):
                        self.ready(outcome)  # the caller may start on it while the other fetches run
                    return outcome
                except FetchError as err:
                    sink.discard()
                    return err
                except Exception as exc:  # noqa: BLE001 - a source bug must not sink the batch
                    sink.discard()
                    return FetchError(SOURCE_ERROR, f"{type(exc).__name__}: {exc}", url=upstream)

            jobs[ref] = pool.submit(job)
            job_upstream[ref] = upstream
        for ref, fut in jobs.items():
            try:
                res = out[ref] = self.wait(fut)
            except FetchError as err:
                res = out[ref] = err
            for other in same[job_upstream[ref]]:
                out[other] = _replace_ref(res, other) if isinstance(res, FetchOutcome) else res
        return out

    def _src_http_files(
        self, source: HttpFilesSource, located: dict[str, Any], pool: ThreadPoolExecutor
    ) -> dict[str, Any]:
        if source.max_concurrency:
            first = fill(source.url, next(iter(located.values())))
            _limit_host(self.client, first, self.options.host_limit(source.max_concurrency))

        def fetch_one(url: str, sink: _StoreSink) -> int:
            resp = self.client.get(
                url, sink=sink, max_bytes=self.options.max_bytes, expect_media=True, deadline=self.deadline
            )
            self.count_bytes(resp.nbytes)
            return resp.attempts

        return self._objects("http_files", located, pool, lambda v: fill(source.url, v), fetch_one)

    def _src_s3(self, source: S3Source, located: dict[str, Any], pool: ThreadPoolExecutor) -> dict[str, Any]:
        key: tuple[Any, ...] = ("s3", source.anon, source.endpoint_url, source.region)
        fs = _FS_CACHE.get(key)
        if fs is None:
            import s3fs

            client_kwargs: dict[str, Any] = {}
            if source.endpoint_url:
                client_kwargs["endpoint_url"] = source.endpoint_url
            if source.region:
                client_kwargs["region_name"] = source.region
            fs = _FS_CACHE.setdefault(key, s3fs.S3FileSystem(anon=source.anon, client_kwargs=client_kwargs))

        def locate(v: dict[str, str]) -> str:
            url = fill(source.url, v)
            return f"{source.endpoint_url.rstrip('/')}/{url[5:]}" if source.endpoint_url else url

        def fetch_one(upstream: str, sink: _StoreSink) -> int:
            path = (
                upstream.split("://", 1)[1]
                if not source.endpoint_url
                else upstream[len(source.endpoint_url.rstrip("/")) + 1 :]
            )
            return self._fs_fetch(fs, path, upstream, sink, host=f"s3:{path.split('/', 1)[0]}")

        return self._objects("s3", located, pool, locate, fetch_one)

    def _src_hf(self, source: HfSource, located: dict[str, Any], pool: ThreadPoolExecutor) -> dict[str, Any]:
        def fetch_one(upstream: str, sink: _StoreSink) -> int:
            fs, path = url_to_fs(upstream)
            return self._fs_fetch(fs, path, upstream, sink, host="hf:" + source.repo)

        return self._objects(
            "hf", located, pool, lambda v: source.fsspec_url(fill(source.path, v)), fetch_one
        )

    def _fs_fetch(self, fs: AbstractFileSystem, path: str, upstream: str, sink: _StoreSink, host: str) -> int:
        cap = self.options.max_bytes

        def once() -> None:
            sink.reset()
            with self.client._slot(host) as state:
                try:
                    with fs.open(path, "rb", cache_type="none") as f:
                        size = getattr(f, "size", None)
                        if size is not None and size > cap:
                            raise FetchError(
                                "too_large", f"{size} bytes exceed the cap of {cap}", url=upstream
                            )
                        while chunk := f.read(_READ_CHUNK):
                            sink.write(chunk)
                            self.count_bytes(len(chunk))
                            if sink.nbytes > cap:
                                raise FetchError("too_large", f"more than {cap} bytes", url=upstream)
                    if size is not None and sink.nbytes != size:
                        raise FetchError(TRUNCATED, f"got {sink.nbytes} of {size} bytes", url=upstream)
                except Exception as exc:  # noqa: BLE001
                    err = _classify_fs_error(exc, upstream)
                    self.client._record(state, err, host)
                    raise err from None
                self.client._record(state, None, host)

        _, attempts = retry_call(
            once, lambda e: _classify_fs_error(e, upstream), self.client, deadline=self.deadline
        )
        return attempts

    # ----------------------------------------------------------------------------------------- archives

    def _src_archive(
        self, source: ArchiveSource, located: dict[str, Any], pool: ThreadPoolExecutor
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        # Each reference: its member path and the archives that may hold it (one, or one per shard).
        wanted: dict[str, tuple[str, list[str]]] = {}
        for ref, v in located.items():
            try:
                member = normalize_member(fill(source.member, v))
                if source.shards:
                    urls = [fill(source.url, v | {"shard": s}) for s in source.shards.values()]
                else:
                    urls = [fill(source.url, v)]
            except UnsetVariable as exc:
                out[ref] = FetchError(SOURCE_ERROR, f"archive source skipped: {exc}")
                continue
            hit = next(
                (h for u in urls if (h := self._cached(ref, "archive", f"{u}#{member}")) is not None), None
            )
            if hit is not None:
                out[ref] = hit
            else:
                wanted[ref] = (member, urls)
        if source.max_concurrency and wanted:
            first = next(iter(wanted.values()))[1][0]
            _limit_host(self.client, first, self.options.host_limit(source.max_concurrency))
        # Archives in the order they are first named; each sees only the references still unresolved.
        archive_order = list(dict.fromkeys(u for _, urls in wanted.values() for u in urls))
        for url in archive_order:
            refs = {ref: m for ref, (m, urls) in wanted.items() if url in urls and ref not in out}
            if not refs:
                continue
            fmt = source.archive_format(url)
            try:
                if fmt == "zip":
                    res = self._zip(url, refs, pool, source.storage_options)
                else:
                    res = self._tar(url, refs, source)
            except Exception as exc:  # noqa: BLE001 - the archive as a whole failed (404, not a zip, cut...)
                err = _classify_fs_error(exc, url)
                res = {ref: err for ref in refs}
            for ref, r in res.items():
                if isinstance(r, FetchOutcome) or not (source.shards and r.failure == NOT_IN_ARCHIVE):
                    out[ref] = r
        for ref in wanted:  # sharded: not in any shard
            out.setdefault(
                ref,
                FetchError(NOT_IN_ARCHIVE, f"{wanted[ref][0]} is in none of {len(wanted[ref][1])} archives"),
            )
        return out

    def _range_source(self, url: str, storage_options: dict[str, Any]) -> RangeSource:
        if url.startswith(("http://", "https://")):
            return HttpRangeSource(self.client, url, deadline=self.deadline)
        fs, path = url_to_fs(url, **storage_options)
        return FsRangeSource(fs, path, label=url)

    def _zip_index(self, url: str, source: RangeSource) -> ZipIndex:
        with _ZIP_CACHE_LOCK:
            index = _ZIP_CACHE.get(url)
        if index is not None:
            return index
        key = f"zip-central-directory:{redact(url)}"  # recorded in the store: no credentials
        entry = self.store.lookup(key)
        if entry is not None:
            region = self.store.get(str(entry["sha256"]))
            index = read_zip_index(source, (int(entry["size"]), int(entry["region_start"]), region))
        else:
            index = read_zip_index(source)
            sha = self.store.put(index.region)
            self.store.record(
                key,
                {
                    "sha256": sha,
                    "bytes": len(index.region),
                    "size": index.size,
                    "region_start": index.region_start,
                },
            )
        with _ZIP_CACHE_LOCK:
            if len(_ZIP_CACHE) >= _ZIP_CACHE_MAX:
                _ZIP_CACHE.pop(next(iter(_ZIP_CACHE)))
            _ZIP_CACHE[url] = index
        return index

    def _zip(
        self, url: str, refs: dict[str, str], pool: ThreadPoolExecutor, storage_options: dict[str, Any]
    ) -> dict[str, Any]:
        source = self._range_source(url, storage_options)
        try:
            index = self._zip_index(url, source)
        finally:
            self.count_bytes(source.bytes_read)
            source.bytes_read = 0
        out: dict[str, Any] = {}
        by_entry: dict[int, list[str]] = {}
        entries = {}
        for ref, member in refs.items():
            entry = index.get(member)
            err = check_zip_entry(entry, member, self.options.max_bytes, url)
            if err is not None or entry is None:
                out[ref] = err
                continue
            by_entry.setdefault(entry.header_offset, []).append(ref)
            entries[entry.header_offset] = entry
        groups = plan_ranges(entries.values(), gap=self.options.coalesce_gap)

        def job(group: list[Any]) -> dict[str, Any]:
            res: dict[str, Any] = {}
            try:
                for entry, data in read_zip_group(source, index, group):
                    for ref in by_entry[entry.header_offset]:
                        upstream = f"{url}#{normalize_member(entry.name)}"
                        if isinstance(data, FetchError):
                            res[ref] = data
                            continue
                        sink = _StoreSink(self.store, self.options.spill_bytes)
                        sink.write(data)
                        res[ref] = self._publish(ref, "archive", upstream, sink, 1)
            except FetchError as err:
                for entry in group:
                    for ref in by_entry[entry.header_offset]:
                        res.setdefault(ref, err)
            return res

        futures = [(g, pool.submit(job, g)) for g in groups]
        for group, fut in futures:
            try:
                out |= self.wait(fut)
            except FetchError as err:
                out |= {ref: err for entry in group for ref in by_entry[entry.header_offset]}
        self.count_bytes(source.bytes_read)
        return out

    def _tar(self, url: str, refs: dict[str, str], source: ArchiveSource) -> dict[str, Any]:
        """Stream the tar once; with ``extract: all`` every member is stored and indexed on the way."""
        with self.store.lock(f"tar:{url}"):
            out: dict[str, Any] = {}
            for ref, member in refs.items():  # another worker may have streamed it while we waited
                hit = self._cached(ref, "archive", f"{url}#{member}")
                if hit is not None:
                    out[ref] = hit
            pending = {ref: m for ref, m in refs.items() if ref not in out}
            if pending:
                out |= self._stream_tar(url, pending, source)
            return out

    def _stream_tar(self, url: str, refs: dict[str, str], source: ArchiveSource) -> dict[str, Any]:
        members: dict[str, list[str]] = {}
        for ref, m in refs.items():
            members.setdefault(m, []).append(ref)
        expected_sha = source.expected_sha256(url)
        keep_all = source.extract == "all"
        wanted = None if keep_all else set(members)
        held: dict[str, tuple[_StoreSink, str]] = {}  # member -> sink, until the archive hash is checked
        errors: dict[str, FetchError] = {}
        reader: HashingReader | None = None
        try:
            with self._open_stream(url, source.storage_options) as raw:
                reader = HashingReader(raw)
                tar_stream: Any = reader
                for tm in iter_tar(tar_stream, wanted, max_bytes=self.options.max_bytes, label=url):
                    if tm.name in held or tm.name in errors:
                        continue  # duplicate name: the first one wins
                    if tm.error is not None or tm.fileobj is None:
                        errors[tm.name] = tm.error or FetchError(SOURCE_ERROR, "no data", url=url)
                        if expected_sha is None and not keep_all and len(held) + len(errors) >= len(members):
                            break  # every referenced member seen: the rest of the stream is not read
                        continue
                    sink = _StoreSink(self.store, self.options.spill_bytes)
                    while chunk := tm.fileobj.read(_READ_CHUNK):
                        sink.write(chunk)
                    held[tm.name] = (sink, f"{url}#{tm.name}")
                    if expected_sha is None and not keep_all and len(held) + len(errors) >= len(members):
                        break  # every referenced member seen and nothing to verify: stop early
                else:
                    if expected_sha is not None:
                        reader.drain()
        except FetchError:
            for sink, _ in held.values():
                sink.discard()
            raise
        finally:
            if reader is not None:
                self.count_bytes(reader.nbytes)
        if expected_sha is not None and reader is not None and reader.hexdigest() != expected_sha:
            for sink, _ in held.values():
                sink.discard()
            mismatch = FetchError(
                HASH_MISMATCH,
                f"archive sha256 {reader.hexdigest()[:12]}... is not the published {expected_sha[:12]}...",
                url=url,
            )
            return {ref: mismatch for ref in refs}
        out: dict[str, Any] = {}
        for name, (sink, upstream) in held.items():
            refs_here = members.get(name)
            if refs_here:
                for i, ref in enumerate(refs_here):
                    if i == 0:
                        out[ref] = self._publish(ref, "archive", upstream, sink, 1)
                    else:
                        first = out[refs_here[0]]
                        out[ref] = (
                            first
                            if isinstance(first, FetchError)
                            else FetchOutcome(
                                ref, "ok", "archive", upstream, first.sha256, first.nbytes, attempts=1
                            )
                        )
            else:  # extract: all: stored for later batches
                sha = sink.digest()
                n = sink.nbytes
                existed = self.store.has(sha)
                sink.publish()
                self.store.record(upstream, {"sha256": sha, "bytes": n})
                if not existed:
                    with self._lock:
                        self.stats.bytes_stored += n
        for ref, m in refs.items():
            if ref not in out:
                out[ref] = errors.get(m) or FetchError(NOT_IN_ARCHIVE, f"{m} is not in the archive", url=url)
        return out

    def _open_stream(self, url: str, storage_options: dict[str, Any]) -> Any:
        if url.startswith(("http://", "https://")):
            return self.client.stream(url, max_bytes=self.options.max_archive_bytes, deadline=self.deadline)
        fs, path = url_to_fs(url, **storage_options)
        try:
            return fs.open(path, "rb")
        except Exception as exc:  # noqa: BLE001
            raise _classify_fs_error(exc, url) from None


def _replace_ref(outcome: FetchOutcome, ref: str) -> FetchOutcome:
    from dataclasses import replace

    return replace(outcome, ref=ref)


def _final_failure(ref: str, errors: list[tuple[str, FetchError]]) -> FetchOutcome:
    """One outcome from every source's failure: a transient one first (a later run retries it), else the
    first source's; the detail lists them all."""
    if not errors:
        return FetchOutcome(ref, NO_SOURCE, detail="no recipe source applies to this reference")
    # An unsafe member (link, escape) is a verdict on the reference itself: it wins over other sources'
    # failures; then a transient failure (a later run retries it); else the first source's.
    kind, chosen = next(
        ((k, e) for k, e in errors if e.failure == UNSAFE_MEMBER),
        next(((k, e) for k, e in errors if e.transient), errors[0]),
    )
    detail = chosen.detail
    if chosen.url and chosen.url not in detail:
        detail = f"{detail} ({chosen.url})"
    if len(errors) > 1:
        others = "; ".join(f"{k}: {e.failure}" for k, e in errors if e is not chosen)
        detail = f"{detail}; also tried {others}"
    return FetchOutcome(ref, chosen.failure, kind, chosen.url, detail=detail[:1000], attempts=chosen.attempts)


def _within(real: str, jail: str) -> bool:
    return real == jail or real.startswith(jail.rstrip("/") + "/")


def _inside(folder: str, rel: str) -> str | None:
    path = posixpath.normpath(f"{folder.rstrip('/')}/{rel}")
    return path if path.startswith(folder.rstrip("/") + "/") else None


def _isfile(fs: AbstractFileSystem, path: str) -> bool:
    try:
        return bool(fs.isfile(path))
    except (OSError, ValueError):
        return False


def _is_local_fs(fs: AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def _limit_host(client: HttpClient, url: str, limit: int) -> None:
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname
    if host:
        client.set_host_limit(host, limit)


_CLIENTS: dict[HttpOptions, HttpClient] = {}
_CLIENTS_LOCK = threading.Lock()


def shared_client(options: HttpOptions) -> HttpClient:
    """One client per process and options, so batches on the same worker share pools and host state."""
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(options)
        if client is None:
            client = _CLIENTS[options] = HttpClient(options)
        return client


def fetch_batch(
    refs: Iterable[str],
    recipe: Recipe,
    store: ContentStore,
    *,
    context: FetchContext | None = None,
    client: HttpClient | None = None,
    options: FetchOptions | None = None,
    expected: Mapping[str, str] | None = None,
    allow_draft: bool = False,
    on_ready: Callable[[FetchOutcome], None] | None = None,
) -> FetchResult:
    """Fetch every reference of ``refs`` by ``recipe`` into ``store``; one outcome per distinct reference.

    ``expected`` maps references to sha256 values known from an earlier run: a fetched object that
    differs is a ``hash_mismatch``. ``on_ready`` is called once per ok outcome as soon as its object is in
    the store, from the fetch threads (see :class:`FetchStream`). Raises only RecipeError (a draft recipe);
    failures are outcomes.
    """
    if recipe.status == "draft" and not allow_draft:
        raise RecipeError(
            f"the recipe of {recipe.subset} is a draft: review its sources and license, "
            "then set `status: ready`"
        )
    options = options or FetchOptions()
    if options.concurrency < 1:
        raise ConfigError("fetch concurrency must be at least 1")
    options = replace(options, http=replace(options.http, per_host=options.host_limit(options.http.per_host)))
    client = client or shared_client(options.http)
    t0 = time.perf_counter()
    batch = _Batch(recipe, store, context or FetchContext(), client, options, expected or {}, on_ready)
    pool = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="fetch")
    try:
        outcomes = batch.run(refs, pool)
    finally:
        # Past the batch deadline, threads still in a socket read are not waited for (they end at their
        # own read timeout); everything they would return has already been recorded as ``timeout``.
        pool.shutdown(wait=not batch.timed_out, cancel_futures=True)
    stats = batch.stats
    stats.seconds = time.perf_counter() - t0
    for o in outcomes.values():
        stats.refs += 1
        if o.ok:
            stats.ok += 1
            if o.cached:
                stats.cached += 1
            elif o.source in LOCAL_KINDS:
                stats.local += 1
            else:
                stats.fetched += 1
        else:
            stats.failed += 1
            stats.failures[o.status] = stats.failures.get(o.status, 0) + 1
    log.info("fetch %s: %s", recipe.subset, stats.summary())
    return FetchResult(outcomes, stats)


class FetchStream:
    """:func:`fetch_batch` in a background thread, its ok outcomes handed over as they arrive.

    Iterating yields each ok outcome once, as soon as its object is stored, so the caller decodes one
    object while the fetch threads wait on the network for the next ones (a batch's fetch and its media
    work overlap instead of running one after the other). Failed references are not yielded: they are in
    :meth:`result`, which waits for the batch and re-raises its error, if any."""

    def __init__(self, refs: Iterable[str], recipe: Recipe, store: ContentStore, **kwargs: Any) -> None:
        self._ready: queue.SimpleQueue[FetchOutcome | None] = queue.SimpleQueue()
        self._result: FetchResult | None = None
        self._error: BaseException | None = None
        refs = list(refs)

        def work() -> None:
            try:
                self._result = fetch_batch(refs, recipe, store, on_ready=self._ready.put, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
                self._error = exc
            finally:
                self._ready.put(None)

        self._thread = threading.Thread(target=work, name="fetch-batch", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[FetchOutcome]:
        while (outcome := self._ready.get()) is not None:
            yield outcome

    def result(self) -> FetchResult:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def read_outcome(outcome: FetchOutcome, store: ContentStore) -> bytes:
    """The bytes of an ok outcome: from the store (remote sources) or in place (local sources)."""
    if not outcome.ok:
        raise FetchError(outcome.status, outcome.detail or "not fetched")
    if outcome.sha256 is not None and outcome.location is None:
        return store.get(outcome.sha256)
    loc = outcome.location
    if loc is None:
        raise FetchError(NOT_FOUND, "outcome has neither an object nor a location")
    fs, path = url_to_fs(loc.path)
    if loc.offset is None:
        data: bytes = fs.cat_file(path)
        return data
    with fs.open(path, "rb") as f:
        f.seek(loc.offset)
        data = f.read(loc.size)
    if loc.size is not None and len(data) != loc.size:
        raise FetchError(TRUNCATED, f"tar member truncated in {path.rsplit('/', 1)[-1]}")
    return data
