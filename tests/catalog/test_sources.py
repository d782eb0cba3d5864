"""Source layouts (tasks/staging/): small replicas of Mantis-Instruct, InfoVQA and LLaVA-Video-178K
built from real images and a real video (scikit-image's data, encoded with PyAV), with the real field names,
staged and parsed; and the encoder balance of ``plan --balance visual``."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from vlmforge.schemas.records import Record, Reject
from vlmforge.tasks.ops.plan.balance import balance_visual, encoder_load_ratio
from vlmforge.tasks.ops.plan.ffd import first_fit_decreasing
from vlmforge.tasks.parse.jsonl_batch import parse_batch
from vlmforge.tasks.staging.stage import list_configs, stage_source
from vlmforge.tasks.staging.store_refs import is_store_ref, read_store_ref
from vlmforge.tasks.storage import ContentStore, sha256_bytes

APACHE = "---\nlicense: apache-2.0\n---\n# {name}\n\nA replica of the published layout.\n"
_IMAGES = ("astronaut.png", "camera.png", "coffee.png", "chelsea.png", "rocket.jpg", "coins.png", "moon.png")


def _image(name: str, size: tuple[int, int] = (96, 72), fmt: str = "JPEG") -> bytes:
    from vlmforge.tasks.sample_release.images import load as _load

    im = _load(name).convert("RGB").resize(size, Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


def _video(path: Path, n: int, offset: int = 0) -> bytes:
    from vlmforge.tasks.sample_release.videos import encode_mp4 as _encode_mp4
    from vlmforge.tasks.sample_release.videos import pan_frames as _pan_frames

    frames = _pan_frames(n + offset, size=(160, 120))[offset:]
    _encode_mp4(path, frames, fps=10)
    return path.read_bytes()


# ---------------------------------------------------------------------------------------------- replicas

MANTIS_ROWS = 5  # ok 2 images, ok 12 images (one embedded), placeholder mismatch, missing member, ok


def build_mantis(root: Path) -> Path:
    """TIGER-Lab/Mantis-Instruct: <config>/train-00000-of-00001.parquet + <config>/train_images.zip."""
    cfg = root / "nlvr2"
    cfg.mkdir(parents=True)
    (root / "README.md").write_text(APACHE.format(name="Mantis-Instruct"))
    members: dict[str, bytes] = {}
    for i, name in enumerate(_IMAGES):
        members[f"train_images/nlvr2_{i}.jpg"] = _image(name, (80 + 8 * i, 64))
    members["train_images/unreferenced.png"] = _image("coffee.png", (600, 400), "PNG")  # never read
    with zipfile.ZipFile(cfg / "train_images.zip", "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)

    def img(i: int) -> dict[str, Any]:
        return {"bytes": None, "path": f"nlvr2_{i}.jpg"}  # as in the rows: relative to the unzipped folder

    def conv(text: str, answer: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]

    twelve = [img(i % 7) for i in range(11)] + [{"bytes": _image("chelsea.png", (64, 48)), "path": "cat.jpg"}]
    rows = [
        {
            "id": "nlvr2_0",
            "images": [img(0), img(1)],
            "conversation": conv("<image><image>Same scene?", "No"),
        },
        {"id": "nlvr2_1", "images": twelve, "conversation": conv("<image>" * 12 + "Which is the cat?", "12")},
        {"id": "nlvr2_2", "images": [img(2), img(3)], "conversation": conv("<image> one placeholder", "x")},
        {
            "id": "nlvr2_3",
            "images": [{"bytes": None, "path": "gone.jpg"}],
            "conversation": conv("<image>?", "y"),
        },
        {"id": "nlvr2_4", "images": [img(4)], "conversation": conv("Describe <image> briefly.", "A rocket.")},
    ]
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("images", pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))),
            ("conversation", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), cfg / "train-00000-of-00001.parquet")
    return root


INFOVQA_ROWS = 4  # tall infographic, photo, no image (placeholder mismatch), truncated JPEG


def build_infovqa(root: Path) -> Path:
    """Ahren09/InfoVQA: data/<split>-0000N-of-0000M.parquet with the image bytes in each row."""
    data = root / "data"
    data.mkdir(parents=True)
    (root / "README.md").write_text("# InfoVQA\n\nInfographics VQA, images embedded in the rows.\n")
    from vlmforge.tasks.sample_release.images import load as _load

    tiles = [
        _load(n).convert("RGB").resize((400, 300)) for n in ("astronaut.png", "coffee.png", "chelsea.png")
    ]
    tall = Image.new("RGB", (400, 300 * 8))
    for k in range(8):
        tall.paste(tiles[k % 3], (0, 300 * k))
    buf = io.BytesIO()
    tall.save(buf, "PNG")
    photo = _image("rocket.jpg", (320, 480))
    rows = [
        {"questionId": 101, "question": "What share is shown?", "answer": "42%",
         "image": {"bytes": buf.getvalue(), "path": "infographic_101.png"}},
        {"questionId": 102, "question": "What flies?", "answer": "a rocket",
         "image": {"bytes": photo, "path": None}},
        {"questionId": 103, "question": "No image here?", "answer": "none", "image": None},
        {"questionId": 104, "question": "Cut short?", "answer": "?",
         "image": {"bytes": photo[: len(photo) // 2], "path": "cut.jpg"}},
    ]  # fmt: skip
    schema = pa.schema(
        [
            ("questionId", pa.int64()),
            ("question", pa.string()),
            ("answer", pa.string()),
            ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
        ]
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), data / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(rows[1:2], schema=schema), data / "validation-00000-of-00001.parquet")
    return root


LLAVA_VIDEO_ROWS = 4  # ok (tar 1), ok (tar 2), missing video, two placeholders for one video
LLAVA_CONFIG = "0_30_s_academic_v0_1"


def build_llava_video(root: Path, tmp: Path) -> Path:
    """lmms-lab/LLaVA-Video-178K: <config>/<config>_*_qa_processed.json + <config>_videos_N.tar.gz."""
    cfg = root / LLAVA_CONFIG
    cfg.mkdir(parents=True)
    (root / "README.md").write_text(APACHE.format(name="LLaVA-Video-178K"))
    tmp.mkdir(parents=True, exist_ok=True)
    vids = {
        "academic_source/activitynet/v_a.mp4": _video(tmp / "a.mp4", 20),
        "academic_source/activitynet/v_unref.mp4": _video(tmp / "u.mp4", 12, 5),
        "academic_source/nextqa/v_b.mp4": _video(tmp / "b.mp4", 16, 10),
    }
    for k, names in enumerate((list(vids)[:2], list(vids)[2:]), 1):
        with tarfile.open(cfg / f"{LLAVA_CONFIG}_videos_{k}.tar.gz", "w:gz") as tf:
            for name in names:
                info = tarfile.TarInfo(name)
                info.size = len(vids[name])
                tf.addfile(info, io.BytesIO(vids[name]))

    def rec(i: int, video: str, question: str) -> dict[str, Any]:
        return {
            "id": f"v_{i}",
            "data_source": "activitynet",
            "video": video,
            "conversations": [
                {"from": "human", "value": question},
                {"from": "gpt", "value": "A slow pan across a field of galaxies."},
            ],
        }

    rows = [
        rec(0, "academic_source/activitynet/v_a.mp4", "<image>\nWhat happens in the video?"),
        rec(1, "academic_source/nextqa/v_b.mp4", "<image>\nDescribe the motion."),
        rec(2, "academic_source/activitynet/v_missing.mp4", "<image>\nAnd here?"),
        rec(3, "academic_source/activitynet/v_a.mp4", "<image>\n<image>\nTwo placeholders, one video."),
    ]
    (cfg / f"{LLAVA_CONFIG.replace('_v0_1', '')}_oe_v0_1_qa_processed.json").write_text(json.dumps(rows))
    return root


# ------------------------------------------------------------------------------------------------ tests


def _staged_lines(out: Path, fmt: str, subset: str) -> list[bytes]:
    return (out / "staging" / fmt / subset / f"{subset}.jsonl").read_bytes().splitlines(keepends=True)


def _parse(lines: list[bytes]) -> list[Record | Reject]:
    return parse_batch(b"".join(lines), 1, subset="s")


def test_mantis_reads_only_referenced_zip_members_and_keeps_every_row(tmp_path: Path) -> None:
    release = build_mantis(tmp_path / "mantis")
    out, store = tmp_path / "out", tmp_path / "out" / "store"
    assert list_configs(str(release), "mantis") == ["nlvr2"]
    staged = stage_source(str(release), "mantis", str(out), str(store), configs=["nlvr2"])
    (st,) = staged.stats
    assert staged.subsets == ["nlvr2"] and st.rows == MANTIS_ROWS and st.embedded == 1 and st.unresolved == 1
    zip_size = (release / "nlvr2" / "train_images.zip").stat().st_size
    assert 0 < st.archive_bytes_read < zip_size - 50_000  # the unreferenced PNG was never read
    lines = _staged_lines(out, "mantis", "nlvr2")
    assert len(lines) == MANTIS_ROWS
    items = _parse(lines)
    assert [type(i).__name__ for i in items] == ["Record", "Record", "Reject", "Record", "Record"]
    assert isinstance(items[2], Reject) and items[2].reason.startswith("placeholder_mismatch")
    twelve = items[1]
    assert isinstance(twelve, Record) and len(twelve.media) == 12
    content = ContentStore(str(store))
    for m in twelve.media:
        assert is_store_ref(m.ref) and read_store_ref(content, m.ref) is not None
    with zipfile.ZipFile(release / "nlvr2" / "train_images.zip") as zf:
        assert read_store_ref(content, twelve.media[0].ref) == zf.read("train_images/nlvr2_0.jpg")
    missing = items[3]
    assert isinstance(missing, Record) and missing.media[0].ref == "gone.jpg"  # the batch reports it missing
    assert (out / "staging" / "mantis" / "nlvr2" / "README.md").read_text().startswith("---\nlicense: apache")


def test_infovqa_embedded_bytes_go_to_the_store_and_an_imageless_row_is_a_placeholder_reject(
    tmp_path: Path,
) -> None:
    release = build_infovqa(tmp_path / "infovqa")
    out, store = tmp_path / "out", tmp_path / "out" / "store"
    assert list_configs(str(release), "infovqa") == ["train", "validation"]
    staged = stage_source(str(release), "infovqa", str(out), str(store), configs=["train"])
    assert staged.subsets == ["infovqa_train"]
    lines = _staged_lines(out, "infovqa", "infovqa_train")
    assert len(lines) == INFOVQA_ROWS
    first = json.loads(lines[0])
    assert first["id"] == "101" and first["conversations"][1]["value"] == "42%"
    items = _parse(lines)
    assert isinstance(items[2], Reject) and "placeholder_mismatch" in items[2].reason
    ok = items[0]
    assert isinstance(ok, Record) and ok.media[0].ref.endswith("/infographic_101.png")
    data = read_store_ref(ContentStore(str(store)), ok.media[0].ref)
    assert data is not None and Image.open(io.BytesIO(data)).size == (400, 2400)
    assert staged.stats[0].embedded == 3


def test_llava_video_streams_each_tar_once_keeps_only_referenced_members_and_restages_nothing(
    tmp_path: Path,
) -> None:
    release = build_llava_video(tmp_path / "llava", tmp_path / "videos")
    out, store = tmp_path / "out", tmp_path / "out" / "store"
    staged = stage_source(str(release), "llava_video", str(out), str(store))
    (st,) = staged.stats
    assert staged.subsets == [LLAVA_CONFIG]
    assert st.archives_streamed == 2 and st.archive_members == 2 and st.unresolved == 1
    unref = (tmp_path / "videos" / "u.mp4").read_bytes()
    assert not ContentStore(str(store)).has(sha256_bytes(unref))
    lines = _staged_lines(out, "llava_video", LLAVA_CONFIG)
    items = _parse(lines)
    assert len(items) == LLAVA_VIDEO_ROWS
    a = items[0]
    assert isinstance(a, Record) and [m.kind for m in a.media] == ["video"] and is_store_ref(a.media[0].ref)
    assert isinstance(items[3], Reject) and items[3].reason.startswith("placeholder_mismatch")
    again = stage_source(str(release), "llava_video", str(out), str(store))
    assert again.stats[0].skipped and again.stats[0].archives_streamed == 0
    assert _staged_lines(out, "llava_video", LLAVA_CONFIG) == lines


def test_unknown_config_is_named() -> None:
    from vlmforge.tasks.errors import ReleaseError

    with pytest.raises(ReleaseError, match="not found"):
        stage_source(
            str(Path(__file__).parent), "mantis", "/tmp/nowhere", "/tmp/nowhere/store", configs=["x"]
        )


def test_visual_balance_evens_the_encoder_load_of_each_step() -> None:
    rng = np.random.default_rng(7)
    n, seq_len, dp = 400, 4096, 4
    visual = np.where(rng.random(n) < 0.3, rng.integers(800, 3000, n), rng.integers(0, 200, n))
    tokens = visual + rng.integers(50, 600, n)
    packs = first_fit_decreasing(tokens, seq_len)
    before = np.bincount(packs, weights=visual)
    new, step, rank, swaps = balance_visual(tokens, visual, packs, seq_len, dp)
    after = np.bincount(new, weights=visual)
    used = np.bincount(new, weights=tokens)
    assert used.max() <= seq_len and after.size == before.size  # same packs, all fit, ids dense
    assert (new == step * dp + rank).all()
    b_mean, _, steps = encoder_load_ratio(before, dp)
    a_mean, a_max, _ = encoder_load_ratio(after, dp)
    assert steps == before.size // dp and a_mean < b_mean and a_mean < 1.1 and a_max < 1.5, (b_mean, a_mean)
