"""Speed of ``vlmforge catalog --estimate`` on a synthetic release of 76 subsets (the Nemotron Image Training
v3 count): seconds per thousand media references, with no media body read.

    .venv/bin/python benchmarks/bench_estimate.py                    # 76 subsets x 400 rows, 2 refs a row
    .venv/bin/python benchmarks/bench_estimate.py --rows 2000 --refs 3

The subsets take turns over the four ways media reach a run: a media tar in the release (member table read
by seeking), a zip at a loopback URL (central directory by range), plain HTTP files (HEAD on a seeded
sample of --probe objects, the rest from the sample's mean) and files under a --media-root. Media bodies
are small random bytes (the estimate never reads them; the server's log is checked for it).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

KINDS = ("tar", "zip", "http", "root")


def _rows(subset: str, rows: int, refs: int, name: Callable[[int], str]) -> str:
    out = []
    for i in range(rows):
        content = [{"type": "image", "image": name(i * refs + j)} for j in range(refs)] + ["Describe."]
        msgs = [{"role": "user", "content": content}, {"role": "assistant", "content": f"row {i}"}]
        out.append(json.dumps({"id": f"{subset}-{i}", "messages": msgs}))
    return "\n".join(out) + "\n"


def build(base: Path, srv: object, subsets: int, rows: int, refs: int) -> tuple[Path, Path, Path, int, int]:
    rng = random.Random(0)
    release, recipes, root = base / "release", base / "recipes", base / "roots"
    recipes.mkdir(parents=True)
    total = true_bytes = 0
    for s in range(subsets):
        kind, subset = KINDS[s % len(KINDS)], f"subset_{s:02d}"
        folder = release / subset
        folder.mkdir(parents=True)
        (folder / "README.md").write_text(f"# {subset}\n\nLicense: CC-BY-4.0\n")
        n = rows * refs
        names = [f"{subset}/img_{i:06d}.jpg" for i in range(n)]
        bodies = [rng.randbytes(rng.randint(2_000, 6_000)) for _ in range(n)]
        if kind == "tar":
            (folder / "media").mkdir()
            with tarfile.open(folder / "media" / "shard_000.tar", "w") as tf:
                for name, body in zip(names, bodies, strict=True):
                    info = tarfile.TarInfo(name)
                    info.size = len(body)
                    tf.addfile(info, io.BytesIO(body))
        elif kind == "zip":
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
                for name, body in zip(names, bodies, strict=True):
                    zf.writestr(name, body)
            url = srv.add(f"/zips/{subset}.zip", buf.getvalue())  # type: ignore[attr-defined]
            (recipes / f"{subset}.yaml").write_text(
                f"subset: {subset}\nlicense: CC-BY-4.0\nsources:\n  - kind: archive\n"
                f"    allow_private: true\n    url: {url}\n"
            )
        elif kind == "http":
            for name, body in zip(names, bodies, strict=True):
                srv.add(f"/files/{name}", body)  # type: ignore[attr-defined]
            url = srv.url("/files/{ref}")  # type: ignore[attr-defined]
            (recipes / f"{subset}.yaml").write_text(
                f"subset: {subset}\nlicense: CC-BY-4.0\nsources:\n  - kind: http_files\n"
                f"    allow_private: true\n    url: {url}\n"
            )
        else:
            for name, body in zip(names, bodies, strict=True):
                (root / name).parent.mkdir(parents=True, exist_ok=True)
                (root / name).write_bytes(body)
        (folder / f"{subset}.jsonl").write_text(_rows(subset, rows, refs, lambda i, names=names: names[i]))
        total += n
        true_bytes += sum(len(b) for b in bodies)
    return release, recipes, root, total, true_bytes


def main() -> None:
    from http_fixture import HttpFixture

    from vlmforge.schemas.config import RunConfig
    from vlmforge.tasks.estimate.release_estimate import EstimateOptions, estimate_release

    ap = argparse.ArgumentParser()
    ap.add_argument("--subsets", type=int, default=76)
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--refs", type=int, default=2)
    ap.add_argument("--probe", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, HttpFixture() as srv:
        release, recipes, root, refs, true_bytes = build(Path(tmp), srv, args.subsets, args.rows, args.refs)
        srv.reset_log()
        cfg = RunConfig.of(
            out=f"{tmp}/out", release=str(release), catalogs=(str(recipes),), media_roots=(str(root),)
        )
        t0 = time.perf_counter()
        est = estimate_release(
            EstimateOptions(
                cfg=cfg, out=f"{tmp}/out", probe_sample=args.probe, decode_sample=0, cores=os.cpu_count() or 1
            )
        )
        seconds = time.perf_counter() - t0
        total = est.rows[-1]
        log = srv.requests()
        bodies = [
            r for r in log if r.method == "GET" and r.sent > 1 and not (r.range or "").startswith("bytes=-")
        ]
        print(
            json.dumps(
                {
                    "subsets": args.subsets,
                    "refs": total.refs,
                    "objects": total.objects,
                    "seconds": round(seconds, 2),
                    "seconds_per_1000_refs": round(seconds / total.refs * 1000, 3),
                    "requests": len(log),
                    "head_requests": sum(r.method == "HEAD" for r in log),
                    "media_bodies_read": len(bodies),
                    "bytes_method": total.bytes_method,
                    "bytes": total.bytes,
                    "true_bytes": true_bytes,
                    "bytes_error": round(total.bytes / true_bytes - 1, 4),
                },
                indent=1,
            )
        )
        assert refs == total.refs


if __name__ == "__main__":
    main()
