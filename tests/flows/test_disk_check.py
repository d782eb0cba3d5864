"""The free-disk check before a run fetches (issue 43 item 10): the estimated disk of the work still to do
(``catalog --estimate``'s figures, made without fetching, sizing by request or writing to OUT) against the
free space of the output's file system, with ``--disk-reserve`` kept free; a run that does not fit is one
line, exit 2, before start-up, and ``--no-disk-check`` skips it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vlmforge.flows.cli.disk_check import disk_need
from vlmforge.schemas.config import RunConfig


def test_a_run_that_would_not_leave_the_reserve_free_is_refused_in_one_line(
    sample_release: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "vlmforge.flows.cli", "run", str(sample_release), "--out", str(out)]
        + ["--executor", "local", "--disk-reserve", "1000T"],
        capture_output=True,
        text=True,
        # a Prefect API nobody serves: the refusal comes before any service is asked for
        env=os.environ | {"PREFECT_API_URL": "http://127.0.0.1:9/api"},
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not enough disk" in lines[0] and "--no-disk-check" in lines[0], lines
    assert "1,000,000.00 GB kept free" in lines[0]
    assert not out.exists()  # nothing fetched, nothing written


def test_the_need_is_the_store_and_the_shards_and_nothing_is_written(
    sample_release: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cfg = RunConfig(release=str(sample_release), out=str(out))
    found = disk_need(cfg, reserve=0)
    assert found is not None and found.fits and found.folder == str(tmp_path)
    # the sample release's media are in the release: the store gains nothing, the shards hold the media
    assert 1_000_000 < found.need < 100_000_000, found
    assert not out.exists()
    assert not disk_need(cfg, reserve=found.free).fits
    assert disk_need(cfg.replace(out="s3://bucket/out"), 0) is None
