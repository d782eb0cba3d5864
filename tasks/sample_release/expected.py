"""What the pipeline must make of every line of the sample release.

``EXPECTED`` describes the outcome for every physical line of every JSONL file (1-based line numbers).
``n_images`` / ``n_videos`` count the image / video parts present in the record as written (0 when the line
does not parse into a record with a list of messages); for ``ok`` rows these are the media the sample must
carry. ``EXPECTED_MEDIA_ERRORS`` gives the detail after ``media_error: <ref>: `` for the ``media_error``
rows.
"""

from __future__ import annotations

from typing import Any, Final

from ...schemas.reasons import REASONS, code_of

__all__ = ["EXPECTED", "EXPECTED_MEDIA_ERRORS", "LARGE_IMAGE", "LARGE_SIZE", "LICENSES", "SUBSETS"]

SUBSETS: Final[tuple[str, ...]] = ("photo_vqa", "multi_image", "video_qa", "bad_rows")
LICENSES: Final[dict[str, str | None]] = {
    "photo_vqa": "CC-BY-4.0",
    "multi_image": "Apache-2.0",
    "video_qa": "CC-BY-SA-4.0",
    "bad_rows": None,  # README states terms that are not an SPDX id -> "unknown"
}
# (subset, path relative to the subset folder) of the image that exceeds the 12.8 MP default max_pixels.
LARGE_IMAGE: Final[tuple[str, str]] = ("multi_image", "images/coffee_27mp.jpg")
LARGE_SIZE: Final[tuple[int, int]] = (6000, 4500)


def _ok(line: int, id_: str, n_images: int = 1, n_videos: int = 0) -> dict[str, Any]:
    return {
        "line": line,
        "id": id_,
        "status": "ok",
        "reason_prefix": None,
        "n_images": n_images,
        "n_videos": n_videos,
    }


def _rej(line: int, id_: str | None, reason: str, n_images: int = 0, n_videos: int = 0) -> dict[str, Any]:
    if code_of(reason) not in REASONS:
        raise KeyError(f"unregistered reason code in the sample release's expectations: {reason!r}")
    return {
        "line": line,
        "id": id_,
        "status": "rejected",
        "reason_prefix": reason,
        "n_images": n_images,
        "n_videos": n_videos,
    }


EXPECTED: Final[dict[str, list[dict[str, Any]]]] = {
    "photo_vqa": [
        _ok(1, "photo-0001"),  # docvqa style: question first, then image
        _ok(2, "photo-0002"),  # chartqa style: image first
        _ok(3, "photo-0003"),  # assistant content as a plain string
        _ok(4, "photo-0004"),  # system turn
        _ok(5, "photo-0005"),  # <think> in the answer
        _ok(6, "photo-0006"),  # RGBA PNG
        _ok(7, "photo-0007"),  # JPEG with EXIF orientation 6
        _ok(8, "photo-0008"),  # grayscale document scan
        _ok(9, "photo-0009"),  # multi-turn, image in the first turn
        _ok(10, "photo-0010"),  # large-ish photo (1411x1411)
    ],
    "multi_image": [
        _ok(1, "multi-0001", n_images=2),
        _ok(2, "multi-0002", n_images=3),
        _ok(3, "multi-0003", n_images=12),
        _ok(4, "multi-0004", n_images=1),  # 27 MP image, must be resized
        _ok(5, "multi-0005", n_images=2),  # images spread over two user turns
    ],
    "video_qa": [
        _ok(1, "video-0001", n_images=0, n_videos=1),
        _ok(2, "video-0002", n_images=0, n_videos=1),
        _ok(3, "video-0003", n_images=1, n_videos=1),  # a video and an image
    ],
    "bad_rows": [
        _ok(1, "good-0001"),
        _rej(2, None, "invalid_json"),  # truncated object
        _rej(3, None, "invalid_record"),  # JSON array instead of an object
        _rej(4, "bad-no-messages", "invalid_record"),  # missing field messages
        _rej(5, "bad-messages-type", "invalid_record"),  # messages is a string
        _rej(6, "bad-audio", "unsupported_part:audio"),
        _rej(7, "bad-missing-file", "missing_media", n_images=1),
        _rej(8, "bad-truncated-jpeg", "media_error", n_images=1),
        _rej(9, "bad-html-as-jpg", "media_error", n_images=1),
        _rej(10, "bad-zero-byte", "media_error", n_images=1),
        _rej(11, "bad-unsafe-ref", "unsafe_ref", n_images=1),
        _ok(12, "a.b.c"),  # valid; the shard key gets sanitised
        _rej(13, None, "empty_line"),
        _rej(14, "", "invalid_record", n_images=1),  # empty id
        _ok(15, "good-0002", n_images=2),
        _ok(16, "good-text-0003", n_images=0),  # text only: no media part, read back with none
    ],
}

# (subset, line) -> detail that follows "media_error: <ref>: "
EXPECTED_MEDIA_ERRORS: Final[dict[tuple[str, int], str]] = {
    ("bad_rows", 8): "truncated",
    ("bad_rows", 9): "not_an_image",
    ("bad_rows", 10): "zero_size",
}
