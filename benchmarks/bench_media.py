"""Verify + resize of images and probe + sample of videos: vlmforge's media stage against img2dataset's
resizer on the same files, in one run, each tool in its own process pinned to one core.

    .venv/bin/python benchmarks/bench_media.py                 # default corpus, ~5 minutes on 2 cores
    .venv/bin/python benchmarks/bench_media.py --scale 4       # 4x the files per class
    .venv/bin/python benchmarks/bench_media.py --big 0         # skip the 300 MP peak-RSS cases

Corpus (generated at start-up from the photos that ship inside scikit-image, so nothing is downloaded):
small photos (0.1-1 MP) as JPEG and PNG, 12 MP and 50 MP upscales as JPEG (with sensor-like grain) and PNG.
Both tools get the bytes in memory (no I/O timed), write nothing (null writer), make one untimed warm-up pass
over the corpus (one-time imports, allocator growth: a pipeline worker is long-lived), and output JPEG:

* vlmforge: ``process_image(data, target_size=smart_resize(factor 28, min 3,136, max --max-pixels),
  image_format="jpeg", jpeg_quality=92)``: original bytes kept when the image is within the limit, else
  one antialiased bicubic resize (what Qwen's processors use; torch's kernel, Pillow's pixels within a
  level) to the factor-aligned size, JPEGs DCT-scaled first. Every image is verified in full: kept JPEGs
  are decoded at 1/8 DCT scale (every entropy-coded block is still decoded), kept PNGs by inflating all
  their data and checking every row's filter byte. The ``keep`` column
  is the default ``image_format=keep`` (a PNG that is not kept is re-encoded as PNG: slower, lossless).
* img2dataset 1.47 ``Resizer``: its closest mode to "fit within max pixels" is ``resize_mode=
  keep_ratio_largest`` with ``resize_only_if_bigger=True``; ``image_size`` is set per file to the longest side
  of vlmforge's target (so both produce the same output size), ``skip_reencode=True`` (keeps the bytes when
  nothing is resized and the format is already JPEG), ``encode_format="jpg", encode_quality=92``, default
  ``downscale_interpolation="area"``. It decodes every image fully with ``cv2.imdecode``.

Peak RSS: one fresh process per tool and file, on a generated 10,000 x 30,000 (300 MP) PNG and JPEG resized to
``--max-pixels``. Videos: H.264 clips (a pan over a photo), probed and sampled with the qwen2_5_vl sampler
(fps 2), as ``probe_video`` (``--video-mode keep``) and as ``sample_frames`` (``--video-mode frames``).

img2dataset runs from its own venv (``--i2d-python``, default /tmp/i2d-venv/bin/python, made with
``python3 -m venv /tmp/i2d-venv && uv pip install --python /tmp/i2d-venv/bin/python img2dataset``); when it is
missing, only vlmforge's figures are printed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FACTOR = 28
MIN_PIXELS = 3136

# ------------------------------------------------------------------------------------------------ corpus


def _photos() -> list[Any]:
    import numpy as np
    import skimage.data as sd
    from PIL import Image

    out = []
    for name in (
        "astronaut",
        "chelsea",
        "coffee",
        "rocket",
        "hubble_deep_field",
        "retina",
        "motorcycle_left",
    ):
        a = sd.stereo_motorcycle()[0] if name == "motorcycle_left" else getattr(sd, name)()
        out.append(Image.fromarray(a if a.ndim == 3 else np.stack([a] * 3, -1)).convert("RGB"))
    return out


def _grain(img: Any, seed: int) -> Any:
    import numpy as np
    from PIL import Image

    arr = np.asarray(img).astype(np.int16)
    arr += np.random.default_rng(seed).integers(-6, 7, arr.shape, dtype=np.int16)
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def make_corpus(folder: Path, scale: int) -> list[tuple[str, Path]]:
    """(class, path) of every file; files are cached in ``folder`` between runs of the same scale."""
    from PIL import Image

    photos = _photos()
    plan: list[tuple[str, str, tuple[int, int] | None, int]] = []  # class, format, size (None: native), seed
    for k in range(4 * scale):
        plan.append(("small", "JPEG", None, k))
    for k in range(2 * scale):
        plan.append(("small", "PNG", None, 100 + k))
    for k in range(3 * scale):
        plan.append(("12MP", "JPEG", (4000, 3000), 200 + k))
    for k in range(1 * scale):
        plan.append(("12MP", "PNG", (4000, 3000), 300 + k))
    for k in range(1 * scale):
        plan.append(("50MP", "JPEG", (8660, 5773), 400 + k))
    for k in range(1 * scale):
        plan.append(("50MP", "PNG", (8660, 5773), 500 + k))
    files = []
    folder.mkdir(parents=True, exist_ok=True)
    for cls, fmt, size, seed in plan:
        path = folder / f"{cls}-{seed:03d}.{'jpg' if fmt == 'JPEG' else 'png'}"
        files.append((f"{cls} {fmt}", path))
        if path.exists():
            continue
        img = photos[seed % len(photos)]
        if size is not None:
            img = img.resize(size, Image.Resampling.LANCZOS)
            if fmt == "JPEG":
                img = _grain(img, seed)
        tmp = path.with_suffix(".tmp")
        if fmt == "JPEG":
            img.save(tmp, format="JPEG", quality=90)
        else:
            img.save(tmp, format="PNG", compress_level=3)
        tmp.rename(path)
    return files


def write_big_png(path: Path, width: int, height: int) -> None:
    """An RGB PNG written band by band (never whole in memory): gradients and a checkerboard."""
    import numpy as np

    comp = zlib.compressobj(1)
    x = np.arange(width)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    with path.open("wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)))
        for y0 in range(0, height, 256):
            y = np.arange(y0, min(height, y0 + 256))[:, None]
            rows = np.empty((len(y), width, 3), np.uint8)
            rows[..., 0] = x[None, :] * 255 // (width - 1)
            rows[..., 1] = y * 255 // (height - 1)
            rows[..., 2] = ((x[None, :] // 50 + y // 50) % 2) * 200
            raw = np.concatenate([np.zeros((len(y), 1), np.uint8), rows.reshape(len(y), -1)], axis=1)
            f.write(chunk(b"IDAT", comp.compress(raw.tobytes())))
        f.write(chunk(b"IDAT", comp.flush()) + chunk(b"IEND", b""))


_BIG_JPEG = """
import sys
from PIL import Image
w, h = int(sys.argv[2]), int(sys.argv[3])
img = Image.linear_gradient("L").resize((w, h)).convert("RGB")
img.paste((200, 40, 40), (0, 0, w // 2, h // 3))
img.save(sys.argv[1], format="JPEG", quality=85)
"""


def make_videos(folder: Path, n: int) -> list[Path]:
    """``n`` 10-second 640x360 H.264 clips at 30 fps: a slow pan over a photo."""
    import av
    import numpy as np

    photos = _photos()
    out = []
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(n):
        path = folder / f"clip-{k:02d}.mp4"
        out.append(path)
        if path.exists():
            continue
        from PIL import Image

        base = np.asarray(photos[k % len(photos)].resize((1280, 720), Image.Resampling.BICUBIC))
        tmp = path.with_suffix(".tmp.mp4")
        with av.open(str(tmp), "w") as container:
            stream = container.add_stream("libx264", rate=30, options={"preset": "veryfast"})
            stream.width, stream.height, stream.pix_fmt = 640, 360, "yuv420p"
            for t in range(300):
                x, y = (t * 2) % 640, (t * 1) % 360
                frame = av.VideoFrame.from_ndarray(
                    np.ascontiguousarray(base[y : y + 360, x : x + 640]), "rgb24"
                )
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        tmp.rename(path)
    return out


def smart_resize(height: int, width: int, max_pixels: int) -> tuple[int, int]:
    from vlmforge.tasks.geometry.resize_rule import smart_resize as sr

    return sr(height, width, FACTOR, MIN_PIXELS, max_pixels)


def image_jobs(files: list[tuple[str, Path]], max_pixels: int) -> list[dict[str, Any]]:
    from PIL import Image

    jobs = []
    for cls, path in files:
        with Image.open(path) as im:
            w, h = im.size
        t_h, t_w = smart_resize(h, w, max_pixels)
        resized = w * h > max_pixels
        jobs.append(
            {
                "cls": cls,
                "path": str(path),
                "image_size": max(t_h, t_w) if resized else max(w, h),
            }
        )
    return jobs


# ------------------------------------------------------------------------------------------------ workers

_PIN = """
import os
try:
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
except (AttributeError, OSError):
    pass
"""

_VLMFORGE_WORKER = (
    _PIN
    + """
import json, sys, time
from vlmforge.tasks.media.image import process_image
from vlmforge.tasks.geometry.resize_rule import smart_resize
spec = json.load(open(sys.argv[1]))
max_pixels, fmt = spec["max_pixels"], spec["image_format"]
target = lambda h, w: smart_resize(h, w, 28, 3136, max_pixels)
datas = [open(j["path"], "rb").read() for j in spec["jobs"]]
for data in datas:  # untimed warm-up pass (lazy imports such as torch's, allocator growth)
    process_image(data, target_size=target, max_pixels=max_pixels, image_format=fmt, jpeg_quality=92)
per = {}
for cls in dict.fromkeys(j["cls"] for j in spec["jobs"]):
    group = [(j, d) for j, d in zip(spec["jobs"], datas) if j["cls"] == cls]
    c = per.setdefault(cls, [0, 0.0, 0, 0])
    while c[3] < spec["repeat"] or c[1] < spec["min_seconds"]:
        for job, data in group:
            t0 = time.process_time()
            r = process_image(data, target_size=target, max_pixels=max_pixels, image_format=fmt,
                              jpeg_quality=92)
            c[1] += time.process_time() - t0
            assert r.status == "ok", (job, r.reason, r.detail)
            c[0] += 1; c[2] += r.kept_original
        c[3] += 1
print(json.dumps(per))
"""
)

_I2D_WORKER = (
    _PIN
    + """
import io, json, sys, time, warnings
warnings.filterwarnings("ignore")
from img2dataset.resizer import Resizer
spec = json.load(open(sys.argv[1]))
resizers = {}
def resizer(size):
    if size not in resizers:
        resizers[size] = Resizer(image_size=size, resize_mode="keep_ratio_largest",
                                 resize_only_if_bigger=True, encode_format="jpg", encode_quality=92,
                                 skip_reencode=True)
    return resizers[size]
datas = [open(j["path"], "rb").read() for j in spec["jobs"]]
for job, data in zip(spec["jobs"], datas):  # untimed warm-up pass, as for vlmforge
    resizer(job["image_size"])(io.BytesIO(data))
per = {}
for cls in dict.fromkeys(j["cls"] for j in spec["jobs"]):
    group = [(j, d) for j, d in zip(spec["jobs"], datas) if j["cls"] == cls]
    c = per.setdefault(cls, [0, 0.0, 0, 0])
    while c[3] < spec["repeat"] or c[1] < spec["min_seconds"]:
        for job, data in group:
            rz = resizer(job["image_size"])
            t0 = time.process_time()
            out, w, h, ow, oh, err = rz(io.BytesIO(data))
            c[1] += time.process_time() - t0
            assert err is None, (job, err)
            c[0] += 1; c[2] += out is not None and len(out) == len(data)
        c[3] += 1
print(json.dumps(per))
"""
)

_RSS_VLMFORGE = (
    _PIN
    + """
import json, resource, sys, time
from vlmforge.tasks.media.image import process_image
from vlmforge.tasks.geometry.resize_rule import smart_resize
max_pixels = int(sys.argv[2])
data = open(sys.argv[1], "rb").read()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
r = process_image(data, target_size=lambda h, w: smart_resize(h, w, 28, 3136, max_pixels),
                  max_pixels=max_pixels, max_image_pixels=400_000_000, image_format="jpeg")
print(json.dumps({"ok": r.status == "ok", "detail": r.detail, "seconds": time.perf_counter() - t0,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024,
                  "size": [r.out_width, r.out_height]}))
"""
)

_RSS_I2D = (
    _PIN
    + """
import io, json, resource, sys, time, warnings
warnings.filterwarnings("ignore")
from img2dataset.resizer import Resizer
data = open(sys.argv[1], "rb").read()
rz = Resizer(image_size=int(sys.argv[2]), resize_mode="keep_ratio_largest", resize_only_if_bigger=True,
             encode_format="jpg", encode_quality=92, skip_reencode=True)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
out, w, h, ow, oh, err = rz(io.BytesIO(data))
print(json.dumps({"ok": err is None, "detail": err, "seconds": time.perf_counter() - t0,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024,
                  "size": [w, h]}))
"""
)

_VIDEO_WORKER = (
    _PIN
    + """
import json, sys, time
from vlmforge.tasks.geometry import load_preset
from vlmforge.tasks.media.video import probe_video
from vlmforge.schemas.config import MediaOptions, TokenOptions
from vlmforge.tasks.geometry import ModelGeometry, sample_video_frames
from vlmforge.tasks.media.frames import sample_frames
preset = load_preset("qwen2_5_vl")
frame_size = ModelGeometry.of(preset, TokenOptions(), MediaOptions()).frame_size
choose = lambda n, fps: sample_video_frames(preset, n, fps)
datas = [open(p, "rb").read() for p in json.load(open(sys.argv[1]))]
out = {}
for mode in ("keep", "frames"):
    t0 = time.perf_counter(); c0 = time.process_time(); frames = 0
    for data in datas:
        if mode == "keep":
            r = probe_video(data, choose_frames=choose, timeout_s=120)
            frames += len(r.sampled_indices)
        else:
            r = sample_frames(data, choose_frames=choose, frame_size=frame_size,
                              timeout_s=120).video
            frames += len(r.sampled_indices)
        assert r.status == "ok", (r.reason, r.detail)
    out[mode] = {"videos": len(datas), "wall": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                 "frames": frames}
print(json.dumps(out))
"""
)


def run_worker(python: str, code: str, *args: str, timeout: float = 1800) -> Any:
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [python, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed ({python}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def i2d_available(python: str) -> bool:
    if not Path(python).exists():
        return False
    code = "import warnings; warnings.filterwarnings('ignore'); from img2dataset.resizer import Resizer"
    return subprocess.run([python, "-c", code], capture_output=True).returncode == 0


# ------------------------------------------------------------------------------------------------ report


def rate(entry: list[float] | None) -> float:
    return entry[0] / entry[1] if entry and entry[1] > 0 else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=1, help="multiply the number of files per class")
    ap.add_argument("--repeat", type=int, default=1, help="least passes over each class per worker")
    ap.add_argument("--min-seconds", type=float, default=1.5, help="least CPU seconds per class and worker")
    ap.add_argument(
        "--max-pixels",
        default="1003520,12845056",
        help="comma-separated limits (default: Megatron-Bridge's 1,003,520, the Qwen2.5-VL hub's 12,845,056)",
    )
    ap.add_argument("--big", type=int, default=1, help="run the 300 MP peak-RSS cases (0 to skip)")
    ap.add_argument("--big-size", default="10000x30000", help="WIDTHxHEIGHT of the big images")
    ap.add_argument("--videos", type=int, default=6, help="number of 10 s clips for the video figures")
    ap.add_argument("--i2d-python", default="/tmp/i2d-venv/bin/python")
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "vlmforge-bench-media")
    args = ap.parse_args(argv)

    py = sys.executable
    have_i2d = i2d_available(args.i2d_python)
    t_start = time.perf_counter()
    print(f"corpus in {args.cache} (scale {args.scale}) ...", file=sys.stderr)
    files = make_corpus(args.cache / f"images-x{args.scale}", args.scale)
    classes = list(dict.fromkeys(cls for cls, _ in files))
    limits = [int(v) for v in args.max_pixels.split(",") if v]

    print("\n## Images: verify + resize, images/s per core (CPU time, one pinned core per tool)\n")
    if not have_i2d:
        print(f"(img2dataset not found at {args.i2d_python}: vlmforge only)\n")
    print(
        "| max_pixels | class | files | vlmforge jpeg | kept | img2dataset | kept | ratio | vlmforge keep |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    totals: dict[int, dict[str, float]] = {}
    for limit in limits:
        jobs = image_jobs(files, limit)
        results: dict[str, Any] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, python, code, extra in (
                ("vlmforge", py, _VLMFORGE_WORKER, {"image_format": "jpeg"}),
                ("vlmforge_keep", py, _VLMFORGE_WORKER, {"image_format": "keep"}),
                ("img2dataset", args.i2d_python, _I2D_WORKER, {}),
            ):
                if name == "img2dataset" and not have_i2d:
                    continue
                spec = Path(tmp) / f"{name}.json"
                spec.write_text(
                    json.dumps(
                        {
                            "jobs": jobs,
                            "max_pixels": limit,
                            "repeat": args.repeat,
                            "min_seconds": args.min_seconds,
                            **extra,
                        }
                    )
                )
                print(f"  {name} at max_pixels={limit} ...", file=sys.stderr)
                results[name] = run_worker(python, code, str(spec))
        sums = {name: [0.0, 0.0] for name in results}
        ratios: list[float] = []
        for cls in classes:
            v, k, i = (results.get(n, {}).get(cls) for n in ("vlmforge", "vlmforge_keep", "img2dataset"))
            for name in results:
                entry = results[name].get(cls)
                sums[name][0] += entry[0] / entry[3]  # one pass over the corpus: files ...
                sums[name][1] += entry[1] / entry[3]  # ... and CPU seconds
            n_files = v[0] // v[3] if v else 0
            ratio = rate(v) / rate(i) if i else float("nan")
            ratios.append(ratio)
            i_cell = f"{rate(i):.1f}" if i else "n/a"
            i_kept = f"{i[2] // i[3]}" if i else "n/a"
            v_kept = v[2] // v[3] if v else 0
            print(
                f"| {limit:,} | {cls} | {n_files} | {rate(v):.1f} | {v_kept} | {i_cell} "
                f"| {i_kept} | {ratio:.2f}x | {rate(k):.1f} |"
            )
        tv = sums["vlmforge"][0] / sums["vlmforge"][1]
        ti = sums["img2dataset"][0] / sums["img2dataset"][1] if "img2dataset" in sums else float("nan")
        tk = sums["vlmforge_keep"][0] / sums["vlmforge_keep"][1]
        totals[limit] = {"vlmforge": tv, "img2dataset": ti, "keep": tk}
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
        print(
            f"| {limit:,} | **whole corpus, one pass** | {len(files)} | **{tv:.1f}** | | **{ti:.1f}** | "
            f"| **{tv / ti:.2f}x** | {tk:.1f} |"
        )
        print(f"| {limit:,} | geometric mean of the class ratios | | | | | | **{geo:.2f}x** | |")

    if args.big:
        width, height = (int(v) for v in args.big_size.lower().split("x"))
        big_dir = args.cache / "big"
        big_dir.mkdir(parents=True, exist_ok=True)
        png, jpg = big_dir / f"big-{width}x{height}.png", big_dir / f"big-{width}x{height}.jpg"
        if not png.exists():
            print(f"  writing {png} ...", file=sys.stderr)
            write_big_png(png.with_suffix(".tmp"), width, height)
            png.with_suffix(".tmp").rename(png)
        if not jpg.exists():
            print(f"  writing {jpg} ...", file=sys.stderr)
            run_worker(py, _BIG_JPEG + "\nprint('{}')", str(jpg), str(width), str(height))
        limit = limits[-1]
        t_h, t_w = smart_resize(height, width, limit)
        print(f"\n## Peak RSS on a {width:,} x {height:,} ({width * height / 1e6:.0f} MP) image, resized to ")
        print(f"{t_w} x {t_h} (max_pixels {limit:,}); one fresh process per cell\n")
        print("| file | bytes | vlmforge peak RSS | growth | s | img2dataset peak RSS | growth | s |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for path in (png, jpg):
            v = run_worker(py, _RSS_VLMFORGE, str(path), str(limit))
            if not v["ok"]:
                raise RuntimeError(f"vlmforge failed on {path}: {v['detail']}")
            cells = [f"{v['peak_mb']:.0f} MB", f"{v['growth_mb']:.0f} MB", f"{v['seconds']:.1f}"]
            if have_i2d:
                i = run_worker(args.i2d_python, _RSS_I2D, str(path), str(max(t_h, t_w)))
                cells += (
                    [f"{i['peak_mb']:.0f} MB", f"{i['growth_mb']:.0f} MB", f"{i['seconds']:.1f}"]
                    if i["ok"]
                    else [f"failed: {i['detail']}", "", ""]
                )
            else:
                cells += ["n/a", "", ""]
            size_mb = path.stat().st_size / 2**20
            print(f"| {path.suffix[1:].upper()} | {size_mb:.0f} MB | " + " | ".join(cells) + " |")

    if args.videos:
        videos = make_videos(args.cache / "videos", args.videos)
        with tempfile.TemporaryDirectory() as tmp:
            spec = Path(tmp) / "videos.json"
            spec.write_text(json.dumps([str(p) for p in videos]))
            out = run_worker(py, _VIDEO_WORKER, str(spec))
        print("\n## Videos: probe + sample (qwen2_5_vl sampler, 2 fps), 10 s 640x360 H.264 at 30 fps\n")
        print("| mode | videos | sampled frames | videos/s (wall) | videos/s per core (CPU) |")
        print("|---|---:|---:|---:|---:|")
        for mode, label in (("keep", "keep (probe_video)"), ("frames", "frames (sample_frames, JPEG)")):
            r = out[mode]
            print(
                f"| {label} | {r['videos']} | {r['frames']} | {r['videos'] / r['wall']:.2f} "
                f"| {r['videos'] / r['cpu']:.2f} |"
            )
    print(f"\n(total run time {time.perf_counter() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
