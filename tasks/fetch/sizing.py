"""What sizing a reference's object means (``vlmforge catalog --estimate``, before any media body is
read): the answers (:class:`Sized`, :class:`Miss`), what the sizers share (:class:`SizingContext`) and the
sampling of sizes only HTTP can tell (:func:`sampled`). Each source kind sizes its own references beside
its fetch (``size`` of :class:`~.sources.media_source.MediaSource`), so a kind is one module.

An object is named by what the store's upstream index records for it (the URL, ``s3://`` locator, zip
``URL#member``) or, for media read in place, by its file or tar member: two references, in one subset or
two, naming the same object are one object, as the run stores and fetches it once.

Sizes are exact where an index says them (tar and zip member tables, object-store listings, files on disk,
the store's own index) and sampled where only HTTP can tell: a seeded random sample of a source's objects
gets a HEAD each, the rest are estimated from the sample's mean (the stratum), with its interval.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ...schemas.recipes import UnsetVariable
from ...schemas.records import SubsetEntry
from ...schemas.redact import redact
from ..http import SOURCE_ERROR, FetchError, HttpClient
from ..storage import ContentStore
from .outcomes import Located
from .size_probes import fs_sizes


@dataclass(frozen=True, slots=True)
class Sized:
    """One reference's object: its name, size (None: not measured, see ``stratum``) and what fetching it
    costs on the network (0: read in place or already in the store)."""

    locator: str
    kind: str
    size: int | None
    transfer: int | None = None  # None: the object's size
    in_store: bool = False
    stratum: str | None = None  # the sample whose mean stands for an unmeasured size
    probed: bool = False  # measured by a request (HEAD, ranged GET, listing, metadata)
    bound: bool = False  # only an upper bound is known (a tar streamed whole)


@dataclass(frozen=True, slots=True)
class Miss:
    """No object here: the failure class the run would record (``http_404``, ``not_in_archive``...)."""

    failure: str
    detail: str


SizeAnswer = Sized | Miss


# Objects per source and subset sized by a request where no index says it: an estimate's default
DEFAULT_PROBE_SAMPLE = 64


@dataclass
class SizingContext:
    """What the sizers of one estimate share: the subset, the store, the HTTP client and its pool, the
    sampling settings, and what the samples measured."""

    entry: SubsetEntry
    client: HttpClient
    pool: ThreadPoolExecutor
    store: ContentStore | None = None
    media_roots: tuple[str, ...] = ()
    probe_sample: int = DEFAULT_PROBE_SAMPLE  # objects per source whose size is asked over HTTP
    seed: int = 0
    strata: dict[str, list[int]] = field(default_factory=dict)  # stratum -> measured sizes
    stratum_objects: dict[str, int] = field(default_factory=dict)  # stratum -> objects it stands for
    streamed: dict[str, int] = field(default_factory=dict)  # tar archive URL -> bytes streamed whole
    memo: dict[str, Any] = field(default_factory=dict)  # per-subset objects a sizer builds once
    known: dict[str, int] = field(default_factory=dict)  # locator -> size asked already (any subset)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def cached(self, locator: str) -> int | None:
        """The size the store's upstream index records for ``locator`` (None: not in the store)."""
        if self.store is None:
            return None
        entry = self.store.lookup(redact(locator))
        return None if entry is None else int(entry.get("bytes", 0))


def sampled(
    ctx: SizingContext, kind: str, locators: dict[str, str], probe: Callable[[str], int]
) -> dict[str, SizeAnswer]:
    """Answers for references whose objects only a request can size (``probe(locator)``): the store's index
    first, then a seeded sample of the other distinct objects probed in the pool; the rest share the
    sample's stratum. A probed object that is absent is a miss (the next source may hold it)."""
    out: dict[str, SizeAnswer] = {}
    todo: dict[str, list[str]] = {}  # locator -> refs
    for ref, loc in locators.items():
        hit = ctx.cached(loc)
        if hit is not None:
            out[ref] = Sized(loc, kind, hit, 0, in_store=True)
        elif loc in ctx.known:  # an earlier subset asked already: not asked twice
            out[ref] = Sized(loc, kind, ctx.known[loc], probed=True)
        else:
            todo.setdefault(loc, []).append(ref)
    if not todo:
        return out
    distinct = sorted(todo)
    rng = random.Random(f"{ctx.seed}:{ctx.entry.subset}:{kind}")
    chosen = rng.sample(distinct, min(len(distinct), ctx.probe_sample))
    stratum = f"{ctx.entry.subset}:{kind}:{len(ctx.strata)}"

    def measure(loc: str) -> int | FetchError:
        try:
            return probe(loc)
        except FetchError as err:
            return err

    measured = dict(zip(chosen, ctx.pool.map(measure, chosen), strict=True))
    sizes = [v for v in measured.values() if isinstance(v, int)]
    ctx.known.update((loc, v) for loc, v in measured.items() if isinstance(v, int))
    ctx.strata[stratum] = sizes
    ctx.stratum_objects[stratum] = len(distinct) - sum(1 for v in measured.values() if not isinstance(v, int))
    for loc, refs in todo.items():
        got = measured.get(loc)
        if isinstance(got, FetchError):
            answer: SizeAnswer = Miss(got.failure, got.detail)
        elif got is not None:
            answer = Sized(loc, kind, got, stratum=stratum, probed=True)
        else:
            answer = Sized(loc, kind, None, stratum=stratum)
        for ref in refs:
            out[ref] = answer
    return out


def locate_all(
    located: Located, template: Callable[[dict[str, str]], str], kind: str
) -> tuple[dict[str, str], dict[str, SizeAnswer]]:
    """Each reference's locator from its template variables; a template with an unset ``${VAR}`` is a
    miss (the run skips that source the same way)."""
    locators: dict[str, str] = {}
    misses: dict[str, SizeAnswer] = {}
    for ref, v in located.items():
        try:
            locators[ref] = template(v)
        except UnsetVariable as exc:
            misses[ref] = Miss(SOURCE_ERROR, f"{kind} source skipped: {exc}")
    return locators, misses


def listed(
    ctx: SizingContext,
    kind: str,
    locators: dict[str, str],
    fs: Any,
    path_of: Callable[[str], str],
    host_of: Callable[[str], str],
) -> dict[str, SizeAnswer]:
    """Exact sizes from an object store: the store's index first, then listings or metadata requests."""
    out: dict[str, SizeAnswer] = {}
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
