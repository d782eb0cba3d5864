"""Fetch + verify + resize of the same real-looking JPEGs from a loopback HTTP server: vlmforge against
img2dataset, same run, same cores, same output size policy; then a range-read fetch of 1% of a zip's members.

    .venv/bin/python benchmarks/bench_fetch.py                  # 5,000 images, both peers, the zip test
    .venv/bin/python benchmarks/bench_fetch.py --images 20000 --workers 2

The JPEGs are crops and rescales of the photos that ship inside scikit-image (mixed sizes, ~25% over the
size limit), each file made unique by a JPEG comment so no content is shared. img2dataset runs from its own
venv (``--i2d-python``, default /tmp/i2d-venv/bin/python; ``pip install img2dataset`` there); when it is
missing only vlmforge's figures are printed.

Output size policy: images over ~1 MP are downscaled once. vlmforge: to smart_resize's factor-28 size
within ``--max-pixels`` (default 1,048,576), original bytes kept otherwise. img2dataset: ``resize_mode=
keep_ratio_largest, image_size=1024, resize_only_if_bigger=True, skip_reencode=True`` (longest side <=
1024, original bytes kept otherwise). Both decode every image fully (verification) and hash it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))


# ----------------------------------------------------------------------------------------------- data


def make_jpegs(n: int, seed: int, cache: Path) -> list[bytes]:
    """``n`` distinct JPEGs of mixed sizes from scikit-image's photos (cached on disk between runs)."""
    folder = cache / f"jpegs-{n}-{seed}"
    if folder.is_dir() and len(list(folder.iterdir())) == n:
        return [(folder / f"{i:06d}.jpg").read_bytes() for i in range(n)]
    import numpy as np
    import skimage.data as sd
    from PIL import Image

    photos = []
    for name in (
        "astronaut",
        "chelsea",
        "coffee",
        "rocket",
        "immunohistochemistry",
        "hubble_deep_field",
        "retina",
        "camera",
        "moon",
        "brick",
        "grass",
        "gravel",
    ):
        a = getattr(sd, name)()
        photos.append(Image.fromarray(a if a.ndim == 3 else np.stack([a] * 3, -1)).convert("RGB"))
    rng = random.Random(seed)
    bases = []
    for _ in range(min(n, 240)):
        p = rng.choice(photos)
        w, h = p.size
        cw, ch = rng.randint(w // 2, w), rng.randint(h // 2, h)
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        r = rng.random()
        long_side = (
            rng.randint(300, 900)
            if r < 0.6
            else rng.randint(900, 1400)
            if r < 0.85
            else rng.randint(1400, 3000)
        )
        scale = long_side / max(cw, ch)
        img = p.crop((x, y, x + cw, y + ch)).resize(
            (max(28, int(cw * scale)), max(28, int(ch * scale))), Image.BILINEAR
        )
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=rng.randint(80, 95))
        bases.append(buf.getvalue())
    out = []
    for i in range(n):
        base = bases[i % len(bases)]
        comment = f"vlmforge-bench {seed} {i}".encode()
        out.append(base[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + base[2:])
    folder.mkdir(parents=True, exist_ok=True)
    for i, data in enumerate(out):
        (folder / f"{i:06d}.jpg").write_bytes(data)
    return out


# ------------------------------------------------------------------------------------ process runner


def run_measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, peak RSS of the process tree in MB, stdout)."""
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak = 0
    ps = psutil.Process(proc.pid)
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [
        threading.Thread(target=lambda s, b: b.append(s.read()), args=(s, b))
        for s, b in ((proc.stdout, out), (proc.stderr, err))
    ]
    for t in readers:
        t.start()
    while proc.poll() is None:
        try:
            rss = sum(p.memory_info().rss for p in [ps, *ps.children(recursive=True)])
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    for t in readers:
        t.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}):\n{err[0].decode()[-3000:]}")
    return wall, peak / 1e6, out[0].decode()


# ----------------------------------------------------------------------------------- vlmforge worker


def _vlmforge_batch(args: tuple[list[str], str, int, int]) -> tuple[int, int]:
    """One batch as the pipeline runs it: the batch's fetch in the background, each image verified, resized
    and stored as soon as it has arrived (tasks/batch/media_step.py does the same)."""
    urls, store_dir, max_pixels, threads = args
    from vlmforge.schemas.recipes import parse_recipe
    from vlmforge.tasks.fetch.acquire import FetchStream, read_outcome
    from vlmforge.tasks.fetch.options import FetchKnobs
    from vlmforge.tasks.geometry.resize_rule import smart_resize
    from vlmforge.tasks.media.image import process_image
    from vlmforge.tasks.storage import ContentStore, sha256_bytes

    base = urls[0].rsplit("/", 1)[0]
    recipe = parse_recipe(
        {
            "subset": "bench",
            "license": "CC0-1.0",
            "sources": [{"kind": "http_files", "allow_private": True, "url": base + "/{name}"}],
        }
    )
    store = ContentStore(store_dir)
    stream = FetchStream(
        [u.rsplit("/", 1)[1] for u in urls], recipe, store, options=FetchKnobs(concurrency=threads)
    )
    ok = 0
    for o in stream:
        r = process_image(
            read_outcome(o, store),
            target_size=lambda h, w: smart_resize(h, w, 28, 3136, max_pixels),
            max_pixels=max_pixels,
        )
        if r.status == "ok" and r.out_bytes is not None:
            store.put(r.out_bytes, o.sha256 if r.kept_original else sha256_bytes(r.out_bytes))
            ok += 1
    return ok, stream.result().stats.failed


def vlmforge_main(
    url_file: str, store_dir: str, workers: int, threads: int, batch: int, max_pixels: int
) -> None:
    import faulthandler
    import multiprocessing as mp
    import signal

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID` shows where a worker is
    urls = Path(url_file).read_text().split()
    batches = [(urls[i : i + batch], store_dir, max_pixels, threads) for i in range(0, len(urls), batch)]
    with mp.get_context("fork").Pool(workers) as pool:
        results = pool.map(_vlmforge_batch, batches, chunksize=1)
    print(json.dumps({"ok": sum(r[0] for r in results), "failed": sum(r[1] for r in results)}))


I2D_SCRIPT = """
import glob, json, sys
from img2dataset import download

if __name__ == "__main__":  # img2dataset spawns its workers: the main module must be import-safe
    url_file, out, workers, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    download(url_list=url_file, input_format="txt", output_folder=out, output_format="webdataset",
             processes_count=workers, thread_count=threads, image_size=1024, resize_mode="keep_ratio_largest",
             resize_only_if_bigger=True, skip_reencode=True, encode_quality=95, number_sample_per_shard=500,
             distributor="multiprocessing", timeout=10, retries=0, compute_hash="sha256", enable_wandb=False)
    ok = failed = 0
    for p in glob.glob(out + "/*_stats.json"):
        s = json.load(open(p)); ok += s["successes"]; failed += s["count"] - s["successes"]
    print(json.dumps({"ok": ok, "failed": failed}))
"""


# ------------------------------------------------------------------------------------------------ zip


def zip_range_read(srv: object, jpegs: list[bytes], fraction: float, tmp: Path) -> dict[str, float]:
    from http_fixture import HttpFixture

    from vlmforge.schemas.recipes import parse_recipe
    from vlmforge.tasks.fetch.acquire import fetch_batch
    from vlmforge.tasks.fetch.options import FetchKnobs
    from vlmforge.tasks.storage import ContentStore

    assert isinstance(srv, HttpFixture)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:  # JPEGs are stored, as in COCO's zips
        for i, data in enumerate(jpegs):
            z.writestr(f"train2017/{i:012d}.jpg", data)
    data = buf.getvalue()
    srv.add("/train2017.zip", data)
    srv.reset_log()
    k = max(1, int(len(jpegs) * fraction))
    refs = [f"{i:012d}.jpg" for i in sorted(random.Random(1).sample(range(len(jpegs)), k))]
    recipe = parse_recipe(
        {
            "subset": "z",
            "license": "CC0-1.0",
            "sources": [
                {
                    "kind": "archive",
                    "allow_private": True,
                    "url": srv.url("/train2017.zip"),
                    "member": "train2017/{name}",
                }
            ],
        }
    )
    t0 = time.perf_counter()
    res = fetch_batch(refs, recipe, ContentStore(str(tmp / "zip-store")), options=FetchKnobs(concurrency=8))
    wall = time.perf_counter() - t0
    member_bytes = sum(len(jpegs[int(r[:12])]) for r in refs)
    return {
        "archive_mb": len(data) / 1e6,
        "members": k,
        "ok": res.stats.ok,
        "member_mb": member_bytes / 1e6,
        "transferred_mb": srv.bytes_sent() / 1e6,
        "requests": len(srv.requests()),
        "seconds": wall,
    }


# ----------------------------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=2, help="processes per peer (the machine's cores)")
    ap.add_argument("--threads", type=int, default=16, help="download threads per process")
    ap.add_argument("--batch", type=int, default=250, help="vlmforge references per batch")
    ap.add_argument("--max-pixels", type=int, default=1_048_576)
    ap.add_argument("--i2d-python", default="/tmp/i2d-venv/bin/python")
    ap.add_argument("--skip-i2d", action="store_true")
    ap.add_argument("--zip-fraction", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "vlmforge-bench"))
    ap.add_argument("--run-vlmforge", nargs=2, metavar=("URL_FILE", "STORE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.run_vlmforge:
        vlmforge_main(a.run_vlmforge[0], a.run_vlmforge[1], a.workers, a.threads, a.batch, a.max_pixels)
        return

    from http_fixture import HttpFixture
    from PIL import Image

    t0 = time.perf_counter()
    jpegs = make_jpegs(a.images, a.seed, Path(a.cache))
    over = sum(
        1 for d in jpegs[:240] if (lambda s: s[0] * s[1])(Image.open(io.BytesIO(d)).size) > a.max_pixels
    )
    print(
        f"{len(jpegs)} JPEGs, {sum(map(len, jpegs)) / 1e6:.0f} MB, "
        f"~{100 * over / min(240, len(jpegs)):.0f}% over {a.max_pixels:,} px "
        f"(made in {time.perf_counter() - t0:.1f} s); {a.workers} processes x {a.threads} threads each"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as tmpdir, HttpFixture() as srv:
        tmp = Path(tmpdir)
        for i, data in enumerate(jpegs):
            srv.add(f"/img/{i:06d}.jpg", data)
        url_file = tmp / "urls.txt"
        url_file.write_text("\n".join(srv.url(f"/img/{i:06d}.jpg") for i in range(len(jpegs))) + "\n")

        cmd = [
            sys.executable,
            __file__,
            "--run-vlmforge",
            str(url_file),
            str(tmp / "store"),
            "--workers",
            str(a.workers),
            "--threads",
            str(a.threads),
            "--batch",
            str(a.batch),
            "--max-pixels",
            str(a.max_pixels),
        ]
        # one intra-op thread per worker process, as Ray gives a 1-CPU task (img2dataset pins OpenCV to one)
        wall, rss, out = run_measured(cmd, dict(os.environ, OMP_NUM_THREADS="1"))
        rows.append(("vlmforge", json.loads(out.strip().splitlines()[-1]), wall, rss))

        if a.skip_i2d or not Path(a.i2d_python).exists():
            print(f"img2dataset: skipped ({'--skip-i2d' if a.skip_i2d else a.i2d_python + ' not found'})")
        else:
            srv.reset_log()
            env = dict(
                os.environ, NO_ALBUMENTATIONS_UPDATE="1", WANDB_MODE="disabled", PYTHONWARNINGS="ignore"
            )
            script = tmp / "i2d.py"
            script.write_text(I2D_SCRIPT)
            cmd = [a.i2d_python, str(script), str(url_file), str(tmp / "i2d"), str(a.workers), str(a.threads)]
            wall, rss, out = run_measured(cmd, env)
            rows.append(("img2dataset", json.loads(out.strip().splitlines()[-1]), wall, rss))

        print()
        print("| peer | images ok | failed | seconds | images/s | peak RSS (MB) | images/s vs img2dataset |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        ref = next((r for r in rows if r[0] == "img2dataset"), None)
        for name, counts, wall, rss in rows:
            ips = counts["ok"] / wall
            ratio = f"{ips / (ref[1]['ok'] / ref[2]):.2f}x" if ref else "n/a"
            print(
                f"| {name} | {counts['ok']} | {counts['failed']} | {wall:.1f} | {ips:.0f} | {rss:.0f}"
                f" | {ratio} |"
            )

        z = zip_range_read(srv, jpegs, a.zip_fraction, tmp)
        print()
        print(
            "| zip archive | members fetched | their bytes | bytes transferred | share of archive"
            " | requests | seconds |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|")
        print(
            f"| {z['archive_mb']:.0f} MB | {z['ok']}/{z['members']} | {z['member_mb']:.2f} MB | "
            f"{z['transferred_mb']:.2f} MB | {100 * z['transferred_mb'] / z['archive_mb']:.2f}% | "
            f"{z['requests']} | "
            f"{z['seconds']:.2f} |"
        )


if __name__ == "__main__":
    main()
