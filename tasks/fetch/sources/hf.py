"""``hf``: one file per reference in a Hugging Face repo at a pinned revision, read through fsspec
``hf://`` within the same host slots and retry policy as HTTP; fetched into the store, sized by the repo
folder's listing."""

from __future__ import annotations

from ....schemas.recipes import HfSource, fill
from ...storage import url_to_fs
from ..batch_state import BatchRun
from ..objects import fetch_objects, read_fs_object
from ..outcomes import Answers, Located
from ..sizing import SizeAnswer, SizingContext, listed, locate_all
from ..store_writes import StoreSink


class Hf:
    kind = "hf"

    def answer(self, source: HfSource, located: Located, run: BatchRun) -> Answers:
        def fetch_one(upstream: str, sink: StoreSink) -> int:
            fs, path = url_to_fs(upstream)
            return read_fs_object(run, fs, path, upstream, sink, host="hf:" + source.repo)

        return fetch_objects(
            run, self.kind, located, lambda v: source.fsspec_url(fill(source.path, v)), fetch_one
        )

    def size(self, source: HfSource, located: Located, ctx: SizingContext) -> dict[str, SizeAnswer]:
        locators, out = locate_all(located, lambda v: source.fsspec_url(fill(source.path, v)), self.kind)
        if not locators:
            return out
        fs, _ = url_to_fs(next(iter(locators.values())))

        def path_of(loc: str) -> str:
            return str(url_to_fs(loc)[1])

        return out | listed(ctx, self.kind, locators, fs, path_of, lambda _: f"hf:{source.repo}")
