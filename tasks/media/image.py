"""Verify and normalise one image referenced by a training record: :func:`process_image`.

Pure functions over bytes; no I/O, no orchestration imports. The pipeline calls :func:`process_image` once
per referenced image and stores the result (status, reason, sizes, output bytes). This module is the order
of the steps; each step's rules live in its own module:

1. open the header only (``decode``): decompression bombs are refused from the header, before any pixel is
   decoded; the displayed size is the size after EXIF orientation (``orient``);
2. ask the model's geometry (``target_size``: the aspect-ratio limit) before paying for a decode, decide
   whether the original can be kept byte-identical (``keep``), and price the decode on the path it will take
   against the decode budget (``decode_budget``: a pixel bomb under the header limit is refused here);
3. verify the encoded data in full: kept originals are decoded as the trainer decodes them
   (``trainer_decode``: Pillow's full ``load()`` of the bytes written), but kept JPEGs, which are decoded
   with DCT scaling at 1/8 (every entropy-coded block is still decoded; a test shows the verdict equals a
   full decode's); big PNGs are decoded and resized in strips (``big_png``); JPEGs that are downsized anyway
   are decoded with DCT scaling near the target (``jpeg_fast_decode``: by libjpeg-turbo through simplejpeg
   where its pixels are Pillow's by construction, else by Pillow); everything else is decoded whole;
4. keep the original (bytes after its end marker cut off), or normalise once (``colour``), resize with
   bicubic to exactly the model's size (``resize``) and encode deterministically (``encode``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Literal

from PIL import Image

from ...schemas.config import DEFAULT_MAX_IMAGE_PIXELS
from ...schemas.reasons import media_codes
from .big_png import goes_in_strips, process_big_png
from .colour import apply_icc, normalise_mode
from .decode import RetryRelaxed, classify_decode_error, full_decode, open_header, pillow_limit_lifted
from .decode_budget import DecodeBudget
from .encode import FMT_TO_EXT, EncodeFormat, ImageFormat, OutExt, choose_output, encode, is_lossless_webp
from .formats import ACCEPTED_IMAGE_FORMATS
from .jpeg_fast_decode import decode_resized_jpeg
from .keep import KEEPABLE, can_keep, kept_bytes
from .orient import ORIENT_OPS, displayed_size, pending_orientation
from .png import PngLayout, metadata_png, png_layout
from .rejects import Reject, media_reason, short_detail
from .resize import RESAMPLE, Resample, resize
from .trainer_decode import frame_count, image_problem

__all__ = ["IMAGE_REASONS", "ImageResult", "process_image"]

#: The reasons an image can be rejected with (the image codes of ``schemas/reasons.py``).
IMAGE_REASONS: frozenset[str] = frozenset(media_reason(code) for code in media_codes("image"))


@dataclass(frozen=True)
class ImageResult:
    """Outcome of :func:`process_image`.

    ``width``/``height`` are the displayed size (after EXIF orientation; 0 when the header was unreadable);
    ``out_width``/``out_height`` the size of ``out_bytes`` (0 for rejects). ``out_ext``/``out_bytes`` are
    None for rejects. ``n_frames`` is the number of frames or pages of an accepted image (animated GIF,
    WebP, APNG, multi-page TIFF, MPO): only the first is used, as the trainer's ``Image.open`` gives it.
    """

    status: Literal["ok", "rejected"]
    format: str | None
    mode: str | None
    width: int
    height: int
    reason: str | None = None
    out_width: int = 0
    out_height: int = 0
    out_ext: OutExt | None = None
    out_bytes: bytes | None = None
    kept_original: bool = False
    notes: tuple[str, ...] = ()
    detail: str | None = None
    n_frames: int = 1


@dataclass(frozen=True)
class _Request:
    """The caller's limits and output choices (see :func:`process_image`)."""

    target_size: Callable[[int, int], tuple[int, int]]
    max_pixels: int
    min_pixels: int
    min_side: int
    max_image_pixels: int
    image_format: ImageFormat
    jpeg_quality: int
    resample: Resample
    accepted_formats: Collection[str]
    budget: DecodeBudget
    align_to_grid: bool = False


@dataclass
class _Seen:
    """What is known of the image so far: a reject reports it (the size is the stored one until the
    orientation is known, then the displayed one)."""

    format: str | None = None
    mode: str | None = None
    size: tuple[int, int] = (0, 0)

    def rejected(self, reason: str, detail: str | None) -> ImageResult:
        code = media_reason(reason)
        return ImageResult("rejected", self.format, self.mode, *self.size, reason=code, detail=detail)


@dataclass(frozen=True)
class _Plan:
    """What the header (and, for PNGs, the chunk walk) says, and what will be done with the image."""

    format: str | None
    mode: str | None
    stored: tuple[int, int]
    displayed: tuple[int, int]
    orientation: int
    #: the chunk layout of a PNG (None for other formats and for PNGs whose IHDR Pillow alone reads)
    layout: PngLayout | None
    #: already decoded whole (an unusual PNG): a second ``load()`` would return silently
    decoded: bool
    #: the model's (width, height) for the displayed image
    target: tuple[int, int]
    keep: bool
    needs_resize: bool

    @property
    def src_format(self) -> str:
        return self.format or ""


def process_image(
    data: bytes,
    *,
    target_size: Callable[[int, int], tuple[int, int]],
    max_pixels: int,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    image_format: ImageFormat = "keep",
    jpeg_quality: int = 92,
    min_pixels: int = 0,
    min_side: int = 1,
    resample: Resample = "bicubic",
    accepted_formats: Collection[str] = ACCEPTED_IMAGE_FORMATS,
    align_to_grid: bool = False,
    decode_budget: DecodeBudget | None = None,
) -> ImageResult:
    """Verify one image by a full decode and return it ready for a shard.

    ``target_size(height, width) -> (H, W)`` is the model's factor-aligned resize (smart_resize); a
    ValueError from it is an ``aspect_ratio`` reject. Images whose displayed pixel count lies in
    ``[min_pixels, max_pixels]`` and that are JPEG/PNG/WebP in RGB or L without EXIF rotation are kept
    byte-identical (when ``image_format`` is ``keep`` or their own format); any other image is normalised and,
    when outside that range, resized once to exactly ``target_size(h, w)`` (so pass the model's min pixels as
    ``min_pixels`` to have small images upscaled here rather than at training time). Headers claiming more
    than ``max_image_pixels`` are refused as ``decompression_bomb`` before any pixel is decoded; a displayed
    side shorter than ``min_side`` is ``too_small``. Only ``accepted_formats`` (Pillow format names) are
    opened; another format Pillow knows is ``unsupported_format: <FORMAT>``. Never raises for bad input.

    The resize filter defaults to ``bicubic``: what Qwen's processors use (transformers
    ``Qwen2VLImageProcessor`` resample, qwen-vl-utils ``Image.resize``), so a full-resolution decode gives
    the pixels training would have computed from the original; ``lanczos`` is sharper and ~40% slower.

    ``align_to_grid``: an image whose size is not already ``target_size(h, w)`` is resized to it even inside
    the range (a trainer whose data path resizes twice, like Megatron-Bridge's collate, then feeds the grid
    the processor computes: :mod:`vlmforge.tasks.tokens.feed_paths`).

    ``decode_budget``: the memory the image's decode may take, priced from the header on the path it will
    take (:mod:`.decode_budget`); over it the image is ``decode_budget``, before any pixel is decoded.
    Default: :meth:`DecodeBudget.for_run` of ``max_image_pixels`` and ``max_pixels``.
    """
    if not data:
        return _Seen().rejected("zero_size", "empty payload")
    request = _Request(
        target_size,
        max_pixels,
        min_pixels,
        min_side,
        max_image_pixels,
        image_format,
        jpeg_quality,
        resample,
        tuple(accepted_formats),
        decode_budget or DecodeBudget.for_run(max_image_pixels, max_pixels),
        align_to_grid,
    )
    try:
        return _process_image(data, request, relaxed=False)
    except RetryRelaxed:
        pass
    # Pillow's own bomb ceiling is below the caller's limit and this image lies in between
    with pillow_limit_lifted(max_image_pixels):
        try:
            return _process_image(data, request, relaxed=True)
        except RetryRelaxed:  # pragma: no cover - relaxed runs never ask again
            return _Seen().rejected("decompression_bomb", "exceeds Pillow limit")


def _process_image(data: bytes, request: _Request, *, relaxed: bool) -> ImageResult:
    seen = _Seen()
    try:
        with open_header(data, request.max_image_pixels, relaxed, request.accepted_formats) as img:
            plan = _plan(data, img, request, seen, relaxed)
            result = _output(data, img, plan, request, relaxed)
    except RetryRelaxed:
        raise
    except Reject as rej:
        return seen.rejected(rej.reason, rej.detail)
    except Exception as exc:  # any other decoder/plugin failure: never crash the caller
        classified = classify_decode_error(exc)
        return seen.rejected(classified.reason, classified.detail)
    n_frames = frame_count(data, request.accepted_formats)
    return replace(result, n_frames=n_frames) if n_frames != 1 else result


# ---- steps 1 and 2: header, orientation, model geometry ---------------------------------------------------


def _plan(data: bytes, img: Image.Image, request: _Request, seen: _Seen, relaxed: bool) -> _Plan:
    """Read what the header says and decide what to do, before any pixel is decoded (but for odd PNGs)."""
    seen.format, seen.mode = img.format, img.mode
    stored = seen.size = img.size
    _check_header_size(stored, request.max_image_pixels)
    layout = png_layout(data) if img.format == "PNG" else None
    decoded = img.format == "PNG" and layout is None
    if decoded:  # unusual PNG: Pillow decodes it whole, once
        request.budget.check(img, None)
        full_decode(img, relaxed)
    orientation = pending_orientation(img, metadata_png(layout) if layout is not None else None)
    displayed = seen.size = displayed_size(stored, orientation)
    _check_min_side(displayed, request.min_side)
    target = _model_size(request.target_size, displayed)
    within = request.min_pixels <= displayed[0] * displayed[1] <= request.max_pixels
    within = within and not (request.align_to_grid and target != displayed)
    return _Plan(
        format=img.format,
        mode=img.mode,
        stored=stored,
        displayed=displayed,
        orientation=orientation,
        layout=layout,
        decoded=decoded,
        target=target,
        keep=can_keep(img.format or "", img.mode, orientation, within, request.image_format),
        needs_resize=not within and target != displayed,
    )


def _check_header_size(size: tuple[int, int], max_image_pixels: int) -> None:
    width, height = size
    if width <= 0 or height <= 0:
        raise Reject("too_small", f"{width}x{height}")
    if width * height > max_image_pixels:
        raise Reject(
            "decompression_bomb", f"header claims {width}x{height} = {width * height} px > {max_image_pixels}"
        )


def _check_min_side(displayed: tuple[int, int], min_side: int) -> None:
    if min(displayed) < min_side:
        raise Reject("too_small", f"{displayed[0]}x{displayed[1]}: a side is below {min_side} px")


def _model_size(
    target_size: Callable[[int, int], tuple[int, int]], displayed: tuple[int, int]
) -> tuple[int, int]:
    """The model's (width, height) for the displayed size; its refusal is an ``aspect_ratio`` reject."""
    try:
        t_h, t_w = target_size(displayed[1], displayed[0])
    except ValueError as exc:
        raise Reject("aspect_ratio", short_detail(exc)) from exc
    return t_w, t_h


# ---- steps 3 and 4: verify, then keep or re-encode --------------------------------------------------------


def _output(data: bytes, img: Image.Image, plan: _Plan, request: _Request, relaxed: bool) -> ImageResult:
    layout = plan.layout
    strips = layout is not None and goes_in_strips(layout, plan.needs_resize)
    if not plan.decoded:
        request.budget.check(img, _reduced_path(plan, strips))
    if plan.keep:
        return _kept(data, img, plan, relaxed)
    if layout is not None and strips:
        return _strip_resized(data, img, layout, plan, request)
    decoded, notes = _verify_decode(data, img, plan, relaxed)
    return _reencoded(data, decoded, plan, request, notes)


def _reduced_path(plan: _Plan, strips: bool) -> str | None:
    """How the image will be decoded: reduced (``jpeg_draft``, ``png_strips``) or whole (None)."""
    if strips:
        return "png_strips"
    if plan.src_format in ("JPEG", "MPO") and (plan.needs_resize or plan.keep):
        return "jpeg_draft"
    return None


def _verify_decode(
    data: bytes, img: Image.Image, plan: _Plan, relaxed: bool
) -> tuple[Image.Image, list[str]]:
    """Decode every pixel (the verification); the decoded image and its notes. JPEGs that will be downsized
    anyway are decoded with DCT scaling near the target (``jpeg_fast_decode``: libjpeg-turbo where its pixels
    are Pillow's); kept ones at 1/8 scale by Pillow (every entropy-coded block is still decoded, so truncation
    and corrupt data are found exactly as at full scale, at a third of the cost)."""
    notes: list[str] = []
    if plan.src_format in ("JPEG", "MPO") and (plan.needs_resize or plan.keep):
        if plan.keep:
            img.draft(plan.mode, (1, 1))
        else:
            img.draft(
                "RGB", displayed_size(plan.target, plan.orientation)
            )  # draft works in stored orientation
            if img.size != plan.stored:
                notes.append("jpeg_draft_scaled")
            return decode_resized_jpeg(data, img, relaxed), notes
    if not plan.decoded:
        full_decode(img, relaxed)
    return img, notes


def _icc_profile(img: Image.Image) -> bytes | None:
    icc = img.info.get("icc_profile")
    return icc if isinstance(icc, bytes) else None


def _reencoded(
    data: bytes, img: Image.Image, plan: _Plan, request: _Request, notes: list[str]
) -> ImageResult:
    """Normalise once (upright, sRGB, RGB or L), resize to the model's size when needed, encode."""
    icc = _icc_profile(img)
    work: Image.Image = img
    if plan.orientation != 1:
        work = work.transpose(ORIENT_OPS[plan.orientation])
        notes.append(f"exif_orientation_{plan.orientation}_applied")
    work = apply_icc(work, icc, notes)
    work, had_alpha = normalise_mode(work, notes)
    if plan.needs_resize:
        work = resize(work, plan.target, RESAMPLE[request.resample])
        notes.append("resized")
    out_fmt = choose_output(request.image_format, plan.src_format, plan.mode or "", had_alpha)
    lossless = out_fmt == "webp" and plan.src_format == "WEBP" and is_lossless_webp(data)
    return _encoded(work, out_fmt, request.jpeg_quality, lossless, plan, notes)


def _strip_resized(
    data: bytes, img: Image.Image, layout: PngLayout, plan: _Plan, request: _Request
) -> ImageResult:
    """A big PNG decoded, normalised and resized strip by strip, then encoded."""
    out, notes = process_big_png(
        data,
        layout,
        _icc_profile(img),
        orientation=plan.orientation,
        out_size=plan.target,
        resample=RESAMPLE[request.resample],
    )
    had_alpha = "alpha_composited_on_white" in notes
    out_fmt = choose_output(request.image_format, plan.src_format, plan.mode or "", had_alpha)
    return _encoded(out, out_fmt, request.jpeg_quality, False, plan, notes)


#: Kept formats verified by a cheaper decode than the trainer's, shown by a test to give its verdict on
#: truncated and damaged files (JPEG: DCT scaling at 1/8 still entropy-decodes every block).
_DRAFT_VERIFIED = frozenset({"JPEG", "MPO"})


def _kept(data: bytes, img: Image.Image, plan: _Plan, relaxed: bool) -> ImageResult:
    """The original bytes as output, verified once; anything after the image's end marker is cut off (and
    noted). The bytes written are decoded as the trainer decodes them (but JPEGs, see ``_DRAFT_VERIFIED``)."""
    out, notes = kept_bytes(plan.src_format, data)
    if plan.src_format in _DRAFT_VERIFIED:
        _verify_decode(data, img, plan, relaxed)
    else:
        problem = image_problem(out)
        if problem is not None:
            raise problem
    width, height = plan.displayed
    return ImageResult(
        "ok",
        plan.format,
        plan.mode,
        width,
        height,
        out_width=width,
        out_height=height,
        out_ext=KEEPABLE[plan.src_format],
        out_bytes=out,
        kept_original=out is data,
        notes=tuple(notes),
    )


def _encoded(
    work: Image.Image, out_fmt: EncodeFormat, quality: int, lossless: bool, plan: _Plan, notes: list[str]
) -> ImageResult:
    return ImageResult(
        "ok",
        plan.format,
        plan.mode,
        *plan.displayed,
        out_width=work.width,
        out_height=work.height,
        out_ext=FMT_TO_EXT[out_fmt],
        out_bytes=encode(work, out_fmt, quality, lossless),
        notes=tuple(notes),
    )
