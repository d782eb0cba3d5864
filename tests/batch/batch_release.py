"""A tiny generated release for the batch tests: one subset, a JSONL whose every line ends a known way, a
few PNGs made with Pillow. Nothing is downloaded; the catalog is bypassed (the entry is built here), so the
tests exercise the batch alone."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

from PIL import Image

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry

SUBSET = "tiny"


def _png(size: tuple[int, int], colour: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def _sample(id_: str, images: list[str], answer: str = "A square.") -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "image", "image": ref} for ref in images]
    content.append({"type": "text", "text": "What is shown?"})
    return {
        "id": id_,
        "messages": [
            {"role": "user", "content": content},
            {"role": "assistant", "content": [{"type": "text", "text": answer}]},
        ],
    }


# long enough for --seq-len 300; the answer is long, so a truncation keeps supervised tokens
LONG_ANSWER = " ".join(["A blue square on a plain background, drawn with care."] * 40)

# The JSONL lines in order (line numbers are 1-based), each with the status and reason code it ends with
# under the default options.
LINES: list[tuple[str, str, str | None]] = [
    (json.dumps(_sample("ok-1", ["images/red.png"])), "ok", None),
    ('{"id": "broken", "messages": [', "rejected", "invalid_json"),
    (json.dumps(_sample("missing", ["images/nope.png"])), "rejected", "missing_media"),
    (json.dumps(_sample("not-png", ["images/html.png"])), "rejected", "media_error"),
    (json.dumps(_sample("three", ["images/red.png", "images/blue.png", "images/red.png"])), "ok", None),
    (json.dumps(_sample("big", ["images/big.png"])), "ok", None),
    (json.dumps(_sample("long", ["images/blue.png"], LONG_ANSWER)), "ok", None),
    (json.dumps(_sample("ok-1", ["images/blue.png"])), "rejected", "duplicate_key"),
    (json.dumps(_sample("ok-2", ["images/blue.png"])), "ok", None),
    (json.dumps(_sample("four", ["images/red.png", "images/blue.png"] * 2)), "ok", None),
]
# The knob settings of the knob test, and the line each knob drops (1-based).
KNOBS: dict[str, Any] = {
    "max_media_per_sample": 3,
    "max_num_images": 2,
    "max_visual_tokens": 200,
    "seq_len": 300,
}
DROPPED_BY: dict[str, int] = {
    "max_media_per_sample": 10,
    "max_num_images": 5,
    "max_visual_tokens": 6,
    "seq_len": 7,
}


def make_release(root: Path) -> SubsetEntry:
    """Write the release under ``root`` and return its subset's catalog entry (one batch)."""
    folder = root / SUBSET
    (folder / "images").mkdir(parents=True)
    (folder / "images" / "red.png").write_bytes(_png((64, 48), (200, 30, 30)))
    (folder / "images" / "blue.png").write_bytes(_png((40, 60), (30, 30, 200)))
    (folder / "images" / "big.png").write_bytes(_png((640, 640), (30, 200, 30)))
    (folder / "images" / "html.png").write_bytes(b"<html><body>not found</body></html>")
    data = "".join(line + "\n" for line, _, _ in LINES).encode()
    jsonl = folder / f"{SUBSET}.jsonl"
    jsonl.write_bytes(data)
    return SubsetEntry(
        subset=SUBSET,
        path=str(folder),
        jsonl=str(jsonl),
        readme_sha256=None,
        jsonl_sha256=hashlib.sha256(data).hexdigest(),
        jsonl_bytes=len(data),
        rows=len(LINES),
        license="MIT",
        license_text=None,
        batch_offsets=(0, len(data)),
        release=str(root),
    )


def config(root: Path, **options: Any) -> RunConfig:
    return RunConfig.of(release=str(root), out=str(root / "out"), **options)
