"""``release_tar``: the subset's own media in the release, read in place (:mod:`..release`: loose files
under the subset folder and ``media/``, then members of the media tars)."""

from __future__ import annotations

from ....schemas.recipes import ReleaseTarSource
from ..batch_state import BatchRun
from ..failures import NOT_FOUND, FetchError
from ..outcomes import Answers, FetchOutcome, Located
from ..release_media import MissingMedia, ReleaseMedia


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
