"""``s3``: one S3 object per reference (``s3://bucket/prefix/{name}``, optionally at another endpoint),
read through s3fs within the same host slots and retry policy as HTTP; fetched into the store, sized by the
bucket's listing (or HEAD for a few keys)."""

from __future__ import annotations

import threading
from typing import Any

from fsspec import AbstractFileSystem

from ....schemas.recipes import S3Source, fill
from ..batch_state import BatchRun
from ..objects import fetch_objects, read_fs_object
from ..outcomes import Answers, Located
from ..sizing import SizeAnswer, SizingContext, listed, locate_all
from ..store_writes import StoreSink

_FILESYSTEMS: dict[tuple[Any, ...], AbstractFileSystem] = {}  # one client per process and settings
_FILESYSTEMS_LOCK = threading.Lock()


class S3:
    kind = "s3"

    def answer(self, source: S3Source, located: Located, run: BatchRun) -> Answers:
        fs = s3_filesystem(source)
        endpoint = source.endpoint_url.rstrip("/") if source.endpoint_url else None

        def locate(variables: dict[str, str]) -> str:
            url = fill(source.url, variables)
            return f"{endpoint}/{url[5:]}" if endpoint else url

        def fetch_one(upstream: str, sink: StoreSink) -> int:
            path = upstream[len(endpoint) + 1 :] if endpoint else upstream.split("://", 1)[1]
            return read_fs_object(run, fs, path, upstream, sink, host=f"s3:{path.split('/', 1)[0]}")

        return fetch_objects(run, self.kind, located, locate, fetch_one)

    def size(self, source: S3Source, located: Located, ctx: SizingContext) -> dict[str, SizeAnswer]:
        fs = s3_filesystem(source)
        endpoint = source.endpoint_url.rstrip("/") if source.endpoint_url else None

        def locate(variables: dict[str, str]) -> str:  # the upstream locator answer() records
            url = fill(source.url, variables)
            return f"{endpoint}/{url[5:]}" if endpoint else url

        def path_of(loc: str) -> str:
            return loc[len(endpoint) + 1 :] if endpoint else loc.split("://", 1)[1]

        locators, out = locate_all(located, locate, self.kind)
        return out | listed(ctx, self.kind, locators, fs, path_of, lambda p: f"s3:{p.split('/', 1)[0]}")


def s3_filesystem(source: S3Source) -> AbstractFileSystem:
    """The s3fs filesystem of ``source``'s connection options, one per options for the process (the
    estimate's listings use it too)."""
    key: tuple[Any, ...] = ("s3", source.anon, source.endpoint_url, source.region)
    with _FILESYSTEMS_LOCK:
        fs = _FILESYSTEMS.get(key)
        if fs is None:
            import s3fs  # only recipes with an s3 source need it

            client_kwargs: dict[str, Any] = {}
            if source.endpoint_url:
                client_kwargs["endpoint_url"] = source.endpoint_url
            if source.region:
                client_kwargs["region_name"] = source.region
            fs = _FILESYSTEMS[key] = s3fs.S3FileSystem(anon=source.anon, client_kwargs=client_kwargs)
        return fs
