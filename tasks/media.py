"""Verify and normalise one media object (image or video) referenced by a training record.

Pure functions over bytes; no I/O, no orchestration imports. The pipeline calls :func:`process_image` or
:func:`probe_video` once per referenced file and stores the result (status, reason, sizes, output bytes).

Images: header-only open first (decompression bombs are refused from the header, before any pixel is
decoded), then a FULL decode (``img.load()``) to verify. The displayed size is the size after EXIF
orientation (``ImageOps.exif_transpose`` semantics). Files already in a trainer-friendly form are kept
byte-identical; everything else is re-encoded once, deterministically (no EXIF, ICC, timestamps).

Videos: PyAV from memory, metadata without a full decode, then the frames the caller's sampler chooses
are decoded sequentially (stopping after the last needed one) under a wall-clock deadline.
"""

from __future__ import annotations

import contextlib
import io
import re
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, Any, Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

try:  # Pillow is normally built with LittleCMS; fall back to dropping profiles if not.
    from PIL import ImageCms

    _SRGB: Any = ImageCms.createProfile("sRGB")
except Exception:  # pragma: no cover - depends on the Pillow build
    ImageCms = None  # type: ignore[assignment]
    _SRGB = None

__all__ = [
    "IMAGE_REASONS",
    "VIDEO_REASONS",
    "ImageResult",
    "VideoResult",
    "process_image",
    "probe_video",
]

ImageFormat = Literal["keep", "jpeg", "webp", "png"]
OutExt = Literal["jpg", "png", "webp"]

IMAGE_REASONS: frozenset[str] = frozenset(
    {
        "zero_size",
        "not_an_image",
        "decompression_bomb",
        "truncated",
        "decode_error",
        "aspect_ratio",
        "too_small",
    }
)
VIDEO_REASONS: frozenset[str] = frozenset(
    {"zero_size", "not_a_video", "no_video_stream", "video_decode_error", "video_timeout", "frame_selection"}
)

_DETAIL_MAX = 200


def _short(exc: BaseException | str) -> str:
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 3] + "..."


# --------------------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImageResult:
    """Outcome of :func:`process_image`.

    ``width``/``height`` are the displayed size (after EXIF orientation; 0 when the header was unreadable);
    ``out_width``/``out_height`` the size of ``out_bytes`` (0 for rejects). ``out_ext``/``out_bytes`` are
    None for rejects.
    """

    status: Literal["ok", "rejected"]
    reason: str | None
    format: str | None
    mode: str | None
    width: int
    height: int
    out_width: int
    out_height: int
    out_ext: OutExt | None
    out_bytes: bytes | None
    kept_original: bool
    notes: tuple[str, ...] = ()
    detail: str | None = None


class _Reject(Exception):
    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class _RetryRelaxed(Exception):
    """Pillow's own bomb ceiling is below the caller's ``max_image_pixels``: redo with it lifted."""


# Formats Pillow may open. EPS (runs Ghostscript), font/animation oddities and write-only formats are left
# out on purpose: untrusted bytes should only reach well-exercised raster decoders.
_OPEN_FORMATS: tuple[str, ...] = (
    "JPEG",
    "MPO",
    "PNG",
    "WEBP",
    "GIF",
    "BMP",
    "DIB",
    "TIFF",
    "ICO",
    "TGA",
    "QOI",
    "PPM",
    "AVIF",
    "JPEG2000",
    "SGI",
    "PCX",
    "ICNS",
    "DDS",
    "PSD",
)
Image.init()
_OPEN_FORMATS = tuple(f for f in _OPEN_FORMATS if f in Image.OPEN)  # MPO is reached through JPEG's factory
_KEEPABLE = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "WEBP": "webp"}
_FMT_TO_EXT: dict[str, OutExt] = {"jpeg": "jpg", "png": "png", "webp": "webp"}
_ALPHA_MODES = {"RGBA", "RGBa", "LA", "La", "PA"}
_HIGH_BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I", "F"}
# EXIF orientation -> transpose (identical to ImageOps.exif_transpose).
_ORIENT_OPS: dict[int, Image.Transpose] = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_TRUNCATION_MARKERS = (
    "truncated",
    "broken data stream",
    "unexpected end",
    "premature end",
    "end of file",
    "not enough data",
    "buffer is not large enough",
)
_BOMB_PIXELS = re.compile(r"Image size \((\d+) pixels\)")
_PILLOW_LIMIT_LOCK = threading.Lock()


def _sniff_image_magic(data: bytes) -> str | None:
    """Name of a raster format recognised from its signature (used to refine 'cannot identify')."""
    head = data[:32]
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[:2] == b"BM":
        return "bmp"
    if head[4:8] == b"ftyp" and head[8:12] in (b"heic", b"heix", b"hevc", b"heim", b"heis", b"mif1", b"msf1"):
        return "heif"
    if head[4:8] == b"ftyp" and head[8:12] in (b"avif", b"avis"):
        return "avif"
    if head.startswith(b"\xff\x0a") or head.startswith(b"\x00\x00\x00\x0cJXL \r\n\x87\n"):
        return "jxl"
    return None


def _header_dims(magic: str, data: bytes) -> tuple[int, int] | None:
    """(width, height) straight from the header of simple formats Pillow refuses to open (e.g. 0 px)."""
    if magic == "png" and len(data) >= 24 and data[12:16] == b"IHDR":
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if magic == "gif" and len(data) >= 10:
        return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    if magic == "bmp" and len(data) >= 26 and int.from_bytes(data[14:18], "little") >= 40:
        return int.from_bytes(data[18:22], "little", signed=True), int.from_bytes(
            data[22:26], "little", signed=True
        )
    return None


def _classify_decode_error(exc: BaseException) -> _Reject:
    if isinstance(exc, _Reject):
        return exc
    if isinstance(exc, Image.DecompressionBombError | Image.DecompressionBombWarning):
        return _Reject("decompression_bomb", _short(exc))
    text = str(exc).lower()
    if isinstance(exc, EOFError) or any(marker in text for marker in _TRUNCATION_MARKERS):
        return _Reject("truncated", _short(exc))
    return _Reject("decode_error", _short(exc))


def _full_decode(img: Image.Image, relaxed: bool) -> None:
    """Decode every pixel (the verification step); failures become rejects."""
    try:
        img.load()
    except Exception as exc:
        if isinstance(exc, Image.DecompressionBombError) and not relaxed:
            raise _RetryRelaxed from exc
        raise _classify_decode_error(exc) from exc


def _orientation(img: Image.Image) -> int:
    try:
        value = img.getexif().get(0x0112, 1)
    except Exception:
        return 1
    return value if isinstance(value, int) and value in _ORIENT_OPS else 1


def _is_lossless_webp(data: bytes) -> bool:
    # Simple (VP8L) or extended (VP8X ... VP8L) lossless WebP.
    return data[12:16] == b"VP8L" or (data[12:16] == b"VP8X" and b"VP8L" in data[30:4096])


def _to_8bit_gray(img: Image.Image) -> Image.Image:
    arr = np.asarray(img)
    if img.mode == "F":
        farr = np.nan_to_num(arr.astype(np.float64))
        peak = float(farr.max()) if farr.size else 0.0
        scaled = farr * 255.0 if peak <= 1.0 else farr
        out = np.clip(np.rint(scaled), 0, 255).astype(np.uint8)
    else:
        iarr = np.clip(arr.astype(np.int64), 0, 65535)
        peak = int(iarr.max()) if iarr.size else 0
        # Scale by the effective bit depth: 10/12-bit sensor or scientific data stored in 16-bit
        # containers would otherwise come out black (>> 8) or, with Pillow's convert("L"), clipped white.
        shift = max(0, peak.bit_length() - 8)
        out = (iarr >> shift).astype(np.uint8)
    return Image.fromarray(out, mode="L")


def _composite_on_white(img: Image.Image) -> Image.Image:
    rgba = img.convert("RGBA")
    background = Image.new("RGB", rgba.size, (255, 255, 255))
    background.paste(rgba.convert("RGB"), mask=rgba.getchannel("A"))
    return background


def _apply_icc(img: Image.Image, icc: bytes | None, notes: list[str]) -> Image.Image:
    """Convert colour to sRGB using the embedded profile (RGB/RGBA/CMYK); otherwise drop the profile."""
    if not icc:
        return img
    if ImageCms is None or img.mode not in ("RGB", "RGBA", "CMYK"):
        notes.append("icc_dropped")
        return img
    try:
        src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
        description = (ImageCms.getProfileDescription(src) or "").strip().lower()
        if description.startswith("srgb") and img.mode != "CMYK":
            return img  # already sRGB: dropping the tag changes nothing
        out_mode = "RGBA" if img.mode == "RGBA" else "RGB"
        converted = ImageCms.profileToProfile(img, src, _SRGB, outputMode=out_mode)
        if converted is None:  # pragma: no cover - only with inPlace=True
            raise ValueError("profileToProfile returned None")
        notes.append("icc_converted_to_srgb")
        return converted
    except Exception:
        notes.append("icc_dropped")
        return img


def _normalise_mode(img: Image.Image, notes: list[str]) -> tuple[Image.Image, bool]:
    """Return an RGB or L image and whether the source carried alpha."""
    mode = img.mode
    if mode in ("RGB", "L"):
        return img, False
    if mode == "1":
        return img.convert("L"), False
    if mode in _HIGH_BIT_MODES:
        return _to_8bit_gray(img).convert("RGB"), False
    has_alpha = mode in _ALPHA_MODES or (
        mode == "P"
        and ("transparency" in img.info or (img.palette is not None and img.palette.mode == "RGBA"))
    )
    if has_alpha:
        notes.append("alpha_composited_on_white")
        return _composite_on_white(img), True
    return img.convert("RGB"), False


def _choose_output(
    image_format: ImageFormat, src_format: str, src_mode: str, had_alpha: bool
) -> Literal["jpeg", "png", "webp"]:
    if image_format != "keep":
        return image_format
    if src_format == "WEBP":
        return "webp"
    if had_alpha or src_format == "PNG" or src_mode in ("P", "1"):
        return "png"  # graphics / cut-outs: lossless
    return "jpeg"


def _encode(img: Image.Image, fmt: Literal["jpeg", "png", "webp"], quality: int, lossless: bool) -> bytes:
    img.info = {}  # no EXIF/ICC/XMP/dpi carried over: deterministic, metadata-free output
    buf = io.BytesIO()
    if fmt == "jpeg":
        img.save(buf, format="JPEG", quality=quality, optimize=False, progressive=False)
    elif fmt == "png":
        img.save(buf, format="PNG", compress_level=6)
    elif lossless:
        img.save(buf, format="WEBP", lossless=True, quality=100, method=4, exact=False)
    else:
        img.save(buf, format="WEBP", quality=quality, method=4)
    return buf.getvalue()


def _process_image(
    data: bytes,
    *,
    target_size: Callable[[int, int], tuple[int, int]],
    max_pixels: int,
    max_image_pixels: int,
    image_format: ImageFormat,
    jpeg_quality: int,
    relaxed: bool,
) -> ImageResult:
    fmt: str | None = None
    mode: str | None = None
    disp_w = disp_h = 0
    try:
        # ---- 1. header only -------------------------------------------------------------------------
        try:
            img = Image.open(io.BytesIO(data), formats=_OPEN_FORMATS)
        except UnidentifiedImageError as exc:
            magic = _sniff_image_magic(data)
            if magic is None:
                raise _Reject(
                    "not_an_image", _short(f"unrecognised content, starts with {data[:16]!r}")
                ) from exc
            dims = _header_dims(magic, data)
            if dims is not None and min(dims) == 0:
                raise _Reject("too_small", f"{magic} header claims {dims[0]}x{dims[1]}") from exc
            raise _Reject("decode_error", _short(f"{magic} signature but unreadable/unsupported")) from exc
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            match = _BOMB_PIXELS.search(str(exc))
            if not relaxed and match is not None and int(match.group(1)) <= max_image_pixels:
                raise _RetryRelaxed from exc
            raise _Reject("decompression_bomb", _short(exc)) from exc
        except _Reject:
            raise
        except Exception as exc:
            raise _classify_decode_error(exc) from exc

        with img:
            fmt, mode = img.format, img.mode
            width, height = img.size
            disp_w, disp_h = width, height  # stored size until the orientation is known
            if width <= 0 or height <= 0:
                raise _Reject("too_small", f"{width}x{height}")
            if width * height > max_image_pixels:
                raise _Reject(
                    "decompression_bomb",
                    f"header claims {width}x{height} = {width * height} px > {max_image_pixels}",
                )
            # Pillow's PNG getexif() decodes the whole image (an eXIf chunk may follow IDAT): for PNG the
            # full decode happens here, exactly once, so a decode failure can never be masked. A second
            # load() after a failed one returns silently, hence the explicit flag.
            decoded = fmt == "PNG"
            if decoded:
                _full_decode(img, relaxed)
            orientation = _orientation(img)
            swap = orientation in (5, 6, 7, 8)
            disp_w, disp_h = (height, width) if swap else (width, height)
            pixels = disp_w * disp_h
            # ---- 2. model geometry (aspect-ratio limit) before paying for a decode ----------------------
            try:
                t_h, t_w = target_size(disp_h, disp_w)
            except ValueError as exc:
                raise _Reject("aspect_ratio", _short(exc)) from exc
            src_format = fmt or ""
            keep = (
                src_format in _KEEPABLE
                and orientation == 1
                and mode in ("RGB", "L")
                and pixels <= max_pixels
                and (image_format == "keep" or _FMT_TO_EXT[image_format] == _KEEPABLE[src_format])
            )
            needs_resize = pixels > max_pixels and (t_w, t_h) != (disp_w, disp_h)
            notes: list[str] = []
            # ---- 3. full decode (DCT-scaled for big JPEGs that will be downsized anyway) ----------------
            if needs_resize and src_format in ("JPEG", "MPO"):
                req = (t_h, t_w) if swap else (t_w, t_h)  # draft works in stored orientation
                img.draft("RGB", req)
                if img.size != (width, height):
                    notes.append("jpeg_draft_scaled")
            if not decoded:
                _full_decode(img, relaxed)
            if keep:
                return ImageResult(
                    status="ok",
                    reason=None,
                    format=fmt,
                    mode=mode,
                    width=disp_w,
                    height=disp_h,
                    out_width=disp_w,
                    out_height=disp_h,
                    out_ext=_KEEPABLE[src_format],  # type: ignore[arg-type]
                    out_bytes=data,
                    kept_original=True,
                    notes=(),
                )
            # ---- 4. normalise once ---------------------------------------------------------------------
            icc = img.info.get("icc_profile")
            work: Image.Image = img
            if orientation != 1:
                work = work.transpose(_ORIENT_OPS[orientation])
                notes.append(f"exif_orientation_{orientation}_applied")
            work = _apply_icc(work, icc if isinstance(icc, bytes) else None, notes)
            work, had_alpha = _normalise_mode(work, notes)
            if needs_resize:
                work = work.resize((t_w, t_h), Image.Resampling.LANCZOS, reducing_gap=3.0)
                notes.append("resized")
            out_fmt = _choose_output(image_format, src_format, mode or "", had_alpha)
            lossless = out_fmt == "webp" and src_format == "WEBP" and _is_lossless_webp(data)
            out = _encode(work, out_fmt, jpeg_quality, lossless)
            return ImageResult(
                status="ok",
                reason=None,
                format=fmt,
                mode=mode,
                width=disp_w,
                height=disp_h,
                out_width=work.width,
                out_height=work.height,
                out_ext=_FMT_TO_EXT[out_fmt],
                out_bytes=out,
                kept_original=False,
                notes=tuple(notes),
            )
    except _RetryRelaxed:
        raise
    except _Reject as rej:
        return _rejected(rej.reason, rej.detail, fmt, mode, disp_w, disp_h)
    except Exception as exc:  # any other decoder/plugin failure: never crash the caller
        classified = _classify_decode_error(exc)
        return _rejected(classified.reason, classified.detail, fmt, mode, disp_w, disp_h)


def _rejected(
    reason: str, detail: str | None, fmt: str | None, mode: str | None, width: int, height: int
) -> ImageResult:
    return ImageResult(
        status="rejected",
        reason=reason,
        format=fmt,
        mode=mode,
        width=width,
        height=height,
        out_width=0,
        out_height=0,
        out_ext=None,
        out_bytes=None,
        kept_original=False,
        notes=(),
        detail=detail,
    )


def process_image(
    data: bytes,
    *,
    target_size: Callable[[int, int], tuple[int, int]],
    max_pixels: int,
    max_image_pixels: int = 256_000_000,
    image_format: ImageFormat = "keep",
    jpeg_quality: int = 92,
) -> ImageResult:
    """Verify one image by a full decode and return it ready for a shard.

    ``target_size(height, width) -> (H, W)`` is the model's factor-aligned resize (smart_resize); a
    ValueError from it is an ``aspect_ratio`` reject. Images with more than ``max_pixels`` displayed pixels
    are resized to exactly ``target_size(h, w)``. Headers claiming more than ``max_image_pixels`` are
    refused as ``decompression_bomb`` before any pixel is decoded. Never raises for bad input.
    """
    if not data:
        return _rejected("zero_size", "empty payload", None, None, 0, 0)
    kwargs: dict[str, Any] = {
        "target_size": target_size,
        "max_pixels": max_pixels,
        "max_image_pixels": max_image_pixels,
        "image_format": image_format,
        "jpeg_quality": jpeg_quality,
    }
    try:
        return _process_image(data, relaxed=False, **kwargs)
    except _RetryRelaxed:
        pass
    # Pillow's global bomb ceiling (2 x Image.MAX_IMAGE_PIXELS, ~179 MP by default) is below the caller's
    # limit and this image lies in between: lift Pillow's ceiling to the caller's limit for this one image.
    # The global is process-wide, so the change is serialised and restored.
    with _PILLOW_LIMIT_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = max(saved or 0, -(-max_image_pixels // 2))
        try:
            return _process_image(data, relaxed=True, **kwargs)
        except _RetryRelaxed:  # pragma: no cover - relaxed runs never ask again
            return _rejected("decompression_bomb", "exceeds Pillow limit", None, None, 0, 0)
        finally:
            Image.MAX_IMAGE_PIXELS = saved


# --------------------------------------------------------------------------------------------------------
# Videos
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VideoResult:
    """Outcome of :func:`probe_video`.

    ``width``/``height`` are as displayed: when ``rotation`` (clockwise degrees, 0/90/180/270) is 90 or 270
    they are the coded size swapped. Decoders that do not auto-rotate (PyAV/decord) deliver coded-size
    frames: swap back when ``rotation in (90, 270)`` if the trainer sees unrotated frames.
    """

    status: Literal["ok", "rejected"]
    reason: str | None
    detail: str | None
    codec: str | None
    width: int
    height: int
    rotation: int
    fps: float
    frames: int
    duration: float
    sampled_indices: tuple[int, ...]


class _VideoTimeout(Exception):
    pass


class _DeadlineReader(io.RawIOBase):
    """Read-only in-memory file that raises once the deadline has passed.

    libav pulls data through ``read``/``seek`` callbacks, so this also bounds time spent inside blocking
    demuxer calls, not only the Python loops.
    """

    def __init__(self, data: bytes, deadline: float) -> None:
        super().__init__()
        self._buf = io.BytesIO(data)
        self._deadline = deadline

    def _check(self) -> None:
        if time.monotonic() > self._deadline:
            raise _VideoTimeout("wall-clock timeout while reading")

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self._check()
        return self._buf.read(size)

    def readinto(self, b: Any) -> int:
        self._check()
        return self._buf.readinto(b)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check()
        return self._buf.seek(offset, whence)

    def tell(self) -> int:
        return self._buf.tell()


def _sniff_video_container(data: bytes) -> bool:
    head = data[:64]
    return (
        head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip")
        or head.startswith(b"\x1a\x45\xdf\xa3")  # Matroska / WebM
        or (head[:4] == b"RIFF" and head[8:12] == b"AVI ")
        or head.startswith(b"OggS")
        or head.startswith(b"FLV")
        or head.startswith(b"\x00\x00\x01\xba")  # MPEG-PS
        or (len(data) > 376 and data[0] == 0x47 and data[188] == 0x47 and data[376] == 0x47)  # MPEG-TS
    )


def _video_reject(reason: str, detail: str | None, **known: Any) -> VideoResult:
    fields: dict[str, Any] = {
        "codec": None,
        "width": 0,
        "height": 0,
        "rotation": 0,
        "fps": 0.0,
        "frames": 0,
        "duration": 0.0,
    }
    fields.update(known)
    return VideoResult(status="rejected", reason=reason, detail=detail, sampled_indices=(), **fields)


def _rotation_from_degrees(ccw_degrees: float) -> int:
    """Display-matrix angle (counter-clockwise, as FFmpeg/PyAV report it) -> clockwise 'rotate' tag."""
    return int(round(-ccw_degrees / 90.0)) * 90 % 360


def probe_video(
    data: bytes,
    *,
    choose_frames: Callable[[int, float], list[int]],
    timeout_s: float = 60.0,
) -> VideoResult:
    """Read a video's metadata, then verify that the frames ``choose_frames(n_frames, fps)`` picks decode.

    Frame indices count decoded frames in presentation order. Never raises for bad input; bounded by
    ``timeout_s`` of wall-clock time.
    """
    if not data:
        return _video_reject("zero_size", "empty payload")
    deadline = time.monotonic() + timeout_s
    import av  # local import keeps image-only workers light

    known: dict[str, Any] = {}
    container: Any = None
    try:
        try:
            reader: IO[bytes] = _DeadlineReader(data, deadline)  # type: ignore[assignment]
            container = av.open(reader, mode="r", metadata_errors="ignore")
        except _VideoTimeout:
            raise
        except Exception as exc:
            if isinstance(exc.__cause__ or exc.__context__, _VideoTimeout):
                raise _VideoTimeout(str(exc)) from exc
            reason = "video_decode_error" if _sniff_video_container(data) else "not_a_video"
            return _video_reject(reason, _short(exc))

        fmt_name = container.format.name or ""
        if fmt_name == "image2" or fmt_name.endswith("_pipe") or fmt_name in ("gif", "webp", "apng"):
            # still images / animated graphics that libav happily opens: not videos for this pipeline
            return _video_reject("not_a_video", f"container format {fmt_name!r} is an image format")
        if not container.streams.video:
            return _video_reject("no_video_stream", f"streams: {[s.type for s in container.streams]}")
        stream = container.streams.video[0]
        cc = stream.codec_context
        if cc is None:
            return _video_reject("video_decode_error", "no decoder for the video stream's codec")
        codec = cc.name
        coded_w, coded_h = int(cc.width or 0), int(cc.height or 0)
        known.update(codec=codec, width=coded_w, height=coded_h)

        rate: Fraction | None = stream.average_rate or stream.guessed_rate or stream.base_rate
        fps = float(rate) if rate else 0.0
        duration = 0.0
        if stream.duration is not None and stream.time_base is not None:
            duration = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            duration = container.duration / av.time_base
        known.update(fps=fps, duration=duration)

        rotation = 0
        rotate_tag = stream.metadata.get("rotate") if stream.metadata else None
        if rotate_tag is not None:
            try:
                rotation = int(round(float(rotate_tag) / 90.0)) * 90 % 360
            except ValueError:
                rotation = 0

        n_frames = int(stream.frames or 0)
        if n_frames <= 0:
            # container has no frame count (e.g. WebM): count packets by demuxing only (no decode)
            counted = 0
            for packet in container.demux(stream):
                if time.monotonic() > deadline:
                    raise _VideoTimeout("timeout while counting packets")
                if packet.size > 0:
                    counted += 1
            n_frames = counted
            if n_frames <= 0 and duration > 0 and fps > 0:
                n_frames = int(round(duration * fps))
            # start decoding from a fresh demuxer rather than trusting a seek back to 0
            container.close()
            container = av.open(_DeadlineReader(data, deadline), mode="r", metadata_errors="ignore")
            stream = container.streams.video[0]
        if n_frames <= 0:
            return _video_reject("video_decode_error", "no frames in video stream", **known)
        if fps <= 0 and duration > 0:
            fps = n_frames / duration
        if duration <= 0 and fps > 0:
            duration = n_frames / fps
        known.update(frames=n_frames, fps=fps, duration=duration)

        try:
            indices = sorted({int(i) for i in choose_frames(n_frames, fps)})
        except Exception as exc:
            return _video_reject("frame_selection", _short(exc), **known)
        if indices and (indices[0] < 0 or indices[-1] >= n_frames):
            return _video_reject(
                "frame_selection", f"indices outside [0, {n_frames}): {indices[0]}..{indices[-1]}", **known
            )

        # ---- sequential decode up to the last needed frame (always at least the first frame) ---------
        last_needed = indices[-1] if indices else 0
        needed = set(indices)
        found: set[int] = set()
        frame_rotation: float | None = None
        decoded = 0
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            if time.monotonic() > deadline:
                raise _VideoTimeout(f"timeout after decoding {decoded} frames")
            if frame_rotation is None:
                frame_rotation = float(getattr(frame, "rotation", 0) or 0)
            if decoded in needed:
                found.add(decoded)
            decoded += 1
            if decoded > last_needed:
                break
        if decoded == 0:
            return _video_reject("video_decode_error", "no frame could be decoded", **known)
        missing = needed - found
        if missing:
            return _video_reject(
                "video_decode_error",
                f"only {decoded} of {n_frames} frames decodable; missing sampled index {min(missing)}",
                **known,
            )
        if rotation == 0 and frame_rotation:
            rotation = _rotation_from_degrees(frame_rotation)
        disp_w, disp_h = (coded_h, coded_w) if rotation in (90, 270) else (coded_w, coded_h)
        return VideoResult(
            status="ok",
            reason=None,
            detail=None,
            codec=codec,
            width=disp_w,
            height=disp_h,
            rotation=rotation,
            fps=fps,
            frames=n_frames,
            duration=duration,
            sampled_indices=tuple(indices),
        )
    except _VideoTimeout as exc:
        return _video_reject("video_timeout", _short(exc), **known)
    except Exception as exc:
        if isinstance(exc.__cause__ or exc.__context__, _VideoTimeout):
            return _video_reject("video_timeout", _short(exc), **known)
        return _video_reject("video_decode_error", _short(exc), **known)
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                container.close()
