"""Gate time on large synthetic manifests: vlmforge's gate against Great Expectations' pandas engine.

    python benchmarks/bench_gate.py                      # 7M samples + 10M media rows; peer at 1M rows
    python benchmarks/bench_gate.py --samples 1000000 --media 1500000 --peer-rows 200000
    python benchmarks/bench_gate.py --peer-rows 7000000  # the peer at full size (many minutes, ~10 GB RAM)

The manifests are written as zstd Parquet parts of 1M rows under a temporary OUT (one subset, ``big``),
like the pipeline writes them, and every run reads them from disk.

* **vlmforge** (the gate as a run calls it, :func:`vlmforge.tasks.gate.check.gate_subset`, on the Parquet
  parts): DuckDB aggregates every row of the manifests into the suite profiles, Great Expectations
  validates the profiles (samples, media and drift suites, all expectations).
* **peer**: Great Expectations 1.x's pandas engine row by row, the way the gate worked before (the
  manifest read with pyarrow, derived columns added in pandas, each expectation with its row condition),
  with the same checks expressed row-level. It is run at ``--peer-rows`` samples (and the proportional
  media rows), and vlmforge is run at that size too, so the ratio compares like with like.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")

import dataclasses  # noqa: E402

from vlmforge.schemas.config import RunConfig  # noqa: E402
from vlmforge.schemas.records import SubsetEntry  # noqa: E402
from vlmforge.schemas.stage_options import GateWork
from vlmforge.schemas.tables import MEDIA, SAMPLES
from vlmforge.tasks.gate.check import gate_inputs, gate_one, gate_subset  # noqa: E402
from vlmforge.tasks.gate.params import GateOverrides  # noqa: E402
from vlmforge.tasks.manifests import OutputLayout  # noqa: E402

SUBSET = "big"
CHUNK = 1_000_000
FACTOR = 28
MAX_PIXELS = 12_845_056
MIN_PIXELS = 3_136
UNB = 2**62
MAXB = 4 * 1024**3


def _strings(prefix: str, numbers: pa.Array, suffix: str = "") -> pa.Array:
    return pc.binary_join_element_wise(prefix, pc.cast(numbers, pa.string()), suffix, "")


def _const(value: str | None, n: int) -> pa.Array:
    return pa.array([value] * 1, pa.string()).take(pa.array(np.zeros(n, np.int32)))


# Columns filled here; later (added) manifest columns are null, as in a run without fetch or truncation.
_BASE_MEDIA = set(MEDIA.names[: MEDIA.get_field_index("visual_tokens") + 1])
_BASE_SAMPLES = set(SAMPLES.names[: SAMPLES.get_field_index("shard") + 1])


def _chunk(start: int, n: int, media_ratio: float, rng: np.random.Generator) -> tuple[pa.Table, pa.Table]:
    """Samples lines ``start+1 .. start+n`` and their media rows (1 or 2 images per sample)."""
    line = np.arange(start + 1, start + n + 1, dtype=np.int64)
    ok = rng.random(n) >= 0.004
    images = (1 + (rng.random(n) < (media_ratio - 1))).astype(np.int32)
    line_a = pa.array(line)
    ok_a = pa.array(ok)
    null = pa.scalar(None, pa.string())
    ids = _strings("id-", line_a)
    # media rows: one per (line, index)
    m_line = np.repeat(line, images)
    m_index = (np.arange(len(m_line)) - np.repeat(np.cumsum(images) - images, images)).astype(np.int32)
    m = len(m_line)
    w = rng.integers(8, 64, m).astype(np.int32) * FACTOR
    h = rng.integers(8, 64, m).astype(np.int32) * FACTOR
    vis = (w.astype(np.int64) * h) // (FACTOR * FACTOR)
    m_ok = np.repeat(ok, images)
    m_status = pc.if_else(pa.array(m_ok), "ok", "rejected")
    sha = pc.utf8_lpad(pc.cast(pa.array(m_line * 8 + m_index), pa.string()), 64, "0")
    nbytes = rng.integers(10_000, 500_000, m)
    media = pa.table(
        {
            "subset": _const(SUBSET, m),
            "sample_id": _strings("id-", pa.array(m_line)),
            "line": m_line,
            "index": m_index,
            "ref": _strings("images/", pa.array(m_line * 8 + m_index), ".jpg"),
            "kind": _const("image", m),
            "status": m_status,
            "reason": pc.if_else(pa.array(m_ok), null, pa.scalar("truncated (image file is truncated)")),
            "source": _const("tar:shard_0000.tar", m),
            "sha256": sha,
            "bytes": nbytes,
            "format": _const("JPEG", m),
            "width": w,
            "height": h,
            "out_sha256": pc.if_else(pa.array(m_ok), sha, null),
            "out_bytes": pa.array(np.where(m_ok, nbytes, 0)).cast(pa.int64()),
            "out_ext": pc.if_else(pa.array(m_ok), "jpg", null),
            "out_width": w,
            "out_height": h,
            "kept_original": pa.array(m_ok),
            "notes": pa.nulls(m, pa.string()),
            "frames": pa.nulls(m, pa.int32()),
            "fps": pa.nulls(m, pa.float64()),
            "sampled_frames": pa.nulls(m, pa.int32()),
            "visual_tokens": vis,
            **{f.name: pa.nulls(m, f.type) for f in MEDIA if f.name not in _BASE_MEDIA},
        },
        schema=MEDIA,
    )
    visual = np.bincount(np.repeat(np.arange(n), images), weights=vis, minlength=n).astype(np.int64)
    text = rng.integers(20, 3000, n)
    samples = pa.table(
        {
            "subset": _const(SUBSET, n),
            "sample_id": ids,
            "line": line,
            "key": pc.if_else(ok_a, _strings(f"{SUBSET}__id-", line_a), null),
            "status": pc.if_else(ok_a, "ok", "rejected"),
            "reason": pc.if_else(ok_a, null, pa.scalar("media_error: images/x.jpg: truncated")),
            "n_images": images,
            "n_videos": np.zeros(n, np.int32),
            "text_tokens": text,
            "visual_tokens": visual,
            "total_tokens": text + visual,
            "split": pc.if_else(ok_a, "train", null),
            "shard": pa.nulls(n, pa.string()),
            **{f.name: pa.nulls(n, f.type) for f in SAMPLES if f.name not in _BASE_SAMPLES},
        },
        schema=SAMPLES,
    )
    return samples, media


def make_manifests(out: Path, samples: int, media: int, seed: int = 0) -> tuple[int, int]:
    """Write ``samples`` sample rows and about ``media`` media rows as Parquet parts; returns both counts."""
    layout = OutputLayout(str(out))
    rng = np.random.default_rng(seed)
    ratio = media / samples
    n_media = 0
    for part, start in enumerate(range(0, samples, CHUNK)):
        s, m = _chunk(start, min(CHUNK, samples - start), ratio, rng)
        for table, tbl in (("samples", s), ("media", m)):
            path = Path(layout.part(table, SUBSET, part))
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(tbl, path, compression="zstd")
        n_media += m.num_rows
    return samples, n_media


def vlmforge_gate(out: Path, rows: int, *, with_media: bool = True) -> tuple[float, bool]:
    # the default model's geometry is the one the manifests are made for (MAX_PIXELS, MIN_PIXELS, FACTOR)
    cfg = RunConfig(release=str(out), out=str(out), max_reject_rate=0.01)
    entry = SubsetEntry(
        subset=SUBSET, path="", jsonl="", readme_sha256=None, jsonl_sha256="", jsonl_bytes=0, rows=rows,
        license="unknown", license_text=None,
    )  # fmt: skip
    t0 = time.perf_counter()
    if with_media:
        result = gate_subset(GateWork.of(cfg), entry, overrides=GateOverrides())
    else:  # the media suite over an empty manifest
        inputs = gate_inputs(GateWork.of(cfg), entry, run_id=None, overrides=GateOverrides())
        result = gate_one(dataclasses.replace(inputs, media=MEDIA.empty_table()))
    seconds = time.perf_counter() - t0
    if not result.passed:
        print("vlmforge gate failed unexpectedly:", result.summary()[:500], file=sys.stderr)
    return seconds, result.passed


# The peer: GX's pandas engine over the rows (the gate's previous design), same checks row-level.
def _e(kind: str, row_condition: str | None = None, **kwargs: Any) -> dict[str, Any]:
    if row_condition:
        kwargs |= {"row_condition": row_condition, "condition_parser": "pandas"}
    return {"type": kind, "kwargs": kwargs}


PEER_SAMPLES = [
    _e("expect_table_row_count_to_equal", value={"$PARAMETER": "rows"}),
    _e("expect_column_values_to_not_be_null", column="line"),
    _e("expect_column_values_to_be_unique", column="line"),
    _e("expect_column_values_to_be_in_set", column="status", value_set=["ok", "rejected", "dropped"]),
    _e("expect_column_values_to_not_be_null", 'status=="ok"', column="sample_id"),
    _e("expect_column_values_to_be_unique", 'status=="ok"', column="sample_id"),
    _e("expect_column_values_to_be_unique", column="key"),
    _e("expect_column_values_to_not_be_null", 'status!="ok"', column="reason"),
    _e(
        "expect_column_values_to_be_between",
        'status=="ok"',
        column="total_tokens",
        min_value=1,
        max_value=UNB,
    ),
    _e("expect_column_values_to_be_in_set", 'status=="ok"', column="tokens_add_up", value_set=[True]),
    _e("expect_column_values_to_be_between", 'status=="ok"', column="n_images", min_value=0, max_value=UNB),
    _e("expect_column_mean_to_be_between", column="is_rejected", min_value=0, max_value=0.01),
]
PEER_MEDIA = [
    _e("expect_column_values_to_be_in_set", column="kind", value_set=["image", "video"]),
    _e("expect_column_values_to_be_in_set", column="status", value_set=["ok", "rejected"]),
    _e("expect_column_values_to_match_regex", 'status=="ok"', column="sha256", regex="^[0-9a-f]{64}$"),
    _e("expect_column_values_to_match_regex", 'status=="ok"', column="out_sha256", regex="^[0-9a-f]{64}$"),
    _e(
        "expect_column_values_to_be_between",
        'status=="ok" & kind=="image"',
        column="out_pixels",
        min_value=1,
        max_value=MAX_PIXELS,
    ),
    _e("expect_column_values_to_be_between", 'status=="ok"', column="out_bytes", min_value=1, max_value=MAXB),
    _e("expect_column_values_to_not_be_null", 'status!="ok"', column="reason"),
    _e("expect_column_values_to_be_in_set", 'sample_status=="ok"', column="status", value_set=["ok"]),
]


def peer_gate(out: Path, rows: int) -> float:
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    layout = OutputLayout(str(out))
    t0 = time.perf_counter()
    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    source = ctx.data_sources.add_pandas("peer")
    samples = pa.concat_tables(pq.read_table(p) for p in layout.parts("samples", SUBSET)).to_pandas()
    samples["is_rejected"] = (samples["status"] == "rejected").astype(float)
    samples["tokens_add_up"] = (samples["text_tokens"] + samples["visual_tokens"]) == samples["total_tokens"]
    media = pa.concat_tables(pq.read_table(p) for p in layout.parts("media", SUBSET)).to_pandas()
    media["out_pixels"] = media["out_width"].astype("float64") * media["out_height"].astype("float64")
    media["sample_status"] = media["line"].map(dict(zip(samples["line"], samples["status"], strict=True)))
    for name, frame, exps in (("samples", samples, PEER_SAMPLES), ("media", media, PEER_MEDIA)):
        batch_def = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole")
        suite = gx.ExpectationSuite(name=f"peer_{name}", expectations=exps)
        batch = batch_def.get_batch(batch_parameters={"dataframe": frame})
        batch.validate(suite, expectation_parameters={"rows": rows})
    return time.perf_counter() - t0


def _row(label: str, engine: str, seconds: float, n: int) -> tuple[str, str, float, int]:
    return (label, engine, seconds, n)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--samples", type=int, default=7_000_000, help="samples manifest rows")
    ap.add_argument("--media", type=int, default=10_000_000, help="media manifest rows (about)")
    ap.add_argument("--peer-rows", type=int, default=1_000_000, help="samples rows for the side-by-side run")
    args = ap.parse_args()

    import resource

    import great_expectations  # noqa: F401 - import time (4-20 s) is not gate time

    tmp = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    rows: list[tuple[str, str, float, int]] = []
    try:
        # Full size, vlmforge only (first, so the peak memory below is the gate's, not the peer's).
        big = tmp / "big"
        t = time.perf_counter()
        n_s, n_m = make_manifests(big, args.samples, args.media)
        print(f"(generated {n_s:,} samples + {n_m:,} media rows in {time.perf_counter() - t:.0f} s)")
        vlmforge_gate(big, n_s, with_media=False)  # warm-up: GX context, DuckDB, page cache
        s_only, _ = vlmforge_gate(big, n_s, with_media=False)
        both, _ = vlmforge_gate(big, n_s)
        peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
        full = f"{n_s:,} samples + {n_m:,} media"
        shutil.rmtree(big)
        # Side by side at the peer's size.
        small = tmp / "small"
        p_s, p_m = make_manifests(small, args.peer_rows, int(args.peer_rows * args.media / args.samples))
        ours_small, _ = vlmforge_gate(small, p_s)
        peer_small = peer_gate(small, p_s)
        label = f"{p_s:,} samples + {p_m:,} media"
        rows.append(_row(label, "GX pandas engine, row-level (peer)", peer_small, p_s + p_m))
        rows.append(_row(label, "vlmforge: DuckDB profile + GX", ours_small, p_s + p_m))
        rows.append(_row(f"{n_s:,} samples", "vlmforge: samples + drift suites", s_only, n_s))
        rows.append(_row(full, "vlmforge: media suite (difference)", both - s_only, n_m))
        rows.append(_row(full, "vlmforge: whole gate (3 suites)", both, n_s + n_m))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print()
    print("| manifest rows | engine | seconds | rows/s | vs peer |")
    print("|---|---|---:|---:|---:|")
    peer_rate = rows[0][3] / rows[0][2]
    for label, engine, seconds, n in rows:
        rate = n / seconds
        print(f"| {label} | {engine} | {seconds:.1f} | {rate:,.0f} | {rate / peer_rate:.1f}x |")
    print(f"\npeak RSS of the full-size gate: {peak_gb:.1f} GB; machine: {os.cpu_count()} cores")
    print("goal: under 60 s for a 7M-row samples manifest and for a 10M-row media manifest")


if __name__ == "__main__":
    main()
