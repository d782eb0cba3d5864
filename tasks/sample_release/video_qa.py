"""Subset ``video_qa``: questions over MP4 clips, one sample with a clip and an image."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .chat import asst, dump, img, txt, user, vid
from .files import readme, write_files, write_jsonl
from .images import jpeg_bytes, load, thumb
from .videos import encode_mp4, gif_frames, pan_frames

__all__ = ["build"]


def build(root: Path) -> int:
    clips = root / "video_qa" / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    encode_mp4(clips / "no_time_for_that.mp4", gif_frames(), fps=15)
    encode_mp4(clips / "hubble_pan.mp4", pan_frames(), fps=15)
    write_files(root, _files())
    return write_jsonl(root / "video_qa" / "video_qa.jsonl", [dump(r) for r in _rows()])


def _files() -> dict[str, bytes]:
    return {
        "video_qa/images/chelsea.jpg": jpeg_bytes(thumb(load("chelsea.png"))),
        "video_qa/README.md": readme(
            "video_qa",
            "Video QA (sample)",
            "Short clips encoded to H.264 MP4 from the animated GIF and a photo in the scikit-image "
            "sample data.",
            "https://github.com/scikit-image/scikit-image/tree/main/skimage/data",
            ["video_qa/", "  video_qa.jsonl", "  clips/*.mp4", "  images/*.jpg"],
            "License: CC-BY-SA-4.0",
        ),
    }


def _rows() -> list[dict[str, Any]]:
    return [
        {
            "id": "video-0001",
            "messages": [
                user(vid("clips/no_time_for_that.mp4"), txt("Describe what happens in the clip.")),
                asst([txt("A short looping animation of a character reacting.")]),
            ],
        },
        {
            "id": "video-0002",
            "messages": [
                user(txt("Which direction does the camera move?"), vid("clips/hubble_pan.mp4")),
                asst("It pans from the top-left towards the right across a field of galaxies."),
            ],
        },
        {
            "id": "video-0003",
            "messages": [
                user(
                    vid("clips/hubble_pan.mp4"),
                    img("images/chelsea.jpg"),
                    txt("Does the image show anything that appears in the video?"),
                ),
                asst([txt("No. The video shows galaxies; the image shows a cat.")]),
            ],
        },
    ]
