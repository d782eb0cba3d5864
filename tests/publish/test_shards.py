"""Shard writer, metadataset and validator against real megatron-energon loading (CPU, tiny data)."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import torch
import yaml
from megatron.energon import WorkerConfig, get_loader, get_train_dataset, get_val_dataset
from PIL import Image

from vlmforge.energon import (
    DEFAULT_VIDEO_FRAMES,
    ChatSample,
    ChatTaskEncoder,
    decode_video_frames,
    media_part_names,
)
from vlmforge.schemas.sample_keys import sanitize_key, split_for_key
from vlmforge.tasks.errors import ConfigError
from vlmforge.tasks.publish import dataset as dataset_module
from vlmforge.tasks.publish.formats.crude import DATASET_YAML
from vlmforge.tasks.publish.journal import JOURNAL_NAME
from vlmforge.tasks.publish.listing import MANIFEST_NAME, expected_keys
from vlmforge.tasks.publish.metadataset import PSI_CONFIGS, ensure_dataset_config, write_metadataset
from vlmforge.tasks.publish.rolling import parse_size
from vlmforge.tasks.publish.samples import DuplicateKeyError, MediaPart, ShardSample
from vlmforge.tasks.validate import validate_energon_dataset

W, H = 32, 24

#: These tests pin the crude format (its bytes, its cooker); the bridge format has test_bridge_format.py.
write_energon_dataset = functools.partial(dataset_module.write_energon_dataset, sample_format="crude")


def _image(color: tuple[int, int, int], fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (W, H), color).save(buf, format=fmt)
    return buf.getvalue()


def _mp4(frames: int = 4) -> bytes:
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=4)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        for i in range(frames):
            arr = np.full((H, W, 3), 40 * i, dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def _color(i: int) -> tuple[int, int, int]:
    # distinct grey levels, far apart so JPEG noise cannot blur them together
    return (10 * i + 5, 10 * i + 5, 10 * i + 5)


def _sample(subset: str, idx: int, split: str, n_images: int = 1, video: bytes | None = None) -> ShardSample:
    key = sanitize_key(subset, f"row.{idx}/x")
    media: list[tuple[str, bytes]] = []
    content: list[object] = [f"question {idx} ✓"]
    for i in range(n_images):
        ext, fmt = ("jpg", "JPEG") if i % 2 == 0 else ("png", "PNG")
        name = f"{i}.{ext}"
        media.append((name, _image(_color(i), fmt)))
        content.append({"type": "image", "image": f"img_{idx}_{i}.{ext}", "part": name})
    if video is not None:
        name = f"{len(media)}.mp4"
        media.append((name, video))
        content.append({"type": "video", "video": f"clip_{idx}.mp4", "part": name})
    record = {
        "id": f"row.{idx}/x",
        "messages": [
            {"role": "user", "content": content},
            {"role": "assistant", "content": f"answer {idx}"},
        ],
    }
    return ShardSample(key=key, split=split, json=record, media=tuple(media))


@pytest.fixture(scope="module")
def video() -> bytes:
    return _mp4()


@pytest.fixture(scope="module")
def samples(video: bytes) -> list[ShardSample]:
    out = [_sample("demo", i, "train") for i in range(7)]
    out.append(_sample("demo", 7, "train", n_images=12))  # numeric part ordering: 10.jpg after 9.png
    out.append(_sample("demo", 8, "train", n_images=1, video=video))
    out += [_sample("demo", i, "val", n_images=2) for i in range(9, 12)]
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory, samples: list[ShardSample]) -> Path:
    dest = tmp_path_factory.mktemp("energon") / "demo"
    result = write_energon_dataset(samples, dest, subset="demo", shard_max_samples=4)
    assert result.path == dest
    assert result.samples == len(samples)
    return dest


def _expected(samples: list[ShardSample]) -> dict[str, list[str]]:
    return {split: [s.key for s in samples if s.split == split] for split in ("train", "val")}


def _wc(errors: list[str], num_workers: int = 0) -> WorkerConfig:
    return WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=num_workers,
        global_error_handler=lambda exc, sample, sources=None: errors.append(repr(exc)),
    )


def test_key_helpers() -> None:
    assert sanitize_key("chartqa_1", "a.b/c d") == "chartqa_1__a_b_c_d"
    assert "." not in sanitize_key("x", "1.2.3")
    fraction = sum(split_for_key(f"k{i}", 0.25) == "val" for i in range(2000)) / 2000
    assert 0.2 < fraction < 0.3
    assert split_for_key("abc", 0.0) == "train" and split_for_key("abc", 1.0) == "val"


def test_layout_and_manifest(dataset: Path, samples: list[ShardSample]) -> None:
    tars = sorted(p.name for p in dataset.glob("*.tar"))
    # 9 train samples, max 4 per shard -> 3 train shards; 3 val samples -> 1 val shard
    assert tars == [
        "train-demo-000000.tar",
        "train-demo-000001.tar",
        "train-demo-000002.tar",
        "val-demo-000000.tar",
    ]
    assert all((dataset / f"{t}.idx").is_file() for t in tars)
    assert (dataset / ".nv-meta" / "dataset.yaml").read_text() == DATASET_YAML
    info = json.loads((dataset / ".nv-meta" / ".info.json").read_text())
    assert list(info["shard_counts"].values()) == [4, 4, 1, 3]
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    assert [m["shard"] for m in manifest] == tars
    assert expected_keys(dataset) == _expected(samples)
    # json part is canonical compact JSON, media members follow in the given order
    with tarfile.open(dataset / "train-demo-000001.tar") as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        key = samples[7].key
        assert names[names.index(f"{key}.json") : names.index(f"{key}.json") + 13] == [f"{key}.json"] + [
            f"{key}.{part}" for part, _ in samples[7].media
        ]
        data = tar.extractfile(f"{key}.json").read()  # type: ignore[union-attr]
        assert (
            data
            == json.dumps(samples[7].json, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
        )
        assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" and m.mode == 0o644 for m in members)
        assert not any(m.pax_headers for m in members)
    # nothing left next to dest
    assert sorted(p.name for p in dataset.parent.iterdir()) == ["demo"]


def test_rewrite_is_byte_identical(tmp_path: Path, dataset: Path, samples: list[ShardSample]) -> None:
    other = write_energon_dataset(samples, tmp_path / "demo", subset="demo", shard_max_samples=4)
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    assert [(s.shard, s.split, s.samples, s.bytes, s.sha256) for s in other.shards] == [
        (m["shard"], m["split"], m["samples"], m["bytes"], m["sha256"]) for m in manifest
    ]
    for shard in other.shards:
        assert (tmp_path / "demo" / shard.shard).read_bytes() == (dataset / shard.shard).read_bytes()
    assert (tmp_path / "demo" / MANIFEST_NAME).read_bytes() == (dataset / MANIFEST_NAME).read_bytes()


def _every_file(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_two_identical_publishes_give_identical_bytes_for_every_file(
    tmp_path: Path, samples: list[ShardSample]
) -> None:
    """Every file, .nv-meta included (Energon's own prepare fills index.sqlite in the order its workers
    finish and writes a random index.uuid; ours fills it in shard order and derives the uuid from the
    content)."""
    a = write_energon_dataset(samples, tmp_path / "a" / "demo", subset="demo", shard_max_samples=2)
    b = write_energon_dataset(samples, tmp_path / "b" / "demo", subset="demo", shard_max_samples=2)
    files_a, files_b = _every_file(a.path), _every_file(b.path)
    assert {".nv-meta/index.sqlite", ".nv-meta/index.uuid", ".nv-meta/.info.json"} <= set(files_a)
    assert [n for n in files_a if files_a[n] != files_b.get(n)] == [] and set(files_a) == set(files_b)
    assert not any(".tmp-" in n for n in files_a)
    uid = files_a[".nv-meta/index.uuid"].decode()
    assert str(uuid.UUID(uid)) == uid and uuid.UUID(uid).version == 5
    # the sealed index still serves every sample through megatron-energon
    report = validate_energon_dataset(a.path, _expected(samples))
    assert report.ok, report.problems
    # other content, other uuid
    changed = [*samples[:-1], _sample("demo", 11, "val", n_images=1)]
    c = write_energon_dataset(changed, tmp_path / "c" / "demo", subset="demo", shard_max_samples=2)
    assert (c.path / ".nv-meta" / "index.uuid").read_text() != uid


def test_roll_by_bytes(tmp_path: Path, samples: list[ShardSample]) -> None:
    train = [s for s in samples if s.split == "train"][:5]
    result = write_energon_dataset(train, tmp_path / "b", subset="b", shard_max_bytes=3000)
    assert result.samples == 5
    assert len(result.shards) >= 3
    assert all(s.split == "train" for s in result.shards)
    assert sum(s.samples for s in result.shards) == 5
    # no val shards -> val omitted from split.yaml, validator accepts an empty val expectation
    split_yaml = yaml.safe_load((tmp_path / "b" / ".nv-meta" / "split.yaml").read_text())
    assert set(split_yaml["split_parts"]) == {"train"}
    report = validate_energon_dataset(tmp_path / "b", {"train": [s.key for s in train], "val": []})
    assert report.ok, report.problems


def test_duplicate_key_raises(tmp_path: Path, samples: list[ShardSample]) -> None:
    dup = [samples[0], samples[1], samples[0]]
    with pytest.raises(DuplicateKeyError):
        write_energon_dataset(dup, tmp_path / "dup", subset="demo")
    assert not (tmp_path / "dup").exists()
    assert list(tmp_path.iterdir()) == []


def test_validate_reads_everything(dataset: Path, samples: list[ShardSample]) -> None:
    report = validate_energon_dataset(dataset, _expected(samples))
    assert report.ok, report.problems
    assert report.counts == {"train": 9, "val": 3}
    key12 = samples[7].key
    assert report.media_parts[key12] == [f"{i}.{'jpg' if i % 2 == 0 else 'png'}" for i in range(12)]
    assert report.media_parts[samples[8].key] == ["0.jpg", "1.mp4"]


def test_validate_with_two_workers(dataset: Path, samples: list[ShardSample]) -> None:
    report = validate_energon_dataset(dataset, _expected(samples), num_workers=2)
    assert report.ok, report.problems
    assert report.counts == {"train": 9, "val": 3}


def test_validate_detects_problems(dataset: Path, samples: list[ShardSample]) -> None:
    expected = _expected(samples)
    expected["train"] = expected["train"][1:] + ["demo__not_there"]
    report = validate_energon_dataset(dataset, expected, sample_limit=None)
    assert not report.ok
    text = "\n".join(report.problems)
    assert "unexpected keys" in text and samples[0].key in text
    assert "missing keys" in text and "demo__not_there" in text
    limited = validate_energon_dataset(dataset, _expected(samples), sample_limit=2)
    assert limited.ok, limited.problems
    assert limited.counts == {"train": 2, "val": 2}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_validate_collects_decode_errors(
    tmp_path: Path, samples: list[ShardSample], num_workers: int
) -> None:
    bad = _sample("bad", 0, "train")
    bad = ShardSample(key=bad.key, split="train", json=bad.json, media=(("0.jpg", b"\xff\xd8not a jpeg"),))
    good = [
        ShardSample(key=f"bad__ok{i}", split="train", json=s.json, media=s.media)
        for i, s in enumerate(samples[:2])
    ]
    write_energon_dataset([good[0], bad, good[1]], tmp_path / "bad", subset="bad")
    expected = {"train": [good[0].key, bad.key, good[1].key]}
    report = validate_energon_dataset(tmp_path / "bad", expected, num_workers=num_workers)
    assert not report.ok
    assert report.counts["train"] == 2
    assert len(report.errors) == 1 and bad.key in report.errors[0] and "DecodingError" in report.errors[0]
    assert any("missing keys" in p and bad.key in p for p in report.problems)


def test_cooker_images_in_order(dataset: Path, samples: list[ShardSample]) -> None:
    errors: list[str] = []
    ds = get_train_dataset(
        str(dataset),
        worker_config=_wc(errors),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=ChatTaskEncoder(),
    )
    by_key: dict[str, ChatSample] = {}
    for sample, _ in zip(get_loader(ds), range(40), strict=False):
        assert isinstance(sample, ChatSample)
        by_key[sample.__key__] = sample
    assert not errors
    assert set(by_key) == {s.key for s in samples if s.split == "train"}

    big = by_key[samples[7].key]
    assert big.parts == [name for name, _ in samples[7].media]
    assert len(big.images) == 12 and big.videos == []
    for i, image in enumerate(big.images):
        assert isinstance(image, torch.Tensor) and image.shape == (3, H, W)
        assert abs(float(image.mean()) * 255 - _color(i)[0]) < 3, i
    linked = [part for part in big.messages[0]["content"] if isinstance(part, dict)]
    assert [p["part"] for p in linked] == big.parts
    assert all(p["image"] is img for p, img in zip(linked, big.images, strict=True))
    assert big.record == samples[7].json
    assert big.__subflavors__ is None or isinstance(big.__subflavors__, dict)

    vid = by_key[samples[8].key]
    assert len(vid.images) == 1 and len(vid.videos) == 1
    assert type(vid.videos[0]).__name__ == "AVDecoder"
    assert vid.messages[0]["content"][2]["video"] is vid.videos[0]


def test_long_keys_use_gnu_longnames(tmp_path: Path, samples: list[ShardSample]) -> None:
    key = sanitize_key("long", "x" * 150)
    long = ShardSample(key=key, split="train", json=samples[7].json, media=samples[7].media)
    result = write_energon_dataset([long], tmp_path / "long", subset="long")
    with tarfile.open(tmp_path / "long" / result.shards[0].shard) as tar:
        assert tar.getnames()[0] == f"{key}.json"
        assert not any(m.pax_headers for m in tar.getmembers())
    report = validate_energon_dataset(tmp_path / "long", {"train": [key], "val": []})
    assert report.ok, report.problems
    assert report.media_parts[key] == [name for name, _ in samples[7].media]


def test_media_part_names_numeric() -> None:
    crude = {"json": {}, "__key__": "k", "10.jpg": 0, "2.png": 0, "1.jpg": 0, "0.mp4": 0, "txt": 0}
    assert media_part_names(crude) == ["0.mp4", "1.jpg", "2.png", "10.jpg"]


def test_metadataset_over_two_datasets(tmp_path: Path, samples: list[ShardSample]) -> None:
    a = [
        ShardSample(key=f"alpha__{i}", split=s.split, json=s.json, media=s.media)
        for i, s in enumerate(samples[:4])
    ]
    b = [
        ShardSample(key=f"beta__{i}", split="train", json=s.json, media=s.media)
        for i, s in enumerate(samples[9:])
    ]
    a[3] = ShardSample(key=a[3].key, split="val", json=a[3].json, media=a[3].media)
    write_energon_dataset(a, tmp_path / "alpha", subset="alpha")
    write_energon_dataset(b, tmp_path / "beta", subset="beta")  # train only
    mds = write_metadataset(tmp_path, {"beta": 1.0, "alpha": 3.0})
    text = mds.read_text()
    assert write_metadataset(tmp_path, {"alpha": 3.0, "beta": 1.0}).read_text() == text
    doc = yaml.safe_load(text)
    assert doc["__class__"] == "MetadatasetV2"
    assert [e["path"] for e in doc["splits"]["train"]["blend"]] == ["./alpha", "./beta"]
    assert [e["weight"] for e in doc["splits"]["train"]["blend"]] == [3.0, 1.0]
    assert doc["splits"]["val"]["blend"] == [{"path": "./alpha", "subflavors": {"source": "alpha"}}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alpha", "beta", "metadataset.yaml"]

    errors: list[str] = []
    ds = get_train_dataset(
        str(mds),
        worker_config=_wc(errors),
        batch_size=None,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=ChatTaskEncoder(),
    )
    seen: dict[str, str] = {}
    for sample, _ in zip(get_loader(ds), range(60), strict=False):
        assert isinstance(sample, ChatSample)
        seen[sample.__key__] = sample.__subflavors__["source"]
    assert not errors
    assert seen == {**{s.key: "alpha" for s in a[:3]}, **{s.key: "beta" for s in b}}

    vds = get_val_dataset(
        str(mds), split_part="val", worker_config=_wc(errors), batch_size=1, task_encoder=ChatTaskEncoder()
    )
    val = [sample for batch in get_loader(vds) for sample in batch]
    assert [(s.__key__, s.__subflavors__["source"]) for s in val] == [(a[3].key, "alpha")]
    assert not errors


def test_stale_staging_and_rewrite(tmp_path: Path, samples: list[ShardSample]) -> None:
    dest = tmp_path / "demo"
    first = samples[:3]
    write_energon_dataset(first, dest, subset="demo")
    before = {p.name: p.read_bytes() for p in dest.glob("*.tar")}

    # a crash during a later write leaves a hidden staging folder with junk
    staging = tmp_path / ".demo.staging"
    (staging / ".nv-meta").mkdir(parents=True)
    (staging / "train-demo-000000.tar").write_bytes(b"junk")
    (staging / "train-demo-000007.tar").write_bytes(b"junk")
    assert {p.name: p.read_bytes() for p in dest.glob("*.tar")} == before
    assert validate_energon_dataset(dest, {"train": [s.key for s in first], "val": []}).ok

    # the next write wipes it and replaces dest atomically
    second = [s for s in samples if s.split == "train"][3:6]
    result = write_energon_dataset(second, dest, subset="demo")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]
    assert sorted(p.name for p in dest.glob("*.tar")) == ["train-demo-000000.tar"]
    assert result.shards[0].samples == 3
    report = validate_energon_dataset(dest, {"train": [s.key for s in second], "val": []})
    assert report.ok, report.problems


def test_empty_input_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_energon_dataset([], tmp_path / "empty", subset="empty")
    assert list(tmp_path.iterdir()) == []


# --- sizes, lazy media, resume, frames ------------------------------------------------------------------


def test_parse_size() -> None:
    assert parse_size("1GB") == 1_000_000_000
    assert parse_size("1gb") == parse_size("1G") == parse_size("1 GB") == 1_000_000_000
    assert parse_size("512MiB") == 512 * 2**20
    assert parse_size("1.5G") == 1_500_000_000
    assert parse_size("700kb") == 700_000
    assert parse_size("4096") == parse_size("4096B") == parse_size(4096) == 4096
    for bad in ("", "1XB", "GB", "-1GB", "0", "1.2.3MB"):
        with pytest.raises(ConfigError, match="invalid size"):
            parse_size(bad)


def _lazy(samples: list[ShardSample], loads: list[str]) -> list[ShardSample]:
    """The same samples with media as MediaPart; ``loads`` records every part read."""

    def loader(name: str, data: bytes) -> Callable[[], bytes]:
        def load() -> bytes:
            loads.append(name)
            return data

        return load

    out = []
    for s in samples:
        media = tuple(
            MediaPart(
                name=n, size=len(d), sha256=hashlib.sha256(d).hexdigest(), load=loader(f"{s.key}/{n}", d)
            )
            for n, d in s.media  # type: ignore[misc]
        )
        out.append(ShardSample(key=s.key, split=s.split, json=s.json, media=media))
    return out


def _hashes(dest: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(dest.glob("*.tar"))}


def test_lazy_media_give_the_same_bytes(tmp_path: Path, dataset: Path, samples: list[ShardSample]) -> None:
    loads: list[str] = []
    result = write_energon_dataset(
        _lazy(samples, loads), tmp_path / "demo", subset="demo", shard_max_samples=4
    )
    assert _hashes(tmp_path / "demo") == _hashes(dataset)
    assert result.reused_shards == 0 and len(loads) == sum(len(s.media) for s in samples)
    assert [s.tokens for s in result.shards] == [None] * 4  # the test records carry no vlmforge block
    assert all((dataset / ".nv-meta" / f"dataset_psi{n}.yaml").is_file() for n in PSI_CONFIGS)
    assert ensure_dataset_config(dataset, 2) == "dataset_psi2.yaml"
    assert ensure_dataset_config(dataset, 16) is None
    assert ensure_dataset_config(tmp_path / "demo", 3) == "dataset_psi3.yaml"
    assert "parallel_shard_iters: 3" in (tmp_path / "demo" / ".nv-meta" / "dataset_psi3.yaml").read_text()

    bad = [
        ShardSample(
            key="demo__x", split="train", json={}, media=(MediaPart("0.jpg", 10, "0" * 64, lambda: b"short"),)
        )
    ]
    with pytest.raises(OSError, match="has 5 bytes, 10 were announced"):
        write_energon_dataset(bad, tmp_path / "bad", subset="demo")
    assert not (tmp_path / "bad").exists()


_SAMPLES_SOURCE = """
import hashlib, io, os, signal, time
from PIL import Image
from vlmforge.tasks.publish import dataset
from vlmforge.tasks.publish.journal import JOURNAL_NAME
from vlmforge.schemas.sample_keys import split_for_key
from vlmforge.tasks.publish.samples import MediaPart, ShardSample

def image(i):
    buf = io.BytesIO()
    Image.new("RGB", (64, 48), (i * 7 % 256, i * 13 % 256, i * 29 % 256)).save(buf, format="PNG")
    return buf.getvalue()

def samples(kill_at):
    for i in range(30):
        if kill_at == f"sample{i}":
            # mid-write: once two shards are durable and recorded (their fsync runs on a helper thread),
            # while the next ones are half written
            for _ in range(600):
                if journal.is_file() and len(journal.read_text().splitlines()) >= 3:
                    break
                time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGKILL)
        data = image(i)
        media = (MediaPart("0.png", len(data), hashlib.sha256(data).hexdigest(), lambda d=data: d),)
        content = [{"type": "image", "part": "0.png"}]
        record = {"id": str(i), "messages": [{"role": "user", "content": content}],
                  "vlmforge": {"total_tokens": 10 + i}}
        key = f"demo__{i}"
        yield ShardSample(key=key, split=split_for_key(key, 0.2), json=record, media=media)
"""

_KILL_SCRIPT = """
import sys
from pathlib import Path
exec(open(sys.argv[1]).read())

dest, kill_at = Path(sys.argv[2]), sys.argv[3]
journal = dest.parent / f".{dest.name}.staging" / JOURNAL_NAME
if kill_at == "prepare":  # every shard written and indexed, .nv-meta not finished
    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    dataset.write_info_and_splits = killed
dataset.write_energon_dataset(
    samples(kill_at), dest, subset="demo", shard_max_samples=4, sample_format="crude"
)
"""


def _kill_samples() -> Iterator[ShardSample]:
    namespace: dict[str, Any] = {}
    exec(_SAMPLES_SOURCE, namespace)
    samples: Iterator[ShardSample] = namespace["samples"]("never")
    return samples


@pytest.mark.parametrize("kill_at", ["sample17", "prepare"])
def test_kill_and_resume_is_byte_identical(tmp_path: Path, kill_at: str) -> None:
    clean = write_energon_dataset(
        _kill_samples(), tmp_path / "clean" / "demo", subset="demo", shard_max_samples=4
    )
    assert clean.reused_shards == 0 and len(clean.shards) >= 4

    dest = tmp_path / "out" / "demo"
    (tmp_path / "samples.py").write_text(_SAMPLES_SOURCE)
    (tmp_path / "writer.py").write_text(_KILL_SCRIPT)
    killed = subprocess.run(
        [sys.executable, str(tmp_path / "writer.py"), str(tmp_path / "samples.py"), str(dest), kill_at],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # nothing a loader would pick up: no dataset folder, only the hidden staging folder with its journal
    assert sorted(p.name for p in dest.parent.iterdir()) == [".demo.staging"]
    journal = (dest.parent / ".demo.staging" / JOURNAL_NAME).read_text().splitlines()
    finished = len(journal) - 1
    assert finished >= 2 if kill_at == "sample17" else finished == len(clean.shards)

    resumed = write_energon_dataset(_kill_samples(), dest, subset="demo", shard_max_samples=4)
    assert resumed.reused_shards == finished  # finished shards were kept, not rewritten
    assert [s.sha256 for s in resumed.shards] == [s.sha256 for s in clean.shards]
    assert _hashes(dest) == _hashes(tmp_path / "clean" / "demo")
    assert sorted(p.name for p in dest.parent.iterdir()) == ["demo"]
    assert not (dest / JOURNAL_NAME).exists()
    report = validate_energon_dataset(dest, expected_keys(dest))
    assert report.ok, report.problems


def test_resume_with_changed_input_rewrites_from_the_change(
    tmp_path: Path, samples: list[ShardSample]
) -> None:
    train = [s for s in samples if s.split == "train"]
    dest = tmp_path / "demo"
    staging = tmp_path / ".demo.staging"

    def interrupted(items: list[ShardSample], stop: int) -> None:
        def gen() -> Iterator[ShardSample]:
            for i, s in enumerate(items):
                if i == stop:
                    raise KeyboardInterrupt
                yield s

        with pytest.raises(KeyboardInterrupt):
            write_energon_dataset(gen(), dest, subset="demo", shard_max_samples=2)
        assert staging.is_dir()

    interrupted(train, 7)  # shards 0-2 finished
    assert not dest.exists()
    changed = list(train)
    changed[3] = ShardSample(
        key=train[3].key, split="train", json={**train[3].json, "id": "changed"}, media=train[3].media
    )
    loads: list[str] = []
    result = write_energon_dataset(_lazy(changed, loads), dest, subset="demo", shard_max_samples=2)
    assert result.reused_shards == 1  # shard 0; shard 1 holds the changed sample, shard 2 comes after it
    assert not any(name.startswith((train[0].key, train[1].key)) for name in loads)
    fresh = write_energon_dataset(changed, tmp_path / "fresh" / "demo", subset="demo", shard_max_samples=2)
    assert [s.sha256 for s in result.shards] == [s.sha256 for s in fresh.shards]

    # other limits: the journal does not apply, everything is rewritten
    interrupted(train, 5)
    assert expected_keys(dest)["train"] == [s.key for s in changed]  # the previous version is still in place
    other = write_energon_dataset(train, dest, subset="demo", shard_max_samples=3)
    assert other.reused_shards == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["demo", "fresh"]


def test_interrupted_publish_is_undone(tmp_path: Path, samples: list[ShardSample]) -> None:
    dest = tmp_path / "demo"
    write_energon_dataset(samples[:3], dest, subset="demo")
    # a crash between the two renames of a filesystem without RENAME_EXCHANGE leaves only `.demo.old`
    os.replace(dest, tmp_path / ".demo.old")
    write_energon_dataset(samples[3:5], dest, subset="demo")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]
    assert expected_keys(dest)["train"] == [s.key for s in samples[3:5]]


def test_frames_cooker(dataset: Path, samples: list[ShardSample]) -> None:
    errors: list[str] = []
    ds = get_val_dataset(
        str(dataset),
        split_part="train",
        worker_config=_wc(errors),
        batch_size=1,
        task_encoder=ChatTaskEncoder(video_frames=True),
    )
    by_key = {s.__key__: s for batch in get_loader(ds) for s in batch}
    assert not errors
    vid = by_key[samples[8].key]
    frames = vid.videos[0]
    assert isinstance(frames, torch.Tensor) and frames.dtype == torch.uint8
    assert frames.shape == (DEFAULT_VIDEO_FRAMES, 3, H, W)
    assert vid.messages[0]["content"][2]["video"] is frames
    assert by_key[samples[7].key].videos == [] and len(by_key[samples[7].key].images) == 12

    from megatron.energon.av import AVDecoder

    video = dict(samples[8].media)["1.mp4"]
    exact = decode_video_frames(video, {"frame_indices": [0, 3]})
    assert exact.shape == (2, 3, H, W)
    # frame i of the fixture is grey level 40 * i
    assert [round(float(f.float().mean()) / 40) for f in exact] == [0, 3]
    assert decode_video_frames(AVDecoder(io.BytesIO(video)), {"sampled_frames": 3}).shape == (3, 3, H, W)


def _text_samples(n: int) -> Iterator[ShardSample]:
    for i in range(n):
        record = {
            "id": f"row.{i}",
            "messages": [{"role": "user", "content": f"q {i}"}, {"role": "assistant", "content": "a"}],
        }
        yield ShardSample(key=f"subset__row_{i:09d}_with_a_longer_key", split="train", json=record, media=())


def test_what_a_publish_holds_while_its_shards_are_checked_does_not_grow_with_its_samples(
    tmp_path: Path,
) -> None:
    """The shards suite runs on the staged dataset after every shard is written and indexed, and it is the
    publish's peak (Great Expectations loaded, the listing as a table): the written keys are in the listing
    file by then, and the writer must not still hold them (once they were held twice, ~40 MB at 200,000 rows).
    Measured with tracemalloc: the same count of allocations whatever the machine."""
    import tracemalloc

    held: dict[int, int] = {}

    def publish(n: int) -> None:
        def check(staged: Path) -> None:
            held[n] = tracemalloc.get_traced_memory()[0]

        tracemalloc.start()
        try:
            write_energon_dataset(
                _text_samples(n), tmp_path / f"d{n}", subset="subset", shard_max_samples=1_000, check=check
            )
        finally:
            tracemalloc.stop()

    publish(10)  # imports and first-call caches, counted in neither figure below
    publish(1_000)
    publish(20_000)
    grown = held[20_000] - held[1_000]
    # 19,000 more keys held once would be ~1.7 MB
    assert grown < 400_000, f"{grown / 1e6:.1f} MB more held at the check for 19,000 more samples"
