"""Hostile inputs, second round (part B), through a real ``vlmforge run`` (CLI, embedded Prefect and Ray): one
release with a subset per case, one run for the module. Pixel bombs under the header limit, a line naming one
image 20,000 times, a recipe on the loopback / metadata address it does not declare, a ``local`` root of
``/etc``, a JSON body where media was expected, a token echoed back percent-encoded and upper-cased by a
redirect to another port. Each row ends with its reason, nothing of a refused source is stored or quoted, the
run is bounded in time and memory. Before it, a ``--format infovqa`` run into the same OUT over a replica of
InfoVQA in which one ``.parquet`` file is an HTML page: that file is one reject with a one-line reason, the
other rows are published, and what that earlier run published is byte for byte the same after the hostile
run. Files and servers are built here, on loopback only."""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from earlier_subsets import assert_published, published_files
from http_fixture import Fault, HttpFixture
from PIL import Image

pytestmark = pytest.mark.slow
RUN_TIMEOUT_S = 900.0
RSS_BOUND_KB = 3_000_000  # the largest process of the tree (KiB); a decoded 15000x15000 WebP alone is 4.2 GB
TOKEN = "PLANTEDr2b/t0ken Value"
JSON_BODY = b'{"AccessKeyId": "PLANTEDmeta", "Token": "secret"}'


def _jpeg() -> bytes:
    buf = io.BytesIO()
    Image.effect_noise((64, 48), 60).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def webp_bomb(side: int) -> bytes:
    """A 38-byte lossless WebP of one colour patched to ``side`` x ``side`` (libwebp decodes it whole)."""
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (10, 20, 30)).save(buf, "WEBP", lossless=True)
    data = bytearray(buf.getvalue())
    bits = int.from_bytes(data[21:25], "little") & ~((1 << 28) - 1)
    data[21:25] = (bits | (side - 1) | ((side - 1) << 14)).to_bytes(4, "little")
    return bytes(data)


def tiff_header(side: int) -> bytes:
    """A small RGB TIFF whose header is patched to claim ``side`` x ``side`` (225 MP, under the limit)."""
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (1, 2, 3)).save(buf, "TIFF")
    data = bytearray(buf.getvalue())
    ifd = int.from_bytes(data[4:8], "little")
    for i in range(int.from_bytes(data[ifd : ifd + 2], "little")):
        entry = ifd + 2 + 12 * i
        if int.from_bytes(data[entry : entry + 2], "little") in (256, 257):  # ImageWidth, ImageLength
            kind = int.from_bytes(data[entry + 2 : entry + 4], "little")
            width = 2 if kind == 3 else 4
            data[entry + 8 : entry + 8 + width] = side.to_bytes(width, "little")
    return bytes(data)


def _row(i: int, refs: list[str]) -> dict[str, Any]:
    parts: list[Any] = ["What is shown?", *({"type": "image", "image": r} for r in refs)]
    return {
        "id": f"r-{i}",
        "messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": "Noise."}],
    }


def _subset(root: Path, name: str, rows: list[list[str]], files: dict[str, bytes] | None = None) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    for rel, data in (files or {}).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(_row(i, r)) + "\n" for i, r in enumerate(rows)))


NOT_PARQUET = "train-00001-of-00002.parquet"
EARLIER = ("infovqa_train", "infovqa_validation")  # published by the --format run before the hostile one
HOSTILE = ("bombs", "metadata", "etc_root", "json_body", "token_echo")


def _noise_jpeg(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.effect_noise((96, 72), 40 + seed).convert("RGB").save(buf, "JPEG", quality=90)
    return buf.getvalue()


def infovqa_with_a_page(root: Path) -> Path:
    """An InfoVQA layout (``data/<split>-0000N-of-0000M.parquet``, image bytes in each row): two good train
    rows, a second train file that is an HTML page saved as ``.parquet``, one validation row."""
    data = root / "data"
    data.mkdir(parents=True)
    schema = pa.schema(
        [
            ("questionId", pa.int64()),
            ("question", pa.string()),
            ("answer", pa.string()),
            ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ]
    )

    def rows(ids: range) -> pa.Table:
        image = [{"bytes": _noise_jpeg(i), "path": f"info_{i}.jpg"} for i in ids]
        table = {"questionId": list(ids), "question": ["What is shown?"] * len(ids)}
        table |= {"answer": ["Noise."] * len(ids), "image": image}
        return pa.Table.from_pydict(table, schema=schema)

    pq.write_table(rows(range(1, 3)), data / "train-00000-of-00002.parquet")
    (data / NOT_PARQUET).write_bytes(b"<html><body>rate limited</body></html>\n" * 40)
    pq.write_table(rows(range(3, 4)), data / "validation-00000-of-00001.parquet")
    return root


def _recipe(recipes: Path, subset: str, source: dict[str, Any]) -> None:
    recipes.joinpath(f"{subset}.yaml").write_text(
        json.dumps({"subset": subset, "license": "MIT", "sources": [source]})  # JSON is YAML
    )


@pytest.fixture(scope="module")
def run(prefect_harness: None) -> Iterator[dict[str, Any]]:
    """A ``--format infovqa`` run, then one real run over every hostile case of the module into the same OUT
    (``--subset`` each), both on the local executor (the decodes in the run's own process, whose peak RSS is
    measured) and the session's Prefect server."""
    from vlmforge.flows.runtime.embedded import configured_api_url

    root = Path(tempfile.mkdtemp(prefix="vfr2b-"))
    jpeg = _jpeg()
    try:
        with HttpFixture() as srv, HttpFixture() as other:
            release, recipes, out = root / "release", root / "recipes", root / "out"
            recipes.mkdir()
            # 2. pixel bombs under the header limit, and 20,000 references to one image in one line
            _subset(
                release,
                "bombs",
                [["img/bomb.webp"], ["img/bomb.tif"], ["img/ok.jpg"], ["img/ok.jpg"] * 20_000],
                {"img/bomb.webp": webp_bomb(15000), "img/bomb.tif": tiff_header(15000), "img/ok.jpg": jpeg},
            )
            # 4. a recipe on an internal address it does not declare; a local root of /etc; a JSON body
            srv.add("/latest/meta-data/x.jpg", JSON_BODY)
            _subset(release, "metadata", [["x.jpg"]])
            _recipe(recipes, "metadata", {"kind": "http_files", "url": srv.url("/latest/meta-data/{name}")})
            _subset(release, "etc_root", [["passwd"]])
            _recipe(recipes, "etc_root", {"kind": "local", "root": "/etc"})
            srv.add("/api/y.jpg", JSON_BODY)
            srv.fault("/api/y.jpg", None)
            _subset(release, "json_body", [["y.jpg"], ["ok.jpg"]])
            srv.add("/api/ok.jpg", jpeg)
            _recipe(
                recipes,
                "json_body",
                {"kind": "http_files", "url": srv.url("/api/{name}"), "allow_private": True},
            )
            # 5. a token echoed back, percent-encoded and upper-cased, in a redirect to another port
            echoed = f"{other.url('/z.jpg')}?a={quote(TOKEN, safe='')}&b={TOKEN.upper().replace(' ', '+')}"
            srv.add("/tok/z.jpg", b"", Fault("redirect", target=echoed))
            other.add("/z.jpg", jpeg)
            _subset(release, "token_echo", [["z.jpg"]])
            _recipe(
                recipes,
                "token_echo",
                {
                    "kind": "http_files",
                    "url": srv.url("/tok/{name}"),
                    "allow_private": True,
                    "redirects": "any_host",
                    "headers": {"Authorization": "Bearer ${VF_R2B_TOKEN}"},
                },
            )
            env = os.environ.copy() | {
                "TMPDIR": str(root),
                "PYTHONUNBUFFERED": "1",
                "PREFECT_API_URL": str(configured_api_url()),
                "VF_R2B_TOKEN": TOKEN,
            }
            common = ["--out", str(out), "--skip-gate", "--num-cpus", "1", "--max-reject-rate", "1.0"]
            common += ["--executor", "local"]
            # 7. an earlier run into the same OUT: a --format source with a .parquet that is not Parquet
            infovqa = infovqa_with_a_page(root / "InfoVQA")
            cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(infovqa), "--format", "infovqa"]
            cmd += ["--config", "train", "--config", "validation", *common]
            layout = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S)
            earlier = {name: published_files(out, name) for name in EARLIER}
            cmd = [sys.executable, "-m", "vlmforge.flows.cli", "run", str(release), *common]
            cmd += ["--recipes", str(recipes), "--env-allow", "VF_R2B_TOKEN"]
            cmd += [a for name in HOSTILE for a in ("--subset", name)]
            t0 = time.monotonic()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S)
            seconds = time.monotonic() - t0
            peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
            yield {
                "proc": proc,
                "out": out,
                "seconds": seconds,
                "peak_kb": peak_kb,
                "srv": srv,
                "other": other,
                "layout": layout,
                "earlier": earlier,
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _query(out: Path, sql: str) -> list[dict[str, Any]]:
    from vlmforge.tasks.ops.query import run_query

    return run_query(str(out), sql).to_pylist()


def _media(out: Path, subset: str) -> dict[str, dict[str, Any]]:
    rows = _query(out, f"SELECT * FROM media WHERE subset = '{subset}'")
    return {r["ref"]: r for r in rows}


def _files_text(out: Path) -> bytes:
    return b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())


def test_the_run_is_bounded_and_loses_no_row(run: dict[str, Any]) -> None:
    proc = run["proc"]
    assert proc.returncode in (0, 1), (proc.stdout + proc.stderr)[-4000:]
    assert run["peak_kb"] < RSS_BOUND_KB, f"peak RSS {run['peak_kb'] / 1024:.0f} MB"
    for r in _query(run["out"], "SELECT subset, rows, ok, rejected, dropped FROM subsets"):
        assert r["rows"] == r["ok"] + r["rejected"] + r["dropped"], r
    print(f"run: {run['seconds']:.1f} s, largest process peak RSS {run['peak_kb'] / 1024:.0f} MB")


def test_pixel_bombs_under_the_header_limit_are_refused_before_decoding(run: dict[str, Any]) -> None:
    media = _media(run["out"], "bombs")
    webp, tif = media["img/bomb.webp"], media["img/bomb.tif"]
    assert webp["reason"].startswith("decode_budget: WEBP RGB 15000x15000 decoded whole needs"), webp
    assert tif["reason"].startswith("decode_budget: TIFF RGB 15000x15000 decoded whole needs"), tif
    assert media["img/ok.jpg"]["status"] == "ok"


def test_twenty_thousand_references_in_one_line_are_dropped(run: dict[str, Any]) -> None:
    rows = _query(
        run["out"], "SELECT status, reason FROM samples WHERE subset = 'bombs' AND sample_id = 'r-3'"
    )
    assert rows == [{"status": "dropped", "reason": "max_media_per_sample: 20000 media > 256"}]


def test_an_undeclared_internal_address_is_never_contacted(run: dict[str, Any]) -> None:
    row = _media(run["out"], "metadata")["x.jpg"]
    assert row["fetch_status"] == "internal_address", row
    assert run["srv"].requests("/latest/meta-data/x.jpg") == []  # nothing sent


def test_a_local_root_of_etc_is_not_read(run: dict[str, Any]) -> None:
    row = _media(run["out"], "etc_root")["passwd"]
    assert row["fetch_status"] == "root_not_allowed", row
    assert b"root:x:0:0" not in _files_text(run["out"])


def test_a_json_body_is_neither_stored_nor_quoted(run: dict[str, Any]) -> None:
    media = _media(run["out"], "json_body")
    row = media["y.jpg"]
    assert row["fetch_status"] == "not_media", row
    assert "Content-Type" in row["fetch_detail"] and "PLANTEDmeta" not in row["fetch_detail"], row
    assert media["ok.jpg"]["status"] == "ok"
    assert b"PLANTEDmeta" not in _files_text(run["out"])


def test_an_echoed_token_is_not_sent_across_ports_nor_persisted(run: dict[str, Any]) -> None:
    assert run["srv"].requests("/tok/z.jpg")[0].authorization == f"Bearer {TOKEN}"
    got = run["other"].requests("/z.jpg")
    assert got and all(r.authorization is None for r in got)  # any_host followed it, without the token
    data = _files_text(run["out"])
    for spelt in (TOKEN, TOKEN.upper(), quote(TOKEN, safe=""), TOKEN.upper().replace(" ", "+")):
        assert spelt.encode() not in data, spelt


def test_recipe_check_refuses_fsspec_chaining(tmp_path: Path) -> None:
    path = tmp_path / "chained.yaml"
    source = {"kind": "archive", "url": "simplecache::http://127.0.0.1:9/a.zip"}
    path.write_text(json.dumps({"subset": "chained", "license": "MIT", "sources": [source]}))
    cmd = [sys.executable, "-m", "vlmforge.flows.cli", "recipe", "check", str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "chains fsspec protocols" in proc.stdout + proc.stderr


def test_a_parquet_file_that_is_not_parquet_is_its_own_reject_and_the_other_rows_are_published(
    run: dict[str, Any],
) -> None:
    layout = run["layout"]
    said = layout.stdout + layout.stderr
    assert layout.returncode == 0, said[-4000:]
    assert "Traceback" not in said and "ArrowInvalid" not in said, said[-4000:]  # was 130 lines of it
    got = {
        r["sample_id"]: r
        for r in _query(
            run["out"], "SELECT subset, sample_id, status, reason FROM samples WHERE subset LIKE 'infovqa_%'"
        )
    }
    bad = got.pop(f"unreadable:{NOT_PARQUET}")
    assert bad["subset"] == "infovqa_train" and bad["status"] == "rejected", bad
    assert bad["reason"].startswith(f"unreadable_source: {NOT_PARQUET}: not a readable Parquet file ("), bad
    assert "\n" not in bad["reason"] and len(bad["reason"]) < 600, bad["reason"]
    assert sorted((r["subset"], r["status"]) for r in got.values()) == [
        ("infovqa_train", "ok"),
        ("infovqa_train", "ok"),
        ("infovqa_validation", "ok"),
    ], got


def test_what_an_earlier_run_published_in_the_same_out_is_byte_identical_afterwards(
    run: dict[str, Any],
) -> None:
    for name in EARLIER:
        assert_published(run["earlier"][name], name)
        assert published_files(run["out"], name) == run["earlier"][name], name
