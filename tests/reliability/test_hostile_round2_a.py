"""Hostile inputs, second round (issue 42, part A), through the real ``vlmforge run``:

- an ``--out`` (or ``--store``) that is or lies inside the release is refused before any service starts:
  one line, exit 2, the release byte-identical and OUT never created (every pairing, both directions, and
  the media roots: ``tests/flows/test_overlap.py``);
- one real run (embedded Prefect and Ray, loopback upstream) over a release holding release tars whose
  headers lie (a 100 GB and a 2**60-byte member in 2.5 KB tars) and a recipe whose ``match`` backtracks
  catastrophically against a 3,000-character reference, with ``--fetch-batch-timeout 30``: the run ends in
  bounded time and memory, every lying row is its own reject with its reason (``truncated``,
  ``match_budget``), the honest rows are published, and nothing outside OUT is written or deleted.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from http_fixture import HttpFixture
from PIL import Image
from planted_values import short_scratch

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 900.0  # a kill switch for a regression (the lying tar used to run for ever), not a timing
PREFLIGHT_BOUND_S = 120.0  # generous for a loaded machine; refused before start-up in ~2 s
RUN_BOUND_S = 600.0  # generous for a loaded machine; the run takes ~30-40 s on 2 cores
MAX_TREE_RSS_MB = 3000  # the largest process of the run (CLI, Ray worker); a 100 GB read was a MemoryError
GB = 1024**3
EVIL = r"(x+x+)+y"  # exponential backtracking on a run of x without a y
LONG_REF = "img/" + "x" * 3000 + ".jpg"


def jpeg(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.effect_noise((64, 64), 30 + seed).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def lying_tar(path: Path, good: str, lie: str, claimed: int) -> None:
    """``good`` (a real JPEG), then ``lie`` whose header claims ``claimed`` bytes; 1 KB of data follows."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        data = jpeg(len(good))
        info = tarfile.TarInfo(good)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
        head = buf.getvalue()[: tf.offset]
    info = tarfile.TarInfo(lie)
    info.size = claimed
    path.write_bytes(head + info.tobuf(format=tarfile.GNU_FORMAT) + b"\xff" * 1024)


def row(i: int, ref: str) -> str:
    return json.dumps(
        {
            "id": f"r-{i}",
            "messages": [
                {"role": "user", "content": ["What is shown?", {"type": "image", "image": ref}]},
                {"role": "assistant", "content": "Noise."},
            ],
        }
    )


def write_subset(root: Path, name: str, refs: list[str]) -> Path:
    folder = root / name
    (folder / "media").mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(row(i, r) + "\n" for i, r in enumerate(refs)))
    return folder


def tree(root: Path) -> dict[str, str]:
    """sha256 of every file below ``root`` (symlinks by their target), by relative path."""
    out = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        if p.is_symlink():
            out[key] = "-> " + os.readlink(p)
        elif p.is_file():
            out[key] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# The child's own peak RSS and its reaped descendants' (wait4): a small launcher forks the CLI so that
# pytest's size is not counted (tests/reliability/test_hostile_recipes.py says why).
LAUNCHER = """
import os, sys
report = int(sys.argv[1])
pid = os.fork()
if pid == 0:
    os.close(report)
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
_, status, usage = os.wait4(pid, 0)
os.write(report, str(usage.ru_maxrss).encode())
sys.exit(os.waitstatus_to_exitcode(status))
"""


def vlmforge_run(
    args: list[str], scratch: Path, log: Path, timeout: float, api: str | None = None
) -> tuple[int, str, float, float]:
    """``vlmforge run ARGS`` in a child with its own temp folders, reporting to the Prefect API ``api`` (None:
    its own Prefect home and server): (exit code, output, seconds, peak RSS in MB of the largest process of
    its tree that was reaped)."""
    homes = {"PREFECT_HOME": scratch / "prefect", "TMPDIR": scratch / "tmp", "HOME": scratch / "home"}
    for folder in homes.values():
        folder.mkdir(parents=True, exist_ok=True)
    env = os.environ.copy() | {k: str(v) for k, v in homes.items()}
    env |= {"RAY_TMPDIR": str(scratch / "tmp"), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    env.pop("PREFECT_API_URL", None)
    if api:
        env["PREFECT_API_URL"] = api
    read_end, write_end = os.pipe()
    cmd = [sys.executable, "-c", LAUNCHER, str(write_end), "-m", "vlmforge.flows.cli", "run", *args]
    t0 = time.monotonic()
    with log.open("wb") as handle:
        child = subprocess.Popen(
            cmd,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            pass_fds=(write_end,),
            start_new_session=True,
        )
        os.close(write_end)
        killer = threading.Timer(timeout, os.killpg, (child.pid, 9))
        killer.start()
        try:
            with os.fdopen(read_end, "rb") as report:
                peak_kb = report.read().decode()
            child.wait()
        finally:
            killer.cancel()
    seconds = time.monotonic() - t0
    text = log.read_text(errors="replace")
    assert peak_kb, f"the launcher reported no figures:\n{text[-3000:]}"
    return child.returncode, text, seconds, int(peak_kb) / 1024


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with short_scratch("vf42-") as root:
        yield root


# ----------------------------------------------------------------------------- item 1: --out vs inputs


@pytest.fixture(scope="module")
def overlap_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("overlap") / "rel"
    for name in ("energon", "docvqa"):  # a subset named like OUT's own folder: the case
        folder = write_subset(root, name, ["cat.jpg"])
        (folder / "cat.jpg").write_bytes(jpeg(1))
    (root.parent / "alias").symlink_to(root)
    return root


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--out", "{rel}"], "--out {rel} is the release"),
        (["--out", "{rel}/energon"], "--out {rel}/energon is inside the release"),
        (["--out", "{top}/alias/docvqa/out"], "is inside the release"),
        (["--out", "{top}/out", "--store", "{rel}/store"], "the store {rel}/store is inside the release"),
    ],
    ids=[
        "out-is-release",
        "out-in-release",
        "out-via-symlink",
        "store-in-release",
    ],
)
def test_an_output_overlapping_an_input_is_refused_before_start_up(
    overlap_release: Path, scratch: Path, tmp_path: Path, args: list[str], words: str
) -> None:
    top, rel = overlap_release.parent, overlap_release
    before = tree(top)
    filled = [a.format(rel=rel, top=top) for a in args]
    code, text, seconds, _ = vlmforge_run([str(rel), *filled], scratch, tmp_path / "log", PREFLIGHT_BOUND_S)
    lines = [line for line in text.splitlines() if line.strip()]
    assert code == 2, text[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines  # no "Ray:" line: nothing started
    assert words.format(rel=rel, top=top) in lines[0], lines[0]
    assert tree(top) == before  # nothing written or deleted, OUT not created
    assert seconds < PREFLIGHT_BOUND_S
    print(f"{words.format(rel='REL', top='TOP')}: refused in {seconds:.2f} s")


# ------------------------------------------------------- items 3 and 6: lying tars, a backtracking regex


@pytest.fixture(scope="module")
def hostile_run(
    prefect_harness: None, tmp_path_factory: pytest.TempPathFactory, scratch: Path
) -> Iterator[dict[str, Any]]:
    """One real run over every hostile release case of this module, on the local executor (the run's tasks
    in its own process: its peak RSS is the whole run's) and the session's Prefect server."""
    from vlmforge.flows.runtime import configured_api_url

    base = tmp_path_factory.mktemp("hostile42")
    release, out, recipes = base / "release", base / "out", base / "recipes"
    tars = write_subset(
        release, "liar_tars", ["img/a.jpg", "img/lie100g.jpg", "img/b.jpg", "img/lie2e60.jpg"]
    )
    lying_tar(tars / "media" / "shard_000000.tar", "img/a.jpg", "img/lie100g.jpg", 100 * GB)
    lying_tar(tars / "media" / "shard_000001.tar", "img/b.jpg", "img/lie2e60.jpg", 2**60)
    write_subset(release, "evil_match", ["img/ok.jpg", LONG_REF])
    recipes.mkdir()
    with HttpFixture() as srv:
        srv.add("/img/ok.jpg", jpeg(7))
        url = srv.url("/{ref}")
        (recipes / "evil_match.yaml").write_text(
            "subset: evil_match\nlicense: MIT\nsources:\n"
            f"  - kind: http_files\n    url: '{url}'\n    match: '{EVIL}'\n"
            f"  - kind: http_files\n    url: '{url}'\n"
        )
        before = tree(base)
        args = [str(release), "--out", str(out), "--recipes", str(recipes), "--skip-gate", "--num-cpus", "1"]
        args += ["--max-reject-rate", "0.9", "--fetch-batch-timeout", "30", "--executor", "local"]
        code, text, seconds, peak_mb = vlmforge_run(
            args, scratch, base / "console.log", RUN_TIMEOUT_S, configured_api_url()
        )
    after = tree(base)
    outside = {k for k in set(before) | set(after) if not k.startswith("out/") and k != "console.log"}
    changed = sorted(k for k in outside if before.get(k) != after.get(k))
    yield {"code": code, "text": text, "seconds": seconds, "peak_mb": peak_mb, "out": out, "changed": changed}


def rows(out: Path, sql: str) -> list[dict[str, Any]]:
    from vlmforge.tasks.ops.query import run_query

    return list(run_query(str(out), sql).to_pylist())


def test_the_run_ends_in_bounded_time_and_memory_and_touches_nothing_outside_out(
    hostile_run: dict[str, Any],
) -> None:
    assert hostile_run["code"] == 0, hostile_run["text"][-4000:]
    assert hostile_run["seconds"] < RUN_BOUND_S
    assert hostile_run["peak_mb"] < MAX_TREE_RSS_MB, f"peak RSS {hostile_run['peak_mb']:.0f} MB"
    assert hostile_run["changed"] == [], hostile_run["changed"]
    print(f"hostile run: {hostile_run['seconds']:.1f} s, largest process {hostile_run['peak_mb']:.0f} MB")


def test_a_tar_member_claiming_more_than_the_tar_holds_is_its_rows_reject(
    hostile_run: dict[str, Any],
) -> None:
    out = hostile_run["out"]
    got = {
        r["sample_id"]: r
        for r in rows(out, "SELECT sample_id, status, reason FROM samples WHERE subset = 'liar_tars'")
    }
    assert [got[s]["status"] for s in ("r-0", "r-1", "r-2", "r-3")] == ["ok", "rejected", "ok", "rejected"], (
        got
    )
    assert got["r-1"]["reason"] == "media_error: img/lie100g.jpg: truncated", got["r-1"]
    assert got["r-3"]["reason"] == "media_error: img/lie2e60.jpg: truncated", got["r-3"]
    media = {
        r["ref"]: r["reason"] for r in rows(out, "SELECT ref, reason FROM media WHERE subset = 'liar_tars'")
    }
    assert media["img/lie100g.jpg"].startswith(
        f"truncated: tar member img/lie100g.jpg claims {100 * GB} bytes"
    )
    assert (
        f"claims {2**60} bytes" in media["img/lie2e60.jpg"]
        and "shard_000001.tar holds" in media["img/lie2e60.jpg"]
    )
    assert (out / "energon" / "liar_tars").is_dir()  # the subset is published with its honest rows


def test_a_backtracking_match_rejects_its_reference_within_the_batch_deadline(
    hostile_run: dict[str, Any],
) -> None:
    out = hostile_run["out"]
    got = {
        r["ref"]: r
        for r in rows(
            out, "SELECT ref, status, fetch_status, fetch_detail FROM media WHERE subset = 'evil_match'"
        )
    }
    assert got["img/ok.jpg"]["status"] == "ok", got["img/ok.jpg"]
    evil = got[LONG_REF]
    assert evil["fetch_status"] == "match_budget" and "budget" in evil["fetch_detail"], evil
    samples = rows(out, "SELECT status, count(*) AS n FROM samples WHERE subset = 'evil_match' GROUP BY ALL")
    assert sorted((r["status"], r["n"]) for r in samples) == [("ok", 1), ("rejected", 1)], samples
