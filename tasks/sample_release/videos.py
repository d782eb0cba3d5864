"""The clips of the sample release: H.264 MP4 encoded bit-exactly (one thread, ``+bitexact``) from the
animated GIF and a pan across a photo in the scikit-image wheel."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
from PIL import Image, ImageSequence

from .images import load, skimage_data_dir

__all__ = ["encode_mp4", "gif_frames", "pan_frames"]


def encode_mp4(path: Path, frames: list[Image.Image], fps: int) -> None:
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


def gif_frames(scale: int = 12, loops: int = 3) -> list[Image.Image]:
    """Frames of the real clip no_time_for_that_tiny.gif (14x25), upscaled with NEAREST to even dimensions."""
    with Image.open(skimage_data_dir() / "no_time_for_that_tiny.gif") as gif:
        base = [f.convert("RGB") for f in ImageSequence.Iterator(gif)]
    w, h = base[0].size
    size = (w * scale + (w * scale) % 2, h * scale + (h * scale) % 2)
    up = [f.resize(size, Image.Resampling.NEAREST) for f in base]
    return up * loops


def pan_frames(n: int = 45, size: tuple[int, int] = (320, 240)) -> list[Image.Image]:
    """A slow diagonal pan across hubble_deep_field.jpg (1000x872)."""
    im = load("hubble_deep_field.jpg").convert("RGB")
    w, h = im.size
    cw, ch = size
    out = []
    for i in range(n):
        t = i / (n - 1)
        x = round(t * (w - cw))
        y = round(t * (h - ch) * 0.5)
        out.append(im.crop((x, y, x + cw, y + ch)))
    return out
