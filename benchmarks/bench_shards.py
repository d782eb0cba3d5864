"""Energon shard writing, index preparation and read-back: vlmforge against the plain tools, in one run.

    .venv/bin/python benchmarks/bench_shards.py                   # 1 GB of mixed media, minutes on 2 cores
    .venv/bin/python benchmarks/bench_shards.py --size 10GB       # the issue's 10 GB
    .venv/bin/python benchmarks/bench_shards.py --read-samples 0  # read back every sample

Corpus (generated at start-up, nothing downloaded): a pool of distinct media files (photo-like JPEGs of
0.3-2 MP, PNGs, a few H.264 MP4 clips) written to a folder on the output disk; every sample gets 1-3 images
(and 1 in 20 a video) as hard links to pool files under its own names, plus its ``json`` record, until the
media reach ``--size``. Both sides then read the same files from the same disk and write to the same disk:

* **write**: ``write_energon_dataset`` with every part a :class:`MediaPart` read from its file (the publish
  path: sizes and sha256 come from the manifests), shards of ``--shard-size``, its ``.nv-meta`` included
  (each shard is indexed as it closes), against ``tar --format=gnu --hard-dereference -cf`` of the same files
  in the same order.
  "durable": vlmforge fsyncs every shard (its default); GNU tar is followed by ``sync`` of its archive.
  "page cache": vlmforge with ``fsync=False`` against plain ``tar``, and against ``tar`` followed by
  ``openssl dgst -sha256`` of the archive (vlmforge hashes every byte it writes for the ``shards``
  manifest; tar does not). Each side runs ``--repeat`` times in alternating order and keeps its best run.
* **shards + .nv-meta**: the durable write above against GNU tar + ``sync`` followed by the
  ``energon prepare`` CLI on the same shards (one worker per core), the CLI's wall time including its
  interpreter start and imports (shown separately as "CLI start-up").
* **read**: samples/s through megatron-energon and vlmforge's cooker (``get_val_dataset`` on the train split,
  ``ChatTaskEncoder``, images decoded to float tensors, videos as ``AVDecoder``, 0 workers) against
  ``webdataset.WebDataset(shards).decode("torchrgb")`` over the same shards in one process (mp4 parts left
  as bytes, which is what Energon's lazy ``AVDecoder`` costs until a frame is read). ``--read-samples``
  limits both to the first N samples (0: all).

Ratios are vlmforge / peer for times (lower is better) and vlmforge / peer for throughputs (higher is better).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _photo(rng: random.Random, width: int, height: int) -> Any:
    import numpy as np
    from PIL import Image

    gen = np.random.default_rng(rng.randrange(2**32))
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack(
        [
            127 + 100 * np.sin(x / gen.uniform(20, 90) + c) * np.cos(y / gen.uniform(20, 90) - c)
            for c in (0.0, 1.0, 2.0)
        ],
        axis=-1,
    )
    noise = gen.normal(0, 8, size=(height, width, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def _mp4(rng: random.Random, frames: int = 48) -> bytes:
    import av
    import numpy as np

    img = np.asarray(_photo(rng, 480, 270))
    buf = io.BytesIO()
    with av.open(buf, mode="w", format="mp4") as container:
        stream = container.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = 320, 180, "yuv420p"
        for i in range(frames):
            crop = np.ascontiguousarray(img[40 : 40 + 180, 2 * i : 2 * i + 320])
            for packet in stream.encode(av.VideoFrame.from_ndarray(crop, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return buf.getvalue()


def make_pool(folder: Path, seed: int = 0) -> list[tuple[str, Path, int, str]]:
    """Distinct media files: (ext, path, size, sha256)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True)
    written: list[tuple[str, Path]] = []
    sizes = [(448, 448), (640, 480), (800, 600), (1024, 768), (1280, 960)]
    for i in range(40):
        width, height = sizes[i % len(sizes)]
        ext = "png" if i % 5 == 4 else "jpg"
        buf = io.BytesIO()
        _photo(rng, width, height).save(buf, format="PNG" if ext == "png" else "JPEG", quality=90)
        (folder / f"pool{i}.{ext}").write_bytes(buf.getvalue())
        written.append((ext, folder / f"pool{i}.{ext}"))
    for i in range(4):
        (folder / f"clip{i}.mp4").write_bytes(_mp4(rng))
        written.append(("mp4", folder / f"clip{i}.mp4"))
    return [
        (ext, path, path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
        for ext, path in written
    ]


def make_corpus(root: Path, total_bytes: int, seed: int = 0) -> tuple[list[dict[str, Any]], Path, int]:
    """Per-sample files (hard links into the pool) and records, until the media reach ``total_bytes``."""
    pool = make_pool(root / "pool", seed)
    images = [p for p in pool if p[0] != "mp4"]
    videos = [p for p in pool if p[0] == "mp4"]
    files = root / "files"
    files.mkdir()
    rng = random.Random(seed + 1)
    samples: list[dict[str, Any]] = []
    media_bytes = 0
    i = 0
    while media_bytes < total_bytes:
        key = f"bench__{i:07d}"
        chosen = rng.sample(images, rng.randint(1, 3)) + ([rng.choice(videos)] if i % 20 == 19 else [])
        parts = []
        content: list[dict[str, Any]] = [{"type": "text", "text": f"What is shown in sample {i}?"}]
        for index, (ext, path, size, sha) in enumerate(chosen):
            name = f"{index}.{ext}"
            os.link(path, files / f"{key}.{name}")
            parts.append((name, files / f"{key}.{name}", size, sha))
            kind = "video" if ext == "mp4" else "image"
            content.append({"type": kind, "index": index, "part": name, "ref": path.name, "sha256": sha})
            media_bytes += size
        record = {
            "id": str(i),
            "messages": [
                {"role": "user", "content": content},
                {"role": "assistant", "content": [{"type": "text", "text": "A synthetic photo." * 8}]},
            ],
            "vlmforge": {"subset": "bench", "line": i + 1, "key": key, "total_tokens": 1000 + i % 500},
        }
        payload = json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()
        (files / f"{key}.json").write_bytes(payload)
        samples.append({"key": key, "record": record, "parts": parts})
        i += 1
    return samples, files, media_bytes


def _drop_caches_hint() -> None:
    os.sync()


def bench_write(
    samples: list[dict[str, Any]], files: Path, out: Path, shard_bytes: int, fsync: bool
) -> dict[str, float]:
    import vlmforge.tasks.publish.dataset as dataset
    from vlmforge.tasks.publish.samples import MediaPart, ShardSample

    def items() -> Any:
        for s in samples:
            media = tuple(
                MediaPart(name=name, size=size, sha256=sha, load=path.read_bytes)
                for name, path, size, sha in s["parts"]
            )
            yield ShardSample(key=s["key"], split="train", json=s["record"], media=media)

    dest = out / ("durable" if fsync else "cached") / "bench"
    _drop_caches_hint()
    t0 = time.perf_counter()
    result = dataset.write_energon_dataset(
        items(),
        dest,
        subset="bench",
        shard_max_bytes=shard_bytes,
        shard_max_samples=10**9,
        fsync=fsync,
        sample_format="crude",  # the read-back below is the crude cooker's
    )
    return {
        # the whole write: the index is built as shards finish, .nv-meta completed after the last one
        "seconds": time.perf_counter() - t0,
        "bytes": float(sum(s.bytes for s in result.shards)),
        "shards": float(len(result.shards)),
        "path": str(dest),  # type: ignore[dict-item]
    }


def bench_tar(
    samples: list[dict[str, Any]], files: Path, out: Path, sync: bool, checksum: bool = False
) -> dict[str, float]:
    listing = out / "tar-list.txt"
    order: list[str] = []
    for s in samples:
        order.append(f"{s['key']}.json")
        order += [path.name for _name, path, _size, _sha in s["parts"]]
    listing.write_text("\n".join(order) + "\n")
    target = out / f"plain-{'durable' if sync else 'cached'}.tar"
    _drop_caches_hint()
    t0 = time.perf_counter()
    subprocess.run(
        [
            "tar",
            "--format=gnu",
            "--hard-dereference",
            "-cf",
            str(target),
            "-C",
            str(files),
            "-T",
            str(listing),
        ],
        check=True,
    )
    if sync:
        subprocess.run(["sync", str(target)], check=True)
    if checksum:
        subprocess.run(["openssl", "dgst", "-sha256", str(target)], check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    size = target.stat().st_size
    target.unlink()
    return {"seconds": seconds, "bytes": float(size)}


def bench_prepare_cli(dataset: Path, workers: int) -> dict[str, float]:
    energon = Path(sys.executable).with_name("energon")
    startup = float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import megatron.energon.cli.main"], check=True)
        startup = min(startup, time.perf_counter() - t0)
    cmd = [
        str(energon),
        "prepare",
        str(dataset),
        "--non-interactive",
        "--split-parts",
        "train:train-.*",
        "--sample-type",
        "CrudeWebdataset",
        "--force-overwrite",
        "--num-workers",
        str(workers),
        "--no-progress",
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return {"seconds": time.perf_counter() - t0, "startup": startup}


def bench_read_cooker(dataset: Path, limit: int | None) -> dict[str, float]:
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    from vlmforge.energon import ChatTaskEncoder

    errors: list[str] = []
    wc = WorkerConfig(
        rank=0,
        world_size=1,
        num_workers=0,
        global_error_handler=lambda e, s, src=None: errors.append(repr(e)),
    )
    ds = get_val_dataset(
        str(dataset),
        split_part="train",
        worker_config=wc,
        batch_size=None,
        limit=limit,
        task_encoder=ChatTaskEncoder(),
    )
    n = 0
    t0 = time.perf_counter()
    for sample in get_loader(ds):
        n += 1
        assert sample.images or sample.videos
        if limit is not None and n >= limit:
            break
    seconds = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"cooker read errors: {errors[:3]}")
    return {"seconds": seconds, "samples": float(n)}


def bench_read_wds(dataset: Path, limit: int | None) -> dict[str, float]:
    import webdataset as wds

    urls = [str(p) for p in sorted(dataset.glob("train-*.tar"))]
    pipe = wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode("torchrgb")
    n = 0
    t0 = time.perf_counter()
    for sample in pipe:
        n += 1
        assert "json" in sample
        if limit is not None and n >= limit:
            break
    return {"seconds": time.perf_counter() - t0, "samples": float(n)}


def _mb_s(row: dict[str, float]) -> float:
    return row["bytes"] / row["seconds"] / 1e6


def main() -> None:
    from vlmforge.tasks.publish.rolling import parse_size

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--size", default="1GB", help="media bytes in the corpus (default 1GB; the issue: 10GB)"
    )
    parser.add_argument("--shard-size", default="256MB", help="shard_max_bytes of the writer")
    parser.add_argument("--read-samples", type=int, default=600, help="samples read back per reader (0: all)")
    parser.add_argument("--workdir", default=None, help="folder on the disk to test (default: a temp folder)")
    parser.add_argument("--repeat", type=int, default=2, help="write runs per side (best kept; default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the corpus and outputs")
    args = parser.parse_args()

    total, shard_bytes = parse_size(args.size), parse_size(args.shard_size)
    root = Path(tempfile.mkdtemp(prefix="bench-shards-", dir=args.workdir))
    try:
        t0 = time.perf_counter()
        samples, files, media = make_corpus(root / "corpus", total)
        print(
            f"corpus: {len(samples):,} samples, {media / 1e9:.2f} GB of media "
            f"({sum(len(s['parts']) for s in samples):,} files) in {time.perf_counter() - t0:.1f} s; "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )
        out = root / "out"
        out.mkdir()
        import megatron.energon  # noqa: F401  # imported once up front: prepare timings exclude it

        rows: list[tuple[str, str, str, str, str]] = []

        def best(runs: list[dict[str, float]]) -> dict[str, float]:
            return min(runs, key=lambda r: r["seconds"])

        durable_ours: list[dict[str, float]] = []
        durable_tar: list[dict[str, float]] = []
        cached_ours: list[dict[str, float]] = []
        cached_tar: list[dict[str, float]] = []
        cached_tar_sum: list[dict[str, float]] = []
        for rep in range(args.repeat):  # alternate the order, keep each side's best run
            last = rep == args.repeat - 1
            if rep % 2:
                durable_tar.append(bench_tar(samples, files, out, sync=True))
            durable_ours.append(bench_write(samples, files, out, shard_bytes, fsync=True))
            if not rep % 2:
                durable_tar.append(bench_tar(samples, files, out, sync=True))
            if not last:
                shutil.rmtree(Path(str(durable_ours[-1]["path"])).parent)
            cached_tar.append(bench_tar(samples, files, out, sync=False))
            cached_ours.append(bench_write(samples, files, out, shard_bytes, fsync=False))
            shutil.rmtree(Path(str(cached_ours[-1]["path"])).parent)
            cached_tar_sum.append(bench_tar(samples, files, out, sync=False, checksum=True))
        ours, tar = best(durable_ours), best(durable_tar)
        cached, tar_cached, tar_sum = best(cached_ours), best(cached_tar), best(cached_tar_sum)
        ours["path"] = durable_ours[-1]["path"]
        rows.append(
            (
                "write, durable (MB/s)",
                f"{_mb_s(ours):.0f}",
                f"{_mb_s(tar):.0f}",
                f"{_mb_s(ours) / _mb_s(tar):.2f}",
                f"fsync per shard vs tar + sync; {ours['bytes'] / 1e9:.2f} GB in "
                f"{ours['shards']:.0f} shards, tar {tar['bytes'] / 1e9:.2f} GB",
            )
        )
        rows.append(
            (
                "write, page cache (MB/s)",
                f"{_mb_s(cached):.0f}",
                f"{_mb_s(tar_cached):.0f}",
                f"{_mb_s(cached) / _mb_s(tar_cached):.2f}",
                "no fsync; vlmforge sha256-hashes every byte (the manifest checksum), tar hashes nothing",
            )
        )
        rows.append(
            (
                "write, page cache + sha256 (MB/s)",
                f"{_mb_s(cached):.0f}",
                f"{_mb_s(tar_sum):.0f}",
                f"{_mb_s(cached) / _mb_s(tar_sum):.2f}",
                "peer: tar, then `openssl dgst -sha256` of the archive (the same work as vlmforge)",
            )
        )

        dataset = Path(str(ours["path"]))
        workers = os.cpu_count() or 1
        cli = bench_prepare_cli(dataset, workers)
        both = tar["seconds"] + cli["seconds"]
        rows.append(
            (
                "shards + .nv-meta, durable (s)",
                f"{ours['seconds']:.2f}",
                f"{both:.2f}",
                f"{ours['seconds'] / both:.2f}",
                f"{len(samples):,} samples; vlmforge indexes each shard as it closes; peer: tar + sync, "
                f"then `energon prepare` with {workers} workers (CLI start-up {cli['startup']:.1f} s)",
            )
        )

        limit = args.read_samples or None
        cooker = bench_read_cooker(dataset, limit)
        plain = bench_read_wds(dataset, limit)
        rate_c, rate_w = cooker["samples"] / cooker["seconds"], plain["samples"] / plain["seconds"]
        rows.append(
            (
                "read back (samples/s)",
                f"{rate_c:.0f}",
                f"{rate_w:.0f}",
                f"{rate_c / rate_w:.2f}",
                f"{cooker['samples']:.0f} samples, images decoded, 0 workers",
            )
        )

        head = ("measure", "vlmforge", "peer", "ratio", "notes")
        peers = "peer: GNU tar / `energon prepare` CLI / webdataset 1.0.2"
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        print()
        print(f"| {' | '.join(h.ljust(w) for h, w in zip(head, widths, strict=True))} |")
        print(f"|{'|'.join('-' * (w + 2) for w in widths)}|")
        for r in rows:
            print(f"| {' | '.join(c.ljust(w) for c, w in zip(r, widths, strict=True))} |")
        print(peers)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
