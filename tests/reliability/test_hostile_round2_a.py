"""Hostile inputs, second round (issue 42, part A), through the real ``vlmforge run``:

- an ``--out`` (or ``--store``) that is or lies inside the release is refused before any service starts:
  one line, exit 2, the release byte-identical and OUT never created (every pairing, both directions, and
  the media roots: ``tests/flows/test_overlap.py``);
- a recipe with a key given twice is refused by ``vlmforge recipe check`` and by ``vlmforge run``, naming the
  key, both lines and the file, exit 2, before any service starts;
- one real run (embedded Prefect and Ray, loopback upstream) over a release holding release tars whose
  headers lie (a 100 GB and a 2**60-byte member in 2.5 KB tars), a recipe whose ``match`` backtracks
  catastrophically against a 3,000-character reference, and a host that answers 429 with a ``Retry-After``
  past the batch deadline, with ``--fetch-batch-timeout 30``: the run ends in bounded time and memory, every
  lying row is its own reject with its reason (``truncated``, ``match_budget``), the host's waiting
  references carry its ``http_429`` (not sent, not ``timeout``), the honest rows are published, nothing
  outside OUT is written or deleted, and a good subset an earlier run published into the same OUT is byte
  for byte as it was.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from earlier_subsets import assert_published, published_files
from http_fixture import Fault, HttpFixture
from measured_child import run_measured
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
    return run_measured(["run", *args], log, timeout, env)


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


# ------------------------------------------------------------------ item 7: a key given twice in a recipe

DUP_RECIPE = (
    "subset: docvqa\nlicense: MIT\nsources:\n  - kind: http_files\n"
    "    url: https://mirror.example/{ref}\n    url: https://other.example/{ref}\n"
)
DUP_WORDS = "refused: line 6: duplicate key 'url' (first at line 5)"


def test_recipe_check_refuses_a_key_given_twice(tmp_path: Path) -> None:
    path = tmp_path / "docvqa.yaml"
    path.write_text(DUP_RECIPE)
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "recipe", "check", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=PREFLIGHT_BOUND_S)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2, lines
    # the CLI's own errors add the one hint line (flows/cli/__init__.py main), as for every other command
    assert lines == [f"error: {path}: {DUP_WORDS}: keep one", "(set VLMFORGE_DEBUG=1 for the traceback)"]


def test_a_run_with_a_key_given_twice_in_a_recipe_is_refused_before_start_up(
    overlap_release: Path, scratch: Path, tmp_path: Path
) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "docvqa.yaml").write_text(DUP_RECIPE)
    before = tree(overlap_release.parent)
    args = [str(overlap_release), "--out", str(tmp_path / "out"), "--recipes", str(recipes)]
    code, text, seconds, _ = vlmforge_run(args, scratch, tmp_path / "log", PREFLIGHT_BOUND_S)
    lines = [line for line in text.splitlines() if line.strip()]
    assert code == 2, text[-3000:]
    assert lines == [f"error: {recipes / 'docvqa.yaml'}: {DUP_WORDS}: keep one"], lines  # no "Ray:" line
    assert not (tmp_path / "out").exists() and tree(overlap_release.parent) == before
    assert seconds < PREFLIGHT_BOUND_S
    print(f"duplicate recipe key: refused in {seconds:.2f} s")


# --------------------------------- items 3, 6 and 7: lying tars, a backtracking regex, a Retry-After


GOOD = "good_earlier"  # published by a run before the hostile one, into the same OUT
HOSTILE = ("liar_tars", "evil_match", "retry_after")
RETRY_AFTER_S = "600"  # far past the 30 s batch deadline
WAITING = [f"wait/{i}.jpg" for i in range(4)]


def text_row(i: int) -> str:
    turns = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi."}]
    return json.dumps({"id": f"r-{i}", "messages": turns})


@pytest.fixture(scope="module")
def hostile_run(
    prefect_harness: None, tmp_path_factory: pytest.TempPathFactory, scratch: Path
) -> Iterator[dict[str, Any]]:
    """A run of one good subset, then one real run over every hostile release case of this module into the
    same OUT (``--subset`` each, the good one not listed), both on the local executor (the run's tasks in its
    own process: its peak RSS is the whole run's) and the session's Prefect server."""
    from vlmforge.flows.runtime.embedded import configured_api_url

    base = tmp_path_factory.mktemp("hostile42")
    release, out, recipes = base / "release", base / "out", base / "recipes"
    good = write_subset(release, GOOD, ["img/g0.jpg", "img/g1.jpg"])
    for i in range(2):
        (good / "img").mkdir(exist_ok=True)
        (good / "img" / f"g{i}.jpg").write_bytes(jpeg(20 + i))
    tars = write_subset(
        release, "liar_tars", ["img/a.jpg", "img/lie100g.jpg", "img/b.jpg", "img/lie2e60.jpg"]
    )
    lying_tar(tars / "media" / "shard_000000.tar", "img/a.jpg", "img/lie100g.jpg", 100 * GB)
    lying_tar(tars / "media" / "shard_000001.tar", "img/b.jpg", "img/lie2e60.jpg", 2**60)
    write_subset(release, "evil_match", ["img/ok.jpg", LONG_REF])
    # every reference of this host answers 429 + Retry-After; one request at a time to it (max_concurrency),
    # so the first answer pauses the host while the others wait for their turn; a text-only row is published
    waiting = write_subset(release, "retry_after", WAITING)
    with (waiting / "retry_after.jsonl").open("a") as handle:
        handle.write(text_row(len(WAITING)) + "\n")
    recipes.mkdir()
    common = ["--out", str(out), "--recipes", str(recipes), "--skip-gate", "--num-cpus", "1"]
    common += ["--max-reject-rate", "0.9", "--fetch-batch-timeout", "30", "--executor", "local"]
    api = configured_api_url()
    code, text, _, _ = vlmforge_run(
        [str(release), *common, "--subset", GOOD], scratch, base / "console-good.log", RUN_TIMEOUT_S, api
    )
    assert code == 0, text[-4000:]
    earlier = published_files(out, GOOD)
    # a second loopback address: the host table is keyed by host name, so the pause stays on this host
    with HttpFixture() as srv, HttpFixture(host="127.0.0.2") as busy:
        srv.add("/img/ok.jpg", jpeg(7))
        url = srv.url("/{ref}")
        (recipes / "evil_match.yaml").write_text(
            "subset: evil_match\nlicense: MIT\nsources:\n"
            f"  - kind: http_files\n    url: '{url}'\n    match: '{EVIL}'\n    allow_private: true\n"
            f"  - kind: http_files\n    url: '{url}'\n    allow_private: true\n"
        )
        for ref in WAITING:
            busy.add(f"/{ref}", jpeg(9), Fault("429", retry_after=RETRY_AFTER_S))
        (recipes / "retry_after.yaml").write_text(
            "subset: retry_after\nlicense: MIT\nsources:\n"
            f"  - kind: http_files\n    url: '{busy.url('/{ref}')}'\n    max_concurrency: 1\n"
            "    allow_private: true\n"
        )
        before = tree(base)
        subsets = [a for name in HOSTILE for a in ("--subset", name)]
        code, text, seconds, peak_mb = vlmforge_run(
            [str(release), *common, *subsets], scratch, base / "console.log", RUN_TIMEOUT_S, api
        )
        sent = {ref: len(busy.requests(f"/{ref}")) for ref in WAITING}
    after = tree(base)
    outside = {k for k in set(before) | set(after) if not k.startswith(("out/", "console"))}
    changed = sorted(k for k in outside if before.get(k) != after.get(k))
    yield {
        "code": code,
        "text": text,
        "seconds": seconds,
        "peak_mb": peak_mb,
        "out": out,
        "changed": changed,
        "earlier": earlier,
        "sent": sent,
    }


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


def media_of(out: Path, subset: str) -> dict[str, dict[str, Any]]:
    """The subset's media rows by reference."""
    sql = f"SELECT ref, status, fetch_status, fetch_detail FROM media WHERE subset = '{subset}'"
    return {r["ref"]: r for r in rows(out, sql)}


def test_a_backtracking_match_rejects_its_reference_within_the_batch_deadline(
    hostile_run: dict[str, Any],
) -> None:
    out = hostile_run["out"]
    got = media_of(out, "evil_match")
    assert got["img/ok.jpg"]["status"] == "ok", got["img/ok.jpg"]
    evil = got[LONG_REF]
    assert evil["fetch_status"] == "match_budget" and "budget" in evil["fetch_detail"], evil
    samples = rows(out, "SELECT status, count(*) AS n FROM samples WHERE subset = 'evil_match' GROUP BY ALL")
    assert sorted((r["status"], r["n"]) for r in samples) == [("ok", 1), ("rejected", 1)], samples


def test_a_hosts_retry_after_is_not_charged_to_its_waiting_references_as_timeouts(
    hostile_run: dict[str, Any],
) -> None:
    out = hostile_run["out"]
    got = media_of(out, "retry_after")
    assert sorted(got) == WAITING, got
    assert all(r["fetch_status"] == "http_429" for r in got.values()), got  # none a `timeout`
    held = [ref for ref, r in got.items() if "not sent" in (r["fetch_detail"] or "")]
    assert held, got  # the host's pause reached the references waiting for their turn...
    for ref in held:
        assert "asked every request to wait" in got[ref]["fetch_detail"], got[ref]
        assert hostile_run["sent"][ref] == 0, hostile_run["sent"]  # ...and they were left unsent
    samples = rows(out, "SELECT status, count(*) AS n FROM samples WHERE subset = 'retry_after' GROUP BY ALL")
    assert sorted((r["status"], r["n"]) for r in samples) == [("ok", 1), ("rejected", len(WAITING))], samples


def test_an_earlier_good_subset_in_the_same_out_is_byte_identical_afterwards(
    hostile_run: dict[str, Any],
) -> None:
    assert_published(hostile_run["earlier"], GOOD)
    assert published_files(hostile_run["out"], GOOD) == hostile_run["earlier"]
    listed = rows(hostile_run["out"], "SELECT subset FROM subsets")
    assert sorted(r["subset"] for r in listed) == sorted([GOOD, *HOSTILE]), listed
