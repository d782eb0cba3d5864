"""lmms-lab/LLaVA-Video-178K: one folder per duration/source category with LLaVA-style JSON.

Rows are ``id``, ``video``, ``conversations: [{from, value}]`` where ``<image>`` stands for the video (it is
rewritten to ``<video>`` unless the row also has images); the videos sit in ``*.tar.gz`` archives beside
the JSON, or unpacked beside it (taken first). Each archive is streamed once and only referenced members
are kept; a tar is not opened once every wanted video is found.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from typing import Any

from fsspec import AbstractFileSystem

from ..archives import iter_tar, normalize_member
from ..http import FetchError
from .common import (
    MAX_MEDIA_BYTES,
    READ_CHUNK,
    LayoutConfig,
    Stager,
    dirs,
    files,
    isfile,
    json_rows,
    jsonable,
    member_candidates,
    staged_line,
)


class LlavaVideoLayout:
    name = "llava_video"

    def configs(self, fs: AbstractFileSystem, root: str) -> list[LayoutConfig]:
        out: list[LayoutConfig] = []
        for folder in dirs(fs, root):
            rows = files(fs, folder, ".json", ".jsonl")
            if rows:
                name = folder.rsplit("/", 1)[-1]
                tars = files(fs, folder, ".tar.gz", ".tgz", ".tar")
                out.append(LayoutConfig(name, name, tuple(rows), tuple(tars), folder))
        return out

    def lines(self, fs: AbstractFileSystem, cfg: LayoutConfig, stager: Stager) -> Iterator[bytes]:
        rows = [r for path in cfg.rows_files for r in json_rows(fs, path)]
        stager.stats.rows = len(rows)
        refs = {
            r["video"] for r in rows if isinstance(r, dict) and isinstance(r.get("video"), str) and r["video"]
        }
        found = _loose_files(fs, cfg, refs, stager)
        found |= _tar_members(fs, cfg.archives, refs - set(found), cfg.name, stager)
        for row in rows:
            yield _row_line(row, found, stager)


def _loose_files(fs: AbstractFileSystem, cfg: LayoutConfig, refs: set[str], stager: Stager) -> dict[str, str]:
    """Videos found as files beside the JSON (an unpacked copy): path -> store reference."""
    found: dict[str, str] = {}
    for ref in sorted(refs):
        loose = posixpath.normpath(f"{cfg.folder}/{normalize_member(ref)}")
        if loose.startswith(cfg.folder + "/") and ".." not in ref.split("/") and isfile(fs, loose):
            found[ref] = stager.put(fs.cat_file(loose), ref, embedded=False)
    return found


def _row_line(row: Any, found: dict[str, str], stager: Stager) -> bytes:
    if not isinstance(row, dict):
        return staged_line({"vlmforge_error": jsonable(row)})
    rec = {k: jsonable(v) for k, v in row.items()}
    video = row.get("video")
    if isinstance(video, str) and video:
        stager.stats.media_refs += 1
        if video in found:
            rec["video"] = found[video]
        else:
            stager.stats.unresolved += 1
        if "image" not in row and "images" not in row:  # "<image>" stands for the video
            _image_placeholders_to_video(rec)
    return staged_line(rec)


def _image_placeholders_to_video(rec: dict[str, Any]) -> None:
    for key in ("conversations", "conversation"):
        turns = rec.get(key)
        if isinstance(turns, list):
            for t in turns:
                if isinstance(t, dict) and isinstance(t.get("value"), str):
                    t["value"] = t["value"].replace("<image>", "<video>")


def _tar_members(
    fs: AbstractFileSystem, tars: tuple[str, ...], wanted: set[str], config: str, stager: Stager
) -> dict[str, str]:
    """Stream each tar once and store the members ``wanted`` names (by path, folder-tolerant); returns
    path -> store reference. A tar is not opened once every wanted path is found."""
    found: dict[str, str] = {}
    by_member: dict[str, list[str]] = {}
    for path in wanted:
        for cand in member_candidates(path, config, ""):
            by_member.setdefault(cand, []).append(path)
    for tar in tars:
        if len(found) == len(wanted):
            break
        label = posixpath.basename(tar)
        stager.stats.archives_streamed += 1
        try:
            _stream_tar(fs, tar, label, by_member, wanted, found, stager)
        except (FetchError, OSError) as exc:
            stager.problem(f"{label}: {exc}")
    return found


def _stream_tar(
    fs: AbstractFileSystem,
    tar: str,
    label: str,
    by_member: dict[str, list[str]],
    wanted: set[str],
    found: dict[str, str],
    stager: Stager,
) -> None:
    with fs.open(tar, "rb", block_size=READ_CHUNK) as raw:
        names = {m for m, paths in by_member.items() if any(p not in found for p in paths)}
        for tm in iter_tar(raw, names, max_bytes=MAX_MEDIA_BYTES, label=label):
            if tm.error is not None or tm.fileobj is None:
                stager.problem(str(tm.error))
                continue
            chunks = []
            while chunk := tm.fileobj.read(READ_CHUNK):
                chunks.append(chunk)
            data = b"".join(chunks)
            for path in by_member.get(tm.name, []):
                if path not in found:
                    found[path] = stager.put(data, path, embedded=False)
            if len(found) == len(wanted):
                break
        stager.stats.archive_bytes_read += int(getattr(raw, "loc", 0) or raw.tell())
