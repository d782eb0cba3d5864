"""Deterministic generator of a small Nemotron-Image-Training-v3 style sample release.

The repository may not ship data fetched from public repositories, so the demo and the end-to-end tests build
their input release with this generator instead. Every image and video is derived from the real photos and the
real animated clip that ship inside the scikit-image wheel (``skimage/data``); nothing is downloaded.

Layout written under ``dest`` (one folder per subset, one module per subset here)::

    photo_vqa/README.md, photo_vqa/photo_vqa.jsonl, photo_vqa/media/shard_000000.tar   (images inside the tar)
    multi_image/README.md, multi_image/multi_image.jsonl, multi_image/images/*          (loose images)
    video_qa/README.md, video_qa/video_qa.jsonl, video_qa/clips/*.mp4, video_qa/images/*
    bad_rows/README.md, bad_rows/bad_rows.jsonl, bad_rows/images/*                      (all bad input kinds)

The same call produces byte-identical files every time: tar headers are fixed (mtime 0, uid/gid 0,
mode 0o644, sorted members), Pillow writes no timestamps, PyAV encodes with ``threads=1`` and bit-exact
flags, and JSONL is written with explicit separators (:mod:`.images`, :mod:`.videos`, :mod:`.files`).
:mod:`.expected` says what the pipeline must make of every line.

Run ``python -m vlmforge.tasks.sample_release DEST [--overwrite]`` (:mod:`.sample_build`).
"""

from .sample_build import build_sample_release
from .shaped import build_shaped_release

__all__ = ["build_sample_release", "build_shaped_release"]
