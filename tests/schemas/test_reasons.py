"""The reason registry is the one list of reject/drop codes: README's table is generated from it, every
code the code base emits is registered, and unregistered codes fail at once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vlmforge.schemas.reasons import REASONS, code_of, markdown_table, reason

REPO = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- reasons:begin -->", "<!-- reasons:end -->"


def test_readme_reason_table_is_the_registry() -> None:
    text = (REPO / "README.md").read_text()
    assert BEGIN in text and END in text, "README must hold the generated reason table between its markers"
    table = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    stale = "README's reason table is stale: paste `python -m vlmforge.schemas.reasons`"
    assert table == markdown_table(), stale


def test_reason_builds_code_and_detail_and_refuses_unknown_codes() -> None:
    assert reason("duplicate_row", "identical to line 3") == "duplicate_row: identical to line 3"
    assert reason("empty_line") == "empty_line"
    assert code_of("media_error: a.jpg: truncated") == "media_error"
    with pytest.raises(KeyError, match="unregistered reason code"):
        reason("no_such_code", "x")


def test_every_code_literal_in_the_product_is_registered() -> None:
    """``reason("code", ...)`` calls anywhere in the product name registered codes (a typo fails here, not
    in a manifest)."""
    called = set()
    for path in [*REPO.glob("tasks/**/*.py"), *REPO.glob("flows/**/*.py")]:
        called |= set(re.findall(r"\breason\(\s*\"([a-z0-9_]+)\"", path.read_text()))
    assert called, "no reason() call found: the scan proves nothing"
    assert called <= set(REASONS), sorted(called - set(REASONS))


def test_media_codes_name_the_kinds_they_reject() -> None:
    """The media stage's image and video lists come from the entries: a media code without kinds fails at
    import, and an image-only code is not a video reason."""
    from vlmforge.schemas.reasons import Reason, media_codes
    from vlmforge.tasks.media.image import IMAGE_REASONS
    from vlmforge.tasks.media.video import VIDEO_REASONS

    with pytest.raises(ValueError, match="media kinds"):
        Reason("new_code", "media", "rejected", "media", "a new media reject")
    with pytest.raises(ValueError, match="media kinds"):
        Reason("new_code", "fetch", "rejected", "fetch", "a fetch failure", ("image",))
    assert set(media_codes("image")) == IMAGE_REASONS and set(media_codes("video")) == VIDEO_REASONS
    assert (
        "aspect_ratio" in IMAGE_REASONS - VIDEO_REASONS and "video_timeout" in VIDEO_REASONS - IMAGE_REASONS
    )
    media = {code for code, r in REASONS.items() if r.level == "media"}
    assert media == IMAGE_REASONS | VIDEO_REASONS
