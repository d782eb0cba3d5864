"""Where one image's CPU goes in the media step, phase by phase, and the decode floor it is judged against.

    .venv/bin/python benchmarks/bench_per_image.py                       # 400 images, 3 repeats
    .venv/bin/python benchmarks/bench_per_image.py --images 1000 --repeats 5

The corpus is ``bench_run.py``'s (60% ~0.3 MP, 30% ~1.9 MP, 10% ~12 MP JPEGs cut from scikit-image's photos,
made at run time under ``--cache``), served by nginx (or Python's http.server) on 127.0.0.1. Two measures,
one thread, one image after another, ``--max-pixels 1048576`` and the default model:

1. **phases**: each image goes through the media step's own functions one at a time, each timed (thread CPU
   and wall): the fetch (the fetch stage's HTTP client, body in memory), hashing the fetched bytes, the
   store write of the original (as the fetch stage writes it: renamed into place, not synced) and its
   upstream-index entry (the bytes then go to the media step in memory: no read back from the store), then
   the verify-and-normalise of ``process_image`` split into its steps (open the header, decode (DCT-scaled
   when downsized 2x or more), orient/colour/mode, resize, encode; what ``process_image`` costs beyond these
   is its per-image Python), and the output's store write (durable: a re-encoded image hashed, written,
   synced and renamed; a kept original synced where the fetch stage left it).
2. **kernel**: the real media step (``tasks/batch``'s :class:`Normaliser` fed by the fetch stage's
   :class:`FetchStream`, 16 fetch threads, as a batch runs it) over the same images in this process; its
   process CPU per image against the **decode floor**, the decode alone as the media step decodes (the sum of
   phase "decode" over the images, each decoded once more in memory). The issue's goal: within 1.5x.

Both measures run for each decoder of the resized JPEGs (``tasks/media/jpeg_fast_decode``): ``pillow``
(Pillow's own decode alone) and ``turbo`` (the media step's: libjpeg-turbo through simplejpeg where its pixels
are Pillow's), interleaved, ``--repeats`` times, the order swapped each repeat, so the machine's load falls on
both alike (the decode floor alternates the two image by image). Figures are per image, averaged over the
corpus (its size mix) and the repeats, and per size class; the last table sets the two decoders side by side,
with each repeat's kernel CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_run  # noqa: E402  (the corpus and the loopback server, shared with the end-to-end benchmark)

CLASSES = ("0.3 MP (kept)", "1.9 MP", "12 MP")
PHASES = (
    "fetch",
    "hash in",
    "store write",
    "index entry",
    "header",
    "decode",
    "orient+colour",
    "resize",
    "encode",
    "process_image Python",
    "hash out",
    "store write out",
)


class Clock:
    """Thread CPU and wall of each phase, summed per (decode path, size class, phase)."""

    def __init__(self) -> None:
        self.cpu: dict[tuple[str, int, str], float] = defaultdict(float)
        self.wall: dict[tuple[str, int, str], float] = defaultdict(float)
        self.latest: dict[tuple[str, int, str], float] = {}  # CPU of the last timing of each phase

    def time(self, key: tuple[str, int, str], fn: Callable[[], Any]) -> Any:
        c0, w0 = time.thread_time(), time.perf_counter()
        out = fn()
        self.latest[key] = time.thread_time() - c0
        self.cpu[key] += self.latest[key]
        self.wall[key] += time.perf_counter() - w0
        return out


DECODERS = ("pillow", "turbo")


@contextlib.contextmanager
def resized_jpeg_decoders(decode: str) -> Iterator[None]:
    """The media step decodes resized JPEGs with Pillow alone (``pillow``) or as it ships (``turbo``)."""
    from vlmforge.tasks.media import jpeg_fast_decode

    shipped = jpeg_fast_decode.RESIZED_JPEG_DECODERS
    jpeg_fast_decode.RESIZED_JPEG_DECODERS = () if decode == "pillow" else shipped
    try:
        yield
    finally:
        jpeg_fast_decode.RESIZED_JPEG_DECODERS = shipped


def _cfg(decode: str, store: str) -> Any:
    from vlmforge.schemas.config import RunConfig

    return RunConfig.of(release="unused", out=store, max_pixels=1_048_576)


def profile_phases(urls: list[str], decode: str, store_dir: Path, clock: Clock) -> None:
    """Phase 1 (see the module docstring): every phase of every image, timed on its own."""
    from PIL import Image

    from vlmforge.tasks.geometry import geometry_of
    from vlmforge.tasks.http import HttpClient
    from vlmforge.tasks.media.colour import apply_icc, normalise_mode
    from vlmforge.tasks.media.decode import open_header
    from vlmforge.tasks.media.encode import choose_output, encode
    from vlmforge.tasks.media.image import process_image
    from vlmforge.tasks.media.jpeg_fast_decode import decode_resized_jpeg
    from vlmforge.tasks.media.orient import ORIENT_OPS, displayed_size, pending_orientation
    from vlmforge.tasks.media.resize import resize
    from vlmforge.tasks.storage import ContentStore, sha256_bytes

    cfg = _cfg(decode, str(store_dir))
    geometry = geometry_of(cfg.tokens, cfg.media)
    store = ContentStore(str(store_dir))
    client = HttpClient()
    warm = client.get(urls[6], expect_media=True).body  # a resized image: torch's first import is not timed
    process_image(warm, target_size=geometry.stored_image_size, max_pixels=geometry.bounds.image_max_pixels)
    for i, url in enumerate(urls):
        cls = bench_run._base_of(i)[0]

        def key(phase: str, cls: int = cls) -> tuple[str, int, str]:
            return (decode, cls, phase)

        data = clock.time(key("fetch"), lambda url=url: client.get(url, expect_media=True).body)
        sha = clock.time(key("hash in"), lambda data=data: sha256_bytes(data))
        clock.time(key("store write"), lambda data=data, sha=sha: store.put(data, sha, durable=False))
        entry = {"sha256": sha, "bytes": len(data)}
        clock.time(key("index entry"), lambda url=url, entry=entry: store.record(url, entry))
        # the steps of process_image, one at a time, on the path it takes
        t0 = time.thread_time()
        res = process_image(
            data,
            target_size=geometry.stored_image_size,
            max_pixels=geometry.bounds.image_max_pixels,
            min_pixels=geometry.bounds.image_min_pixels,
        )
        whole = time.thread_time() - t0
        img = clock.time(key("header"), lambda data=data: open_header(data, 256_000_000, False))
        w, h = displayed_size(img.size, orientation := pending_orientation(img, None))
        t_h, t_w = geometry.stored_image_size(h, w)
        if res.kept_original:
            clock.time(key("decode"), lambda img=img: (img.draft(img.mode, (1, 1)), img.load()))
            clock.time(key("store write out"), lambda data=data, sha=sha: store.put(data, sha))
            steps = ("header", "decode")
        else:
            target = displayed_size((t_w, t_h), orientation)
            decoded = clock.time(
                key("decode"),
                lambda img=img, t=target, data=data: (
                    img.draft("RGB", t),
                    decode_resized_jpeg(data, img, False),
                )[1],
            )
            work = clock.time(
                key("orient+colour"),
                lambda img=decoded, o=orientation: normalise_mode(
                    apply_icc(img.transpose(ORIENT_OPS[o]) if o != 1 else img, None, []), []
                )[0],
            )
            work = clock.time(
                key("resize"), lambda w=work, t=(t_w, t_h): resize(w, t, Image.Resampling.BICUBIC)
            )
            fmt = choose_output("keep", "JPEG", "RGB", False)
            out = clock.time(key("encode"), lambda w=work, f=fmt: encode(w, f, 92, False))
            assert out == res.out_bytes, "the phases must redo process_image's work exactly"
            out_sha = clock.time(key("hash out"), lambda out=out: sha256_bytes(out))
            clock.time(key("store write out"), lambda out=out, s=out_sha: store.put(out, s))
            steps = ("header", "decode", "orient+colour", "resize", "encode")
        clock.cpu[key("process_image Python")] += max(0.0, whole - sum(clock.latest[key(s)] for s in steps))


def kernel(urls: list[str], decode: str, store_dir: Path) -> tuple[float, float, int]:
    """Phase 2: the media step as a batch runs it (fetch threads + Normaliser); (process CPU-s, wall, ok)."""
    from vlmforge.schemas.recipes import parse_recipe
    from vlmforge.schemas.rows import MediaRow
    from vlmforge.tasks.batch.normalise import Normaliser
    from vlmforge.tasks.fetch.acquire import FetchStream, read_outcome
    from vlmforge.tasks.fetch.options import FetchKnobs
    from vlmforge.tasks.geometry import geometry_of
    from vlmforge.tasks.storage import ContentStore

    base = urls[0].rsplit("/", 1)[0]
    recipe = parse_recipe(
        {
            "subset": "bench",
            "license": "CC0-1.0",
            "sources": [{"kind": "http_files", "allow_private": True, "url": base + "/{name}"}],
        }
    )
    cfg = _cfg(decode, str(store_dir))
    store = ContentStore(str(store_dir))
    normalise = Normaliser(cfg, geometry_of(cfg.tokens, cfg.media), store)
    ok = 0
    c0, w0 = time.process_time(), time.perf_counter()
    for start in range(0, len(urls), 250):  # batches of 250 references, as a run cuts them
        names = [u.rsplit("/", 1)[1] for u in urls[start : start + 250]]
        stream = FetchStream(names, recipe, store, options=FetchKnobs(concurrency=16))
        for o in stream:
            row = MediaRow(subset="bench", sample_id=o.ref, line=0, index=0, ref=o.ref, kind="image")
            row.sha256 = o.sha256
            ok += normalise(row, read_outcome(o, store)).ok
        stream.result()
    return time.process_time() - c0, time.perf_counter() - w0, ok


def decode_floor(files: list[bytes], clock: Clock, rep: int) -> None:
    """The decode alone, as the path decodes each image (in memory, nothing else), into phase "floor", by
    both decoders image by image (the order swapped every image): load that comes and goes hits both."""
    from vlmforge.tasks.geometry import geometry_of
    from vlmforge.tasks.media.decode import open_header
    from vlmforge.tasks.media.jpeg_fast_decode import decode_resized_jpeg
    from vlmforge.tasks.media.orient import displayed_size, pending_orientation

    cfg = _cfg("unused", "unused")
    geometry = geometry_of(cfg.tokens, cfg.media)
    for i, data in enumerate(files):
        cls = bench_run._base_of(i)[0]
        for decode in DECODERS if (i + rep) % 2 == 0 else DECODERS[::-1]:
            img = open_header(data, 256_000_000, False)
            orientation = pending_orientation(img, None)
            w, h = displayed_size(img.size, orientation)
            t_h, t_w = geometry.stored_image_size(h, w)
            if w * h <= geometry.bounds.image_max_pixels:
                clock.time((decode, cls, "floor"), lambda img=img: (img.draft(img.mode, (1, 1)), img.load()))
                continue
            target = displayed_size((t_w, t_h), orientation)
            with resized_jpeg_decoders(decode):
                clock.time(
                    (decode, cls, "floor"),
                    lambda img=img, t=target, data=data: (
                        img.draft("RGB", t),
                        decode_resized_jpeg(data, img, False),
                    ),
                )


def _per_class(clock: Clock, decode: str, phase: str, counts: list[int]) -> list[float]:
    return [clock.cpu[(decode, c, phase)] / max(counts[c], 1) * 1e3 for c in range(3)]


def report(clock: Clock, n: int, repeats: int, kernels: dict[str, list[tuple[float, float, int]]]) -> None:
    """Per decoder: the phase table, the floor and the kernel; then both decoders side by side."""
    counts = [sum(1 for i in range(n) if bench_run._base_of(i)[0] == c) * repeats for c in range(3)]
    images = n * repeats
    for decode in DECODERS:
        print(f"\n### decoder `{decode}`: CPU per image (ms), one thread, {repeats} repeats\n")
        print("| phase | " + " | ".join(CLASSES) + " | corpus mean | share |")
        print("|---|" + "--:|" * 5)
        total = sum(clock.cpu[(decode, c, p)] for c in range(3) for p in PHASES) / images
        for phase in PHASES:
            per = _per_class(clock, decode, phase, counts)
            mean = sum(clock.cpu[(decode, c, phase)] for c in range(3)) / images * 1e3
            print(
                f"| {phase} | "
                + " | ".join(f"{x:.2f}" for x in per)
                + f" | {mean:.2f} | {mean / total / 10:.0f}% |"
            )
        walls = sum(clock.wall[(decode, c, p)] for c in range(3) for p in PHASES) / images * 1e3
        print(f"| **sum** | | | | **{total * 1e3:.2f}** (wall {walls:.2f}) | |")
        store_wall = sum(
            clock.wall[(decode, c, p)] for c in range(3) for p in ("store write", "store write out")
        )
        print(f"\nstore writes' wall (fsync included): {store_wall / images * 1e3:.2f} ms per image")
        floor = _per_class(clock, decode, "floor", counts)
        floor_mean = sum(clock.cpu[(decode, c, "floor")] for c in range(3)) / images * 1e3
        cpu = sum(k[0] for k in kernels[decode])
        wall = sum(k[1] for k in kernels[decode])
        ok = sum(k[2] for k in kernels[decode])
        print(
            f"decode floor: {' / '.join(f'{x:.2f}' for x in floor)} ms per class, "
            f"corpus mean {floor_mean:.2f} ms"
        )
        print(
            f"kernel (fetch threads + Normaliser, {ok}/{images} ok): {cpu / images * 1e3:.2f} ms CPU and "
            f"{wall / images * 1e3:.2f} ms wall per image = **{cpu / images * 1e3 / floor_mean:.2f}x the "
            "decode floor**"
        )
    _side_by_side(clock, n, repeats, counts, kernels)


def _side_by_side(
    clock: Clock, n: int, repeats: int, counts: list[int], kernels: dict[str, list[tuple[float, float, int]]]
) -> None:
    images = n * repeats
    print("\n### `pillow` -> `turbo`: CPU per image (ms)\n")
    print("| measure | " + " | ".join(CLASSES) + " | corpus mean |")
    print("|---|" + "--:|" * 4)
    for label, phase in (
        ("decode floor (image by image)", "floor"),
        ("decode (phases)", "decode"),
        ("resize", "resize"),
        ("encode", "encode"),
        ("fetch", "fetch"),
    ):
        cells = []
        for c in range(3):
            old, new = (_per_class(clock, d, phase, counts)[c] for d in DECODERS)
            cells.append(f"{old:.2f} -> {new:.2f}")
        old, new = (sum(clock.cpu[(d, c, phase)] for c in range(3)) / images * 1e3 for d in DECODERS)
        print(
            f"| {label} | "
            + " | ".join(cells)
            + f" | {old:.2f} -> {new:.2f} ({(new / old - 1) * 100:+.1f}%) |"
        )
    per_repeat = {d: [k[0] / n * 1e3 for k in kernels[d]] for d in DECODERS}
    old, new = (sum(per_repeat[d]) / repeats for d in DECODERS)
    print(f"| kernel CPU | | | | {old:.2f} -> {new:.2f} ({(new / old - 1) * 100:+.1f}%) |")
    for d in DECODERS:
        print(f"\nkernel CPU per image, each repeat, `{d}`: " + ", ".join(f"{x:.2f}" for x in per_repeat[d]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "vlmforge-bench"))
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one intra-op thread, as Ray gives a 1-CPU task
    root = bench_run.make_corpus(a.images, a.seed, Path(a.cache))
    files = [(root / "img" / f"{i:06d}.jpg").read_bytes() for i in range(a.images)]  # page cache
    clock = Clock()
    kernels: dict[str, list[tuple[float, float, int]]] = {d: [] for d in DECODERS}
    with tempfile.TemporaryDirectory(prefix="bench-per-image-") as d:
        tmp = Path(d)
        (tmp / "http").mkdir()
        srv = bench_run.Server(root, tmp / "http")
        try:
            print(f"{a.images} images served by {srv.kind} on 127.0.0.1; load {os.getloadavg()[0]:.2f}")
            urls = [srv.url(f"img/{i:06d}.jpg") for i in range(a.images)]
            for rep in range(a.repeats):
                decode_floor(files, clock, rep)
                order = DECODERS if rep % 2 == 0 else DECODERS[::-1]
                for decode in order:  # a fresh store each time: every object is fetched and written
                    with resized_jpeg_decoders(decode):
                        profile_phases(urls, decode, tmp / f"store-phases-{decode}-{rep}", clock)
                        kernels[decode].append(kernel(urls, decode, tmp / f"store-kernel-{decode}-{rep}"))
        finally:
            srv.close()
    report(clock, a.images, a.repeats, kernels)
    print(f"\nload at the end {os.getloadavg()[0]:.2f}; median phase figures move with the machine's load")


if __name__ == "__main__":
    main()
