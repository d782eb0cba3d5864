"""``--trainer bridge-*`` counts what Megatron-Bridge's ``QwenVLTaskEncoder`` counts, on the pixels the shard
holds: per image, ``prod(image_grid_thw) // merge**2`` of transformers' Qwen image processor (built in code,
no hub) with the encoder's ``min_pixels``/``max_pixels``, run on the stored image bytes decoded as Bridge's
image handler decodes them; per sample, the encoder's skips (more than ``max_num_images`` images, more than
``max_visual_tokens`` visual tokens) are exactly vlmforge's drops."""

from __future__ import annotations

import hashlib
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.reasons import code_of
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork
from vlmforge.schemas.trainers import TRAINERS
from vlmforge.tasks.batch.batch_pipeline import build_batch
from vlmforge.tasks.manifests import OutputLayout, read_table
from vlmforge.tasks.storage import ContentStore

pil_qwen = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")

SUBSET = "sizes"
PATCH = {"bridge-qwen2.5-vl": 14, "bridge-qwen3-vl": 16}
# (width, height): tiny, rounding ties (14, 42, 70 px are x.5 patches), around max_pixels, huge, and aspect
# ratios up to the processor's 200:1 limit and past it.
FIXED = [
    (1, 1), (2, 3), (13, 7), (14, 14), (42, 70), (70, 42), (27, 29), (100, 50), (333, 777), (448, 448),
    (640, 480), (1000, 1000), (1001, 1003), (1002, 1001), (1280, 720), (1920, 1080), (1024, 980),
    (4000, 3000), (3000, 4000), (6000, 4000), (4000, 20), (20, 4000), (5600, 28), (200, 1), (1, 200),
    (3000, 15), (4020, 20), (20, 4020),
]  # fmt: skip
RNG = random.Random(19)
SIZES = FIXED + [(RNG.randint(1, 3000), RNG.randint(1, 3000)) for _ in range(24)]
VISUAL_LIMIT = 3000  # an explicit --max-visual-tokens: images alone never pass the preset's 16384 (10 x 1280)


def _image(size: tuple[int, int], n: int) -> bytes:
    fmt = "JPEG" if n % 3 == 0 else "PNG"
    buf = io.BytesIO()
    Image.new("RGB", size, (n * 37 % 256, 90, 200)).save(buf, format=fmt)
    return buf.getvalue()


def _line(id_: str, refs: list[str]) -> str:
    content: list[dict[str, Any]] = [{"type": "image", "image": r} for r in refs]
    content.append({"type": "text", "text": "Describe."})
    messages = [{"role": "user", "content": content}, {"role": "assistant", "content": "Shapes."}]
    return json.dumps({"id": id_, "messages": messages})


def _release(root: Path) -> tuple[SubsetEntry, dict[str, int]]:
    """One sample per size, then multi-image samples around the knobs; returns the entry and, per sample id,
    its image count."""
    folder = root / SUBSET
    (folder / "img").mkdir(parents=True)
    lines, n_images = [], {}
    for n, size in enumerate(SIZES):
        name = f"img/{n:03d}_{size[0]}x{size[1]}.{'jpg' if n % 3 == 0 else 'png'}"
        (folder / name).write_bytes(_image(size, n))
        lines.append(_line(f"one-{n}", [name]))
        n_images[f"one-{n}"] = 1
    (folder / "img" / "small.png").write_bytes(_image((100, 50), 1))
    (folder / "img" / "square.png").write_bytes(_image((1000, 1000), 2))
    for count in (10, 11, 12):  # max_num_images 10: 10 kept, 11 and 12 skipped
        lines.append(_line(f"many-{count}", ["img/small.png"] * count))
        n_images[f"many-{count}"] = count
    for count in (1, 2, 3, 4):  # around VISUAL_LIMIT for both patch sizes
        lines.append(_line(f"squares-{count}", ["img/square.png"] * count))
        n_images[f"squares-{count}"] = count
    data = "".join(line + "\n" for line in lines).encode()
    (folder / f"{SUBSET}.jsonl").write_bytes(data)
    entry = SubsetEntry(
        subset=SUBSET,
        path=str(folder),
        jsonl=str(folder / f"{SUBSET}.jsonl"),
        readme_sha256=None,
        jsonl_sha256=hashlib.sha256(data).hexdigest(),
        jsonl_bytes=len(data),
        rows=len(lines),
        license="MIT",
        license_text=None,
        batch_offsets=(0, len(data)),
        release=str(root),
    )
    return entry, n_images


def _bridge_tokens(processor: Any, data: bytes) -> int | None:
    """The encoder's count of one image (None: the processor refuses it), decoded like Bridge's handler."""
    with Image.open(io.BytesIO(data)) as im:
        rgb = im.convert("RGB")
    try:
        grid = processor(images=[rgb], return_tensors="np")["image_grid_thw"]
    except ValueError:
        return None
    return int(grid.prod(axis=-1).sum()) // processor.merge_size**2


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_visual_tokens_and_drops_equal_the_bridge_encoders(tmp_path: Path, trainer: str) -> None:
    preset = TRAINERS[trainer]
    entry, n_images = _release(tmp_path)
    cfg = RunConfig.of(
        release=str(tmp_path), out=str(tmp_path / "out"), **(preset | {"max_visual_tokens": VISUAL_LIMIT})
    )
    build_batch(entry, 0, BatchWork.of(cfg))
    layout, store = OutputLayout(cfg.out), ContentStore(cfg.store_url)
    samples = {r["sample_id"]: r for r in read_table(layout, "samples", SUBSET).to_pylist()}
    media = read_table(layout, "media", SUBSET).to_pylist()
    processor = pil_qwen.Qwen2VLImageProcessorPil(
        patch_size=PATCH[trainer],
        merge_size=2,
        temporal_patch_size=2,
        size={"shortest_edge": preset["min_pixels"], "longest_edge": preset["max_pixels"]},
    )

    # per image: every stored image, decoded, costs what vlmforge says; a refused one is a vlmforge reject
    bridge: dict[str, int] = {}
    resized = 0
    collate_refused = set()
    for m in media:
        if m["status"] != "ok":
            assert m["reason"].startswith("aspect_ratio"), m
            continue
        stored = store.get(m["out_sha256"])
        with Image.open(io.BytesIO(stored)) as im:
            assert im.size == (m["out_width"], m["out_height"])
        resized += (m["out_width"], m["out_height"]) != (m["width"], m["height"])
        if "Bridge's collate" in (samples[m["sample_id"]]["reason"] or ""):
            # batch() first rounds to 28 (qwen-vl-utils): past 200:1 there the processor raises, so the
            # sample is dropped though encode_sample's check would pass it
            h28, w28 = (max(28, round(v / 28) * 28) for v in (m["out_height"], m["out_width"]))
            assert max(h28, w28) / min(h28, w28) > 200, m
            assert max(m["width"], m["height"]) / min(m["width"], m["height"]) >= 100, (
                m
            )  # extreme ratios only
            collate_refused.add(m["sample_id"])
            continue
        tokens = _bridge_tokens(processor, stored)
        assert tokens == m["visual_tokens"], (m["ref"], m["out_width"], m["out_height"])
        bridge[m["sample_id"]] = bridge.get(m["sample_id"], 0) + tokens
    refused = [(w, h) for w, h in SIZES if max(w, h) / min(w, h) > 200]
    assert sum(m["status"] == "rejected" for m in media) == len(refused) == 2
    assert resized >= 5  # the shard holds resized pixels for the big images, and they still agree
    for w, h in refused:  # the processor refuses the same images
        assert _bridge_tokens(processor, _image((w, h), 1)) is None

    # per sample: the encoder's skips are vlmforge's drops, and a kept sample's sum is its visual_tokens
    statuses = set()
    for sample_id, row in samples.items():
        if n_images[sample_id] > preset["max_num_images"]:
            expected = "max_num_images"
        elif sample_id in collate_refused:
            expected = "token_count_error"
        elif sample_id in bridge and bridge[sample_id] > VISUAL_LIMIT:
            expected = "max_visual_tokens"
        else:
            expected = "ok" if sample_id in bridge else "media_error"
        got = row["status"] if row["status"] == "ok" else code_of(row["reason"])
        assert got == expected, (sample_id, row["reason"], bridge.get(sample_id))
        if got == "ok":
            assert row["visual_tokens"] == bridge[sample_id]
        statuses.add(got)
    assert statuses - {"token_count_error"} == {"ok", "max_num_images", "max_visual_tokens", "media_error"}
    assert not collate_refused or trainer == "bridge-qwen3-vl"  # factor 28 == qwen-vl-utils' 28: no change
    kept_squares = [n for n in (1, 2, 3, 4) if samples[f"squares-{n}"]["status"] == "ok"]
    assert 0 < len(kept_squares) < 4  # the limit falls between the square samples
