"""``http_files``: one HTTP(S) URL per reference, from a template; fetched into the store, sized by HEAD (or
a one-byte ranged GET) on a seeded sample."""

from __future__ import annotations

from urllib.parse import urlsplit

from ....schemas.recipes import HttpFilesSource, UnsetVariable, check_expanded, fill
from ...http import SOURCE_ERROR, FetchError, check_url
from ..batch_state import BatchRun
from ..objects import fetch_objects
from ..outcomes import Answers, Located
from ..size_probes import http_size
from ..sizing import SizeAnswer, SizingContext, locate_all, sampled
from ..store_writes import StoreSink


class HttpFiles:
    kind = "http_files"

    def answer(self, source: HttpFilesSource, located: Located, run: BatchRun) -> Answers:
        try:
            check_expanded(source.headers)
        except UnsetVariable as exc:
            return dict.fromkeys(located, FetchError(SOURCE_ERROR, f"{self.kind} source skipped: {exc}"))
        if source.max_concurrency:
            run.limit_host(fill(source.url, next(iter(located.values()))), source.max_concurrency)

        def fetch_one(url: str, sink: StoreSink) -> int:
            check_url(url, source.allow_private, run.client.options.resolver)  # before anything is sent
            resp = run.client.get(
                url,
                sink=sink,
                max_bytes=run.options.max_bytes,
                expect_media=True,
                deadline=run.deadline,
                redirects=source.redirects,
                headers=source.headers,
            )
            run.count_bytes(resp.nbytes)
            return resp.attempts

        return fetch_objects(run, self.kind, located, lambda v: fill(source.url, v), fetch_one)

    def size(self, source: HttpFilesSource, located: Located, ctx: SizingContext) -> dict[str, SizeAnswer]:
        locators, out = locate_all(located, lambda v: fill(source.url, v), self.kind)
        if source.max_concurrency and locators:
            host = urlsplit(next(iter(locators.values()))).hostname
            if host:
                ctx.client.hosts.set_limit(host, source.max_concurrency)
        return out | sampled(ctx, self.kind, locators, lambda url: http_size(ctx.client, url))
