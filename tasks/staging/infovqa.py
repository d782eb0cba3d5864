"""Ahren09/InfoVQA: Parquet with the image bytes embedded in each row, one config per split.

Rows carry ``image: {bytes, path}``, ``question`` and ``answer`` (or ``answers`` / ``label``); the files sit
at the root, in ``<config>/`` or in ``<config>/<split>/`` and are grouped by the split their name starts
with (``train-00000-of-00001.parquet``). Each row becomes one LLaVA-form line: a human turn
``<image>\\n<question>`` and a gpt turn with the (first) answer.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator
from typing import Any

from fsspec import AbstractFileSystem

from .common import (
    LayoutConfig,
    Stager,
    UnreadableRows,
    dirs,
    files,
    image_ext,
    parquet_rows,
    staged_line,
    unreadable_line,
)

_COLUMNS = ("id", "questionId", "question_id", "image", "question", "answer", "answers", "image_url")


class InfoVqaLayout:
    name = "infovqa"

    def configs(self, fs: AbstractFileSystem, root: str) -> list[LayoutConfig]:
        found = [(root, p) for p in files(fs, root, ".parquet")]
        for folder in dirs(fs, root):
            found += [(folder, p) for p in files(fs, folder, ".parquet")]
            for sub in dirs(fs, folder):  # <config>/<split>/*.parquet
                found += [(sub, p) for p in files(fs, sub, ".parquet")]
        by_split: dict[str, list[tuple[str, str]]] = {}
        for folder, p in found:
            by_split.setdefault(_split_of(p), []).append((folder, p))
        return [
            LayoutConfig(split, f"infovqa_{split}", tuple(p for _, p in items), (), items[0][0])
            for split, items in sorted(by_split.items())
        ]

    def lines(self, fs: AbstractFileSystem, cfg: LayoutConfig, stager: Stager) -> Iterator[bytes]:
        for path in cfg.rows_files:
            stem = posixpath.basename(path).split(".", 1)[0]
            try:
                for i, row in enumerate(parquet_rows(fs, path, _COLUMNS)):
                    stager.stats.rows += 1
                    yield _row_line(row, f"{stem}-{i:07d}", stager)
            except UnreadableRows as exc:  # the file's own reject; the other files are staged
                yield unreadable_line(path, str(exc), stager)


def _split_of(path: str) -> str:
    """``train`` of ``train-00000-of-00001.parquet`` / ``train.parquet``."""
    stem = posixpath.basename(path).split(".", 1)[0]
    return re.split(r"[-_]\d", stem, maxsplit=1)[0] or "train"


def _row_line(row: dict[str, Any], fallback_id: str, stager: Stager) -> bytes:
    sid = next((row[k] for k in ("id", "questionId", "question_id") if row.get(k) is not None), None)
    sid = str(sid) if sid is not None else fallback_id
    image = row.get("image")
    data = image.get("bytes") if isinstance(image, dict) else image
    images: list[str] = []
    if isinstance(data, bytes) and data:
        stager.stats.media_refs += 1
        name = image.get("path") if isinstance(image, dict) else None
        images.append(stager.put(data, name or f"{sid}.{image_ext(data)}", embedded=True))
    question = row.get("question")
    rec = {
        "id": sid,
        "images": images,
        "conversations": [
            {"from": "human", "value": f"<image>\n{question}" if isinstance(question, str) else None},
            {"from": "gpt", "value": _answer(row)},
        ],
    }
    return staged_line(rec)


def _answer(row: dict[str, Any]) -> Any:
    for key in ("answer", "answers", "label"):
        if key in row and row[key] is not None:
            value = row[key]
            if isinstance(value, list):
                return str(value[0]) if value else ""
            return value if isinstance(value, str) else str(value)
    return None
