"""Fetch stage: turn a batch of media references into objects in the content-addressed store.

For each reference the recipe's sources are tried in order (see ``schemas/recipes.py``); the first one
that yields the object wins. Each source kind is one module of :mod:`.sources`, found by its ``kind`` in
:data:`~.sources.SOURCES`. ``release_tar`` and ``local`` answer in place (the bytes are read where they
are); remote sources (``http_files``, ``archive``, ``s3``, ``hf``) stream the object into the store and
record its upstream locator (:mod:`.store_writes`), so an object is fetched once, whichever subsets, batches
or runs reference it, and a killed run resumes without fetching anything twice.

A failed reference is an outcome with a failure class (:mod:`.failures`), never an exception; the batch
reports its counts (bytes, files/s, failures by class) in :class:`~.outcomes.FetchStats` and one log line.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from ...schemas.recipe_match import MatchBudgetError
from ...schemas.recipes import Recipe, ref_variables
from ..catalog import check_ready
from ..errors import ConfigError
from ..http import MATCH_BUDGET, NO_SOURCE, NOT_FOUND, TIMEOUT, FetchError, HttpClient, HttpOptions
from ..parse import normalize_ref, unsafe_ref_reason
from ..storage import ContentStore
from .batch_state import BatchRun
from .options import FetchContext, FetchKnobs
from .outcomes import FetchOutcome, FetchResult, FetchStats, Located, final_failure
from .recipe_env import bind_environment
from .release_media import MissingMedia, read_location
from .sources import SOURCES
from .store_writes import StoreWriter

log = logging.getLogger("vlmforge.fetch")

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
    options: FetchKnobs | None = None,
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
    check_ready(recipe, allow_draft)
    recipe = bind_environment(recipe, (context or FetchContext()).env_allow)
    options = options or FetchKnobs()
    if options.concurrency < 1:
        raise ConfigError("fetch concurrency must be at least 1")
    options = replace(options, http=replace(options.http, per_host=options.host_limit(options.http.per_host)))
    client = client or shared_client(options.http)
    t0 = time.perf_counter()
    writer = StoreWriter(store, options.spill_bytes, expected or {})
    pool = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="fetch")
    run = BatchRun(writer, context or FetchContext(), client, options, pool, on_ready)
    try:
        outcomes = _answer(run, recipe, refs)
    finally:
        # Past the batch deadline, threads still in a socket read are not waited for (they end at their
        # own read timeout); everything they would return has already been recorded as ``timeout``.
        pool.shutdown(wait=not run.timed_out, cancel_futures=True)
    stats = FetchStats(bytes_fetched=run.bytes_fetched, bytes_stored=writer.bytes_stored)
    stats.seconds = time.perf_counter() - t0
    for outcome in outcomes.values():
        stats.count(outcome)
    log.info("fetch %s: %s", recipe.subset, stats.summary())
    return FetchResult(outcomes, stats)


def _answer(run: BatchRun, recipe: Recipe, refs: Iterable[str]) -> dict[str, FetchOutcome]:
    """One outcome per distinct reference, in first-seen order: each recipe source in turn answers the
    references still open that its ``match`` accepts; the first ok answer wins."""
    order: list[str] = list(dict.fromkeys(refs))
    outcomes: dict[str, FetchOutcome] = {}
    errors: dict[str, list[tuple[str, FetchError]]] = {r: [] for r in order}
    for ref in order:
        bad = unsafe_ref_reason(ref)
        if bad:
            outcomes[ref] = FetchOutcome(ref, NO_SOURCE, detail=f"unsafe reference ({bad})")
    todo = [r for r in order if r not in outcomes]
    for source in recipe.sources:
        located, refused = _located(todo, source.compiled_match(), run.deadline)
        for ref, err in refused.items():
            errors[ref].append((source.kind, err))
        if not located:
            continue
        for ref, answer in SOURCES[source.kind].answer(source, located, run).items():
            if isinstance(answer, FetchOutcome):
                outcomes[ref] = answer
                run.ready(answer)  # sources that do not announce their answers as they come
            else:
                errors[ref].append((source.kind, answer))
        todo = [r for r in todo if r not in outcomes]
    for ref in todo:
        outcomes[ref] = final_failure(ref, errors[ref])
    return {ref: outcomes[ref] for ref in order}


def _located(refs: list[str], match: Any, deadline: float | None) -> tuple[Located, dict[str, FetchError]]:
    """The references a source's ``match`` accepts, with their template variables, and those it could not
    judge: a search refused or past its budget (``match_budget``, :mod:`...schemas.recipe_match`), or not
    started because the batch deadline (``time.monotonic()``) had come."""
    located: Located = {}
    refused: dict[str, FetchError] = {}
    for ref in refs:
        if match is not None and deadline is not None and time.monotonic() >= deadline:
            refused[ref] = FetchError(TIMEOUT, "batch deadline reached before the source's match was tried")
            continue
        try:
            variables = ref_variables(normalize_ref(ref), match)
        except MatchBudgetError as exc:
            refused[ref] = FetchError(MATCH_BUDGET, str(exc))
            continue
        if variables is not None:
            located[ref] = variables
    return located, refused


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
    """The bytes of an ok outcome: the ones it holds (handed over once), else from the store (remote
    sources) or in place (local sources)."""
    if not outcome.ok:
        raise FetchError(outcome.status, outcome.detail or "not fetched")
    if outcome.location is None:
        held = None if outcome.held is None else outcome.held.take()
        if held is not None:
            return held
        if outcome.sha256 is None:
            raise FetchError(NOT_FOUND, "outcome has neither an object nor a location")
        return store.get(outcome.sha256)
    try:
        return read_location(outcome.location, outcome.ref)
    except MissingMedia as exc:
        raise FetchError(exc.failure, str(exc)) from None
