"""``--accept-image-format FMT`` (``MediaOptions.extra_image_formats``): a format Pillow reads but vlmforge
does not accept by default is ``unsupported_format: <FORMAT>``, and accepted (re-encoded, upright pixels equal
to Pillow's) once the run names it. The XPM file is written here by hand (Pillow cannot write XPM)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
from PIL import Image, ImageOps
from typer.testing import CliRunner

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.rows import MediaRow
from vlmforge.tasks.batch.normalise import Normaliser
from vlmforge.tasks.geometry.model_geometry import geometry_of
from vlmforge.tasks.media.formats import ACCEPTED_IMAGE_FORMATS, accepted_image_formats
from vlmforge.tasks.media.image import process_image
from vlmforge.tasks.storage import ContentStore

# one character per pixel; every row differs and no row is a mirror of another, so a flip or turn shows
_PALETTE = {" ": (255, 0, 0), ".": (0, 255, 0), "X": (0, 0, 255), "o": (250, 250, 250)}


def _xpm(width: int, height: int) -> bytes:
    keys = list(_PALETTE)
    rows = [
        "".join(keys[(x * 3 + y * 5 + (x * y) // 7) % len(keys)] for x in range(width)) for y in range(height)
    ]
    lines = [f'"{width} {height} {len(_PALETTE)} 1",']
    lines += [f'"{k} c #{r:02X}{g:02X}{b:02X}",' for k, (r, g, b) in _PALETTE.items()]
    lines += [f'"{row}",' for row in rows]
    return ("/* XPM */\nstatic char *vlmforge_test[] = {\n" + "\n".join(lines) + "\n};\n").encode()


def _rgb(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as img:
        return ImageOps.exif_transpose(img).convert("RGB")


@pytest.fixture(scope="module")
def xpm() -> bytes:
    data = _xpm(72, 60)  # 4320 px: within Qwen2.5-VL's min/max pixels, so the run does not resize it
    with Image.open(io.BytesIO(data)) as img:
        assert img.format == "XPM" and img.size == (72, 60)
    assert "XPM" not in ACCEPTED_IMAGE_FORMATS
    return data


def test_accepted_image_formats_widens_the_list_in_order() -> None:
    assert accepted_image_formats() == ACCEPTED_IMAGE_FORMATS
    widened = accepted_image_formats(["xpm", " FITS ", "PNG", "XPM"])
    assert widened == (*ACCEPTED_IMAGE_FORMATS, "XPM", "FITS")
    with pytest.raises(ValueError, match="NOT_A_FORMAT unknown to Pillow"):
        accepted_image_formats(["not_a_format"])


def test_process_image_refuses_then_accepts_xpm(xpm: bytes) -> None:
    def same(h: int, w: int) -> tuple[int, int]:
        return h, w

    refused = process_image(xpm, target_size=same, max_pixels=10**6)
    assert (refused.status, refused.reason, refused.detail) == ("rejected", "unsupported_format", "XPM")
    ok = process_image(
        xpm,
        target_size=same,
        max_pixels=10**6,
        image_format="png",
        accepted_formats=accepted_image_formats(["XPM"]),
    )
    assert ok.status == "ok" and ok.format == "XPM" and ok.out_bytes is not None and not ok.kept_original
    assert (ok.out_width, ok.out_height) == (72, 60)
    assert _rgb(ok.out_bytes).tobytes() == _rgb(xpm).tobytes()


def _normalise(tmp_path: Path, xpm: bytes, extra: tuple[str, ...]) -> MediaRow:
    """The run's media step for one image reference, with the run's options."""
    cfg = RunConfig(release=str(tmp_path), out=str(tmp_path / "out"), extra_image_formats=extra)
    store = ContentStore(str(tmp_path / "store"))
    row = MediaRow(subset="s", sample_id="a", line=1, index=0, ref="images/a.xpm", kind="image")
    row.sha256 = hashlib.sha256(xpm).hexdigest()
    outcome = Normaliser(cfg, geometry_of(cfg.tokens, cfg.media), store)(row, xpm)
    assert outcome.ok == (row.status == "ok")
    if outcome.ok:
        assert row.out_sha256 is not None
        assert _rgb(store.get(row.out_sha256)).tobytes() == _rgb(xpm).tobytes()
    return row


def test_the_run_option_reaches_the_media_stage(tmp_path: Path, xpm: bytes) -> None:
    default = _normalise(tmp_path / "a", xpm, ())
    assert default.status == "rejected" and default.reason is not None
    assert default.reason.startswith("unsupported_format") and "XPM" in default.reason
    widened = _normalise(tmp_path / "b", xpm, ("xpm",))
    assert (widened.status, widened.format, widened.n_frames) == ("ok", "XPM", 1)
    assert (widened.out_width, widened.out_height, widened.kept_original) == (72, 60, False)


def test_the_option_changes_the_batch_fingerprint(tmp_path: Path) -> None:
    base = RunConfig(release=str(tmp_path), out=str(tmp_path / "out"))
    assert base.media.extra_image_formats == ()
    widened = base.replace(extra_image_formats=["XPM"])
    assert widened.media.extra_image_formats == ("XPM",)
    assert widened.media_fingerprint() != base.media_fingerprint()


def test_cli_flag_is_repeatable_and_an_unknown_name_fails_before_the_run(tmp_path: Path) -> None:
    from vlmforge.flows.cli import app

    result = CliRunner().invoke(
        app,
        [
            "run",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
            "--accept-image-format",
            "XPM",
            "--accept-image-format",
            "nope",
        ],
        env={"COLUMNS": "400"},  # the error box does not wrap the message
    )
    assert result.exit_code == 2, result.output
    assert "NOPE unknown to Pillow" in result.output and "XPM" not in result.output.split("opens:")[0]
