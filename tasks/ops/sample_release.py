"""Deterministic generator of a small Nemotron-Image-Training-v3 style sample release.

The repository may not ship data fetched from public repositories, so the demo and the end-to-end tests build
their input release with this generator instead. Every image and video is derived from the real photos and the
real animated clip that ship inside the scikit-image wheel (``skimage/data``); nothing is downloaded.

Layout written under ``dest`` (one folder per subset)::

    photo_vqa/README.md, photo_vqa/photo_vqa.jsonl, photo_vqa/media/shard_000000.tar   (images inside the tar)
    multi_image/README.md, multi_image/multi_image.jsonl, multi_image/images/*          (loose images)
    video_qa/README.md, video_qa/video_qa.jsonl, video_qa/clips/*.mp4, video_qa/images/*
    bad_rows/README.md, bad_rows/bad_rows.jsonl, bad_rows/images/*                      (all bad input kinds)

The same call produces byte-identical files every time: tar headers are fixed (mtime 0, uid/gid 0,
mode 0o644, sorted members), Pillow writes no timestamps, PyAV encodes with ``threads=1`` and bit-exact
flags, and JSONL is written with explicit separators.

``EXPECTED`` describes the outcome the pipeline must reach for every physical line of every JSONL file
(1-based line numbers). ``n_images`` / ``n_videos`` count the image / video parts present in the record as
written (0 when the line does not parse into a record with a list of messages); for ``ok`` rows these are the
media the sample must carry. ``EXPECTED_MEDIA_ERRORS`` gives the detail after ``media_error: <ref>: `` for the
``media_error`` rows.

Run ``python -m vlmforge.tasks.ops.sample_release DEST [--overwrite]``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tarfile
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Final

import numpy as np
from PIL import Image, ImageSequence

__all__ = [
    "EXPECTED",
    "EXPECTED_MEDIA_ERRORS",
    "LARGE_IMAGE",
    "SUBSETS",
    "SampleRelease",
    "build_sample_release",
    "main",
    "skimage_data_dir",
]

SUBSETS: Final[tuple[str, ...]] = ("photo_vqa", "multi_image", "video_qa", "bad_rows")
LICENSES: Final[dict[str, str | None]] = {
    "photo_vqa": "CC-BY-4.0",
    "multi_image": "Apache-2.0",
    "video_qa": "CC-BY-SA-4.0",
    "bad_rows": None,  # README states terms that are not an SPDX id -> "unknown"
}
# (subset, path relative to the subset folder) of the image that exceeds the 12.8 MP default max_pixels.
LARGE_IMAGE: Final[tuple[str, str]] = ("multi_image", "images/coffee_27mp.jpg")
LARGE_SIZE: Final[tuple[int, int]] = (6000, 4500)

_JPEG_QUALITY: Final[int] = 85
_THUMB: Final[int] = 384  # longest side of the loose multi-image pictures (keeps the release small)
_JSON_SEPARATORS: Final[tuple[str, str]] = (", ", ": ")


@dataclass(frozen=True)
class SampleRelease:
    root: Path
    subsets: list[str]
    total_lines: int


# ----------------------------------------------------------------------------------------------------
# Expected outcome
# ----------------------------------------------------------------------------------------------------


def _ok(line: int, id_: str, n_images: int = 1, n_videos: int = 0) -> dict[str, Any]:
    return {
        "line": line,
        "id": id_,
        "status": "ok",
        "reason_prefix": None,
        "n_images": n_images,
        "n_videos": n_videos,
    }


def _rej(line: int, id_: str | None, reason: str, n_images: int = 0, n_videos: int = 0) -> dict[str, Any]:
    return {
        "line": line,
        "id": id_,
        "status": "rejected",
        "reason_prefix": reason,
        "n_images": n_images,
        "n_videos": n_videos,
    }


EXPECTED: Final[dict[str, list[dict[str, Any]]]] = {
    "photo_vqa": [
        _ok(1, "photo-0001"),  # docvqa style: question first, then image
        _ok(2, "photo-0002"),  # chartqa style: image first
        _ok(3, "photo-0003"),  # assistant content as a plain string
        _ok(4, "photo-0004"),  # system turn
        _ok(5, "photo-0005"),  # <think> in the answer
        _ok(6, "photo-0006"),  # RGBA PNG
        _ok(7, "photo-0007"),  # JPEG with EXIF orientation 6
        _ok(8, "photo-0008"),  # grayscale document scan
        _ok(9, "photo-0009"),  # multi-turn, image in the first turn
        _ok(10, "photo-0010"),  # large-ish photo (1411x1411)
    ],
    "multi_image": [
        _ok(1, "multi-0001", n_images=2),
        _ok(2, "multi-0002", n_images=3),
        _ok(3, "multi-0003", n_images=12),
        _ok(4, "multi-0004", n_images=1),  # 27 MP image, must be resized
        _ok(5, "multi-0005", n_images=2),  # images spread over two user turns
    ],
    "video_qa": [
        _ok(1, "video-0001", n_images=0, n_videos=1),
        _ok(2, "video-0002", n_images=0, n_videos=1),
        _ok(3, "video-0003", n_images=1, n_videos=1),  # a video and an image
    ],
    "bad_rows": [
        _ok(1, "good-0001"),
        _rej(2, None, "invalid_json"),  # truncated object
        _rej(3, None, "invalid_record"),  # JSON array instead of an object
        _rej(4, "bad-no-messages", "invalid_record"),  # missing field messages
        _rej(5, "bad-messages-type", "invalid_record"),  # messages is a string
        _rej(6, "bad-audio", "unsupported_part:audio"),
        _rej(7, "bad-missing-file", "missing_media", n_images=1),
        _rej(8, "bad-truncated-jpeg", "media_error", n_images=1),
        _rej(9, "bad-html-as-jpg", "media_error", n_images=1),
        _rej(10, "bad-zero-byte", "media_error", n_images=1),
        _rej(11, "bad-unsafe-ref", "unsafe_ref", n_images=1),
        _ok(12, "a.b.c"),  # valid; the shard key gets sanitised
        _rej(13, None, "empty_line"),
        _rej(14, "", "invalid_record", n_images=1),  # empty id
        _ok(15, "good-0002", n_images=2),
    ],
}

# (subset, line) -> detail that follows "media_error: <ref>: "
EXPECTED_MEDIA_ERRORS: Final[dict[tuple[str, int], str]] = {
    ("bad_rows", 8): "truncated",
    ("bad_rows", 9): "not_an_image",
    ("bad_rows", 10): "zero_size",
}


# ----------------------------------------------------------------------------------------------------
# Media helpers
# ----------------------------------------------------------------------------------------------------


def skimage_data_dir() -> Path:
    """The ``data`` folder of the installed scikit-image wheel (only files shipped in the wheel are read)."""
    import skimage

    return Path(os.path.dirname(skimage.__file__)) / "data"


def _load(name: str) -> Image.Image:
    with Image.open(skimage_data_dir() / name) as im:
        im.load()
        return im.copy()


def _jpeg_bytes(im: Image.Image, *, quality: int = _JPEG_QUALITY, exif: bytes | None = None) -> bytes:
    buf = io.BytesIO()
    rgb = im if im.mode in ("RGB", "L") else im.convert("RGB")
    if exif is None:
        rgb.save(buf, format="JPEG", quality=quality, optimize=False, progressive=False)
    else:
        rgb.save(buf, format="JPEG", quality=quality, optimize=False, progressive=False, exif=exif)
    return buf.getvalue()


def _png_bytes(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=False, compress_level=9)
    return buf.getvalue()


def _thumb(im: Image.Image, longest: int = _THUMB) -> Image.Image:
    w, h = im.size
    scale = longest / max(w, h)
    if scale >= 1:
        return im
    return im.resize((max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.LANCZOS)


def _rgba_astronaut() -> Image.Image:
    """astronaut.png with a soft circular alpha mask (a real RGBA PNG)."""
    im = _load("astronaut.png").convert("RGB")
    w, h = im.size
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    r = np.hypot(xx - w / 2, yy - h / 2) / (min(w, h) / 2)
    alpha = np.clip((1.15 - r) * 255 / 0.3, 0, 255).astype(np.uint8)
    out = im.convert("RGBA")
    out.putalpha(Image.fromarray(alpha, mode="L"))
    return out


def _exif_rotated_rocket() -> tuple[bytes, tuple[int, int]]:
    """rocket.jpg stored rotated with EXIF Orientation=6; returns (jpeg bytes, displayed size).

    Orientation 6 means "rotate 90 degrees clockwise to display", so the stored pixels are the upright photo
    rotated 90 degrees counter-clockwise: stored 427x640, displayed 640x427.
    """
    upright = _load("rocket.jpg").convert("RGB")
    stored = upright.transpose(Image.Transpose.ROTATE_90)
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation
    return _jpeg_bytes(stored, exif=exif.tobytes()), upright.size


def _large_coffee() -> bytes:
    """coffee.png cropped to 4:3 and upscaled with LANCZOS to 6000x4500 (27 MP)."""
    im = _load("coffee.png").convert("RGB")
    w, h = im.size  # 600x400
    cw = h * 4 // 3
    left = (w - cw) // 2
    im = im.crop((left, 0, left + cw, h)).resize(LARGE_SIZE, Image.Resampling.LANCZOS)
    return _jpeg_bytes(im, quality=85)


def _encode_mp4(path: Path, frames: list[Image.Image], fps: int) -> None:
    import av

    w, h = frames[0].size
    assert w % 2 == 0 and h % 2 == 0, "yuv420p needs even dimensions"
    with av.open(
        str(path),
        mode="w",
        format="mp4",
        container_options={"fflags": "+bitexact", "movflags": "+faststart"},
    ) as container:
        stream = container.add_stream("libx264", rate=Fraction(fps, 1))
        stream.width = w
        stream.height = h
        stream.pix_fmt = "yuv420p"
        cc = stream.codec_context
        cc.thread_count = 1
        cc.options = {
            "preset": "medium",
            "crf": "26",
            "tune": "animation",
            "x264-params": "threads=1:lookahead-threads=1:sliced-threads=0",
            "flags": "+bitexact",
        }
        for i, im in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.asarray(im.convert("RGB")), format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def _gif_frames(scale: int = 12, loops: int = 3) -> list[Image.Image]:
    """Frames of the real clip no_time_for_that_tiny.gif (14x25), upscaled with NEAREST to even dimensions."""
    with Image.open(skimage_data_dir() / "no_time_for_that_tiny.gif") as gif:
        base = [f.convert("RGB") for f in ImageSequence.Iterator(gif)]
    w, h = base[0].size
    size = (w * scale + (w * scale) % 2, h * scale + (h * scale) % 2)
    up = [f.resize(size, Image.Resampling.NEAREST) for f in base]
    return up * loops


def _pan_frames(n: int = 45, size: tuple[int, int] = (320, 240)) -> list[Image.Image]:
    """A slow diagonal pan across hubble_deep_field.jpg (1000x872)."""
    im = _load("hubble_deep_field.jpg").convert("RGB")
    w, h = im.size
    cw, ch = size
    out = []
    for i in range(n):
        t = i / (n - 1)
        x = round(t * (w - cw))
        y = round(t * (h - ch) * 0.5)
        out.append(im.crop((x, y, x + cw, y + ch)))
    return out


# ----------------------------------------------------------------------------------------------------
# Writers
# ----------------------------------------------------------------------------------------------------


def _write_tar(path: Path, members: dict[str, bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name in sorted(members):
            data = members[name]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            tf.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())


def _write_files(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in sorted(files.items()):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def _dump(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False, separators=_JSON_SEPARATORS)


def _write_jsonl(path: Path, lines: list[str]) -> int:
    """Each entry is one physical line (already serialised); returns the number of lines."""
    path.write_bytes("".join(line + "\n" for line in lines).encode("utf-8"))
    return len(lines)


def _readme(subset: str, title: str, source: str, url: str, layout: list[str], license_line: str) -> bytes:
    text = "\n".join(
        [
            f"# {title}",
            "",
            f"Subset `{subset}` of the vlmforge sample release "
            "(generated by `vlmforge.tasks.ops.sample_release`).",
            "",
            "## Upstream source",
            "",
            source,
            f"Source: {url}",
            "",
            "## Expected local layout",
            "",
            "```",
            *layout,
            "```",
            "",
            "## License",
            "",
            license_line,
            "",
        ]
    )
    return text.encode("utf-8")


def _img(ref: str) -> dict[str, str]:
    return {"type": "image", "image": ref}


def _vid(ref: str) -> dict[str, str]:
    return {"type": "video", "video": ref}


def _txt(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def _user(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content)}


def _asst(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


# ----------------------------------------------------------------------------------------------------
# Subsets
# ----------------------------------------------------------------------------------------------------


def _build_photo_vqa(root: Path) -> int:
    sub = root / "photo_vqa"
    rocket_exif, _ = _exif_rotated_rocket()
    members = {
        "images/astronaut.jpg": _jpeg_bytes(_load("astronaut.png")),
        "images/chelsea.jpg": _jpeg_bytes(_load("chelsea.png")),
        "images/coffee.jpg": _jpeg_bytes(_load("coffee.png")),
        "images/rocket.jpg": _jpeg_bytes(_load("rocket.jpg")),
        "images/hubble_deep_field.jpg": _jpeg_bytes(_load("hubble_deep_field.jpg")),
        "images/astronaut_rgba.png": _png_bytes(_rgba_astronaut()),
        "images/rocket_exif6.jpg": rocket_exif,
        "images/page.png": _png_bytes(_load("page.png")),
        "images/motorcycle_left.jpg": _jpeg_bytes(_load("motorcycle_left.png")),
        "images/retina.jpg": _jpeg_bytes(_load("retina.jpg")),
    }
    _write_tar(sub / "media" / "shard_000000.tar", members)
    rows = [
        {
            "id": "photo-0001",
            "messages": [
                {
                    "role": "user",
                    "content": ["What is the person in the picture wearing?", _img("images/astronaut.jpg")],
                },
                _asst([_txt("A white spacesuit with mission patches.")]),
            ],
        },
        {
            "id": "photo-0002",
            "messages": [
                _user(_img("images/chelsea.jpg"), _txt("Which animal is shown? Answer with a single word.")),
                _asst([_txt("Cat")]),
            ],
        },
        {
            "id": "photo-0003",
            "messages": [
                _user(_img("images/coffee.jpg"), "What drink is in the cup?"),
                _asst("Coffee, served in a cup on a saucer."),
            ],
        },
        {
            "id": "photo-0004",
            "messages": [
                {"role": "system", "content": "You are a careful visual assistant. Answer briefly."},
                _user(_txt("What kind of vehicle is this?"), _img("images/rocket.jpg")),
                _asst([_txt("A launch vehicle (rocket) on its pad.")]),
            ],
        },
        {
            "id": "photo-0005",
            "messages": [
                _user(_img("images/hubble_deep_field.jpg"), _txt("Are most objects here stars or galaxies?")),
                _asst(
                    "<think>The frame is a deep-field exposure; the extended, fuzzy shapes are distant "
                    "galaxies and only a few point sources with diffraction spikes are foreground stars."
                    "</think>Galaxies."
                ),
            ],
        },
        {
            "id": "photo-0006",
            "messages": [
                _user(_txt("Describe the shape of the visible region."), _img("images/astronaut_rgba.png")),
                _asst([_txt("A soft-edged circle around the astronaut's portrait; the corners are clear.")]),
            ],
        },
        {
            "id": "photo-0007",
            "messages": [
                _user(_img("images/rocket_exif6.jpg"), _txt("Is the rocket standing upright?")),
                _asst([_txt("Yes, once the EXIF orientation is applied the rocket stands upright.")]),
            ],
        },
        {
            "id": "photo-0008",
            "messages": [
                _user("Is this a photo or a scanned text page?", _img("images/page.png")),
                _asst([_txt("A scanned page of text.")]),
            ],
        },
        {
            "id": "photo-0009",
            "messages": [
                _user(_img("images/motorcycle_left.jpg"), _txt("What vehicle is in the image?")),
                _asst([_txt("A motorcycle.")]),
                _user(_txt("What colour is it mostly?")),
                _asst([_txt("Mostly red and black.")]),
            ],
        },
        {
            "id": "photo-0010",
            "messages": [
                _user(_txt("What kind of medical image is this?"), _img("images/retina.jpg")),
                _asst([_txt("A fundus photograph of the retina.")]),
            ],
        },
    ]
    _write_files(
        root,
        {
            "photo_vqa/README.md": _readme(
                "photo_vqa",
                "Photo VQA (sample)",
                "Single-image question answering over photos from the scikit-image sample data; the "
                "images are redistributed inside the release as a tar shard.",
                "https://github.com/scikit-image/scikit-image/tree/main/skimage/data",
                [
                    "photo_vqa/",
                    "  photo_vqa.jsonl",
                    "  media/shard_000000.tar   # members images/<name>.jpg|png",
                ],
                "License: CC-BY-4.0",
            )
        },
    )
    return _write_jsonl(sub / "photo_vqa.jsonl", [_dump(r) for r in rows])


_MULTI_SOURCES: Final[list[tuple[str, str]]] = [
    ("astronaut.png", "images/astronaut.jpg"),
    ("chelsea.png", "images/chelsea.jpg"),
    ("coffee.png", "images/coffee.jpg"),
    ("rocket.jpg", "images/rocket.jpg"),
    ("hubble_deep_field.jpg", "images/hubble_deep_field.jpg"),
    ("retina.jpg", "images/retina.jpg"),
    ("motorcycle_left.png", "images/motorcycle_left.jpg"),
    ("grass.png", "images/grass.png"),
    ("brick.png", "images/brick.png"),
    ("camera.png", "images/camera.png"),
    ("text.png", "images/text.png"),
    ("coins.png", "images/coins.png"),
]


def _build_multi_image(root: Path) -> int:
    sub = root / "multi_image"
    files: dict[str, bytes] = {}
    for src, ref in _MULTI_SOURCES:
        im = _thumb(_load(src))
        files[f"multi_image/{ref}"] = _png_bytes(im) if ref.endswith(".png") else _jpeg_bytes(im)
    files[f"multi_image/{LARGE_IMAGE[1]}"] = _large_coffee()
    files["multi_image/README.md"] = _readme(
        "multi_image",
        "Multi-image reasoning (sample)",
        "Questions over 1 to 12 images per sample built from the scikit-image sample data; images are "
        "expected as loose files next to the JSONL.",
        "https://github.com/scikit-image/scikit-image/tree/main/skimage/data",
        ["multi_image/", "  multi_image.jsonl", "  images/*.jpg, images/*.png"],
        "License: Apache-2.0",
    )
    _write_files(root, files)
    refs = [ref for _, ref in _MULTI_SOURCES]
    twelve: list[Any] = [_txt("Here are twelve pictures.")]
    for i, ref in enumerate(refs, start=1):
        twelve += [_txt(f"Image {i}:"), _img(ref)]
    twelve.append(_txt("How many of them are grayscale textures or scans?"))
    rows = [
        {
            "id": "multi-0001",
            "messages": [
                _user(
                    _img("images/chelsea.jpg"),
                    _img("images/astronaut.jpg"),
                    _txt("Which image shows an animal?"),
                ),
                _asst([_txt("The first image shows a cat.")]),
            ],
        },
        {
            "id": "multi-0002",
            "messages": [
                _user(
                    _txt("Compare these textures:"),
                    _img("images/grass.png"),
                    _img("images/brick.png"),
                    _img("images/coins.png"),
                    _txt("Which one contains round objects?"),
                ),
                _asst("The third one: it shows coins."),
            ],
        },
        {
            "id": "multi-0003",
            "messages": [_user(*twelve), _asst([_txt("Five: grass, brick, camera, text, coins.")])],
        },
        {
            "id": "multi-0004",
            "messages": [
                _user(_img(LARGE_IMAGE[1]), _txt("What is on the table?")),
                _asst([_txt("A cup of coffee on a saucer.")]),
            ],
        },
        {
            "id": "multi-0005",
            "messages": [
                _user(_img("images/rocket.jpg"), _txt("What is this?")),
                _asst([_txt("A rocket on a launch pad.")]),
                _user(_txt("And this one?"), _img("images/hubble_deep_field.jpg")),
                _asst([_txt("A deep-field telescope image full of galaxies.")]),
            ],
        },
    ]
    return _write_jsonl(sub / "multi_image.jsonl", [_dump(r) for r in rows])


def _build_video_qa(root: Path) -> int:
    sub = root / "video_qa"
    (sub / "clips").mkdir(parents=True, exist_ok=True)
    _encode_mp4(sub / "clips" / "no_time_for_that.mp4", _gif_frames(), fps=15)
    _encode_mp4(sub / "clips" / "hubble_pan.mp4", _pan_frames(), fps=15)
    _write_files(
        root,
        {
            "video_qa/images/chelsea.jpg": _jpeg_bytes(_thumb(_load("chelsea.png"))),
            "video_qa/README.md": _readme(
                "video_qa",
                "Video QA (sample)",
                "Short clips encoded to H.264 MP4 from the animated GIF and a photo in the scikit-image "
                "sample data.",
                "https://github.com/scikit-image/scikit-image/tree/main/skimage/data",
                ["video_qa/", "  video_qa.jsonl", "  clips/*.mp4", "  images/*.jpg"],
                "License: CC-BY-SA-4.0",
            ),
        },
    )
    rows = [
        {
            "id": "video-0001",
            "messages": [
                _user(_vid("clips/no_time_for_that.mp4"), _txt("Describe what happens in the clip.")),
                _asst([_txt("A short looping animation of a character reacting.")]),
            ],
        },
        {
            "id": "video-0002",
            "messages": [
                _user(_txt("Which direction does the camera move?"), _vid("clips/hubble_pan.mp4")),
                _asst("It pans from the top-left towards the right across a field of galaxies."),
            ],
        },
        {
            "id": "video-0003",
            "messages": [
                _user(
                    _vid("clips/hubble_pan.mp4"),
                    _img("images/chelsea.jpg"),
                    _txt("Does the image show anything that appears in the video?"),
                ),
                _asst([_txt("No. The video shows galaxies; the image shows a cat.")]),
            ],
        },
    ]
    return _write_jsonl(sub / "video_qa.jsonl", [_dump(r) for r in rows])


_HTML_ERROR_PAGE: Final[bytes] = (
    b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n"
    b"<body><h1>Not Found</h1><p>The requested URL was not found on this server.</p></body></html>\n"
)


def _build_bad_rows(root: Path) -> int:
    sub = root / "bad_rows"
    good_jpeg = _jpeg_bytes(_thumb(_load("chelsea.png")))
    full_jpeg = _jpeg_bytes(_load("coffee.png"))
    _write_files(
        root,
        {
            "bad_rows/images/chelsea.jpg": good_jpeg,
            "bad_rows/images/camera.png": _png_bytes(_thumb(_load("camera.png"))),
            "bad_rows/images/truncated.jpg": full_jpeg[: len(full_jpeg) // 2],
            "bad_rows/images/error_page.jpg": _HTML_ERROR_PAGE,
            "bad_rows/images/empty.png": b"",
            "bad_rows/README.md": _readme(
                "bad_rows",
                "Bad rows (sample)",
                "Hand-made rows that exercise every rejection path of the pipeline, plus a few good rows.",
                "https://example.org/upstream/bad_rows",
                ["bad_rows/", "  bad_rows.jsonl", "  images/*"],
                "Terms: research use only, see upstream",
            ),
        },
    )

    def q(ref: str, text: str = "What is shown?") -> list[dict[str, Any]]:
        return [_user(_img(ref), _txt(text)), _asst([_txt("Something.")])]

    lines = [
        _dump({"id": "good-0001", "messages": q("images/chelsea.jpg", "What animal is this?")}),
        '{"id": "bad-json", "messages": [{"role": "user", "content": "unterminated',
        _dump([{"id": "array-0001", "messages": q("images/chelsea.jpg")}]),
        _dump({"id": "bad-no-messages", "conversations": q("images/chelsea.jpg")}),
        _dump({"id": "bad-messages-type", "messages": "What is shown in images/chelsea.jpg?"}),
        _dump(
            {
                "id": "bad-audio",
                "messages": [
                    _user({"type": "audio", "audio": "clips/meow.wav"}, _txt("What do you hear?")),
                    _asst([_txt("A cat.")]),
                ],
            }
        ),
        _dump({"id": "bad-missing-file", "messages": q("images/does_not_exist.jpg")}),
        _dump({"id": "bad-truncated-jpeg", "messages": q("images/truncated.jpg")}),
        _dump({"id": "bad-html-as-jpg", "messages": q("images/error_page.jpg")}),
        _dump({"id": "bad-zero-byte", "messages": q("images/empty.png")}),
        _dump({"id": "bad-unsafe-ref", "messages": q("../../etc/passwd")}),
        _dump({"id": "a.b.c", "messages": q("images/chelsea.jpg", "Dotted id: is this a cat?")}),
        "",
        _dump({"id": "", "messages": q("images/chelsea.jpg")}),
        _dump(
            {
                "id": "good-0002",
                "messages": [
                    _user(
                        _img("images/chelsea.jpg"), _img("images/camera.png"), _txt("Which one is grayscale?")
                    ),
                    _asst("The second one."),
                ],
            }
        ),
    ]
    return _write_jsonl(sub / "bad_rows.jsonl", lines)


# ----------------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------------


def build_sample_release(dest: Path, *, overwrite: bool = False) -> SampleRelease:
    """Write the sample release into ``dest`` (created if missing).

    Raises ``FileExistsError`` when ``dest`` exists and is not empty, unless ``overwrite`` is set, in which
    case ``dest`` is removed first.
    """
    dest = Path(dest)
    if dest.exists():
        if not dest.is_dir():
            raise FileExistsError(f"{dest} exists and is not a directory")
        if any(dest.iterdir()):
            if not overwrite:
                raise FileExistsError(f"{dest} is not empty (pass overwrite=True to replace it)")
            shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)
    total = 0
    total += _build_photo_vqa(dest)
    total += _build_multi_image(dest)
    total += _build_video_qa(dest)
    total += _build_bad_rows(dest)
    return SampleRelease(root=dest, subsets=list(SUBSETS), total_lines=total)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vlmforge.tasks.ops.sample_release",
        description="Write the deterministic vlmforge sample release.",
    )
    parser.add_argument("dest", type=Path, help="output folder (one folder per subset is written inside)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty DEST")
    args = parser.parse_args(argv)
    try:
        rel = build_sample_release(args.dest, overwrite=args.overwrite)
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {rel.root}: subsets={','.join(rel.subsets)} lines={rel.total_lines}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
