"""Would libjpeg-turbo's M/8 DCT scaling make a fast path for the JPEGs the media step decodes whole?

    .venv/bin/python benchmarks/bench_fast_decode.py --images 100

Pillow's ``draft`` scales a JPEG's decode by 1/2, 1/4 or 1/8 only, so a JPEG shrunk by less than 2x (the
corpus's ~1.9 MP class at ``--max-pixels 1048576``) is decoded at full size. libjpeg-turbo (simplejpeg 1.9
bundles it) also scales by M/8. For every corpus JPEG over ``max_pixels`` this measures, one thread, best
of three: the exact path (Pillow decode, DCT-scaled by ``draft`` where it can, then vlmforge's bicubic
``resize`` to the model's size) against the fast one (simplejpeg decode at the smallest M/8 scale still at
least the model's size, then the same resize): CPU per image, each step alone, PSNR and the largest pixel
error against the exact path. It also checks that simplejpeg decoding at Pillow's own draft scale gives
Pillow's pixels exactly, and at what CPU (the decode alone, best of three: the media step's own use of it,
``tasks/media/jpeg_fast_decode``, is measured as it runs by ``bench_per_image.py``). The corpus is
``bench_run.py``'s (made under ``--cache``).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_run  # noqa: E402  (the corpus)


def _best(fn: Callable[[], Any], reps: int = 3) -> tuple[float, Any]:
    """(least thread CPU of ``reps`` calls in ms, the last result)."""
    best, out = float("inf"), None
    for _ in range(reps):
        c0 = time.thread_time()
        out = fn()
        best = min(best, time.thread_time() - c0)
    return best * 1e3, out


def _psnr(a: Any, b: Any) -> float:
    import numpy as np

    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return 99.0 if mse == 0 else 10 * float(np.log10(255**2 / mse))


def measure(files: list[bytes]) -> dict[str, list[float]]:
    import numpy as np
    import simplejpeg
    from PIL import Image

    from vlmforge.schemas.config import RunConfig
    from vlmforge.tasks.geometry import geometry_of
    from vlmforge.tasks.media.resize import resize

    cfg = RunConfig.of(release="unused", out="unused", max_pixels=1_048_576)
    geometry = geometry_of(cfg.tokens, cfg.media)
    bicubic = Image.Resampling.BICUBIC
    got: dict[str, list[float]] = {}

    def add(key: str, value: float) -> None:
        got.setdefault(key, []).append(value)

    for data in files:
        img = Image.open(io.BytesIO(data))
        w, h = img.size
        t_h, t_w = geometry.stored_image_size(h, w)
        if img.mode != "RGB" or w * h <= geometry.bounds.image_max_pixels:
            continue
        whole = w // t_w < 2 and h // t_h < 2  # draft leaves it at full size
        cls = "whole" if whole else "drafted"

        def pil_decode(data: bytes = data, t: tuple[int, int] = (t_w, t_h)) -> Image.Image:
            im = Image.open(io.BytesIO(data))
            im.draft("RGB", t)
            im.load()
            return im

        ms, exact_src = _best(pil_decode)
        add(f"{cls} exact decode", ms)
        ms, exact = _best(lambda s=exact_src, t=(t_w, t_h): resize(s, t, bicubic))
        add(f"{cls} exact resize", ms)
        ms, same = _best(
            lambda s=exact_src, d=data: simplejpeg.decode_jpeg(
                d, "RGB", min_width=s.size[0], min_height=s.size[1]
            )
        )
        add(f"{cls} same-scale decode", ms)
        add(f"{cls} same-scale identical", float(np.array_equal(same, np.asarray(exact_src))))
        ms, arr = _best(
            lambda d=data, tw=t_w, th=t_h: simplejpeg.decode_jpeg(d, "RGB", min_width=tw, min_height=th)
        )
        add(f"{cls} fast decode", ms)
        add(f"{cls} fast scale M", round(arr.shape[1] / w * 8))
        src = Image.fromarray(arr)
        ms, fast = _best(lambda s=src, t=(t_w, t_h): resize(s, t, bicubic) if s.size != t else s)
        add(f"{cls} fast resize", ms)
        a, b = np.asarray(exact), np.asarray(fast)
        add(f"{cls} PSNR", _psnr(a, b))
        add(f"{cls} largest error", float(np.abs(a.astype(int) - b.astype(int)).max()))
    return got


def report(got: dict[str, list[float]]) -> None:
    for cls in ("whole", "drafted"):
        n = len(got.get(f"{cls} PSNR", []))
        if not n:
            continue

        def mean(key: str, cls: str = cls) -> float:
            values = got[f"{cls} {key}"]
            return sum(values) / len(values)

        exact = mean("exact decode") + mean("exact resize")
        fast = mean("fast decode") + mean("fast resize")
        scales = ", ".join(f"{int(m)}/8" for m in sorted(set(got[f"{cls} fast scale M"])))
        how = "whole" if cls == "whole" else "scaled"
        print(f"\n### {n} JPEGs over max_pixels that Pillow's draft decodes {how}\n")
        print(
            f"- exact: decode {mean('exact decode'):.2f} + resize {mean('exact resize'):.2f} = {exact:.2f} ms"
        )
        print(
            f"- fast (M/8 = {scales}): decode {mean('fast decode'):.2f} + resize {mean('fast resize'):.2f} = "
            f"{fast:.2f} ms: **{exact / fast:.2f}x the exact path's speed**"
        )
        print(
            f"- fast vs exact pixels: PSNR min {min(got[f'{cls} PSNR']):.1f} dB, mean {mean('PSNR'):.1f} dB; "
            f"largest pixel error {max(got[f'{cls} largest error']):.0f}"
        )
        same = sum(got[f"{cls} same-scale identical"])
        print(
            f"- simplejpeg at Pillow's own scale: decode {mean('same-scale decode'):.2f} ms, "
            f"pixels identical to Pillow's in {same:.0f}/{n}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "vlmforge-bench"))
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    root = bench_run.make_corpus(a.images, a.seed, Path(a.cache))
    files = [(root / "img" / f"{i:06d}.jpg").read_bytes() for i in range(a.images)]
    print(f"{a.images} corpus JPEGs, one thread, best of 3; load {os.getloadavg()[0]:.2f}")
    report(measure(files))


if __name__ == "__main__":
    main()
