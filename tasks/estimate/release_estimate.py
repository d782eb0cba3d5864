"""``vlmforge catalog --estimate``: what a run of a release will fetch, store and take, per subset, before
one media body is read. The front door of this package:

catalog (:func:`~vlmforge.tasks.catalog.release.catalog_release`) -> the references the parser keeps
(:mod:`.references`) -> each reference's object and size by its recipe's sources (:mod:`.sizes`) -> disk
ratios (:mod:`.disk`) and rates (:mod:`.hours`) -> the figures (:mod:`.tally`), written to the ``estimates``
manifest table under OUT when an output folder is given.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from ...schemas.config import RunConfig
from ...schemas.estimate_rows import ESTIMATES, EstimateRow
from ...schemas.recipes import Recipe
from ..catalog import catalog_release, check_ready, find_recipe
from ..fetch import DEFAULT_PROBE_SAMPLE, SizingContext, bind_environment
from ..http import HttpClient, HttpOptions
from ..manifests import OutputLayout, write_parquet
from ..storage import ContentStore
from .disk import DEFAULT, DiskRatios, previous_ratios, sampled_ratios
from .hours import Rates, measured_rates, parse_bandwidth
from .references import subset_references
from .sizes import size_references
from .tally import SubsetSizing, tally
from .versus import Versus, versus_actual

# Objects an estimate decodes per subset and the network its hours are for (the probe sample: fetch's
# sizing.py), declared once: the catalog command's and the estimate flow's defaults are these.
DEFAULT_DECODE_SAMPLE = 8
DEFAULT_BANDWIDTH_TEXT = "1Gbit"
DEFAULT_BANDWIDTH = parse_bandwidth(DEFAULT_BANDWIDTH_TEXT)  # bytes per second


@dataclass(frozen=True)
class EstimateOptions:
    """How to estimate: the run's options (release, subsets, recipes, knobs, store, per-host limit) and the
    sampling, the cores and the bandwidth the hours are for."""

    cfg: RunConfig
    out: str | None = None  # an output folder: its store, an earlier run's ratios and rates; the table
    probe_sample: int = (
        DEFAULT_PROBE_SAMPLE  # objects per source and subset sized by a request where no index says it
    )
    decode_sample: int = (
        DEFAULT_DECODE_SAMPLE  # objects per subset fetched and normalised for the disk ratios (0: none)
    )
    seed: int = 0
    cores: int = 0  # 0: this machine's
    bandwidth: float = DEFAULT_BANDWIDTH  # bytes per second
    # False: read the output folder (its store, an earlier run's ratios and rates) but write nothing there
    # (the run's own disk check: its estimate is not the user's)
    write_table: bool = True


@dataclass
class Estimate:
    rows: list[EstimateRow]
    estimate_id: str
    settings: dict[str, object] = field(default_factory=dict)
    table_paths: list[str] = field(default_factory=list)
    versus: list[Versus] = field(
        default_factory=list
    )  # with an output folder: the last run's estimate vs actual


def run_recipe(subset: str, cfg: RunConfig) -> Recipe:
    """The sources the run uses for ``subset``: its recipe when it names a remote source (the fetch stage),
    else the media roots then the release (what :mod:`vlmforge.tasks.fetch.release_media` does,
    which is :meth:`Recipe.default`)."""
    recipe = find_recipe(subset, cfg.media.catalogs)
    if recipe is not None and recipe.remote:
        check_ready(recipe)
        # the variables the user allowed (--env-allow), as the run puts them in; others stay ${NAME} and
        # their source answers why (the estimate's "no source answers" note names it)
        return bind_environment(recipe, cfg.fetch.env_allow)
    return Recipe.default(subset)


def estimate_release(opts: EstimateOptions) -> Estimate:
    """Estimate every selected subset of the release; with ``opts.out``, write the ``estimates`` table and
    compare the estimate made before its latest run with what that run took."""
    cfg = opts.cfg
    cores = opts.cores or os.cpu_count() or 1
    entries = catalog_release(
        cfg.source.release,
        subsets=cfg.source.subsets,
        batch_lines=cfg.batches.batch_lines,
        storage_options=cfg.source.storage_options,
        batch_media=cfg.batches.batch_media,
    )
    store = ContentStore(cfg.store_url) if (opts.out or cfg.fetch.store) else None
    previous = previous_ratios(opts.out, cfg) if opts.out and _has_manifests(opts.out) else {}
    rates = (measured_rates(opts.out) if opts.out and _has_manifests(opts.out) else None) or Rates()
    client = HttpClient(HttpOptions(per_host=cfg.fetch.fetch_per_host))
    sized: list[SubsetSizing] = []
    known: dict[str, int] = {}  # sizes asked over HTTP, shared by the subsets (one request per object)
    try:
        with ThreadPoolExecutor(cfg.fetch.fetch_concurrency, thread_name_prefix="estimate") as pool:
            for entry in entries:
                t0 = time.perf_counter()
                refs = subset_references(entry, cfg.media.allowed_url_schemes)
                recipe = run_recipe(entry.subset, cfg)
                ctx = SizingContext(
                    entry,
                    client,
                    pool,
                    store,
                    cfg.media.media_roots,
                    opts.probe_sample,
                    opts.seed,
                    known=known,
                )
                answers = size_references(refs.distinct, recipe, ctx)
                ratios: DiskRatios = previous.get(entry.subset) or (
                    sampled_ratios(
                        entry, recipe, answers, refs.kinds, cfg, store, opts.decode_sample, opts.seed
                    )
                    or DEFAULT
                )
                sized.append(
                    SubsetSizing(
                        entry,
                        refs,
                        answers,
                        ctx.strata,
                        ctx.stratum_objects,
                        ctx.streamed,
                        ratios,
                        time.perf_counter() - t0,
                    )
                )
    finally:
        client.close()
    # microseconds: two estimates in one second (a rerun, the CLI after a flow) are two estimates; the id
    # still sorts by time beside a run's start (versus.py picks the last estimate made before a run)
    estimate_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    settings = _settings(opts, cores)
    rows = tally(
        sized,
        cores=cores,
        bandwidth=opts.bandwidth,
        rates=rates,
        estimate_id=estimate_id,
        release=cfg.source.release,
        settings=json.dumps(settings, sort_keys=True),
    )
    result = Estimate(rows, estimate_id, settings)
    if opts.out and opts.write_table:
        result.table_paths = write_estimates(opts.out, estimate_id, rows)
        result.versus = versus_actual(opts.out, cfg.fetch.store)
    return result


def _settings(opts: EstimateOptions, cores: int) -> dict[str, object]:
    t, m = opts.cfg.tokens, opts.cfg.media
    return {
        "model": t.model,
        "max_pixels": t.max_pixels,
        "min_pixels": t.min_pixels,
        "image_format": m.image_format,
        "video_mode": m.video_mode,
        "cores": cores,
        "bandwidth_bytes_per_s": opts.bandwidth,
        "probe_sample": opts.probe_sample,
        "decode_sample": opts.decode_sample,
        "seed": opts.seed,
    }


def _has_manifests(out: str) -> bool:
    layout = OutputLayout(out)
    return bool(layout.fs.isdir(layout.manifests))


def write_estimates(out: str, estimate_id: str, rows: list[EstimateRow]) -> list[str]:
    """One ``estimates`` part per subset for this estimate (``part-<id>.parquet``, atomically): the table
    keeps every estimate, so a later report can set an estimate made before a run beside what it took."""
    import pyarrow as pa

    layout = OutputLayout(out)
    paths = []
    for row in rows:
        table = pa.Table.from_pylist([asdict(row)], schema=ESTIMATES)
        path = f"{layout.table_dir('estimates', row.subset)}/part-{estimate_id}.parquet"
        paths.append(write_parquet(layout.fs, path, table))
    return paths
