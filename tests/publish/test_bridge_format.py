"""The ``bridge`` sample format (Megatron-Bridge's ``ChatMLWebdataset``): its parts, its pickles, and the
sample release published in it and read back through real megatron-energon with vlmforge's own reader (no
``megatron.bridge`` in this environment). The crude format's bytes stay what they were."""

from __future__ import annotations

import collections
import io
import json
import pickle
import pickletools
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from conftest import error_collecting_worker_config
from megatron.energon import get_loader, get_val_dataset
from PIL import Image

from vlmforge.energon import ChatSample
from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.stage_options import BatchWork
from vlmforge.tasks.manifests import OutputLayout, read_table
from vlmforge.tasks.publish.dataset import write_energon_dataset
from vlmforge.tasks.publish.formats import DEFAULT_FORMAT, FORMATS, format_of_dataset
from vlmforge.tasks.publish.formats.chatml import DATASET_YAML, READ_CONFIG, BridgeFormat
from vlmforge.tasks.publish.formats.chatml_read import BridgePartsEncoder, cook_bridge_parts
from vlmforge.tasks.publish.formats.pickled import (
    load_plain,
    pickled_list,
    pickled_list_size,
    pickled_nested,
    pickled_nested_size,
)
from vlmforge.tasks.publish.listing import read_manifest
from vlmforge.tasks.publish.samples import MediaPart, ShardSample
from vlmforge.tasks.validate import format_reports, validate_output

# ------------------------------------------------------------------------------------------------ pickles

#: Opcodes a plain list of bytes may use: nothing that names a global or calls one.
PLAIN_OPS = {"PROTO", "EMPTY_LIST", "MARK", "BINBYTES", "APPENDS", "STOP"}


@pytest.mark.parametrize("sizes", [[], [0], [1, 255, 256, 70_000], [3] * 40])
def test_pickled_list_is_plain_and_sized(sizes: list[int]) -> None:
    items = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    data = pickled_list(items)
    assert len(data) == pickled_list_size(sizes)
    assert pickle.loads(data) == items == load_plain(data)
    assert {op.name for op, _arg, _pos in pickletools.genops(data)} <= PLAIN_OPS


@pytest.mark.parametrize("sizes", [[], [[]], [[5, 6], [], [300]]])
def test_pickled_nested_is_plain_and_sized(sizes: list[list[int]]) -> None:
    lists = [[bytes([j]) * n for j, n in enumerate(v)] for v in sizes]
    data = pickled_nested(lists)
    assert len(data) == pickled_nested_size(sizes)
    assert pickle.loads(data) == lists == load_plain(data)
    assert {op.name for op, _arg, _pos in pickletools.genops(data)} <= PLAIN_OPS


def test_load_plain_refuses_globals() -> None:
    with pytest.raises(pickle.UnpicklingError, match="collections.OrderedDict"):
        load_plain(pickle.dumps(collections.OrderedDict(a=1)))


# ------------------------------------------------------------------------------------------------ encode


def _jpeg(color: tuple[int, int, int], size: tuple[int, int] = (32, 24)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="JPEG")
    return buf.getvalue()


def _record() -> tuple[dict[str, Any], tuple[MediaPart, ...]]:
    frames = [f"1.{k:04d}.jpg" for k in range(3)]
    content = [
        {"type": "text", "text": "look ✓"},
        {"type": "image", "index": 0, "part": "0.jpg", "ref": "a.jpg", "width": 32, "height": 24},
        {"type": "video", "index": 1, "frames": frames, "frame_indices": [0, 5, 9], "ref": "v.mp4"},
        {"type": "text", "text": "and this"},
        {"type": "image", "index": 2, "part": "2.png", "ref": "b.png"},
    ]
    record = {
        "id": "r1",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
            {"role": "user", "content": content},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
        ],
        "vlmforge": {"subset": "s", "line": 1, "key": "s__r1", "total_tokens": 42},
    }
    media = [MediaPart.from_bytes("0.jpg", _jpeg((200, 0, 0)))]
    media += [MediaPart.from_bytes(name, _jpeg((0, 60 * k, 0), (56, 28))) for k, name in enumerate(frames)]
    media.append(MediaPart.from_bytes("2.png", b"\x89PNG-not-read-here"))
    return record, tuple(media)


def test_encode_writes_bridges_parts() -> None:
    record, media = _record()
    parts = BridgeFormat().encode(record, media)
    assert parts.record_name == "json"
    assert json.loads(parts.record) == [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look ✓"},
                {"type": "image"},
                {"type": "video"},
                {"type": "text", "text": "and this"},
                {"type": "image"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
    ]
    assert [p.name for p in parts.media] == ["jpgs", "videos", "vlmforge.json"]
    loaded = {p.name: p.load() for p in parts.media}
    assert all(len(loaded[p.name]) == p.size for p in parts.media)  # sizes announced before any read
    by_name = {p.name: p.load() for p in media}
    assert load_plain(loaded["jpgs"]) == [by_name["0.jpg"], by_name["2.png"]]
    assert load_plain(loaded["videos"]) == [[by_name[f"1.{k:04d}.jpg"] for k in range(3)]]
    assert json.loads(loaded["vlmforge.json"]) == record
    # an image-only sample still has every field_map part (an empty videos list)
    image_only = {"messages": [{"role": "user", "content": [record["messages"][1]["content"][1]]}]}
    again = BridgeFormat().encode(image_only, media[:1])
    assert load_plain(again.media[1].load()) == []


def test_encode_refuses_unlinked_media() -> None:
    record, media = _record()
    with pytest.raises(ValueError, match="not referenced by the record"):
        BridgeFormat().encode(record, (*media, MediaPart.from_bytes("9.jpg", b"x")))
    with pytest.raises(ValueError, match="'2.png' missing"):
        BridgeFormat().encode(record, media[:-1])


def _raw(turns: Any, images: list[bytes], videos: list[list[bytes]], record: dict[str, Any]) -> dict:
    return {
        "__key__": "k",
        "__restore_key__": ("Webdataset", "k"),
        "json": json.dumps(turns).encode(),
        "jpgs": pickled_list(images),
        "videos": pickled_nested(videos),
        "vlmforge.json": json.dumps(record).encode(),
    }


def test_reader_refuses_what_bridge_would_misread() -> None:
    img = _jpeg((1, 2, 3))
    turns = [{"role": "user", "content": [{"type": "image"}, {"type": "image"}]}]
    rec = {"messages": []}
    cooked = cook_bridge_parts(_raw(turns, [img, img], [], rec))
    assert isinstance(cooked, ChatSample) and cooked.images == [img, img] and cooked.videos == []
    with pytest.raises(ValueError, match="2 image placeholders, 1 images"):
        cook_bridge_parts(_raw(turns, [img], [], rec))
    with pytest.raises(ValueError, match="image 1 does not decode"):
        cook_bridge_parts(_raw(turns, [img, b"not an image"], [], rec))
    video_turns = [{"role": "user", "content": [{"type": "video"}]}]
    video_rec = {"messages": [{"content": [{"type": "video", "frames": ["1.0000.jpg", "1.0001.jpg"]}]}]}
    with pytest.raises(ValueError, match=r"videos have \[1\] frames, the record names \[2\]"):
        cook_bridge_parts(_raw(video_turns, [], [[img]], video_rec))
    sample = _raw(turns, [img, img], [], rec)
    sample["jpgs"] = pickle.dumps(collections.OrderedDict())
    with pytest.raises(pickle.UnpicklingError):
        cook_bridge_parts(sample)


def test_bridge_is_the_default_and_crude_stays() -> None:
    assert DEFAULT_FORMAT == "bridge" and set(FORMATS) == {"bridge", "crude"}
    assert RunConfig(release="r", out="o").shards.sample_format == "bridge"
    assert RunConfig(release="r", out="o", sample_format="crude").shards.sample_format == "crude"


# ------------------------------------------------------------------------------------------ crude bytes

#: Shard sha256 of :func:`_pin_samples` in the crude format, as written before the bridge format existed.
CRUDE_PINNED = [
    ("train-pin-000000.tar", "3cba3d1e347acc8ff4b4d6bce97f10179461ade59b85749cd2814966c4ad17d1"),
    ("train-pin-000001.tar", "0bca93a99d406127edb65d1f18434157c8b89545f128fdd3e9760d3aafe05e21"),
    ("val-pin-000000.tar", "c687e9b7652e49826f50e7b7c9dc4e03d528960d7e86cc31ca52ced4146d9e2d"),
]


def _pin_samples() -> list[ShardSample]:
    samples = []
    for i in range(7):
        key = f"pin__{i}"
        media = tuple((f"{j}.jpg", bytes([i, j]) * (100 + 37 * j)) for j in range(i % 3))
        content = [{"type": "text", "text": f"q {i} ✓"}] + [{"type": "image", "part": n} for n, _ in media]
        record = {
            "id": str(i),
            "messages": [{"role": "user", "content": content}],
            "vlmforge": {"key": key, "total_tokens": i},
        }
        samples.append(ShardSample(key=key, split="val" if i % 4 == 3 else "train", json=record, media=media))
    return samples


def test_crude_bytes_unchanged(tmp_path: Path) -> None:
    result = write_energon_dataset(
        _pin_samples(), tmp_path / "pin", subset="pin", shard_max_samples=3, sample_format="crude"
    )
    assert [(s.shard, s.sha256) for s in result.shards] == CRUDE_PINNED
    meta = tmp_path / "pin" / ".nv-meta"
    assert (meta / "dataset.yaml").read_text() == "__module__: megatron.energon\n__class__: CrudeWebdataset\n"
    assert not (meta / READ_CONFIG).exists()


# ------------------------------------------------------------------------------ the sample release, bridge


@pytest.fixture(scope="module", params=["frames", "keep"])
def published(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> RunConfig:
    """The sample release through the stage functions (no Prefect, no Ray), published as ``bridge``."""
    from vlmforge.tasks.batch.batch_pipeline import build_batch
    from vlmforge.tasks.catalog.release_catalog import catalog_release
    from vlmforge.tasks.publish.publish import publish_metadataset, publish_subset
    from vlmforge.tasks.sample_release.sample_build import build_sample_release

    root = tmp_path_factory.mktemp(f"bridge-{request.param}")
    release = build_sample_release(root / "release").root
    cfg = RunConfig(release=str(release), out=str(root / "out"), video_mode=request.param, val_fraction=0.2)
    layout = OutputLayout(cfg.out)
    for entry in catalog_release(str(release), batch_lines=cfg.batches.batch_lines):
        for index in range(len(entry.batch_offsets) - 1):
            build_batch(entry, index, BatchWork.of(cfg))
        publish_subset(layout, entry.subset, shard_max_bytes=10**9, shard_max_samples=4)
    publish_metadataset(layout)
    return cfg


def _read_all(dataset: Path) -> list[ChatSample]:
    samples: list[ChatSample] = []
    wc, errors = error_collecting_worker_config()
    for split in ("train", "val"):
        if not any(e["split"] == split for e in read_manifest(dataset)):
            continue
        ds = get_val_dataset(
            str(dataset),
            split_part=split,
            worker_config=wc,
            batch_size=None,
            task_encoder=BridgePartsEncoder(),
            dataset_config=READ_CONFIG,
        )
        samples += list(get_loader(ds))
    assert errors == []
    return samples


def _placeholders(turns: list[dict[str, Any]], kind: str) -> int:
    return sum(1 for turn in turns for part in turn["content"] if part["type"] == kind)


@pytest.mark.slow
def test_sample_release_reads_back_without_bridge(published: RunConfig) -> None:
    reports = validate_output(published.out)
    assert reports and all(r.ok for r in reports), format_reports(reports)
    assert "megatron.bridge" not in sys.modules
    layout = OutputLayout(published.out)
    energon = Path(published.out) / "energon"
    assert "metadataset.yaml" in {p.name for p in energon.iterdir()}
    videos_seen = 0
    for report in reports:
        dataset = energon / report.subset
        assert format_of_dataset(dataset).name == "bridge"
        assert (dataset / ".nv-meta" / "dataset.yaml").read_text() == DATASET_YAML
        rows = {
            r["key"]: r
            for r in read_table(layout, "samples", report.subset).to_pylist()
            if r["status"] == "ok"
        }
        media = read_table(layout, "media", report.subset).to_pylist()
        videos = {(m["line"]): m for m in media if m["kind"] == "video" and m["status"] == "ok"}
        samples = _read_all(dataset)
        assert sorted(s.__key__ for s in samples) == sorted(rows)
        for sample in samples:
            row = rows[sample.__key__]
            assert _placeholders(sample.messages, "image") == len(sample.images) == row["n_images"]
            assert _placeholders(sample.messages, "video") == len(sample.videos) == row["n_videos"]
            assert sample.record["vlmforge"]["total_tokens"] == row["total_tokens"]
            for frames in sample.videos:
                m = videos[row["line"]]
                assert len(frames) == m["sampled_frames"] == len(m["frame_indices"])
                size = (m["out_width"], m["out_height"]) if published.media.video_mode == "frames" else None
                for frame in frames:
                    with Image.open(io.BytesIO(frame)) as img:
                        assert img.size == (size or (m["width"], m["height"]))
                videos_seen += 1
        for tar_path in dataset.glob("*.tar"):
            with tarfile.open(tar_path) as tar:
                names = tar.getnames()
            keys = sorted({n.split(".", 1)[0] for n in names})
            want = sorted(f"{k}.{p}" for k in keys for p in ("json", "jpgs", "videos", "vlmforge.json"))
            assert sorted(names) == want  # every field_map part in every sample, nothing else
    assert videos_seen > 0


@pytest.mark.slow
def test_republish_is_byte_identical(published: RunConfig) -> None:
    from vlmforge.tasks.publish.publish import publish_subset

    dataset = Path(published.out) / "energon" / "video_qa"
    before = [(e["shard"], e["sha256"]) for e in read_manifest(dataset)]
    publish_subset(OutputLayout(published.out), "video_qa", shard_max_bytes=10**9, shard_max_samples=4)
    assert [(e["shard"], e["sha256"]) for e in read_manifest(dataset)] == before
