"""How much disk the store and the shards will take, from the objects' sizes and three ratios, measured in
the first of these places that has them:

1. ``previous_run``: an earlier run's manifests in OUT made with the same media settings (model, pixels,
   image format, video mode): what its media rows and shards say;
2. ``sample``: a few of the subset's objects (seeded) fetched into a throw-away store and put through the
   media stage's own :class:`~vlmforge.tasks.batch.normalise.Normaliser` at the chosen settings;
3. ``default``: stated values (images kept as they are, a shard sample's text and tar headers).

Shards carry each sample's media again (an object two samples use is in the shards twice, in the store
once); the store keeps fetched objects plus every output that is not a fetched object itself (a re-encoded
image, or an original read in place from the release).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...schemas.config import RunConfig
from ...schemas.recipes import REMOTE_KINDS, SOURCE_KINDS, Recipe
from ...schemas.records import SubsetEntry
from ...schemas.redact import redact
from ...schemas.rows import MediaRow
from ..fetch import FetchContext, FetchKnobs, SizeAnswer, Sized, fetch_batch, read_outcome
from ..manifests import OutputLayout
from ..storage import ContentStore, sha256_bytes

# Settings an earlier run's ratios hold for (the media stage's knobs that change output bytes).
RATIO_SETTINGS = (
    ("tokens", "model"),
    ("tokens", "max_pixels"),
    ("tokens", "min_pixels"),
    ("media", "image_format"),
    ("media", "video_mode"),
    ("media", "video_max_pixels"),
)
LOCAL_KINDS = frozenset(SOURCE_KINDS) - REMOTE_KINDS  # kinds read in place: nothing fetched or stored
INDEX_ENTRY_BYTES = 260  # one upstream-index entry in the store (JSON: locator, sha256, bytes)
TAR_MEMBER = 512 + 256  # a tar header and, on average, half a block of padding
SAMPLE_MEMBERS = 4  # json, jpgs, videos, vlmforge.json (the bridge format)
SHARD_TAIL = 1024 + 5120  # a tar's end blocks and, on average, half a 10 KiB record of padding
SHARD_BYTES = 1_000_000_000  # --shard-size's default: shards per subset


@dataclass(frozen=True)
class DiskRatios:
    """``out``: output bytes per upstream byte (what a shard holds per reference, and what the store keeps
    of an object read in place); ``store``: re-encoded output bytes per upstream byte (what the store keeps
    beside a fetched object: a kept original is the fetched object itself); ``per_sample``: shard bytes per
    sample beyond its media (None: from the record's own text)."""

    out: float
    store: float
    per_sample: float | None
    method: str
    bodies: int = 0  # media bodies read to measure them


DEFAULT = DiskRatios(out=1.0, store=0.0, per_sample=None, method="default")


def sample_overhead(record_bytes: float, media_per_sample: float) -> float:
    """Shard bytes of one sample beyond its media when no run measured it: its tar members' headers, the
    conversation JSON (about the JSONL line) and vlmforge's record (refs, hashes, token counts)."""
    return SAMPLE_MEMBERS * TAR_MEMBER + record_bytes + 350 + 170 * media_per_sample


def previous_ratios(out: str, cfg: RunConfig) -> dict[str, DiskRatios]:
    """Per subset, the ratios an earlier run in ``out`` measured with the same media settings ({} if none)."""
    layout = OutputLayout(out)
    runs = sorted(Path(layout.root, "runs").glob("*.json")) if layout.fs.isdir(f"{layout.root}/runs") else []
    if not runs:
        return {}
    try:
        config = RunConfig.model_validate(json.loads(runs[-1].read_text())["config"])
    except (ValueError, KeyError):
        return {}
    if any(getattr(getattr(config, a), b) != getattr(getattr(cfg, a), b) for a, b in RATIO_SETTINGS):
        return {}
    from ..ops import connect

    con = connect(out)
    try:
        rows = con.execute(_RATIOS_SQL).fetchall()
    finally:
        con.close()
    result = {}
    for subset, upstream, out_bytes, store_extra, distinct_bytes, shard_bytes, samples in rows:
        if not upstream or not distinct_bytes:
            continue
        per_sample = (shard_bytes - out_bytes) / samples if shard_bytes and samples else None
        result[subset] = DiskRatios(
            out=out_bytes / upstream,
            store=(store_extra or 0) / distinct_bytes,
            per_sample=per_sample,
            method="previous_run",
        )
    return result


_RATIOS_SQL = """
WITH ok AS (
  SELECT m.* FROM media m JOIN samples s ON m.subset = s.subset AND m.line = s.line
  WHERE m.status = 'ok' AND s.status = 'ok' AND m.bytes IS NOT NULL AND m.out_bytes IS NOT NULL
), refs AS (
  SELECT subset, sum(bytes) AS upstream, sum(out_bytes) AS out_bytes FROM ok GROUP BY subset
), objects AS (
  SELECT subset, sum(bytes) AS distinct_bytes
  FROM (SELECT DISTINCT subset, sha256, bytes FROM ok) GROUP BY subset
), extra AS (
  SELECT subset, sum(out_bytes) AS store_extra FROM (
    SELECT DISTINCT subset, out_sha256, out_bytes FROM ok
    WHERE out_sha256 <> sha256
  ) GROUP BY subset
), sh AS (
  SELECT subset, sum(bytes) AS shard_bytes, sum(samples) AS samples FROM shards GROUP BY subset
)
SELECT r.subset, r.upstream, r.out_bytes, e.store_extra, o.distinct_bytes, sh.shard_bytes, sh.samples
FROM refs r JOIN objects o USING (subset) LEFT JOIN extra e USING (subset) LEFT JOIN sh USING (subset)
"""


def sampled_ratios(
    entry: SubsetEntry,
    recipe: Recipe,
    answers: dict[str, SizeAnswer],
    kinds: dict[str, str],
    cfg: RunConfig,
    store: ContentStore | None,
    count: int,
    seed: int,
) -> DiskRatios | None:
    """The ratios of ``count`` of the subset's objects (seeded), fetched into a throw-away store as the
    run fetches them and normalised as the run normalises them; None when none could be measured."""
    import random

    from ..batch import Normaliser
    from ..geometry import geometry_of

    found = {ref: a for ref, a in answers.items() if isinstance(a, Sized) and not a.bound}
    if count <= 0 or not found:
        return None
    by_object = {a.locator: ref for ref, a in sorted(found.items())}
    chosen = random.Random(f"{seed}:{entry.subset}:disk").sample(
        sorted(by_object), min(count, len(by_object))
    )
    refs = [by_object[loc] for loc in chosen]
    with tempfile.TemporaryDirectory(prefix="vlmforge-estimate-") as tmp:
        scratch = ContentStore(tmp)
        data = _read_stored(refs, found, store)  # objects a run stored already: no fetch
        fetch = [r for r in refs if r not in data]
        bodies = 0
        if fetch:
            context = FetchContext(entry.path, entry.media_tars, cfg.media.media_roots)
            result = fetch_batch(fetch, recipe, scratch, context=context, options=FetchKnobs(concurrency=4))
            for ref in fetch:
                outcome = result.outcomes[ref]
                if outcome.ok:
                    data[ref] = read_outcome(outcome, scratch)
                    bodies += outcome.location is None  # fetched (media read in place are not)
        normalise = Normaliser(cfg, geometry_of(cfg.tokens, cfg.media), scratch)
        upstream = out_bytes = extra = 0
        for ref, body in data.items():
            row = MediaRow(subset=entry.subset, sample_id="", line=0, index=0, ref=ref, kind=kinds[ref])
            row.sha256, row.bytes = sha256_bytes(body), len(body)
            if not normalise(row, body).ok or row.out_bytes is None:
                continue
            upstream += len(body)
            out_bytes += row.out_bytes
            if not row.kept_original:
                extra += row.out_bytes
    if not upstream:
        return None
    return DiskRatios(out_bytes / upstream, extra / upstream, None, "sample", bodies)


def _read_stored(refs: list[str], found: dict[str, Sized], store: ContentStore | None) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    if store is None:
        return out
    for ref in refs:
        if found[ref].in_store:
            entry = store.lookup(redact(found[ref].locator))
            if entry is not None:
                out[ref] = store.get(str(entry["sha256"]))
    return out
