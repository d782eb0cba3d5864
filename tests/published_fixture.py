"""Builds a published output from synthetic subsets (manifests, store, Energon datasets) for the tests
that read one back: validation, mixes."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from vlmforge.schemas.sample_keys import sanitize_key
from vlmforge.tasks.manifests import OutputLayout, write_part, write_records_part
from vlmforge.tasks.publish.publish import publish_metadataset, publish_subset
from vlmforge.tasks.storage import ContentStore

W, H = 16, 12


@dataclass(frozen=True)
class SubsetSpec:
    """A synthetic subset: ``n`` ok samples, ``tokens(i)`` total tokens each, ``images`` PNGs each."""

    name: str
    n: int
    tokens: Callable[[int], int] = lambda i: 100
    images: int = 1
    val_every: int = 0  # every k-th sample goes to val (0: none)
    license: str = "CC-BY-4.0"
    batch_lines: int = 0  # lines per manifest part (0: one part)


def _png(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (W, H), (seed * 37 % 256, seed * 91 % 256, seed * 13 % 256)).save(buf, format="PNG")
    return buf.getvalue()


def write_manifests(out: str, spec: SubsetSpec, *, key_of: Callable[[int], str] | None = None) -> None:
    """The manifest parts `build_batch` commits for a subset whose every line is ok."""
    layout = OutputLayout(out)
    store = ContentStore(layout.store)
    per_part = spec.batch_lines or spec.n
    for part_index, start in enumerate(range(0, spec.n, per_part)):
        samples: list[dict[str, Any]] = []
        media: list[dict[str, Any]] = []
        records: list[tuple[int, str]] = []
        for i in range(start, min(spec.n, start + per_part)):
            line, sample_id = i + 1, f"id.{i}"
            key = key_of(i) if key_of else sanitize_key(spec.name, sample_id)
            split = "val" if spec.val_every and i % spec.val_every == spec.val_every - 1 else "train"
            content: list[dict[str, Any]] = [{"type": "text", "text": f"question {i}"}]
            for j in range(spec.images):
                data = _png(1000 * i + j)
                sha = store.put(data)
                media.append(
                    {
                        "subset": spec.name,
                        "sample_id": sample_id,
                        "line": line,
                        "index": j,
                        "ref": f"img_{i}_{j}.png",
                        "kind": "image",
                        "status": "ok",
                        "sha256": sha,
                        "bytes": len(data),
                        "format": "PNG",
                        "width": W,
                        "height": H,
                        "out_sha256": sha,
                        "out_bytes": len(data),
                        "out_ext": "png",
                        "out_width": W,
                        "out_height": H,
                        "kept_original": True,
                        "visual_tokens": 4,
                    }
                )
                content.append(
                    {
                        "type": "image",
                        "index": j,
                        "part": f"{j}.png",
                        "ref": f"img_{i}_{j}.png",
                        "width": W,
                        "height": H,
                        "sha256": sha,
                    }
                )
            total = spec.tokens(i)
            visual = 4 * spec.images
            tokens = {"text_tokens": total - visual, "visual_tokens": visual, "total_tokens": total}
            doc = {
                "id": sample_id,
                "messages": [
                    {"role": "user", "content": content},
                    {"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]},
                ],
                "vlmforge": {"subset": spec.name, "line": line, "key": key, **tokens},
            }
            records.append((line, json.dumps(doc, sort_keys=True, separators=(",", ":"))))
            samples.append(
                {
                    "subset": spec.name,
                    "sample_id": sample_id,
                    "line": line,
                    "key": key,
                    "status": "ok",
                    "n_images": spec.images,
                    "n_videos": 0,
                    "split": split,
                    **tokens,
                }
            )
        stats = {
            "lines": len(samples),
            "ok": len(samples),
            "rejected": 0,
            "images": spec.images * len(samples),
        }
        write_part(layout, "media", spec.name, part_index, media, fingerprint="fp")
        write_records_part(layout, spec.name, part_index, records, "fp")
        write_part(layout, "samples", spec.name, part_index, samples, fingerprint="fp", stats=stats)
    write_part(
        layout,
        "subsets",
        spec.name,
        0,
        [{"subset": spec.name, "license": spec.license, "rows": spec.n, "ok": spec.n, "published": True}],
    )


def build_out(
    root: Path | str, specs: list[SubsetSpec], *, shard_max_samples: int = 4, sample_format: str = "crude"
) -> str:
    """An output (a folder or an fsspec URL) with manifests and published Energon datasets for ``specs``."""
    out = str(root)
    for spec in specs:
        write_manifests(out, spec)
        publish_subset(
            OutputLayout(out),
            spec.name,
            shard_max_bytes=1_000_000_000,
            shard_max_samples=shard_max_samples,
            sample_format=sample_format,
        )
    publish_metadataset(OutputLayout(out))
    return out
