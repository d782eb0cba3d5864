"""Parse and plan (no media work) of a generated Nemotron-style JSONL, against plain ``json.loads`` loops.

Prints one table, rows/s per core (CPU time of this process, one process), every row measured in the same
run over the same file:

* ``json.loads loop (decode only)``: ``for line in f: json.loads(line)``, no validation, no records: the
  floor any json.loads-based stage sits under.
* ``json.loads stage (same work)``: the previous parse stage (stdlib ``json.loads`` + the same
  normalisation into Records and media refs, written as a plain loop): the reference of the goal.
* ``vlmforge parse+plan``: what a batch does: seek to its byte range from the catalog plan and
  ``parse_batch`` it (orjson, fast path for well-formed records, GC paused), Records with media refs.
* ``vlmforge catalog scan``: the one streaming pass per subset (sha256, line count, batch offsets, duplicate
  rows and id conflicts across the whole subset).

``--rss`` also runs streaming parse and the catalog scan in child processes over a ~20 MB file and over
the full file and prints their peak RSS (bounded memory: the big file should not need more).

    python benchmarks/bench_parse.py                      # 200k rows (~2 minutes on 2 cores)
    python benchmarks/bench_parse.py --rows 1000000 --rss # the issue's 1M rows
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import posixpath
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec

from vlmforge.schemas.records import MediaRef, Message, Part, Record, Reject
from vlmforge.tasks.catalog.scan import scan_subset_jsonl
from vlmforge.tasks.parse.jsonl_batch import parse_batch

WORDS = (
    "the a chart shows value of total year revenue page table figure document what is in image left right "
    "number percent growth between which highest lowest label axis legend title row column cell sum"
)


_WORDS = WORDS.split(" ")


def generate(path: Path, rows: int, seed: int = 0) -> None:
    """Nemotron v3 style rows: system turns, 1-3 images with metadata, a video now and then, <think>."""
    rnd = random.Random(seed)

    def txt(n: int) -> str:
        return " ".join(rnd.choice(_WORDS) for _ in range(n))

    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            msgs: list[dict[str, Any]] = []
            if rnd.random() < 0.2:
                msgs.append({"role": "system", "content": txt(12)})
            content: list[Any] = []
            for k in range(rnd.choice((1, 1, 1, 2, 3))):
                content.append(
                    {
                        "type": "image",
                        "image": f"images/{i:07d}_{k}.jpg",
                        "metadata": {"width": 800, "height": 600},
                    }
                )
            if rnd.random() < 0.05:
                content.append(
                    {"type": "video", "video": f"clips/{i:07d}.mp4", "metadata": {"video_fps": 2.0}}
                )
            content.append({"type": "text", "text": txt(rnd.randint(8, 40))})
            msgs.append({"role": "user", "content": content})
            answer = txt(rnd.randint(10, 120))
            if rnd.random() < 0.3:
                answer = f"<think>{txt(30)}</think>{answer}"
            msgs.append(
                {"role": "assistant", "content": [{"type": "text", "text": answer}] if i % 2 else answer}
            )
            f.write(json.dumps({"id": f"s-{i:08d}", "messages": msgs}, ensure_ascii=False) + "\n")


# ---- the reference: the previous parse stage (tasks/parse.py before orjson), verbatim but renamed ----


_old_MEDIA_TYPES = ("image", "video")
_old_SCHEMES = ("http://", "https://", "file://", "s3://", "gs://", "hf://", "ftp://", "data:")


class _old_Invalid(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _old_split_lines(data: bytes) -> list[bytes]:
    """Lines of a JSONL chunk; a trailing newline does not start another line."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def _old_unsafe_ref_reason(ref: str) -> str | None:
    """Why a media reference may not be followed, or None when it is a safe relative path."""
    if not ref or not ref.strip():
        return "empty reference"
    if "\x00" in ref:
        return "NUL byte in reference"
    low = ref.lower()
    if low.startswith(_old_SCHEMES) or "://" in low:
        return "URL references need a media recipe that allows them"
    if ref.startswith(("/", "\\")) or (len(ref) > 1 and ref[1] == ":"):
        return "absolute path"
    if ".." in ref.replace("\\", "/").split("/"):
        return "path escapes its folder ('..')"
    return None


def _old_normalize_ref(ref: str) -> str:
    """The path form used for matching against files and tar members (``./a//b`` -> ``a/b``)."""
    return posixpath.normpath(ref.replace("\\", "/")).lstrip("/")


def _old_part(item: Any, where: str) -> Part:
    if isinstance(item, str):
        return {"type": "text", "text": item}
    if not isinstance(item, dict):
        raise _old_Invalid(
            f"invalid_record: {where} must be a string or an object, got {type(item).__name__}"
        )
    ptype = item.get("type")
    if ptype is None:  # untyped parts seen in the wild: {"image": ...} / {"text": ...}
        ptype = next((t for t in ("image", "video", "text") if t in item), None)
    if ptype == "text":
        text = item.get("text")
        if not isinstance(text, str):
            raise _old_Invalid(f"invalid_record: {where}.text must be a string")
        return {"type": "text", "text": text}
    if ptype in _old_MEDIA_TYPES:
        ref = item.get(ptype)
        if isinstance(ref, dict):  # {"image": {"path": ...}} / {"video": {"url": ...}}
            ref = ref.get("path") or ref.get("url")
        if not isinstance(ref, str):
            raise _old_Invalid(f"invalid_record: {where}.{ptype} must be a string path")
        bad = _old_unsafe_ref_reason(ref)
        if bad:
            raise _old_Invalid(f"unsafe_ref: {ref[:200]} ({bad})")
        part: Part = {"type": ptype, "ref": ref}
        if isinstance(item.get("metadata"), dict):
            part["metadata"] = item["metadata"]
        return part
    if isinstance(ptype, str):
        raise _old_Invalid(f"unsupported_part:{ptype[:50]}")
    raise _old_Invalid(f"invalid_record: {where} has no usable type")


def _old_messages(raw: Any) -> list[Message]:
    if not isinstance(raw, list):
        raise _old_Invalid(f"invalid_record: messages must be a list, got {type(raw).__name__}")
    if not raw:
        raise _old_Invalid("invalid_record: messages is empty")
    out: list[Message] = []
    for i, msg in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise _old_Invalid(f"invalid_record: {where} must be an object")
        role = msg.get("role")
        if not isinstance(role, str) or not role:
            raise _old_Invalid(f"invalid_record: {where}.role must be a non-empty string")
        if "content" not in msg:
            raise _old_Invalid(f"invalid_record: missing field {where}.content")
        content = msg["content"]
        if content is None:
            parts: list[Part] = []
        elif isinstance(content, str):
            parts = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = [_old_part(item, f"{where}.content[{j}]") for j, item in enumerate(content)]
        else:
            raise _old_Invalid(f"invalid_record: {where}.content must be a string or a list")
        out.append({"role": role, "content": parts})
    return out


def _old_parse_record(obj: Any, line: int) -> Record:
    """Normalise one decoded JSON value; raises _old_Invalid with a reason."""
    if not isinstance(obj, dict):
        raise _old_Invalid(f"invalid_record: expected a JSON object, got {type(obj).__name__}")
    sid = obj.get("id")
    if "id" not in obj:
        raise _old_Invalid("invalid_record: missing field id")
    if isinstance(sid, int) and not isinstance(sid, bool):
        sid = str(sid)
    if not isinstance(sid, str) or not sid.strip():
        raise _old_Invalid("invalid_record: id must be a non-empty string")
    if "messages" not in obj:
        raise _old_Invalid("invalid_record: missing field messages")
    messages = _old_messages(obj["messages"])
    media: list[MediaRef] = []
    for msg in messages:
        for part in msg["content"]:
            if part["type"] in _old_MEDIA_TYPES:
                media.append(MediaRef(index=len(media), kind=part["type"], ref=part["ref"]))
    return Record(sample_id=sid, line=line, messages=messages, media=tuple(media))


def _old_reject_nan(token: str) -> float:
    raise ValueError(f"{token} is not valid JSON")


def _old_parse_line(raw: bytes, line: int) -> Record | Reject:
    """One JSONL line to a Record or a Reject (never raises on bad input)."""
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if not raw.strip():
        return Reject(line=line, reason="empty_line: the line is blank")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Reject(line=line, reason=f"invalid_utf8: byte {exc.start}: {exc.reason}")
    try:
        obj = json.loads(text, parse_constant=_old_reject_nan)
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc) or type(exc).__name__
        col = f" (col {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        return Reject(line=line, reason=f"invalid_json: {msg}{col}")
    sid = obj.get("id") if isinstance(obj, dict) else None
    try:
        return _old_parse_record(obj, line)
    except _old_Invalid as exc:
        return Reject(line=line, reason=exc.reason, sample_id=sid if isinstance(sid, str) and sid else None)
    except RecursionError:
        return Reject(line=line, reason="invalid_record: nesting too deep")


def _old_parse_chunk(data: bytes, first_line: int) -> Iterator[Record | Reject]:
    """Parse a chunk of whole JSONL lines whose first line has number ``first_line`` (1-based)."""
    for i, raw in enumerate(_old_split_lines(data)):
        yield _old_parse_line(raw, first_line + i)


# ------------------------------------------------------------------------------------------ measuring


def _cpu(fn: Callable[[], int]) -> tuple[float, int]:
    t0 = time.process_time()
    n = fn()
    return time.process_time() - t0, n


def _batches(path: Path, offsets: tuple[int, ...]) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as f:
        for i in range(len(offsets) - 1):
            f.seek(offsets[i])
            yield i, f.read(offsets[i + 1] - offsets[i])


def run(path: Path, batch_lines: int) -> list[tuple[str, float, int]]:
    import numpy  # noqa: F401 - the scan's duplicate resolution imports it once per process: not per-row work

    fs = fsspec.filesystem("file")
    results: list[tuple[str, float, int]] = []

    def decode_only() -> int:
        n = 0
        with open(path, "rb") as f:
            for line in f:
                json.loads(line)
                n += 1
        return n

    def reference_stage() -> int:
        n = 0
        for i, data in _batches(path, offsets):
            items = list(_old_parse_chunk(data, i * batch_lines + 1))
            n += sum(len(r.media) >= 0 for r in items if type(r) is Record)
        return n

    def ours() -> int:
        n = 0
        for i, data in _batches(path, offsets):
            items = parse_batch(data, i * batch_lines + 1)
            n += sum(len(r.media) >= 0 for r in items if type(r) is Record)  # touch the plan
        return n

    scan_holder: list[Any] = []

    def scan() -> int:
        s = scan_subset_jsonl(fs, str(path), batch_lines, subset="bench", batch_media=None)
        scan_holder.append(s)
        return s.rows

    dt, n = _cpu(scan)
    offsets = scan_holder[0].offsets
    results.append(("vlmforge catalog scan (sha256, offsets, duplicates)", dt, n))
    for name, fn in (
        ("json.loads loop (decode only)", decode_only),
        ("json.loads stage (same work: previous parse stage)", reference_stage),
        ("vlmforge parse+plan (orjson, fast path)", ours),
    ):
        dt, n = _cpu(fn)
        results.append((name, dt, n))
    return results


def _rss_child(mode: str, path: str) -> int:
    code = (
        "import resource, sys, fsspec\n"
        "from vlmforge.tasks.parse.parse_batch import iter_records\n"
        "from vlmforge.tasks.catalog.scan import scan_subset_jsonl\n"
        f"mode, path = {mode!r}, {path!r}\n"
        "if mode == 'parse':\n"
        "    n = sum(1 for _ in iter_records(path))\n"
        "else:\n"
        "    fs = fsspec.filesystem('file')\n"
        "    n = scan_subset_jsonl(fs, path, 2000, subset='bench', batch_media=None).rows\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return int(out.stdout.strip().splitlines()[-1]) // 1024  # KiB -> MiB


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000, help="rows of the generated JSONL (issue: 1000000)")
    ap.add_argument("--batch-lines", type=int, default=2000)
    ap.add_argument("--rss", action="store_true", help="also measure peak RSS of streaming, 20 MB vs full")
    ap.add_argument("--keep", type=Path, default=None, help="folder to keep the generated file in")
    args = ap.parse_args(argv)

    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-parse-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"nemotron_{args.rows}.jsonl"
    if not path.exists():
        t0 = time.perf_counter()
        generate(path, args.rows)
        print(f"generated {path} ({path.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - t0:.0f} s")
    size = path.stat().st_size
    results = run(path, args.batch_lines)
    base = next(dt for name, dt, _ in results if name.startswith("json.loads stage"))
    floor = next(dt for name, dt, _ in results if name.startswith("json.loads loop"))
    print()
    print(
        f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{args.rows:,} rows, {size / 1e6:,.0f} MB ({size / args.rows:,.0f} B/row)"
    )
    print()
    head = ("work", "rows/s per core", "vs json.loads stage", "vs decode-only loop")
    print(f"| {head[0]:<52} | {head[1]:>15} | {head[2]:>19} | {head[3]:>19} |")
    print(f"|{'-' * 54}|{'-' * 17}:|{'-' * 20}:|{'-' * 20}:|")
    for name, dt, n in results:
        print(f"| {name:<52} | {n / dt:>15,.0f} | {base / dt:>18.2f}x | {floor / dt:>18.2f}x |")
    if args.rss:
        small = folder / "small_20mb.jsonl"
        with open(path, "rb") as src, open(small, "wb") as dst:
            dst.write(src.read(20_000_000).rsplit(b"\n", 1)[0] + b"\n")
        print()
        big = f"{size / 1e6:,.0f} MB file"
        print(f"| {'peak RSS (MiB)':<30} | {'20 MB file':>10} | {big:>12} | {'ratio':>6} |")
        print(f"|{'-' * 32}|{'-' * 11}:|{'-' * 13}:|{'-' * 7}:|")
        for mode, label in (
            ("parse", "streaming parse (iter_records)"),
            ("scan", "catalog scan with duplicates"),
        ):
            a, b = _rss_child(mode, str(small)), _rss_child(mode, str(path))
            print(f"| {label:<30} | {a:>10} | {b:>12} | {b / a:>5.2f}x |")
    if args.keep is None:
        for p in folder.iterdir():
            p.unlink()
        folder.rmdir()


if __name__ == "__main__":
    main()
