"""Write the whole sample release: every subset's builder, in :data:`~.expected.SUBSETS` order, into one
folder (``python -m vlmforge.tasks.sample_release DEST [--overwrite]``)."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import bad_rows, multi_image, photo_vqa, video_qa
from .expected import SUBSETS

__all__ = ["BUILDERS", "SampleRelease", "build_sample_release", "main"]

#: Subset name -> the function that writes it under a root folder and returns its JSONL line count.
BUILDERS: dict[str, Callable[[Path], int]] = {
    "photo_vqa": photo_vqa.build,
    "multi_image": multi_image.build,
    "video_qa": video_qa.build,
    "bad_rows": bad_rows.build,
}


@dataclass(frozen=True)
class SampleRelease:
    root: Path
    subsets: list[str]
    total_lines: int


def build_sample_release(dest: Path, *, overwrite: bool = False) -> SampleRelease:
    """Write the sample release into ``dest`` (created if missing).

    Raises ``FileExistsError`` when ``dest`` exists and is not empty, unless ``overwrite`` is set, in which
    case ``dest`` is removed first.
    """
    dest = Path(dest)
    _prepare_dest(dest, overwrite)
    total = sum(BUILDERS[subset](dest) for subset in SUBSETS)
    return SampleRelease(root=dest, subsets=list(SUBSETS), total_lines=total)


def _prepare_dest(dest: Path, overwrite: bool) -> None:
    if dest.exists():
        if not dest.is_dir():
            raise FileExistsError(f"{dest} exists and is not a directory")
        if any(dest.iterdir()):
            if not overwrite:
                raise FileExistsError(f"{dest} is not empty (pass overwrite=True to replace it)")
            shutil.rmtree(dest)
    dest.mkdir(parents=True, exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vlmforge.tasks.sample_release",
        description="Write the deterministic vlmforge sample release.",
    )
    parser.add_argument("dest", type=Path, help="output folder (one folder per subset is written inside)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty DEST")
    args = parser.parse_args(argv)
    try:
        rel = build_sample_release(args.dest, overwrite=args.overwrite)
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {rel.root}: subsets={','.join(rel.subsets)} lines={rel.total_lines}")
    return 0
