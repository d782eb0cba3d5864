"""``release_tar``: the subset's own media in the release, read in place (:mod:`..release`: loose files
under the subset folder and ``media/``, then members of the media tars)."""

from __future__ import annotations

from ....schemas.recipes import ReleaseTarSource
from ...http import NOT_FOUND, FetchError
from ...storage import is_local
from ..batch_state import BatchRun
from ..outcomes import Answers, FetchOutcome, Located
from ..release_media import MissingMedia, ReleaseMedia
from ..size_probes import IndexedReleaseMedia, file_size
from ..sizing import Miss, SizeAnswer, Sized, SizingContext


class ReleaseTar:
    kind = "release_tar"

    def answer(self, source: ReleaseTarSource, located: Located, run: BatchRun) -> Answers:
        if run.context.subset_path is None:
            return dict.fromkeys(located, FetchError(NOT_FOUND, "no release folder given"))
        release = ReleaseMedia(run.context.subset_path, run.context.media_tars, deadline=run.deadline)
        out: Answers = {}
        for ref, variables in located.items():
            rel = variables["ref"]
            location = release.where(rel)
            if isinstance(location, MissingMedia):
                out[ref] = FetchError(location.failure, str(location))
                continue
            upstream = location.path if location.offset is None else f"{location.path}#{rel}"
            out[ref] = FetchOutcome(ref, "ok", self.kind, upstream, nbytes=location.size, location=location)
        return out

    def size(self, source: ReleaseTarSource, located: Located, ctx: SizingContext) -> dict[str, SizeAnswer]:
        """Loose files and media-tar members, by the run's resolver (the tars' member tables)."""
        release = ctx.memo.get("release")
        if release is None:
            e = ctx.entry
            release = ctx.memo["release"] = IndexedReleaseMedia(
                e.path, e.media_tars, storage_options=e.storage_options
            )
        remote = not is_local(release.fs)
        out: dict[str, SizeAnswer] = {}
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
