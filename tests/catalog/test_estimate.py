"""``vlmforge catalog --estimate`` against what a real run then took, over every way media reach a run: the
release's own media tar, a zip at a URL read by range (loopback HTTP), S3 (moto's server on 127.0.0.1) and
plain HTTP files (two subsets sharing objects). The estimate reads no media body (the servers' logs say so),
its object counts are exact, its bytes exact for the indexed sources and within 5% for the sampled one, its
disk within 10% of the store and shards; after the run, the same report sets the estimate beside the run."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import run_flow
from http_fixture import HttpFixture
from PIL import Image

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.estimate_rows import TOTAL, EstimateRow
from vlmforge.tasks.estimate.release_estimate import EstimateOptions, estimate_release
from vlmforge.tasks.estimate.versus import actual_figures, versus_actual
from vlmforge.tasks.ops.query import run_query

pytestmark = pytest.mark.slow

MAX_PIXELS = 65_536  # below every fixture image: each one is re-encoded (the disk ratios matter)
HTTP_A = 40  # distinct objects of http_a, sized from a sample of PROBE
HTTP_B_OWN, HTTP_B_SHARED = 6, 5  # http_b: its own objects, and objects http_a has too
PROBE = 16
ZIP_MEMBERS, ZIP_USED = 30, 10
S3_OBJECTS = 20
TAR_OBJECTS = 12


def _jpeg(seed: int) -> bytes:
    from skimage import data

    img = Image.fromarray(data.astronaut()).rotate(seed * 7).resize((300 + 4 * (seed % 9), 240))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=88)
    return buf.getvalue()


def _subset(root: Path, name: str, refs: list[str]) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(f"# {name}\n\nLicense: CC0-1.0\n")
    rows = [
        {
            "id": f"{name}-{i}",
            "messages": [
                {"role": "user", "content": [{"type": "image", "image": ref}, "What is in the picture?"]},
                {"role": "assistant", "content": f"Picture {i} of {name}."},
            ],
        }
        for i, ref in enumerate(refs)
    ]
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


class World:
    """The release, the recipes, the HTTP server and the S3 bucket, and what each subset really holds."""

    def __init__(self, base: Path, srv: HttpFixture, s3: str) -> None:
        import s3fs

        self.base, self.srv, self.s3 = base, srv, s3
        self.release, self.recipes = base / "release", base / "recipes"
        self.recipes.mkdir()
        seed = iter(range(10_000))
        # tarred: the release's own media tar (one reference twice: one object)
        folder = _subset(self.release, "tarred", [f"t{i}.jpg" for i in range(TAR_OBJECTS)] + ["t0.jpg"])
        (folder / "media").mkdir()
        with tarfile.open(folder / "media" / "shard_000.tar", "w") as tf:
            for i in range(TAR_OBJECTS):
                body = _jpeg(next(seed))
                info = tarfile.TarInfo(f"t{i}.jpg")
                info.size = len(body)
                tf.addfile(info, io.BytesIO(body))
        # zipped: a zip at a URL, a third of its members referenced, one absent
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for i in range(ZIP_MEMBERS):
                zf.writestr(f"imgs/z{i}.jpg", _jpeg(next(seed)))
        srv.add("/archives/images.zip", buf.getvalue())
        _subset(
            self.release, "zipped", [f"imgs/z{i}.jpg" for i in range(0, 3 * ZIP_USED, 3)] + ["imgs/none.jpg"]
        )
        self._recipe(
            "zipped",
            f"  - kind: archive\n    allow_private: true\n    url: {srv.url('/archives/images.zip')}\n",
        )
        # s3: one object per reference in a bucket, one absent
        fs = s3fs.S3FileSystem(endpoint_url=s3, key="testing", secret="testing")
        fs.mkdir("media-bucket")
        for i in range(S3_OBJECTS):
            fs.pipe(f"media-bucket/photos/s{i}.jpg", _jpeg(next(seed)))
        _subset(self.release, "bucket", [f"s{i}.jpg" for i in range(S3_OBJECTS)] + ["gone.jpg"])
        s3_source = "  - kind: s3\n    url: s3://media-bucket/photos/{name}\n    anon: false\n"
        self._recipe("bucket", f"{s3_source}    endpoint_url: {s3}\n")
        # http_a and http_b: one URL per reference; http_b shares some of http_a's objects
        for i in range(HTTP_A + HTTP_B_OWN):
            srv.add(f"/media/h{i}.jpg", _jpeg(next(seed)))
        own_b = [f"h{HTTP_A + i}.jpg" for i in range(HTTP_B_OWN)]
        _subset(self.release, "http_a", [f"h{i}.jpg" for i in range(HTTP_A)] + ["h1.jpg", "h2.jpg"])
        _subset(self.release, "http_b", own_b + [f"h{i}.jpg" for i in range(HTTP_B_SHARED)])
        for name in ("http_a", "http_b"):
            self._recipe(
                name, f"  - kind: http_files\n    allow_private: true\n    url: {srv.url('/media/{name}')}\n"
            )
        self.out = base / "out"

    def _recipe(self, subset: str, sources: str) -> None:
        (self.recipes / f"{subset}.yaml").write_text(
            f"subset: {subset}\nlicense: CC0-1.0\nsources:\n{sources}"
        )

    def cfg(self) -> RunConfig:
        return RunConfig(
            release=str(self.release),
            out=str(self.out),
            catalogs=(str(self.recipes),),
            max_pixels=MAX_PIXELS,
            skip_gate=True,
            num_cpus=2,
        )

    def estimate(self, decode_sample: int) -> dict[str, EstimateRow]:
        opts = EstimateOptions(
            cfg=self.cfg(), out=str(self.out), probe_sample=PROBE, decode_sample=decode_sample, cores=2
        )
        return {r.subset: r for r in estimate_release(opts).rows}


@pytest.fixture(scope="module")
def world(
    prefect_harness: None, moto_s3: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Two estimates before the run (no body read at all; then a few bodies decoded for the disk ratios),
    the run, and the estimate after it, with the server logs of each step."""
    with HttpFixture() as srv:
        w = World(tmp_path_factory.mktemp("estimate"), srv, moto_s3)
        state: dict[str, Any] = {"world": w}
        state["blind"] = w.estimate(decode_sample=0)
        state["blind_log"] = srv.requests()
        srv.reset_log()
        state["before"] = w.estimate(decode_sample=4)
        state["before_log"] = srv.requests()
        srv.reset_log()
        state["summary"] = run_flow(w.cfg())
        state["run_log"] = srv.requests()
        srv.reset_log()
        state["after"] = w.estimate(decode_sample=4)
        state["after_log"] = srv.requests()
        yield state


def _bodies(log: list[Any], prefix: str) -> list[Any]:
    """GET requests under ``prefix`` that carried more than the one byte a size probe asks for."""
    return [r for r in log if r.path.startswith(prefix) and r.method == "GET" and r.sent > 1]


def test_the_estimate_reads_no_media_body(world: dict[str, Any]) -> None:
    log = world["blind_log"]
    assert _bodies(log, "/media/") == []
    probes = [r for r in log if r.path.startswith("/media/")]
    assert all(r.method == "HEAD" for r in probes)
    paths = {r.path for r in probes}
    assert len(paths) == len(probes)  # no object asked twice, whichever subsets name it
    http_b = {f"/media/h{i}.jpg" for i in [*range(HTTP_B_SHARED), *range(HTTP_A, HTTP_A + HTTP_B_OWN)]}
    assert http_b <= paths  # fewer objects than the sample: every one asked
    assert PROBE + HTTP_B_OWN <= len(paths) <= PROBE + HTTP_B_OWN + HTTP_B_SHARED  # http_a's sample too
    zip_reads = [r for r in log if r.path == "/archives/images.zip"]
    assert zip_reads and all(r.method == "GET" and (r.range or "").startswith("bytes=-") for r in zip_reads)
    assert world["blind"][TOTAL].sample_bodies == 0


def test_object_counts_are_exact_and_shared_objects_counted_once(world: dict[str, Any]) -> None:
    est, actual = world["blind"], actual_figures(str(world["world"].out))
    assert world["summary"].failed == []
    expected = {"tarred": TAR_OBJECTS, "zipped": ZIP_USED, "bucket": S3_OBJECTS, "http_a": HTTP_A}
    expected["http_b"] = HTTP_B_OWN + HTTP_B_SHARED
    for subset, n in expected.items():
        assert est[subset].objects == n == actual[subset].objects, subset
    assert est["http_b"].new_objects == HTTP_B_OWN  # the shared ones are fetched by http_a
    assert est[TOTAL].objects == sum(expected.values()) - HTTP_B_SHARED == actual[TOTAL].objects
    assert (est["zipped"].missing, est["bucket"].missing, est["tarred"].missing) == (1, 1, 0)
    assert est["tarred"].refs == TAR_OBJECTS + 1 and est["http_a"].refs == HTTP_A + 2


def test_bytes_are_exact_for_indexed_sources_and_close_for_sampled_ones(world: dict[str, Any]) -> None:
    est, actual = world["blind"], actual_figures(str(world["world"].out))
    for subset in ("tarred", "zipped", "bucket"):
        assert est[subset].bytes_method == "exact"
        assert est[subset].bytes == actual[subset].bytes, subset
    a = est["http_a"]
    assert a.bytes_method == "sampled" and a.probed == PROBE
    assert abs(a.bytes - actual["http_a"].bytes) <= 0.05 * actual["http_a"].bytes
    assert a.bytes_low <= actual["http_a"].bytes <= a.bytes_high  # inside the 95% interval
    assert est["http_b"].bytes_method == "exact"  # fewer objects than the sample: every one asked
    assert est["http_b"].bytes == actual["http_b"].bytes


def test_disk_is_within_ten_percent_of_the_store_and_shards(world: dict[str, Any]) -> None:
    before, actual = world["before"], actual_figures(str(world["world"].out))
    assert before[TOTAL].disk_method == "sample"
    est = before[TOTAL].store_bytes + before[TOTAL].shard_bytes
    took = (actual[TOTAL].store_bytes or 0) + actual[TOTAL].shard_bytes
    assert abs(est - took) <= 0.10 * took, (est, took, before[TOTAL], actual[TOTAL])
    # the few bodies it decoded are the only bodies it read over HTTP
    http_bodies = sum(before[s].sample_bodies for s in ("http_a", "http_b"))
    assert len(_bodies(world["before_log"], "/media/")) == http_bodies > 0


def test_after_the_run_the_report_sets_the_estimate_beside_the_run(world: dict[str, Any]) -> None:
    out = str(world["world"].out)
    versus = {v.subset: v.as_dict() for v in versus_actual(out)}
    print(json.dumps(versus, indent=1))  # the figures behind the "Done when" (pytest -rP shows them)
    assert versus[TOTAL]["estimate_id"] == world["before"][TOTAL].estimate_id
    assert versus["zipped"]["objects"] == versus["zipped"]["actual_objects"] == ZIP_USED
    assert versus["bucket"]["bytes_error"] == 0.0
    assert abs(versus[TOTAL]["disk_error"]) <= 0.10
    after = world["after"]
    for subset in ("zipped", "bucket", "http_a", "http_b"):
        assert after[subset].in_store == after[subset].objects and after[subset].fetch_bytes == 0, subset
    assert after[TOTAL].disk_method == "previous_run" and after[TOTAL].rates.startswith("runs table")
    assert _bodies(world["after_log"], "/") == []  # everything came from the store or the run's ratios
    got = run_query(out, "SELECT subset, count(DISTINCT estimate_id) AS n FROM estimates GROUP BY ALL")
    assert {r["subset"]: r["n"] for r in got.to_pylist()}[TOTAL] == 3


def test_cli_prints_the_table_and_json(world: dict[str, Any]) -> None:
    from typer.testing import CliRunner

    from vlmforge.flows.cli import app

    w = world["world"]
    args = ["catalog", str(w.release), "--estimate", "--out", str(w.out), "--recipes", str(w.recipes)]
    args += [
        "--max-pixels",
        str(MAX_PIXELS),
        "--decode-sample",
        "0",
        "--cores",
        "8",
        "--bandwidth",
        "100Mbit",
    ]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert {s["subset"] for s in data["subsets"]} == {"tarred", "zipped", "bucket", "http_a", "http_b"}
    assert (
        data["total"]["settings"]["cores"] == 8
        and data["total"]["settings"]["bandwidth_bytes_per_s"] == 12.5e6
    )
    assert data["versus_actual"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any(line.strip().startswith("total") for line in lines) and "vs actual" in res.output


def test_the_estimate_flow_publishes_its_table_as_an_artifact(world: dict[str, Any]) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from vlmforge.flows.estimate_flow import estimate_flow

    w = world["world"]
    got = estimate_flow(
        str(w.release),
        out=str(w.out),
        recipes=[str(w.recipes)],
        knobs={"max_pixels": MAX_PIXELS},
        decode_sample=0,
        probe_sample=PROBE,
    )
    assert got["total"]["objects"] == world["blind"][TOTAL].objects and got["versus_actual"]
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["vlmforge-estimate"]))
        )
    page = str(max(found, key=lambda a: a.created or 0).data)
    assert "| **total** |" in page and "## Estimate vs actual" in page and "| http_b |" in page
