"""The shared path of sources that hold one object per reference (``http_files``, ``s3``, ``hf``): look the
reference up in the store's upstream index, else fetch it in the batch's pool into the store; references
naming the same upstream object share one fetch.

Object-store reads (s3fs, HfFileSystem) go through :func:`read_fs_object`: the same host slots, breaker and
retry policy as HTTP, so a slow bucket is treated like a slow web server.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future

from fsspec import AbstractFileSystem

from ...schemas.recipes import UnsetVariable
from ...schemas.redact import redact
from ..http import SOURCE_ERROR, TIMEOUT, TOO_LARGE, TRUNCATED, FetchError, classify_fs_error, retry_call
from .batch_state import BatchRun
from .outcomes import Answer, Answers, FetchOutcome, Located
from .store_writes import StoreSink

READ_CHUNK = 1024 * 1024

Locate = Callable[[dict[str, str]], str]  # template variables -> upstream locator
FetchOne = Callable[[str, StoreSink], int]  # upstream locator, sink -> attempts


def fetch_objects(run: BatchRun, kind: str, located: Located, locate: Locate, fetch_one: FetchOne) -> Answers:
    """Answer every located reference: from the upstream index, or by ``fetch_one`` in the pool."""
    out: Answers = {}
    jobs: dict[str, tuple[str, Future[Answer]]] = {}  # first ref of an upstream -> (upstream, its fetch)
    same: dict[str, list[str]] = {}  # upstream -> further refs naming the same object
    for ref, variables in located.items():
        try:
            upstream = locate(variables)
        except UnsetVariable as exc:
            out[ref] = FetchError(SOURCE_ERROR, f"{kind} source skipped: {exc}")
            continue
        hit = run.writer.cached(ref, kind, upstream)
        if hit is not None:
            out[ref] = hit
            run.ready(hit)
        elif upstream in same:
            same[upstream].append(ref)
        else:
            same[upstream] = []
            jobs[ref] = (upstream, run.pool.submit(_fetch_into_store, run, kind, ref, upstream, fetch_one))
    for ref, (upstream, fut) in jobs.items():
        try:
            answer = out[ref] = run.wait(fut)
        except FetchError as err:
            answer = out[ref] = err
        for other in same[upstream]:
            out[other] = answer.for_ref(other) if isinstance(answer, FetchOutcome) else answer
    return out


def _fetch_into_store(run: BatchRun, kind: str, ref: str, upstream: str, fetch_one: FetchOne) -> Answer:
    """One object into the store (a pool job): its outcome, announced at once, or its failure.

    The fetch runs under the store's lock on the object's upstream locator, taken across processes: a
    batch of another worker naming the same object waits for it, then finds the object in the store."""
    with run.writer.store.lock(f"object:{redact(upstream)}"):
        hit = run.writer.cached(ref, kind, upstream)  # another worker fetched it while we waited
        if hit is not None:
            run.ready(hit)
            return hit
        if run.deadline is not None and time.monotonic() >= run.deadline:
            return FetchError(TIMEOUT, "batch deadline reached while waiting for another worker's fetch")
        return _fetch_unlocked(run, kind, ref, upstream, fetch_one)


def _fetch_unlocked(run: BatchRun, kind: str, ref: str, upstream: str, fetch_one: FetchOne) -> Answer:
    sink = run.writer.sink()
    try:
        attempts = fetch_one(upstream, sink)
        answer = run.writer.publish(ref, kind, upstream, sink, attempts)
        if isinstance(answer, FetchOutcome):
            run.ready(answer)  # the caller may start on it while the other fetches run
        return answer
    except FetchError as err:
        sink.discard()
        return err
    except Exception as exc:  # noqa: BLE001 - a source bug must not sink the batch
        sink.discard()
        return FetchError(SOURCE_ERROR, f"{type(exc).__name__}: {exc}", url=upstream)


def read_fs_object(
    run: BatchRun, fs: AbstractFileSystem, path: str, upstream: str, sink: StoreSink, host: str
) -> int:
    """Copy one object-store file into ``sink`` within ``host``'s slots and the retry policy; returns the
    attempts it took."""
    cap = run.options.max_bytes

    def once() -> None:
        sink.reset()
        with run.client.hosts.slot(host) as state:
            try:
                _copy(run, fs, path, upstream, sink, cap)
            except Exception as exc:  # noqa: BLE001
                err = classify_fs_error(exc, upstream)
                run.client.hosts.record(state, err, host)
                raise err from None
            run.client.hosts.record(state, None, host)

    def classify(exc: BaseException) -> FetchError:
        return classify_fs_error(exc, upstream)

    _, attempts = retry_call(once, classify, run.client.retry, deadline=run.deadline)
    return int(attempts)


def _copy(run: BatchRun, fs: AbstractFileSystem, path: str, upstream: str, sink: StoreSink, cap: int) -> None:
    with fs.open(path, "rb", cache_type="none") as f:
        size = getattr(f, "size", None)
        if size is not None and size > cap:
            raise FetchError(TOO_LARGE, f"{size} bytes exceed the cap of {cap}", url=upstream)
        while chunk := f.read(READ_CHUNK):
            sink.write(chunk)
            run.count_bytes(len(chunk))
            if sink.nbytes > cap:
                raise FetchError(TOO_LARGE, f"more than {cap} bytes", url=upstream)
    if size is not None and sink.nbytes != size:
        raise FetchError(TRUNCATED, f"got {sink.nbytes} of {size} bytes", url=upstream)
