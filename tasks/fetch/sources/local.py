"""``local``: a folder (local path or fsspec URL) holding the upstream files in the documented layout;
default: each ``--media-root`` of the run. Files are read in place."""

from __future__ import annotations

import os

from ....schemas.recipes import LocalSource, UnsetVariable, check_expanded, fill
from ...http import NOT_FOUND, SOURCE_ERROR, FetchError, check_local_root
from ...storage import is_local, url_to_fs
from ..batch_state import BatchRun
from ..outcomes import Answer, Answers, FetchOutcome, LocalLocation, Located
from ..release_media import MissingMedia, file_in
from ..size_probes import file_size
from ..sizing import Miss, SizeAnswer, Sized, SizingContext


class Local:
    kind = "local"

    def answer(self, source: LocalSource, located: Located, run: BatchRun) -> Answers:
        roots = [source.root] if source.root else list(run.context.media_roots)
        if not roots:
            return dict.fromkeys(located, FetchError(NOT_FOUND, "no --media-root given"))
        return {ref: self._find(source, roots, ref, variables, run) for ref, variables in located.items()}

    def _find(
        self, source: LocalSource, roots: list[str], ref: str, variables: dict[str, str], run: BatchRun
    ) -> Answer:
        """The first root holding the reference's file (user folders: their symlinks are followed)."""
        for root in roots:
            try:
                check_expanded(source.storage_options)
                fs, base = url_to_fs(fill(root, variables), **source.storage_options)
                if source.root and is_local(fs):  # a recipe's own folder: only where the run may read
                    check_local_root(base, _readable(run))
                path = file_in(fs, base, fill(source.path, variables))
            except UnsetVariable as exc:
                return FetchError(SOURCE_ERROR, f"local source skipped: {exc}")
            except FetchError as err:
                return err
            if path is not None:
                found = LocalLocation(path if is_local(fs) else fs.unstrip_protocol(path))
                return FetchOutcome(ref, "ok", self.kind, found.path, location=found)
        return FetchError(NOT_FOUND, f"not under {', '.join(roots)}")

    def size(self, source: LocalSource, located: Located, ctx: SizingContext) -> dict[str, SizeAnswer]:
        """Sized on disk (or by the folder's filesystem)."""
        roots = [source.root] if source.root else list(ctx.media_roots)
        if not roots:
            return dict.fromkeys(located, Miss(NOT_FOUND, "no --media-root given"))
        return {ref: self._size_one(source, roots, v) for ref, v in located.items()}

    def _size_one(self, source: LocalSource, roots: list[str], variables: dict[str, str]) -> SizeAnswer:
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


def _readable(run: BatchRun) -> list[str]:
    """The folders a recipe's local root may lie under: the release (the subset folder's parent) and each
    --media-root."""
    release = [os.path.dirname(run.context.subset_path.rstrip("/"))] if run.context.subset_path else []
    return release + list(run.context.media_roots)
