"""``archive``: a zip or a tar at a URL (http(s), s3://, hf://, or a local path), the member path as a
template, optionally one archive per ``{shard}``. Only referenced members are read (:mod:`..zip_fetch`,
:mod:`..tar_fetch`) and stored; a member already in the upstream index is not read again."""

from __future__ import annotations

from ....schemas.recipes import ArchiveSource, UnsetVariable, check_expanded, fill
from ..archive_members import normalize_member
from ..batch_state import BatchRun
from ..failures import NOT_IN_ARCHIVE, SOURCE_ERROR, FetchError, classify_fs_error
from ..outcomes import Answers, FetchOutcome, Located
from ..policy import check_url
from ..tar_fetch import fetch_tar_members
from ..zip_fetch import fetch_zip_members

Wanted = dict[str, tuple[str, list[str]]]  # reference -> (member path, the archives that may hold it)


class Archive:
    kind = "archive"

    def answer(self, source: ArchiveSource, located: Located, run: BatchRun) -> Answers:
        out, wanted = self._plan(source, located, run)
        if wanted:
            run.limit_host(next(iter(wanted.values()))[1][0], source.max_concurrency)
        # Archives in the order they are first named; each sees only the references still unresolved.
        for url in dict.fromkeys(u for _, urls in wanted.values() for u in urls):
            refs = {ref: m for ref, (m, urls) in wanted.items() if url in urls and ref not in out}
            if refs:
                for ref, answer in self._read_archive(source, url, refs, run).items():
                    # sharded: a member missing from one shard may be in the next
                    if isinstance(answer, FetchOutcome) or not (
                        source.shards and answer.failure == NOT_IN_ARCHIVE
                    ):
                        out[ref] = answer
        for ref, (member, urls) in wanted.items():  # sharded: not in any shard
            out.setdefault(ref, FetchError(NOT_IN_ARCHIVE, f"{member} is in none of {len(urls)} archives"))
        return out

    def _plan(self, source: ArchiveSource, located: Located, run: BatchRun) -> tuple[Answers, Wanted]:
        """Each reference's member and candidate archives; the ones the upstream index answers already."""
        out: Answers = {}
        wanted: Wanted = {}
        for ref, v in located.items():
            try:
                check_expanded(source.storage_options)
                member = normalize_member(fill(source.member, v))
                shards = source.shards.values() if source.shards else [None]
                urls = [fill(source.url, v if s is None else v | {"shard": s}) for s in shards]
            except UnsetVariable as exc:
                out[ref] = FetchError(SOURCE_ERROR, f"archive source skipped: {exc}")
                continue
            hits = (run.writer.cached(ref, self.kind, f"{u}#{member}") for u in urls)
            hit = next((h for h in hits if h is not None), None)
            if hit is not None:
                out[ref] = hit
            else:
                wanted[ref] = (member, urls)
        return out, wanted

    def _read_archive(self, source: ArchiveSource, url: str, refs: dict[str, str], run: BatchRun) -> Answers:
        try:
            check_url(url, source.allow_private, run.client.options.resolver)  # before anything is sent
        except FetchError as err:
            return dict.fromkeys(refs, err)
        try:
            if source.archive_format(url) == "zip":
                return fetch_zip_members(run, url, refs, source.storage_options, source.redirects)
            return fetch_tar_members(run, url, refs, source)
        except Exception as exc:  # noqa: BLE001 - the archive as a whole failed (404, not a zip, cut...)
            return dict.fromkeys(refs, classify_fs_error(exc, url))
