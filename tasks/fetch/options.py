"""The knobs of one fetch call (made from the run's ``FetchOptions``), and the run and subset facts the
release and local sources need."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...schemas.config import FetchOptions
from ..http import DISALLOWED_DIRECTIVES, HttpOptions


@dataclass(frozen=True)
class FetchKnobs:
    """Knobs of the fetch stage (the HTTP client has its own, :class:`HttpOptions`)."""

    concurrency: int = 16  # threads of one batch (per-host limits apply on top)
    max_bytes: int = 512 * 1024 * 1024  # one media object
    max_archive_bytes: int = 1 << 40  # one streamed tar
    spill_bytes: int = 8 * 1024 * 1024  # larger objects are streamed to a temp file, not held in memory
    coalesce_gap: int = 256 * 1024  # zip members closer than this are read in one range request
    http: HttpOptions = field(default_factory=HttpOptions)
    # Wall-clock bound of one fetch_batch call (None: unbounded). No request, retry or backoff starts past
    # it, bodies still arriving are cut there, and references not done by then end as ``timeout`` (a later
    # run retries them), so a batch never hangs on a slow or stalled host.
    batch_timeout: float | None = None
    # Batches fetching at the same time across the run (the flow's share of the cluster). Per-host limits
    # (``http.per_host``, a source's ``max_concurrency``) are for the whole run: each batch gets this share
    # of them, at least one request, so a 64-CPU cluster does not open 64 x the limit to one host.
    host_share: int = 1

    @classmethod
    def for_run(cls, run: FetchOptions, host_share: int, *, honour_robots_tag: bool = True) -> FetchKnobs:
        """The knobs of a run's fetch options (``--fetch-concurrency``, ``--fetch-per-host``, the batch
        deadline, the User-Agent) for one of ``host_share`` batches fetching at once; ``honour_robots_tag``
        False (``--ignore-robots-tag``) turns the X-Robots-Tag opt-outs off."""
        return cls(
            concurrency=run.fetch_concurrency,
            http=HttpOptions(
                per_host=run.fetch_per_host,
                request_timeout=run.fetch_request_timeout,
                user_agent=run.user_agent,
                disallowed_directives=DISALLOWED_DIRECTIVES if honour_robots_tag else (),
            ),
            batch_timeout=run.fetch_batch_timeout,
            host_share=host_share,
        )

    def host_limit(self, limit: int) -> int:
        return max(1, limit // max(1, self.host_share))


@dataclass(frozen=True)
class FetchContext:
    """The run and subset facts the local sources need."""

    subset_path: str | None = None  # release folder of the subset
    media_tars: tuple[str, ...] = ()
    media_roots: tuple[str, ...] = ()
    env_allow: tuple[str, ...] = ()  # environment variables a recipe may read (--env-allow): recipe_env.py
