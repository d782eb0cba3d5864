"""Before a run fetches anything: does the estimated disk of the work still to do fit the output's file
system? The estimate is ``catalog --estimate``'s (``tasks/estimate``) made cheap: no object is fetched
or decoded (disk ratios from an earlier run in OUT, else the stated defaults), no HTTP object is sized by a
request (sizes the release tars, archive indexes and listings say, or the store holds), and nothing is
written to OUT. A run that would not fit is refused with one line (exit 2) before its services start."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass

from ...schemas.config import RunConfig
from ...schemas.estimate_rows import TOTAL
from ...tasks.errors import UsageError


@dataclass(frozen=True)
class DiskNeed:
    folder: str  # the existing folder whose file system was measured
    need: int  # bytes the run is estimated to add: store objects and shards
    free: int  # bytes free there now
    reserve: int  # bytes to keep free (--disk-reserve)

    @property
    def fits(self) -> bool:
        return self.need + self.reserve <= self.free


def _existing(path: str) -> str:
    """``path`` or its nearest existing parent (an output folder a first run has not made yet)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def disk_need(cfg: RunConfig, reserve: int = 0) -> DiskNeed | None:
    """The estimated bytes the run adds to its output's file system against what is free there; None when
    the output is not a local folder (nothing to measure)."""
    from ...tasks.estimate import EstimateOptions, estimate_release

    if not _local(cfg.out):
        return None
    out = cfg.out.removeprefix("file://")
    opts = EstimateOptions(cfg, out=out, probe_sample=0, decode_sample=0, write_table=False)
    total = next(r for r in estimate_release(opts).rows if r.subset == TOTAL)
    store = cfg.store_url.removeprefix("file://")
    folder = _existing(out)
    need = total.shard_bytes
    # the store's objects count here when the store is on the same file system (its default, OUT/store)
    if _local(store) and os.stat(_existing(store)).st_dev == os.stat(folder).st_dev:
        need += total.store_bytes
    return DiskNeed(folder, need, shutil.disk_usage(folder).free, reserve)


def check_disk(cfg: RunConfig, reserve: int, say: Callable[[str], None]) -> None:
    """Refuse (``UsageError``: one line, exit 2) a run whose estimated disk does not fit with ``reserve``
    left free; say why a check is skipped."""
    if cfg.source.limit is not None:
        say("disk check: skipped for a trial run (--limit)")
        return
    try:
        found = disk_need(cfg, reserve)
    except Exception as exc:  # noqa: BLE001 - a check that cannot estimate must not stop the run it guards
        say(f"disk check: skipped, the estimate failed ({type(exc).__name__}: {exc})")
        return
    if found is None:
        say(f"disk check: skipped, {cfg.out} is not a local folder")
        return
    if not found.fits:
        raise UsageError(
            f"not enough disk: the run needs about {_gb(found.need)} (store and shards, estimated) "
            f"+ {_gb(found.reserve)} kept free (--disk-reserve), {found.folder} has {_gb(found.free)} free",
            "free space, choose another --out / --store, or pass --no-disk-check",
        )


def _gb(n: int) -> str:
    """GB, or MB below one (a small run needs a few MB: "0.00 GB" would say nothing)."""
    return f"{n / 1e9:,.2f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"
