"""Subset ``bad_rows``: hand-made lines that exercise every rejection path, plus a few good rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from .chat import asst, dump, img, txt, user
from .files import readme, write_files, write_jsonl
from .images import jpeg_bytes, load, png_bytes, thumb

__all__ = ["build"]


_HTML_ERROR_PAGE: Final[bytes] = (
    b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n"
    b"<body><h1>Not Found</h1><p>The requested URL was not found on this server.</p></body></html>\n"
)


def build(root: Path) -> int:
    write_files(root, _files())
    return write_jsonl(root / "bad_rows" / "bad_rows.jsonl", _lines())


def _files() -> dict[str, bytes]:
    """Good images, each kind of broken file, and the README."""
    good_jpeg = jpeg_bytes(thumb(load("chelsea.png")))
    full_jpeg = jpeg_bytes(load("coffee.png"))
    return {
        "bad_rows/images/chelsea.jpg": good_jpeg,
        "bad_rows/images/camera.png": png_bytes(thumb(load("camera.png"))),
        "bad_rows/images/truncated.jpg": full_jpeg[: len(full_jpeg) // 2],
        "bad_rows/images/error_page.jpg": _HTML_ERROR_PAGE,
        "bad_rows/images/empty.png": b"",
        "bad_rows/README.md": readme(
            "bad_rows",
            "Bad rows (sample)",
            "Hand-made rows that exercise every rejection path of the pipeline, plus a few good rows.",
            "https://example.org/upstream/bad_rows",
            ["bad_rows/", "  bad_rows.jsonl", "  images/*"],
            "Terms: research use only, see upstream",
        ),
    }


def _q(ref: str, text: str = "What is shown?") -> list[dict[str, Any]]:
    return [user(img(ref), txt(text)), asst([txt("Something.")])]


def _lines() -> list[str]:
    """The JSONL lines as written: one per row of :data:`~.expected.EXPECTED` ``["bad_rows"]``."""
    return [
        dump({"id": "good-0001", "messages": _q("images/chelsea.jpg", "What animal is this?")}),
        '{"id": "bad-json", "messages": [{"role": "user", "content": "unterminated',
        dump([{"id": "array-0001", "messages": _q("images/chelsea.jpg")}]),
        dump({"id": "bad-no-messages", "conversations": _q("images/chelsea.jpg")}),
        dump({"id": "bad-messages-type", "messages": "What is shown in images/chelsea.jpg?"}),
        dump(
            {
                "id": "bad-audio",
                "messages": [
                    user({"type": "audio", "audio": "clips/meow.wav"}, txt("What do you hear?")),
                    asst([txt("A cat.")]),
                ],
            }
        ),
        dump({"id": "bad-missing-file", "messages": _q("images/does_not_exist.jpg")}),
        dump({"id": "bad-truncated-jpeg", "messages": _q("images/truncated.jpg")}),
        dump({"id": "bad-html-as-jpg", "messages": _q("images/error_page.jpg")}),
        dump({"id": "bad-zero-byte", "messages": _q("images/empty.png")}),
        dump({"id": "bad-unsafe-ref", "messages": _q("../../etc/passwd")}),
        dump({"id": "a.b.c", "messages": _q("images/chelsea.jpg", "Dotted id: is this a cat?")}),
        "",
        dump({"id": "", "messages": _q("images/chelsea.jpg")}),
        dump(
            {
                "id": "good-0002",
                "messages": [
                    user(img("images/chelsea.jpg"), img("images/camera.png"), txt("Which one is grayscale?")),
                    asst("The second one."),
                ],
            }
        ),
        # a good row with no media: text-only samples sit beside image ones in the release's subsets
        dump(
            {"id": "good-text-0003", "messages": [user(txt("Name a grayscale test image.")), asst("camera")]}
        ),
    ]
