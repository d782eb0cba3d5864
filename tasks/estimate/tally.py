"""From each subset's sized references to the figures of the ``estimates`` table: objects after the
cross-subset de-duplication (an object is counted, fetched and stored by the first subset that names it),
bytes with their sampling interval, transfer, disk and hours, per subset and for the release."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from ...schemas.estimate_rows import TOTAL, EstimateRow
from ...schemas.records import SubsetEntry
from ..fetch import Miss, SizeAnswer, Sized
from .disk import INDEX_ENTRY_BYTES, LOCAL_KINDS, SHARD_BYTES, SHARD_TAIL, DiskRatios, sample_overhead
from .hours import Rates, run_hours
from .references import SubsetRefs

Z95 = 1.96


@dataclass
class SubsetSizing:
    """One subset's references, the answer for each, what its samples measured, and the disk ratios."""

    entry: SubsetEntry
    refs: SubsetRefs
    answers: dict[str, SizeAnswer]
    strata: dict[str, list[int]]
    stratum_objects: dict[str, int]
    streamed: dict[str, int]
    ratios: DiskRatios
    seconds: float = 0.0


@dataclass
class _Seen:
    """What earlier subsets of the estimate already counted."""

    objects: dict[str, Sized] = field(default_factory=dict)
    archives: set[str] = field(default_factory=set)
    bytes: float = 0.0  # of the objects above, each once


def tally(
    sized: list[SubsetSizing],
    *,
    cores: int,
    bandwidth: float,
    rates: Rates,
    estimate_id: str,
    release: str,
    settings: str,
) -> list[EstimateRow]:
    """One row per subset, in order, then the ``_total`` row."""
    seen = _Seen()
    rows = [_subset_row(s, seen, cores, bandwidth, rates) for s in sized]
    for row in rows:
        row.estimate_id, row.release, row.settings = estimate_id, release, settings
    total = _total(rows, seen, cores, bandwidth, rates)
    total.estimate_id, total.release, total.settings = estimate_id, release, settings
    return [*rows, total]


def _subset_row(s: SubsetSizing, seen: _Seen, cores: int, bandwidth: float, rates: Rates) -> EstimateRow:
    means = {k: statistics.fmean(v) if v else 0.0 for k, v in s.strata.items()}

    def size_of(a: Sized) -> float:
        if a.size is not None:
            return float(a.size)
        return means.get(a.stratum, 0.0) if a.stratum else 0.0

    objects: dict[str, Sized] = {}
    kinds: dict[str, str] = {}
    uses_bytes = 0.0
    for ref, a in s.answers.items():
        if isinstance(a, Sized):
            objects.setdefault(a.locator, a)
            kinds.setdefault(a.locator, s.refs.kinds.get(ref, "image"))
            uses_bytes += s.refs.uses[ref] * size_of(a)
    row = EstimateRow(subset=s.entry.subset, estimate_id="", rows=s.refs.rows, records=s.refs.records)
    row.refs = s.refs.refs
    row.objects = len(objects)
    row.in_store = sum(1 for a in objects.values() if a.in_store)
    row.missing = sum(1 for a in s.answers.values() if isinstance(a, Miss))
    row.missing_why = missing_reasons(a for a in s.answers.values() if isinstance(a, Miss))
    counts: dict[str, int] = {}
    for a in objects.values():
        counts[a.kind] = counts.get(a.kind, 0) + 1
    row.sources = " ".join(f"{k}:{n}" for k, n in sorted(counts.items())) or None
    row.bytes = round(sum(size_of(a) for a in objects.values()))
    half = _half_interval(objects.values(), s)
    bound = sum(s.streamed.values())
    row.bytes_low, row.bytes_high = max(0, round(row.bytes - half)), round(row.bytes + half + bound)
    row.bytes_method = (
        "bound" if bound else "sampled" if half > 0 or _unmeasured(objects.values()) else "exact"
    )
    row.probed = sum(1 for a in objects.values() if a.probed)

    fetch = store = 0.0
    for loc, a in objects.items():
        if loc in seen.objects:
            continue
        seen.objects[loc] = a
        row.new_objects += 1
        size = size_of(a)
        seen.bytes += size
        if a.in_store:
            continue
        if a.kind not in LOCAL_KINDS:
            fetch += size if a.transfer is None else a.transfer
            store += size + INDEX_ENTRY_BYTES
        store += size * (s.ratios.out if a.kind in LOCAL_KINDS else s.ratios.store)
    for url, size in s.streamed.items():
        if url not in seen.archives:
            seen.archives.add(url)
            fetch += size
    row.fetch_bytes, row.store_bytes = round(fetch), round(store)
    per_sample, tails = s.ratios.per_sample, 0.0
    if per_sample is None:  # no run measured it: the format's own overheads
        records = max(s.refs.records, 1)
        per_sample = sample_overhead(s.refs.record_bytes / records, s.refs.refs / records)
        tails = SHARD_TAIL * math.ceil(max(uses_bytes * s.ratios.out, 1) / SHARD_BYTES)
    row.shard_bytes = round(uses_bytes * s.ratios.out + s.refs.records * per_sample + tails)
    row.disk_method, row.sample_bodies = s.ratios.method, s.ratios.bodies
    images = sum(1 for k in kinds.values() if k != "video")
    hours = run_hours(
        images=images,
        videos=len(kinds) - images,
        rows=s.refs.rows,
        fetch_bytes=row.fetch_bytes,
        disk_bytes=row.store_bytes + row.shard_bytes,
        cores=cores,
        bandwidth=bandwidth,
        rates=rates,
        batches=max(len(s.entry.batch_offsets) - 1, 0),
        subsets=1,
    )
    row.cpu_hours, row.network_hours, row.disk_hours = hours.cpu, hours.network, hours.disk
    row.hours, row.bottleneck, row.rates = hours.total, hours.bottleneck, rates.source
    row.seconds = round(s.seconds, 3)
    return row


def missing_reasons(misses: Iterable[Miss], shown: int = 3) -> str | None:
    """The commonest reasons among ``misses``, most first, with their counts (``361 x source_error: ...``)."""
    counts = Counter(f"{m.failure}: {m.detail}"[:200] for m in misses)
    return "; ".join(f"{n} x {why}" for why, n in counts.most_common(shown)) or None


def _merge_reasons(rows: list[EstimateRow], shown: int = 3) -> str | None:
    counts: Counter[str] = Counter()
    for r in rows:
        for part in (r.missing_why or "").split("; "):
            n, sep, why = part.partition(" x ")
            if sep and n.isdigit():
                counts[why] += int(n)
    return "; ".join(f"{n} x {why}" for why, n in counts.most_common(shown)) or None


def _unmeasured(objects: object) -> bool:
    return any(a.size is None and not a.bound for a in objects)  # type: ignore[attr-defined]


def _half_interval(objects: object, s: SubsetSizing) -> float:
    """95% half-width of the estimated part: per stratum, u objects standing in for the sample's mean have
    the variance u^2 s^2 / n (1 - n/N) (simple random sampling without replacement)."""
    unmeasured: dict[str, int] = {}
    for a in objects:  # type: ignore[attr-defined]
        if a.size is None and a.stratum:
            unmeasured[a.stratum] = unmeasured.get(a.stratum, 0) + 1
    var = 0.0
    for stratum, u in unmeasured.items():
        sizes = s.strata.get(stratum, [])
        n, big_n = len(sizes), max(s.stratum_objects.get(stratum, 0), 1)
        if n < 2:
            continue
        var += u * u * statistics.variance(sizes) / n * max(0.0, 1 - n / big_n)
    return Z95 * math.sqrt(var)


def _total(rows: list[EstimateRow], seen: _Seen, cores: int, bandwidth: float, rates: Rates) -> EstimateRow:
    t = EstimateRow(subset=TOTAL, estimate_id="")
    for name in ("rows", "records", "refs", "missing", "probed", "fetch_bytes", "store_bytes", "shard_bytes"):
        setattr(t, name, sum(getattr(r, name) for r in rows))
    for name in ("cpu_hours", "network_hours", "disk_hours", "seconds", "sample_bodies"):
        setattr(t, name, sum(getattr(r, name) for r in rows))
    t.objects = t.new_objects = len(seen.objects)
    t.in_store = sum(1 for a in seen.objects.values() if a.in_store)
    # every object once (its first subset's size); the interval adds the subsets' in quadrature
    share = {r.subset: (r.bytes_high - r.bytes_low) / 2 for r in rows}
    t.bytes = round(seen.bytes)
    half = math.sqrt(sum(h * h for h in share.values()))
    t.bytes_low, t.bytes_high = max(0, round(t.bytes - half)), round(t.bytes + half)
    methods = {r.bytes_method for r in rows}
    t.bytes_method = "bound" if "bound" in methods else "sampled" if "sampled" in methods else "exact"
    counts: dict[str, int] = {}
    for a in seen.objects.values():
        counts[a.kind] = counts.get(a.kind, 0) + 1
    t.sources = " ".join(f"{k}:{n}" for k, n in sorted(counts.items())) or None
    t.disk_method = ",".join(sorted({r.disk_method for r in rows})) or "default"
    t.missing_why = _merge_reasons(rows)
    t.fixed_hours = rates.fixed_hours
    t.hours = t.fixed_hours + max(t.cpu_hours, t.network_hours, t.disk_hours)
    t.bottleneck = max(
        (("cpu", t.cpu_hours), ("network", t.network_hours), ("disk", t.disk_hours)), key=lambda kv: kv[1]
    )[0]
    t.rates = rows[0].rates if rows else rates.source
    return t
