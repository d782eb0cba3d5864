"""How long a run will take at the user's cores and bandwidth: CPU (media work per object, parse / tokens /
write per row, at the rates this machine measured: the ``runs`` table of an earlier output), network (bytes
to fetch over the bandwidth) and disk (bytes written over a disk rate). The stages overlap (a batch decodes
while its fetches wait on the network), so the run takes about the longest of the three: the bottleneck.
"""

from __future__ import annotations

from dataclasses import dataclass

# Stated defaults, when no earlier run on this machine measured the rates. From this repository's
# benchmarks on 2 cores (README, Benchmarks): ~5,000 small JPEGs fetched, verified and resized in 54 s of
# wall (0.02 s per image and core), large photos 0.15-0.2 s; 200,000 text rows in 17 s (1.7e-4 s per row
# and core). A video is decoded for its sampled frames: about 20 images' work.
DEFAULT_IMAGE_SECONDS = 0.05
DEFAULT_VIDEO_SECONDS = 1.0
DEFAULT_ROW_SECONDS = 2e-4
DEFAULT_DISK_BYTES_PER_S = 200e6  # a SATA SSD writing while it is read
ROW_STAGES = ("parse", "tokens", "write")


@dataclass(frozen=True)
class Rates:
    """Per-core seconds per image, per video and per row; the disk's write rate; where they come from."""

    image_seconds: float = DEFAULT_IMAGE_SECONDS
    video_seconds: float = DEFAULT_VIDEO_SECONDS
    row_seconds: float = DEFAULT_ROW_SECONDS
    disk_bytes_per_s: float = DEFAULT_DISK_BYTES_PER_S
    source: str = "default"


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
    """The per-core rates of the latest run in ``out`` (its ``runs`` table), or None. The batch stages' times
    are summed over the batches (each batch runs on one core), so seconds / items is per core."""
    from ..query import connect

    try:
        con = connect(out)
    except Exception:  # noqa: BLE001 - no manifests: no measured rates
        return None
    try:
        latest = con.execute("SELECT max(run_id) FROM runs").fetchone()
        run_id = latest[0] if latest else None
        if run_id is None:
            return None
        media = con.execute(
            "SELECT sum(seconds), sum(items) FROM runs WHERE run_id = $r AND stage = 'media' AND items > 0",
            {"r": run_id},
        ).fetchone()
        rows = con.execute(
            "SELECT sum(seconds) FROM runs WHERE run_id = $r AND stage IN ('parse', 'tokens', 'write')",
            {"r": run_id},
        ).fetchone()
        lines = con.execute(
            "SELECT sum(items) FROM runs WHERE run_id = $r AND stage = 'parse'", {"r": run_id}
        ).fetchone()
    finally:
        con.close()
    if not media or not media[1]:
        return None
    per_object = float(media[0]) / float(media[1])
    per_row = (
        float(rows[0]) / float(lines[0]) if rows and rows[0] and lines and lines[0] else DEFAULT_ROW_SECONDS
    )
    # the media stage does not tell images from videos: the measured rate stands for both
    return Rates(per_object, per_object, per_row, DEFAULT_DISK_BYTES_PER_S, f"runs table ({run_id})")


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
) -> Hours:
    """Hours of CPU, network and disk work for a subset (or the release) on ``cores`` cores and
    ``bandwidth`` bytes per second."""
    cpu = (images * rates.image_seconds + videos * rates.video_seconds + rows * rates.row_seconds) / max(
        cores, 1
    )
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
