"""``vlmforge run`` end to end against img2dataset's CLI, side by side in one run, on the same JPEGs served by
nginx on 127.0.0.1; and the fixed cost and row scaling of the real CLI (issue 22).

    .venv/bin/python benchmarks/bench_run.py --images 1000,5000,20000 --reps 3   # vlmforge vs img2dataset
    .venv/bin/python benchmarks/bench_run.py --images 5000 --i2d-variant          # + keep_ratio_largest
    .venv/bin/python benchmarks/bench_run.py --images 5000,20000 --kernel         # + the media kernel alone
    .venv/bin/python benchmarks/bench_run.py --images 1000,5000 --reps 2         # marginal + fixed cost
    .venv/bin/python benchmarks/bench_run.py --fixed-cost --reps 3                # empty and 10-line subset
    .venv/bin/python benchmarks/bench_run.py --fixed-cost --services              # against running services
    .venv/bin/python benchmarks/bench_run.py --text-rows 5000,20000,200000         # text-only rows

What is timed is each tool's own command line, start-up and teardown included: ``vlmforge run RELEASE --out
OUT --recipes R --max-pixels 1048576`` with embedded defaults (it starts its own Prefect server and Ray;
PREFECT_API_URL and RAY_ADDRESS are removed from its environment), one subset whose JSONL rows each reference
one image fetched through an ``http_files`` recipe, a fresh OUT each repetition; and ``img2dataset`` (its own
venv, ``--i2d-python``, default /tmp/i2d-venv/bin/python: ``python3 -m venv /tmp/i2d-venv &&
/tmp/i2d-venv/bin/pip install img2dataset``) on a url list of the same URLs: webdataset, ``resize_mode=
keep_ratio, image_size=1024, resize_only_if_bigger=True``, ``processes_count=2, thread_count=16`` (vlmforge
fetches with 16 threads a batch); ``--i2d-variant`` adds ``keep_ratio_largest`` with ``skip_reencode=True``.
The tools run interleaved (A B A B ...), ``--reps`` times each.

Measured per repetition: wall (command start to its exit), images/s (ok images / wall), CPU-s of the whole
process tree and peak RSS of the tree. Each command runs under a small wrapper (this file, ``--wrap``) that is
the Linux child subreaper of the command's tree: every descendant, orphaned or not, is reaped by the wrapper,
so ``getrusage(RUSAGE_CHILDREN)`` of the wrapper is the CPU of every process the command started that was
waited for (processes still alive 30 s after the command exits are killed and reaped, and named). A process
whose parent lets the kernel reap it is missing there (Ray's workers are: on 1,000 images that sum said 21
CPU-s of 65), so the CPU of each process is also sampled while it lives (the last 0.2 s of a process may be
missed) and the larger of the two sums is reported. The peak RSS is the largest sum of RSS over all the
wrapper's descendants, sampled every 0.2 s (shared pages are counted in each process, as ``ps`` does);
beside it the peak PSS of the tree (read every 1 s: ``PSS_EVERY``), where a page shared by several processes
(forked workers, Ray's shared-memory object store, mapped libraries) is split among them, so it sums to what
the tree really holds. What is timed is checked: vlmforge's run record (``OUT/runs/*.json``) must say N ok
and the subset published, img2dataset's ``*_stats.json`` N successes; failures are printed with their
reasons.

Corpus (made once, cached under ``--cache``): image i is ~0.3 MP for i % 10 < 6, ~1.9 MP for 6..8 and ~12 MP
for 9 (60/30/10%), cut from scikit-image's photos with a little noise, every file unique (a JPEG comment),
so the first N files of the cache are the N-image corpus for any N; they are read once before the timed
runs (page cache). nginx (2 workers, outside the measured tree) listens on 127.0.0.1 only; without nginx
(``apt-get install -y nginx``) a threaded Python HTTP server serves them, with a warning.

The stage benchmarks (bench_fetch.py, bench_media.py, bench_tokens.py, ...) time one stage's functions in a
harness; this one times what a user runs.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import json
import os
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SUBSET = "bench_photos"
CORPUS_VERSION = "v2"
MIX = ((6, 0.3e6), (3, 1.9e6), (1, 12e6))  # tenths of the corpus, pixels: 60% 0.3 MP, 30% 1.9 MP, 10% 12 MP
BASES_PER_TENTH = 10
LINGER_S = 30.0
SAMPLE_S = 0.2
#: PSS is read every this many samples: it walks each process's page tables (smaps_rollup), which for Ray's
#: processes cost the harness ~20 CPU-s of kernel time in a 70 s run when read every 0.2 s, CPU taken from the
#: tool it measures on a 2-core machine (and more from the tool with more processes); RSS (statm) is read
#: every sample
PSS_EVERY = 5
TIMELINE: Path | None = None  # --timeline DIR: every sample of every run, to find where a peak sits

# --------------------------------------------------------------------------------------------- corpus


def _base_of(i: int) -> tuple[int, int]:
    """(size class, index among that class's images) of image ``i``: classes cycle in tenths."""
    start = 0
    for cls, (tenths, _) in enumerate(MIX):
        if i % 10 < start + tenths:
            return cls, (i // 10) * tenths + i % 10 - start
        start += tenths
    raise AssertionError("MIX covers ten tenths")


def _make_bases(seed: int) -> list[list[bytes]]:
    """Per size class, JPEG crops of scikit-image's photos rescaled to the class's pixels, with mild noise."""
    import numpy as np
    import skimage.data as sd
    from PIL import Image

    photos = []
    for name in ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "retina", "camera"):
        a = getattr(sd, name)()
        photos.append(Image.fromarray(a if a.ndim == 3 else np.stack([a] * 3, -1)).convert("RGB"))
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    out: list[list[bytes]] = []
    for tenths, pixels in MIX:
        bases = []
        for _ in range(tenths * BASES_PER_TENTH):
            p = rng.choice(photos)
            w, h = p.size
            cw, ch = rng.randint(w // 2, w), rng.randint(h // 2, h)
            x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
            aspect = rng.uniform(0.6, 1.8)  # width / height
            tw = int((pixels * rng.uniform(0.9, 1.1) * aspect) ** 0.5)
            th = int(tw / aspect)
            img = p.crop((x, y, x + cw, y + ch)).resize((tw, th), Image.Resampling.BICUBIC)
            arr = np.asarray(img, dtype=np.int16) + nrng.integers(-6, 7, (th, tw, 1), dtype=np.int16)
            buf = io.BytesIO()
            Image.fromarray(arr.clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=rng.randint(85, 93))
            bases.append(buf.getvalue())
        out.append(bases)
    return out


def make_corpus(n: int, seed: int, cache: Path) -> Path:
    """The folder served over HTTP; ``img/{i:06d}.jpg`` exists for every i < n (made once, then reused)."""
    root = cache / f"run-corpus-{CORPUS_VERSION}-{seed}"
    folder = root / "img"
    have = int((root / "count").read_text()) if (root / "count").is_file() else 0
    if have >= n:
        return root
    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    bases = _make_bases(seed)
    for i in range(have, n):
        cls, k = _base_of(i)
        base = bases[cls][k % len(bases[cls])]
        comment = f"vlmforge-bench-run {seed} {i}".encode()
        data = base[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + base[2:]
        (folder / f"{i:06d}.jpg").write_bytes(data)
    (root / "count").write_text(str(n))
    print(f"corpus: {n} JPEGs under {root} (made in {time.perf_counter() - t0:.0f} s)", flush=True)
    return root


# ----------------------------------------------------------------------------------------- http server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NGINX_CONF = """daemon off;
worker_processes 2;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
{user}
events {{ worker_connections 4096; }}
http {{
  access_log off;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  types {{ image/jpeg jpg; }}
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{port};
    root {root};
  }}
}}
"""


class Server:
    """nginx on 127.0.0.1 serving ``root`` (a threaded Python server when nginx is missing)."""

    def __init__(self, root: Path, tmp: Path) -> None:
        self.port = _free_port()
        nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
        if nginx:
            conf = tmp / "nginx.conf"
            user = "user root;" if os.geteuid() == 0 else ""
            conf.write_text(NGINX_CONF.format(tmp=tmp, user=user, port=self.port, root=root))
            cmd = [nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")]
            self.kind = "nginx"
        else:
            print(
                "WARNING: nginx not found (apt-get install -y nginx): serving with Python's threaded "
                "http.server, which is slower and costs CPU on the same cores",
                flush=True,
            )
            cmd = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(self.port),
                   "--directory", str(root)]  # fmt: skip
            self.kind = "python http.server"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(self.url("img/000000.jpg"), timeout=2).read()
                break
            except (OSError, urllib.error.URLError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = tmp / "error.log"
                    raise RuntimeError(
                        f"{self.kind} did not start: {log.read_text() if log.exists() else ''}"
                    ) from None
                time.sleep(0.1)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------------------- measured process tree


def wrap_main(result: str, cmd: list[str]) -> None:
    """Run ``cmd`` as the child subreaper of its whole tree; write wall, exit code and the tree's CPU."""
    import psutil

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of the tree are reparented to us
    res = Path(result)
    t0 = time.perf_counter()
    with open(res.with_suffix(".out"), "wb") as o, open(res.with_suffix(".err"), "wb") as e:
        root = subprocess.Popen(cmd, stdout=o, stderr=e)
    rc: int | None = None
    wall = 0.0
    deadline = float("inf")
    killed: list[str] = []
    while True:
        try:
            pid, status, _ = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == root.pid:
            rc, wall = os.waitstatus_to_exitcode(status), time.perf_counter() - t0
            root.returncode = rc
            deadline = time.monotonic() + LINGER_S
        elif pid == 0:
            if time.monotonic() > deadline:  # left behind by the command: stop them, their CPU still counts
                for p in psutil.Process().children(recursive=True):
                    try:
                        killed.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
                        p.kill()
                    except psutil.Error:
                        pass
                deadline = float("inf")
            time.sleep(0.02)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = {"rc": rc, "wall": wall, "cpu_user": ru.ru_utime, "cpu_sys": ru.ru_stime, "killed": killed}
    res.write_text(json.dumps(out))


# What a process of the tree is, for the breakdown of the peak RSS: Ray and Prefect name their processes.
_KINDS = (  # first match wins: Ray's agents are titled ray::...Agent too
    ("Agent", "ray agents"),
    ("monitor.py", "ray agents"),
    ("ray::", "ray workers"),
    ("default_worker", "ray workers"),
    ("gcs_server", "ray gcs"),
    ("raylet", "raylet"),
    ("dashboard", "ray agents"),
    ("runtime_env", "ray agents"),
    ("log_monitor", "ray agents"),
    ("prefect", "prefect server"),
    ("uvicorn", "prefect server"),
    ("img2dataset", "img2dataset"),
    ("vlmforge", "vlmforge driver"),
)


def process_kind(p: Any) -> str:
    """A short label for ``p`` (a psutil.Process) from its name and command line."""
    text = " ".join([p.name(), *p.cmdline()[:4]])
    return next((label for key, label in _KINDS if key in text), p.name())


def measure(
    cmd: list[str], env: dict[str, str], work: Path, tag: str, services: Any = None
) -> dict[str, Any]:
    """Run ``cmd`` under the wrapper; sample the tree's RSS; return wall, CPU-s, peak RSS and its output.

    ``services`` (a psutil.Process): a running tree the command uses (``--services``), sampled with it; its
    processes' CPU counts from the command's start (Ray's workers of the run are children of its raylet)."""
    import psutil

    def services_tree() -> list[Any]:
        with contextlib.suppress(psutil.Error):
            return [services, *services.children(recursive=True)] if services is not None else []
        return []

    before: dict[tuple[int, float], float] = {}
    for p in services_tree():
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            before[(p.pid, p.create_time())] = t.user + t.system
    result = work / f"{tag}.json"
    wrapper = subprocess.Popen([sys.executable, __file__, "--wrap", str(result), "--", *cmd], env=env)
    me = psutil.Process(wrapper.pid)
    peak, peak_pss, peak_parts = 0, 0, dict[str, int]()
    # CPU seen per process while it lives: the wrapper's rusage misses processes whose parent never waits for
    # them (Ray's raylet lets the kernel reap its workers), so the tree's CPU is the larger of the two
    cpu_seen: dict[tuple[int, float], float] = {}
    timeline = []
    t0 = time.monotonic()
    harness_cpu0 = sum(os.times()[:2])
    n_samples = 0
    try:
        while wrapper.poll() is None:
            rss, pss, parts, each = 0, 0, dict[str, int](), list[tuple[str, int]]()
            with_pss = n_samples % PSS_EVERY == 0
            n_samples += 1
            try:
                procs = me.children(recursive=True)
            except psutil.Error:
                procs = []
            for p in procs + services_tree():
                with contextlib.suppress(psutil.Error):
                    mem = p.memory_full_info() if with_pss else p.memory_info()
                    t = p.cpu_times()
                    ident = (p.pid, p.create_time())
                    cpu_seen[ident] = t.user + t.system - before.get(ident, 0.0)
                    size = mem.rss
                    rss += size
                    pss += getattr(mem, "pss", 0)
                    kind = process_kind(p)
                    parts[kind] = parts.get(kind, 0) + size
                    parts[f"{kind} #"] = parts.get(f"{kind} #", 0) + 1
                    if TIMELINE:
                        each.append((" ".join(p.cmdline()[:1])[:40], size))
            if TIMELINE:
                timeline.append(
                    {"t": round(time.monotonic() - t0, 2), "rss": rss, "pss": pss, "each": each} | parts
                )
            if rss > peak:
                peak, peak_parts = rss, parts
            if with_pss:
                peak_pss = max(peak_pss, pss)
            time.sleep(SAMPLE_S)
    except BaseException:
        for p in [*me.children(recursive=True), me]:
            with contextlib.suppress(psutil.Error):
                p.kill()
        raise
    r = json.loads(result.read_text())
    if TIMELINE:
        TIMELINE.mkdir(parents=True, exist_ok=True)
        (TIMELINE / f"{work.name}-{tag}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in timeline))
    r["harness_cpu"] = sum(os.times()[:2]) - harness_cpu0
    r["cpu_rusage"] = r["cpu_user"] + r["cpu_sys"]
    r["cpu_sampled"] = sum(cpu_seen.values())
    r["cpu"] = max(r["cpu_rusage"], r["cpu_sampled"])
    r["peak_rss"] = peak
    r["peak_pss"] = peak_pss
    r["peak_parts"] = dict(
        sorted(peak_parts.items(), key=lambda kv: -kv[1])
    )  # label: bytes, "label #": count
    r["stdout"] = result.with_suffix(".out").read_text(errors="replace")
    r["stderr"] = result.with_suffix(".err").read_text(errors="replace")
    if r["killed"]:
        print(f"  note: {tag}: killed {len(r['killed'])} processes left 30 s after exit: {r['killed']}")
    return r


# --------------------------------------------------------------------------------------- the peers


class Services:
    """``vlmforge server --ray`` on loopback for the whole benchmark (``--services``): the Prefect server and
    Ray head a scheduled deployment's runs use, started once. Its token is a random one in the environment
    (no file); its Prefect database lives in ``tmp``."""

    def __init__(self, tmp: Path, vlmforge: str) -> None:
        import psutil

        from vlmforge.flows.runtime.embedded import PrefectServer

        port = _free_port()
        token = os.urandom(32).hex()
        self.log = tmp / "services.log"
        env = clean_env(RAY_AUTH_TOKEN=token, PREFECT_HOME=str(tmp / "prefect-home"))
        with self.log.open("wb") as log:
            cmd = [vlmforge, "server", "--ray", "--port", str(port)]
            self.popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.proc = psutil.Process(self.popen.pid)
        url = f"http://127.0.0.1:{port}/api"
        # it starts Ray's head and prints its address first, then the Prefect server
        PrefectServer(url, self.popen, self.log).wait_healthy(180)
        found = [w for w in self.log.read_text(errors="replace").split() if w.startswith("RAY_ADDRESS=")]
        if not found:
            raise RuntimeError(f"vlmforge server printed no RAY_ADDRESS:\n{self.log.read_text()[-2000:]}")
        self.env = {"PREFECT_API_URL": url, "RAY_ADDRESS": found[0].split("=", 1)[1], "RAY_AUTH_TOKEN": token}

    def close(self) -> None:
        self.popen.terminate()  # `vlmforge server` stops Ray's head, then the Prefect server
        try:
            self.popen.wait(timeout=60)
        except subprocess.TimeoutExpired:
            for p in [*self.proc.children(recursive=True), self.proc]:
                with contextlib.suppress(Exception):
                    p.kill()


SERVICES: Services | None = None


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "RAY_ADDRESS")}
    return env | extra


def write_release(root: Path, lines: list[str]) -> Path:
    folder = root / "release" / SUBSET
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("# benchmark subset\n\nLicense: CC0-1.0\n")
    (folder / f"{SUBSET}.jsonl").write_text("".join(line + "\n" for line in lines))
    return root / "release"


def image_lines(n: int) -> list[str]:
    return [
        json.dumps(
            {
                "id": f"img{i:06d}",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image", "image": f"img/{i:06d}.jpg"}, "Describe it."],
                    },
                    {"role": "assistant", "content": f"Photo number {i}."},
                ],
            }
        )
        for i in range(n)
    ]


def text_lines(n: int) -> list[str]:
    rng = random.Random(n)
    words = [
        "the",
        "a",
        "chart",
        "shows",
        "value",
        "year",
        "rate",
        "total",
        "answer",
        "table",
        "figure",
        "row",
        "column",
        "mean",
        "sum",
    ]
    out = []
    for i in range(n):
        q = " ".join(rng.choice(words) for _ in range(rng.randint(8, 30)))
        a = " ".join(rng.choice(words) for _ in range(rng.randint(10, 60)))
        msgs = [{"role": "user", "content": f"Q{i}: {q}?"}, {"role": "assistant", "content": f"{a}."}]
        out.append(json.dumps({"id": f"t{i:07d}", "messages": msgs}))
    return out


def run_vlmforge(a: argparse.Namespace, release: Path, recipes: Path | None, work: Path, tag: str) -> dict:
    out = work / f"out-{tag}"
    cmd = [a.vlmforge, "run", str(release), "--out", str(out), "--max-pixels", str(a.max_pixels)]
    cmd += ["--recipes", str(recipes)] if recipes else []
    cmd += a.vlmforge_arg
    env, services = (SERVICES.env, SERVICES.proc) if SERVICES is not None else ({}, None)
    r = measure(cmd, clean_env(**env), work, tag, services)
    r["ok"], r["failures"] = 0, {}
    runs = sorted((out / "runs").glob("*.json")) if (out / "runs").is_dir() else []
    if runs:
        subsets = json.loads(runs[-1].read_text())["summary"]["subsets"]
        s = next((x for x in subsets if x["subset"] == SUBSET), None)
        if s:
            r["ok"], r["lines"], r["published"] = s["stats"]["ok"], s["stats"]["lines"], s["published"]
            if s["stats"]["ok"] < s["stats"]["lines"]:
                r["failures"] = vlmforge_failures(str(out))
            if not s["published"]:
                r["failures"]["not published"] = f"gate {s['gate']}, error {s['error']}"
            if s["published"] and s["validation"] != "ok":  # the read-back of what was published
                r["failures"]["read-back"] = s["validation"][:500]
    if r["rc"] != 0 or not runs:
        r["failures"]["run"] = f"exit {r['rc']}: {r['stderr'][-1500:]}"
    if a.keep_out and out.is_dir():  # for `vlmforge stats` / `vlmforge query` afterwards
        shutil.move(str(out), str(Path(a.keep_out) / out.name))
    set_aside(out)
    return r


def set_aside(path: Path) -> None:
    """Move a finished run's output out of the way; the work folder is removed once, after the last run.
    Removing ~15,000 files between runs left the file system that many freed inodes, which ext4 (without a
    journal, as here) skips for a minute on every file it makes: the next run paid for the previous one's
    clean-up, and the tool that makes a file per object paid most."""
    if path.exists():
        aside = path.parent / "set-aside"
        aside.mkdir(exist_ok=True)
        path.rename(aside / f"{path.name}-{len(list(aside.iterdir()))}")


def vlmforge_failures(out: str) -> dict[str, int]:
    import duckdb

    sql = (
        "SELECT status || ': ' || split_part(coalesce(reason, ''), ':', 1) AS r, count(*) FROM "
        f"read_parquet('{out}/manifests/samples/**/*.parquet', union_by_name=true) "
        "WHERE status != 'ok' GROUP BY 1"
    )
    try:
        return {k: int(v) for k, v in duckdb.execute(sql).fetchall()}
    except duckdb.Error as exc:
        return {"(manifests unreadable)": str(exc)}  # type: ignore[dict-item]


def run_kernel(a: argparse.Namespace, url_file: Path, work: Path, tag: str) -> dict:
    """vlmforge's media kernel alone on the same URLs: bench_fetch.py's batches (fetch in the background,
    each image verified, resized, encoded and stored, as ``tasks/batch/media_step.py`` does) in a pool of one
    process per core, 250 references a batch and 16 fetch threads as a run has; no Prefect, Ray, parsing,
    tokens, manifests, gate or shards. What no orchestration of this kernel can beat on this machine."""
    store = work / f"store-{tag}"
    cores = str(os.cpu_count() or 1)
    cmd = [sys.executable, str(REPO / "benchmarks" / "bench_fetch.py"), "--run-vlmforge", str(url_file),
           str(store), "--workers", cores, "--threads", "16", "--batch", "250",
           "--max-pixels", str(a.max_pixels)]  # fmt: skip
    # one intra-op thread a process, as Ray gives a 1-CPU task
    r = measure(cmd, clean_env(OMP_NUM_THREADS="1"), work, tag)
    r["ok"], r["failures"] = 0, {}
    try:
        counts = json.loads(r["stdout"].strip().splitlines()[-1])
        r["ok"], r["lines"] = counts["ok"], counts["ok"] + counts["failed"]
    except (IndexError, ValueError, KeyError):
        r["failures"]["run"] = f"exit {r['rc']}: {r['stderr'][-1500:]}"
    set_aside(store)
    return r


def run_i2d(a: argparse.Namespace, url_file: Path, work: Path, tag: str, variant: bool) -> dict:
    out = work / f"out-{tag}"
    i2d = str(Path(a.i2d_python).parent / "img2dataset")
    cmd = [i2d, f"--url_list={url_file}", "--input_format=txt", f"--output_folder={out}",
           "--output_format=webdataset", f"--processes_count={a.i2d_processes}",
           f"--thread_count={a.i2d_threads}", "--image_size=1024", "--resize_only_if_bigger=True",
           "--encode_quality=95", "--number_sample_per_shard=1000", "--timeout=10", "--retries=0",
           "--enable_wandb=False", "--distributor=multiprocessing"]  # fmt: skip
    cmd += (
        ["--resize_mode=keep_ratio_largest", "--skip_reencode=True"]
        if variant
        else ["--resize_mode=keep_ratio"]
    )
    env = clean_env(NO_ALBUMENTATIONS_UPDATE="1", WANDB_MODE="disabled", PYTHONWARNINGS="ignore")
    r = measure(cmd, env, work, tag)
    r["ok"], r["failures"], count = 0, {}, 0
    for p in out.glob("*_stats.json"):
        s = json.loads(p.read_text())
        r["ok"] += s["successes"]
        count += s["count"]
        for k, v in s.get("status_dict", {}).items():
            if k != "success":
                r["failures"][k[:200]] = r["failures"].get(k[:200], 0) + v
    r["lines"] = count
    if r["rc"] != 0:
        r["failures"]["run"] = f"exit {r['rc']}: {r['stderr'][-1500:]}"
    set_aside(out)
    return r


# ------------------------------------------------------------------------------------------ reporting


def _rng(vals: list[float], fmt: str) -> str:
    lo, hi = min(vals), max(vals)
    return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else f"{lo:{fmt}}-{hi:{fmt}}"


def print_rep(size: str, tool: str, rep: int, r: dict, unit: str) -> None:
    cores = os.cpu_count() or 1
    rate = r["ok"] / r["wall"] if r["wall"] else 0.0
    print(
        f"| {size} | {tool} | {rep} | {r['wall']:.1f} | {r['ok']}/{r.get('lines', '?')} | {rate:.1f} | "
        f"{r['cpu']:.0f} | {100 * r['cpu'] / r['wall'] / cores:.0f}% | "
        f"{r['peak_rss'] / 1e9:.2f} | {r['peak_pss'] / 1e9:.2f} |",
        flush=True,
    )
    at_peak = r["peak_parts"]
    parts = ", ".join(
        f"{k} {v / 1e9:.2f} ({at_peak[k + ' #']})"
        for k, v in at_peak.items()
        if not k.endswith("#") and v >= 20e6
    )
    print(f"  at the peak (GB): {parts}", flush=True)
    print(
        f"  the harness's own sampling: {r['harness_cpu']:.1f} CPU-s (not counted in the tool's)", flush=True
    )
    if r["failures"]:
        print(
            f"  FAILURES ({tool}, {size} {unit}, rep {rep}): {json.dumps(r['failures'])[:3000]}", flush=True
        )


def header(unit: str) -> None:
    print(
        f"\n| {unit} | tool | rep | wall (s) | ok | {unit}/s | CPU-s | cores busy | "
        "peak tree RSS (GB) | PSS (GB) |"
    )
    print("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|", flush=True)


def summarise(runs: dict[str, list[dict]]) -> dict[str, dict[str, Any]]:
    cores = os.cpu_count() or 1
    out = {}
    for tool, rs in runs.items():
        rates = [r["ok"] / r["wall"] for r in rs]
        out[tool] = {
            "wall_s": [round(r["wall"], 2) for r in rs],
            "per_s": [round(x, 2) for x in rates],
            "per_s_mean": statistics.mean(rates),
            "per_s_per_core": statistics.mean(rates) / cores,
            "cpu_s": [round(r["cpu"], 1) for r in rs],
            "peak_rss_gb": [round(r["peak_rss"] / 1e9, 3) for r in rs],
            "peak_pss_gb": [round(r["peak_pss"] / 1e9, 3) for r in rs],
            "ok": [r["ok"] for r in rs],
            "all_ok": all(not r["failures"] for r in rs),
        }
    return out


def print_summary(title: str, unit: str, by_size: dict[str, dict[str, dict]]) -> None:
    print(f"\n{title}\n")
    print(f"| {unit} | tool | wall (s) | {unit}/s | CPU-s | peak tree RSS (GB) | PSS (GB) | all ok |")
    print("|--:|---|--:|--:|--:|--:|--:|---|")
    for size, tools in by_size.items():
        for tool, s in tools.items():
            print(
                f"| {size} | {tool} | {_rng(s['wall_s'], '.1f')} | {s['per_s_mean']:.1f} | "
                f"{_rng(s['cpu_s'], '.0f')} | {_rng(s['peak_rss_gb'], '.2f')} | "
                f"{_rng(s['peak_pss_gb'], '.2f')} | {s['all_ok']} |"
            )


# ---------------------------------------------------------------------------------------------- modes


def images_mode(a: argparse.Namespace, sizes: list[int], tmp: Path) -> dict:
    root = make_corpus(max(sizes), a.seed, Path(a.cache))
    srv = Server(root, tmp / "http")
    have_i2d = Path(a.i2d_python).exists() and not a.skip_i2d
    if not have_i2d:
        print(f"img2dataset: skipped ({'--skip-i2d' if a.skip_i2d else a.i2d_python + ' not found'})")
    tools = (
        ["vlmforge"]
        + (["vlmforge-kernel"] if a.kernel else [])
        + (["img2dataset"] + (["img2dataset-largest-skip"] if a.i2d_variant else []) if have_i2d else [])
    )
    by_size: dict[str, dict] = {}
    try:
        print(f"serving {root} with {srv.kind} on 127.0.0.1:{srv.port}")
        recipes = tmp / "recipes"
        recipes.mkdir()
        (recipes / f"{SUBSET}.yaml").write_text(
            f"subset: {SUBSET}\nlicense: CC0-1.0\n"
            f"sources:\n  - kind: http_files\n    allow_private: true\n    url: {srv.url('img/{name}')}\n"
        )
        for n in sizes:
            work = tmp / f"images-{n}"
            work.mkdir()
            release = write_release(work, image_lines(n))
            for i in range(n):  # into the page cache: neither tool reads the disk first
                (root / "img" / f"{i:06d}.jpg").read_bytes()
            url_file = work / "urls.txt"
            url_file.write_text("".join(srv.url(f"img/{i:06d}.jpg") + "\n" for i in range(n)))
            runs: dict[str, list[dict]] = {t: [] for t in tools}
            header("images")
            for rep in range(a.reps):
                for tool in tools:
                    tag = f"{tool}-{rep}"
                    if tool == "vlmforge":
                        r = run_vlmforge(a, release, recipes, work, tag)
                    elif tool == "vlmforge-kernel":
                        r = run_kernel(a, url_file, work, tag)
                    else:
                        r = run_i2d(a, url_file, work, tag, variant=tool != "img2dataset")
                    r["failures"] = r["failures"] or ({} if r["ok"] == n else {"ok": f"{r['ok']} of {n}"})
                    runs[tool].append(r)
                    print_rep(str(n), tool, rep, r, "images")
            by_size[str(n)] = summarise(runs)
    finally:
        srv.close()
    title = "images: vlmforge run vs img2dataset (ranges over repetitions, images/s the mean)"
    print_summary(title, "images", by_size)
    if have_i2d:
        print("\n| images | vlmforge / img2dataset images/s | peak RSS (median) | peak PSS (median) |")
        print("|--:|--:|--:|--:|")
        for size, s in by_size.items():
            v, i = s["vlmforge"], s["img2dataset"]

            def ratio(key: str, v: dict = v, i: dict = i) -> float:
                return statistics.median(v[key]) / max(statistics.median(i[key]), 1e-9)

            s["ratios"] = {
                "images_per_s": v["per_s_mean"] / max(i["per_s_mean"], 1e-9),
                "peak_rss": ratio("peak_rss_gb"),
                "peak_pss": ratio("peak_pss_gb"),
            }
            r = s["ratios"]
            print(f"| {size} | {r['images_per_s']:.2f}x | {r['peak_rss']:.2f}x | {r['peak_pss']:.2f}x |")
    if a.kernel:
        print_kernel_bound(by_size)
    if len(by_size) >= 2:
        print_marginal(by_size)
    return {"server": srv.kind, "images": by_size}


def print_marginal(by_size: dict[str, dict]) -> None:
    """The cost of one more image (the difference between the smallest and the largest size, over the
    difference in images) and the fixed cost (the smallest size's cost less its images at the marginal
    rate), per tool, wall and whole-tree CPU, each tool against img2dataset's marginal figures."""
    sizes = sorted(by_size, key=int)
    n1, n2 = int(sizes[0]), int(sizes[-1])
    print(f"\nmarginal cost per image ({n1:,} -> {n2:,} images) and fixed cost, means over repetitions\n")
    print("| tool | marginal wall (ms) | marginal CPU (ms) | fixed wall (s) | fixed CPU-s | "
          "marginal speed vs img2dataset | marginal CPU vs img2dataset |")  # fmt: skip
    print("|---|--:|--:|--:|--:|--:|--:|")
    marginal: dict[str, tuple[float, float, float, float]] = {}
    for tool in by_size[sizes[0]]:
        if tool == "ratios" or tool not in by_size[sizes[-1]]:  # "ratios": a size's tools side by side
            continue
        lo, hi = by_size[sizes[0]][tool], by_size[sizes[-1]][tool]
        w1, w2 = statistics.mean(lo["wall_s"]), statistics.mean(hi["wall_s"])
        c1, c2 = statistics.mean(lo["cpu_s"]), statistics.mean(hi["cpu_s"])
        mw, mc = (w2 - w1) / (n2 - n1), (c2 - c1) / (n2 - n1)
        marginal[tool] = (mw, mc, w1 - n1 * mw, c1 - n1 * mc)
    peer = marginal.get("img2dataset")
    for tool, (mw, mc, fw, fc) in marginal.items():
        speed = f"{peer[0] / mw:.2f}x" if peer and mw > 0 else "n/a"
        cpu = f"{mc / peer[1]:.2f}x" if peer and peer[1] > 0 else "n/a"
        print(f"| {tool} | {mw * 1e3:.1f} | {mc * 1e3:.1f} | {fw:.1f} | {fc:.1f} | {speed} | {cpu} |")
        by_size[sizes[-1]][tool]["marginal"] = {"wall_ms": mw * 1e3, "cpu_ms": mc * 1e3, "fixed_wall_s": fw,
                                                "fixed_cpu_s": fc}  # fmt: skip


def print_kernel_bound(by_size: dict[str, dict]) -> None:
    """What the pipeline around the media kernel costs, and the most any orchestration of the kernel could
    reach against img2dataset: the kernel alone's images/s over img2dataset's."""
    print("\n| images | vlmforge run / kernel alone (wall) | kernel alone / img2dataset images/s |")
    print("|--:|--:|--:|")
    for size, s in by_size.items():
        v, k, i = s["vlmforge"], s["vlmforge-kernel"], s.get("img2dataset")
        run_over_kernel = statistics.median(v["wall_s"]) / max(statistics.median(k["wall_s"]), 1e-9)
        bound = f"{k['per_s_mean'] / max(i['per_s_mean'], 1e-9):.2f}x" if i else "n/a"
        s["kernel"] = {"run_over_kernel_wall": run_over_kernel, "kernel_bound_vs_i2d": bound}
        print(f"| {size} | {run_over_kernel:.2f}x | {bound} |")


def text_mode(a: argparse.Namespace, label: str, sizes: list[int], tmp: Path) -> dict:
    by_size: dict[str, dict] = {}
    header("rows")
    for n in sizes:
        work = tmp / f"{label}-{n}"
        work.mkdir()
        release = write_release(work, text_lines(n))
        runs: dict[str, list[dict]] = {"vlmforge": []}
        for rep in range(a.reps):
            r = run_vlmforge(a, release, None, work, f"vlmforge-{rep}")
            if r["ok"] != n and "run" not in r["failures"]:
                r["failures"]["ok"] = f"{r['ok']} of {n}"
            runs["vlmforge"].append(r)
            print_rep(str(n), "vlmforge", rep, r, "rows")
        by_size[str(n)] = summarise(runs)
    title = {"fixed": "fixed cost: an empty subset and a 10-line subset", "text": "text-only rows end to end"}
    print_summary(title[label], "rows", by_size)
    if label == "text":
        print("\n| rows | rows/s | rows/s per core | rows per CPU-s |\n|--:|--:|--:|--:|")
        for size, s in by_size.items():
            v = s["vlmforge"]
            per_cpu = int(size) / statistics.mean(v["cpu_s"])
            print(f"| {size} | {v['per_s_mean']:.0f} | {v['per_s_per_core']:.0f} | {per_cpu:.0f} |")
    return {label: by_size}


def run_modes(a: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if a.images:
        results |= images_mode(a, [int(x) for x in a.images.split(",")], tmp)
    if a.fixed_cost:
        results |= text_mode(a, "fixed", [0, 10], tmp)
    if a.text_rows:
        results |= text_mode(a, "text", [int(x) for x in a.text_rows.split(",")], tmp)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", help="comma-separated corpus sizes, e.g. 1000,5000,20000 (default 5000)")
    ap.add_argument("--fixed-cost", action="store_true", help="an empty subset and a 10-line text subset")
    ap.add_argument("--text-rows", help="comma-separated text-only row counts, e.g. 5000,20000,200000")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each tool, interleaved")
    ap.add_argument("--max-pixels", type=int, default=1_048_576)
    ap.add_argument("--vlmforge", default=str(REPO / ".venv" / "bin" / "vlmforge"))
    ap.add_argument("--vlmforge-arg", action="append", default=[], help="extra `vlmforge run` argument")
    ap.add_argument("--i2d-python", default="/tmp/i2d-venv/bin/python")
    ap.add_argument("--i2d-processes", type=int, default=2)
    ap.add_argument("--i2d-threads", type=int, default=16)
    ap.add_argument("--i2d-variant", action="store_true", help="also keep_ratio_largest + skip_reencode")
    ap.add_argument("--skip-i2d", action="store_true")
    ap.add_argument("--keep-out", help="move each vlmforge OUT into this folder (for `vlmforge stats OUT`)")
    ap.add_argument(
        "--kernel", action="store_true", help="also vlmforge's media kernel alone (bench_fetch.py's batches)"
    )
    ap.add_argument(
        "--services",
        action="store_true",
        help="run `vlmforge run` against `vlmforge server --ray` started once (a deployment's set-up)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "vlmforge-bench"))
    ap.add_argument("--timeline", help="write every RSS sample of every run (per process kind) to DIR")
    ap.add_argument("--wrap", help=argparse.SUPPRESS)
    if "--wrap" in sys.argv:  # the measuring wrapper: bench_run.py --wrap RESULT -- CMD...
        k = sys.argv.index("--")
        wrap_main(sys.argv[sys.argv.index("--wrap") + 1], sys.argv[k + 1 :])
        return
    a = ap.parse_args()
    global TIMELINE
    TIMELINE = Path(a.timeline).resolve() if a.timeline else None
    if not a.images and not a.fixed_cost and not a.text_rows:
        a.images = "5000"
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the server, remove temp dirs
    info: dict[str, Any] = {"cores": os.cpu_count(), "loadavg_start": os.getloadavg(), "reps": a.reps}
    if Path(a.i2d_python).exists():
        code = "import importlib.metadata as m; print(m.version('img2dataset'))"
        v = subprocess.run([a.i2d_python, "-c", code], capture_output=True, text=True)
        info["img2dataset"] = v.stdout.strip()
    print(f"machine: {info['cores']} cores, load {info['loadavg_start'][0]:.2f}; "
          f"img2dataset {info.get('img2dataset', 'not installed')}", flush=True)  # fmt: skip
    results: dict[str, Any] = {"info": info}
    global SERVICES
    with tempfile.TemporaryDirectory(prefix="bench-run-") as d:
        tmp = Path(d)
        (tmp / "http").mkdir()
        if a.services:
            SERVICES = Services(tmp, a.vlmforge)
            print(f"services: vlmforge server --ray, {SERVICES.env['PREFECT_API_URL']}", flush=True)
            results["info"]["services"] = True
        try:
            results |= run_modes(a, tmp)
        finally:
            if SERVICES is not None:
                SERVICES.close()
    info["loadavg_end"] = os.getloadavg()
    print("\nJSON " + json.dumps(results, default=str), flush=True)


if __name__ == "__main__":
    main()
