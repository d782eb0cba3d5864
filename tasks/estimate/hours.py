"""How long a run will take at the user's cores and bandwidth, wall clock, start to end:

    hours = start-up + end + max(cpu, network, disk)

- **cpu**: per core, the batches' work (media work per object, parse / tokens / write per row, Prefect's and
  Ray's cost per batch task) and each subset's own stages (gate, publish, read-back, its Data Docs page),
  at the rates this machine measured (the ``runs`` table of the latest run in OUT that did work) or stated
  defaults;
- **network**: bytes to fetch over the bandwidth; **disk**: bytes written over a disk rate. The stages
  overlap (a batch decodes while its fetches wait on the network), so the work takes about the longest of
  the three: the bottleneck;
- **start-up** (Ray, the Prefect server and the flow's imports, before the flow begins), the workers'
  **warm-up** (their first imports) and the **end** (the summary, the services' stop): fixed, in the total
  only.

Measured on a run, the fixed costs are its own: start-up and end as its process spent them outside the
flow (``vlmforge run`` records that); per batch, the batches' span on every
core less their work (the warm-up included); per subset, the flow's time less its catalog, its batches'
span and the end, over the subsets it gated. An estimate of the release a run measured so gives back that
run's wall (at its cores and load); other releases scale by their batches, subsets and items.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# Stated defaults, when no earlier run on this machine measured the rates. From this repository's
# benchmarks on 2 cores (README, Benchmarks): ~5,000 small JPEGs fetched, verified and resized in 54 s of
# wall (0.02 s per image and core), large photos 0.15-0.2 s; 200,000 text rows in 17 s (1.7e-4 s per row
# and core). A video is decoded for its sampled frames: about 20 images' work.
DEFAULT_IMAGE_SECONDS = 0.05
DEFAULT_VIDEO_SECONDS = 1.0
DEFAULT_ROW_SECONDS = 2e-4
DEFAULT_DISK_BYTES_PER_S = 200e6  # a SATA SSD writing while it is read
# Measured on 2 shared cores (the sample release: 4 subsets, a 400-row release of 76 subsets; issue 43):
# start-up 15-35 s; each worker's first tasks import and load what they use (Great Expectations, torch and
# energon, the tokenizer): ~20 s of wall whatever the run; then a subset's gate, publish, read-back and Data
# Docs page ~1.5 core-s, a batch task ~0.5 core-s of Prefect and Ray; the run's end after its report ~2 s.
DEFAULT_STARTUP_SECONDS = 20.0
DEFAULT_WARMUP_SECONDS = 20.0
DEFAULT_SUBSET_SECONDS = 1.5
DEFAULT_BATCH_SECONDS = 0.5
DEFAULT_END_SECONDS = 2.0
ROW_STAGES = ("parse", "tokens", "write")


@dataclass(frozen=True)
class Rates:
    """Per-core seconds per image, per video and per row; the disk's write rate; where they come from."""

    image_seconds: float = DEFAULT_IMAGE_SECONDS
    video_seconds: float = DEFAULT_VIDEO_SECONDS
    row_seconds: float = DEFAULT_ROW_SECONDS
    disk_bytes_per_s: float = DEFAULT_DISK_BYTES_PER_S
    source: str = "default"
    startup_seconds: float = DEFAULT_STARTUP_SECONDS  # wall, before the flow begins
    subset_seconds: float = DEFAULT_SUBSET_SECONDS  # per core: a subset's gate, publish, read-back, docs
    batch_seconds: float = DEFAULT_BATCH_SECONDS  # per core: a batch task's own cost
    end_seconds: float = DEFAULT_END_SECONDS  # wall, after the run's report
    # wall: the workers' first imports (a measured run's are in its per-batch and per-subset figures)
    warmup_seconds: float = DEFAULT_WARMUP_SECONDS

    @property
    def fixed_hours(self) -> float:
        """Start-up, warm-up and end: what a run takes whatever it works on."""
        return (self.startup_seconds + self.warmup_seconds + self.end_seconds) / 3600


@dataclass(frozen=True)
class Hours:
    cpu: float
    network: float
    disk: float

    @property
    def total(self) -> float:
        return max(self.cpu, self.network, self.disk)

    @property
    def bottleneck(self) -> str:
        return max((("cpu", self.cpu), ("network", self.network), ("disk", self.disk)), key=lambda kv: kv[1])[
            0
        ]


def measured_rates(out: str) -> Rates | None:
    """The rates of the latest run in ``out`` that did batch work (a rerun that skipped every batch measured
    nothing), from its ``runs`` table, or None. The batch stages' times are summed over the batches (each
    batch runs on one core), so seconds / items is per core."""
    from ..ops import connect

    try:
        con = connect(out)
    except Exception:  # noqa: BLE001 - no manifests: no measured rates
        return None
    try:
        worked = con.execute("SELECT max(run_id) FROM runs WHERE stage = 'parse' AND items > 0").fetchone()
        run_id = worked[0] if worked else None
        if run_id is None:
            return None
        rows = con.execute(
            "SELECT subset = '_run' AS run_wide, stage, sum(seconds), sum(items), sum(batches) FROM runs "
            "WHERE run_id = $r GROUP BY ALL",
            {"r": run_id},
        ).fetchall()
    finally:
        con.close()
    return rates_of_run(
        run_id, {(bool(w), st): (float(s or 0), int(n or 0), int(b or 0)) for w, st, s, n, b in rows}
    )


def rates_of_run(run_id: str, t: dict[tuple[bool, str], tuple[float, int, int]]) -> Rates:
    """The rates of one run from its ``runs`` rows: (run-wide?, stage) -> (seconds, items, batches)."""
    zero = (0.0, 0, 0)
    media_s, media_n, _ = t.get((False, "media"), zero)
    per_object = media_s / media_n if media_n else DEFAULT_IMAGE_SECONDS
    lines = t.get((False, "parse"), zero)[1]
    row_s = sum(t.get((False, st), zero)[0] for st in ROW_STAGES)
    per_row = row_s / lines if lines and row_s else DEFAULT_ROW_SECONDS
    # the process's time outside the flow (vlmforge run records it): start-up and end, on this many cores
    outside, cores, _ = t.get((True, "startup"), (0.0, 0, 0))
    startup_s, end_s = (outside, 0.0) if cores else (DEFAULT_STARTUP_SECONDS, DEFAULT_END_SECONDS)
    cores = cores or os.cpu_count() or 1  # not recorded (a deployment's run): this machine's
    batch_s, subset_s = DEFAULT_BATCH_SECONDS, DEFAULT_SUBSET_SECONDS
    span, _, _ = t.get((True, "batches"), zero)
    batches = t.get((False, "batches"), zero)[2]
    if batches and span:  # the batches' span on every core less their items' work, per batch
        batch_s = max(DEFAULT_BATCH_SECONDS, (span * cores - media_s - row_s) / batches)
    subsets = max(t.get((True, stage), zero)[1] for stage in ("gate", "publish", "validate"))
    if subsets and (True, "run") in t:  # the flow beside its catalog and batches, per subset
        rest = t[(True, "run")][0] - t.get((True, "catalog"), zero)[0] - span
        subset_s = max(0.0, rest) * cores / subsets
    # the media stage does not tell images from videos: the measured rate stands for both (none measured:
    # the defaults, e.g. a text-only run)
    video_s = per_object if media_n else DEFAULT_VIDEO_SECONDS
    return Rates(
        per_object,
        video_s,
        per_row,
        DEFAULT_DISK_BYTES_PER_S,
        f"runs table ({run_id})",
        startup_seconds=startup_s,
        subset_seconds=subset_s,
        batch_seconds=batch_s,
        end_seconds=end_s,
        warmup_seconds=0.0,
    )


def run_hours(
    *,
    images: int,
    videos: int,
    rows: int,
    fetch_bytes: int,
    disk_bytes: int,
    cores: int,
    bandwidth: float,
    rates: Rates,
    batches: int = 0,
    subsets: int = 0,
) -> Hours:
    """Hours of CPU, network and disk work for a subset (or the release) on ``cores`` cores and
    ``bandwidth`` bytes per second: its ``batches`` and its ``subsets``' own stages included."""
    items = images * rates.image_seconds + videos * rates.video_seconds + rows * rates.row_seconds
    tasks = batches * rates.batch_seconds + subsets * rates.subset_seconds
    cpu = (items + tasks) / max(cores, 1)
    network = fetch_bytes / bandwidth if bandwidth > 0 else 0.0
    disk = disk_bytes / rates.disk_bytes_per_s
    return Hours(cpu / 3600, network / 3600, disk / 3600)


def parse_bandwidth(text: str) -> float:
    """``1Gbit``, ``100Mbit``, ``50MB`` (per second), or a plain number of bytes per second."""
    t = text.strip().lower().removesuffix("/s").removesuffix("ps")
    units = {"gbit": 1e9 / 8, "mbit": 1e6 / 8, "kbit": 1e3 / 8, "gb": 1e9, "mb": 1e6, "kb": 1e3, "b": 1.0}
    for suffix, factor in units.items():
        if t.endswith(suffix):
            return float(t[: -len(suffix)]) * factor
    return float(t)
