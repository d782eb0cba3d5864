"""The release's shape against one subset and against img2dataset (issue 35): ``vlmforge run`` of the same
N images as one subset and as v3's 76 long-tailed subsets (``tasks/sample_release/shaped.py``), beside
img2dataset on the same URLs; and text-only rows in 76 subsets.

    .venv/bin/python benchmarks/bench_shape.py --images 5000             # 1 vs 76 subsets vs img2dataset
    .venv/bin/python benchmarks/bench_shape.py --images 20000 --skip-one  # 76 subsets vs img2dataset only
    .venv/bin/python benchmarks/bench_shape.py --text-rows 100000,1000000 # text only, 76 subsets

Everything is measured as ``bench_run.py`` measures (its corpus, nginx or Python HTTP server on 127.0.0.1,
its measuring wrapper: wall, whole-tree CPU-s, peak tree RSS and PSS; img2dataset from ``--i2d-python``).
The 76-subset release references the corpus's ``img/{i:06d}.jpg`` through one ``http_files`` recipe a
subset, subset sizes Zipf-like (the largest ~1/5 of the rows, the tail a few rows each). Printed: each run,
then the ratios the issue's goals name: 76 subsets / 1 subset (wall), 76-subset images/s / img2dataset's,
peak PSS / img2dataset's; rows/s of the text runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_run as br  # noqa: E402 - the measuring wrapper, corpus and server of the run benchmark

from vlmforge.tasks.sample_release.shaped import build_shaped_release  # noqa: E402


def run_release(a: argparse.Namespace, release: Path, recipes: Path, work: Path, tag: str) -> dict[str, Any]:
    """``vlmforge run`` of a whole release under the measuring wrapper; ok and lines summed over subsets."""
    out = work / f"out-{tag}"
    cmd = [a.vlmforge, "run", str(release), "--out", str(out), "--max-pixels", str(a.max_pixels)]
    cmd += ["--recipes", str(recipes), "--env-allow", "VLMFORGE_SHAPED_UPSTREAM", *a.vlmforge_arg]
    r = br.measure(cmd, br.clean_env(), work, tag)
    r["ok"], r["lines"], r["failures"] = 0, 0, {}
    runs = sorted((out / "runs").glob("*.json")) if (out / "runs").is_dir() else []
    if runs:
        subsets = json.loads(runs[-1].read_text())["summary"]["subsets"]
        r["subsets"] = len(subsets)
        for s in subsets:
            r["ok"] += s["stats"]["ok"]
            r["lines"] += s["stats"]["lines"]
            if not s["published"] or s["validation"] != "ok":
                r["failures"][s["subset"]] = (
                    f"gate {s['gate']}, error {s['error']}, read-back {s['validation']}"
                )
        if r["ok"] < r["lines"]:
            r["failures"] |= br.vlmforge_failures(str(out))
    if r["rc"] != 0 or not runs:
        r["failures"]["run"] = f"exit {r['rc']}: {r['stderr'][-1500:]}"
    shutil.rmtree(out, ignore_errors=True)
    return r


def images_mode(a: argparse.Namespace, n: int, tmp: Path) -> dict[str, Any]:
    corpus = br.make_corpus(n, a.seed, Path(a.cache))
    srv = br.Server(corpus, tmp / "http")
    work = tmp / f"images-{n}"
    work.mkdir()
    try:
        print(f"serving {corpus} with {srv.kind} on 127.0.0.1:{srv.port}", flush=True)
        base = srv.url("").rstrip("/")
        shapes = {"vlmforge-76": build_shaped_release(work / "s76", n, mix="images", upstream_dir=corpus,
                                                      upstream_url=base)}  # fmt: skip
        if not a.skip_one:
            shapes["vlmforge-1"] = build_shaped_release(
                work / "s1", n, mix="images", subsets=1, upstream_dir=corpus, upstream_url=base
            )
        sizes = [p.rows for p in shapes["vlmforge-76"].plan]
        print(f"76 subsets: {sizes[:4]} ... {sizes[-3:]} rows", flush=True)
        for i in range(n):  # into the page cache: no tool reads the disk first
            (corpus / "img" / f"{i:06d}.jpg").read_bytes()
        url_file = work / "urls.txt"
        url_file.write_text("".join(srv.url(f"img/{i:06d}.jpg") + "\n" for i in range(n)))
        have_i2d = Path(a.i2d_python).exists() and not a.skip_i2d
        tools = [*shapes, *(["img2dataset"] if have_i2d else [])]
        runs: dict[str, list[dict[str, Any]]] = {t: [] for t in tools}
        br.header("images")
        for rep in range(a.reps):
            for tool in tools:
                tag = f"{tool}-{rep}"
                if tool == "img2dataset":
                    r = br.run_i2d(a, url_file, work, tag, variant=False)
                else:
                    r = run_release(a, shapes[tool].root, shapes[tool].recipes, work, tag)
                r["failures"] = r["failures"] or ({} if r["ok"] == n else {"ok": f"{r['ok']} of {n}"})
                runs[tool].append(r)
                br.print_rep(str(n), tool, rep, r, "images")
    finally:
        srv.close()
    summary = br.summarise(runs)
    br.print_summary(f"{n} images: one subset, 76 subsets, img2dataset", "images", {str(n): summary})
    ratios = _ratios(summary)
    print("\n| images | 76 / 1 subset (wall) | 76 subsets / img2dataset images/s | peak PSS / img2dataset |")
    print("|--:|--:|--:|--:|")
    print(f"| {n} | {ratios.get('wall_76_over_1', 'n/a')} | {ratios.get('per_s_76_over_i2d', 'n/a')} | "
          f"{ratios.get('pss_76_over_i2d', 'n/a')} |", flush=True)  # fmt: skip
    return {"summary": summary, "ratios": ratios}


def _ratios(s: dict[str, dict[str, Any]]) -> dict[str, str]:
    def med(tool: str, key: str) -> float:
        return statistics.median(s[tool][key])

    out = {}
    if "vlmforge-1" in s:
        out["wall_76_over_1"] = f"{med('vlmforge-76', 'wall_s') / med('vlmforge-1', 'wall_s'):.2f}x"
    if "img2dataset" in s:
        per_s = s["vlmforge-76"]["per_s_mean"] / max(s["img2dataset"]["per_s_mean"], 1e-9)
        out["per_s_76_over_i2d"] = f"{per_s:.2f}x"
        out["pss_76_over_i2d"] = (
            f"{med('vlmforge-76', 'peak_pss_gb') / med('img2dataset', 'peak_pss_gb'):.2f}x"
        )
    return out


def text_mode(a: argparse.Namespace, sizes: list[int], tmp: Path) -> dict[str, Any]:
    by_size: dict[str, Any] = {}
    br.header("rows")
    for n in sizes:
        work = tmp / f"text-{n}"
        work.mkdir()
        rel = build_shaped_release(work / "s76", n, mix="text")
        runs: dict[str, list[dict[str, Any]]] = {"vlmforge-76": []}
        for rep in range(a.reps):
            r = run_release(a, rel.root, rel.recipes, work, f"text-{rep}")
            runs["vlmforge-76"].append(r)
            br.print_rep(str(n), "vlmforge-76", rep, r, "rows")
        by_size[str(n)] = br.summarise(runs)
    br.print_summary("text-only rows in 76 subsets", "rows", by_size)
    return by_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, help="images in the corpus, e.g. 5000 or 20000")
    ap.add_argument("--text-rows", help="comma-separated text-only row counts, e.g. 100000,1000000")
    ap.add_argument("--skip-one", action="store_true", help="no one-subset run")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--max-pixels", type=int, default=1_048_576)
    ap.add_argument("--vlmforge", default=str(br.REPO / ".venv" / "bin" / "vlmforge"))
    ap.add_argument("--vlmforge-arg", action="append", default=[], help="extra `vlmforge run` argument")
    ap.add_argument("--i2d-python", default="/tmp/i2d-venv/bin/python")
    ap.add_argument("--i2d-processes", type=int, default=2)
    ap.add_argument("--i2d-threads", type=int, default=16)
    ap.add_argument("--skip-i2d", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "vlmforge-bench"))
    a = ap.parse_args()
    if not a.images and not a.text_rows:
        a.images = 5000
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict[str, Any] = {"info": {"cores": os.cpu_count(), "loadavg_start": os.getloadavg()}}
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-shape-") as d:
        tmp = Path(d)
        (tmp / "http").mkdir()
        if a.images:
            results["images"] = images_mode(a, a.images, tmp)
        if a.text_rows:
            results["text"] = text_mode(a, [int(x) for x in a.text_rows.split(",")], tmp)
    results["info"]["loadavg_end"] = os.getloadavg()
    print("\nJSON " + json.dumps(results, default=str), flush=True)


if __name__ == "__main__":
    main()
