"""Tests for the deterministic sample-release generator (vlmforge.tasks.sample_release)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from pathlib import Path
from typing import Any

import av
import pytest
from PIL import Image, ImageOps

from vlmforge.tasks.sample_release.expected import EXPECTED, EXPECTED_MEDIA_ERRORS, LARGE_IMAGE, SUBSETS
from vlmforge.tasks.sample_release.sample_build import SampleRelease, build_sample_release, main

DEFAULT_MAX_PIXELS = 12_845_056


def _tree_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[SampleRelease, float]:
    dest = tmp_path_factory.mktemp("release_a") / "release"
    t0 = time.perf_counter()
    rel = build_sample_release(dest)
    return rel, time.perf_counter() - t0


def _lines(rel: SampleRelease, subset: str) -> list[str]:
    return (rel.root / subset / f"{subset}.jsonl").read_text("utf-8").split("\n")[:-1]


def _parts(record: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for msg in record["messages"]:
        content = msg["content"]
        if isinstance(content, list):
            out += [p for p in content if isinstance(p, dict)]
    return out


def _tar_members(subset_dir: Path) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    for shard in sorted((subset_dir / "media").glob("shard_*.tar")):
        with tarfile.open(shard) as tf:
            for m in tf.getmembers():
                f = tf.extractfile(m)
                assert f is not None
                members[m.name] = f.read()
    return members


def _resolve(subset_dir: Path, ref: str, members: dict[str, bytes]) -> bytes | None:
    for cand in (subset_dir / ref, subset_dir / "media" / ref):
        if cand.is_file():
            return cand.read_bytes()
    return members.get(ref)


def test_byte_identical(built: tuple[SampleRelease, float], tmp_path: Path) -> None:
    rel, _ = built
    other = build_sample_release(tmp_path / "release_b")
    a, b = _tree_hashes(rel.root), _tree_hashes(other.root)
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    assert not differ, f"{len(differ)} files differ between two builds: {differ[:20]}"
    assert len(a) > 20


def test_summary_and_layout(built: tuple[SampleRelease, float]) -> None:
    rel, elapsed = built
    assert rel.subsets == list(SUBSETS) == list(EXPECTED)
    assert rel.total_lines == sum(len(v) for v in EXPECTED.values())
    assert elapsed < 30, f"generation took {elapsed:.1f}s"
    total = sum(p.stat().st_size for p in rel.root.rglob("*") if p.is_file())
    assert total < 10 * 1024 * 1024, total
    for subset in rel.subsets:
        readme = (rel.root / subset / "README.md").read_text("utf-8")
        assert "http" in readme
    assert "License: CC-BY-4.0" in (rel.root / "photo_vqa" / "README.md").read_text()
    assert "License: Apache-2.0" in (rel.root / "multi_image" / "README.md").read_text()
    assert "License: CC-BY-SA-4.0" in (rel.root / "video_qa" / "README.md").read_text()
    assert "License:" not in (rel.root / "bad_rows" / "README.md").read_text()


def test_overwrite(tmp_path: Path) -> None:
    dest = tmp_path / "r"
    dest.mkdir()
    (dest / "stale.txt").write_text("x")
    with pytest.raises(FileExistsError):
        build_sample_release(dest)
    build_sample_release(dest, overwrite=True)
    assert not (dest / "stale.txt").exists()
    assert main([str(dest)]) == 1


def test_expected_matches_jsonl(built: tuple[SampleRelease, float]) -> None:
    rel, _ = built
    for subset, expected in EXPECTED.items():
        lines = _lines(rel, subset)
        assert len(lines) == len(expected), subset
        assert [e["line"] for e in expected] == list(range(1, len(lines) + 1))
        for exp, line in zip(expected, lines, strict=True):
            assert set(exp) == {"line", "id", "status", "reason_prefix", "n_images", "n_videos"}
            assert exp["status"] in ("ok", "rejected")
            assert (exp["reason_prefix"] is None) == (exp["status"] == "ok")
            if exp["reason_prefix"] == "empty_line":
                assert line == ""
                continue
            if exp["reason_prefix"] == "invalid_json":
                with pytest.raises(json.JSONDecodeError):
                    json.loads(line)
                continue
            rec = json.loads(line)
            if not isinstance(rec, dict):
                assert exp["reason_prefix"] == "invalid_record"
                continue
            assert rec.get("id") == exp["id"]
            if not isinstance(rec.get("messages"), list):
                assert exp["reason_prefix"] == "invalid_record"
                continue
            parts = _parts(rec)
            assert sum(p.get("type") == "image" for p in parts) == exp["n_images"], (subset, exp)
            assert sum(p.get("type") == "video" for p in parts) == exp["n_videos"], (subset, exp)
    for (err_subset, err_line), detail in EXPECTED_MEDIA_ERRORS.items():
        assert EXPECTED[err_subset][err_line - 1]["reason_prefix"] == "media_error"
        assert detail in ("truncated", "not_an_image", "zero_size")
    assert sum(e["reason_prefix"] == "media_error" for v in EXPECTED.values() for e in v) == len(
        EXPECTED_MEDIA_ERRORS
    )


def test_rejection_coverage() -> None:
    reasons = {e["reason_prefix"] for e in EXPECTED["bad_rows"]}
    assert reasons >= {
        None,
        "invalid_json",
        "invalid_record",
        "empty_line",
        "unsupported_part:audio",
        "unsafe_ref",
        "missing_media",
        "media_error",
    }
    ids = {e["id"] for e in EXPECTED["bad_rows"] if e["status"] == "ok"}
    assert "a.b.c" in ids


def test_good_media_resolve(built: tuple[SampleRelease, float]) -> None:
    rel, _ = built
    n_ok_media = 0
    for subset, expected in EXPECTED.items():
        subset_dir = rel.root / subset
        members = _tar_members(subset_dir)
        lines = _lines(rel, subset)
        for exp in expected:
            if exp["status"] != "ok":
                continue
            rec = json.loads(lines[exp["line"] - 1])
            for part in _parts(rec):
                if part["type"] == "image":
                    data = _resolve(subset_dir, part["image"], members)
                    assert data is not None, (subset, part)
                    with Image.open(io.BytesIO(data)) as im:
                        im.load()
                    n_ok_media += 1
                elif part["type"] == "video":
                    assert _resolve(subset_dir, part["video"], members) is not None, (subset, part)
                    n_ok_media += 1
    assert n_ok_media >= 30
    # photo_vqa images live only inside the tar, under images/<name>
    photo_members = _tar_members(rel.root / "photo_vqa")
    assert all(name.startswith("images/") for name in photo_members)
    assert not (rel.root / "photo_vqa" / "images").exists()


def test_tar_headers_fixed(built: tuple[SampleRelease, float]) -> None:
    rel, _ = built
    with tarfile.open(rel.root / "photo_vqa" / "media" / "shard_000000.tar") as tf:
        infos = tf.getmembers()
    assert [m.name for m in infos] == sorted(m.name for m in infos)
    for m in infos:
        assert (m.mtime, m.uid, m.gid, m.mode) == (0, 0, 0, 0o644)


def test_special_images(built: tuple[SampleRelease, float]) -> None:
    rel, _ = built
    members = _tar_members(rel.root / "photo_vqa")
    with Image.open(io.BytesIO(members["images/rocket_exif6.jpg"])) as im:
        assert im.getexif().get(0x0112) == 6
        stored = im.size
        shown = ImageOps.exif_transpose(im).size
    assert shown == (stored[1], stored[0]) and shown[0] > shown[1]
    with Image.open(io.BytesIO(members["images/astronaut_rgba.png"])) as im:
        assert im.format == "PNG" and im.mode == "RGBA"
        alpha_min, _ = im.getchannel("A").getextrema()
        assert isinstance(alpha_min, int) and alpha_min < 255
    subset, ref = LARGE_IMAGE
    with Image.open(rel.root / subset / ref) as im:
        assert im.format == "JPEG"
        assert im.width * im.height > DEFAULT_MAX_PIXELS
    large_rows = [
        json.loads(line) for line in _lines(rel, subset) if f'"{ref}"' in line and line.count('"image":') == 1
    ]
    assert large_rows


def test_twelve_image_row(built: tuple[SampleRelease, float]) -> None:
    rel, _ = built
    counts = [e["n_images"] for e in EXPECTED["multi_image"]]
    assert 12 in counts and 2 in counts and 3 in counts
    for line in _lines(rel, "multi_image"):
        rec = json.loads(line)
        if sum(p["type"] == "image" for p in _parts(rec)) == 12:
            refs = [p["image"] for p in _parts(rec) if p["type"] == "image"]
            assert len(set(refs)) == 12
            break
    else:
        pytest.fail("no 12-image row")


def test_bad_media_files(built: tuple[SampleRelease, float]) -> None:
    rel, _ = built
    images = rel.root / "bad_rows" / "images"
    assert (images / "empty.png").stat().st_size == 0
    assert not (images / "does_not_exist.jpg").exists()
    assert (images / "error_page.jpg").read_bytes().lstrip().lower().startswith(b"<!doctype html")
    with pytest.raises(OSError), Image.open(images / "truncated.jpg") as im:
        im.load()


def test_videos_decode(built: tuple[SampleRelease, float]) -> None:
    rel, _ = built
    clips = sorted((rel.root / "video_qa" / "clips").glob("*.mp4"))
    assert len(clips) >= 2
    for clip in clips:
        with av.open(str(clip)) as container:
            stream = container.streams.video[0]
            assert stream.codec_context.name == "h264"
            assert stream.width % 2 == 0 and stream.height % 2 == 0
            n = sum(1 for _ in container.decode(video=0))
        assert n > 8, (clip, n)
    mixed = [e for e in EXPECTED["video_qa"] if e["n_videos"] >= 1 and e["n_images"] >= 1]
    assert mixed
