"""Big PNGs: decoded, normalised and resized strip by strip, never whole in memory.

Infographics and scanned pages arrive as PNGs of 100+ megapixels that the model will see at one or two.
Decoded whole they would need gigabytes per worker; here every row is still decoded (the verification), but
only one strip of source rows and the output are held at a time. The strips are cut at whole blocks of the
box pre-reduction, so reducing strip by strip gives the pixels reducing the whole image would.
"""

from __future__ import annotations

from collections.abc import Callable

from PIL import Image

from .colour import icc_converter, normalise_mode
from .orient import ORIENT_OPS, swaps_sides
from .png import PngLayout, png_strips
from .rejects import Reject
from .resize import StripResizer, reduce_factors

__all__ = ["STRIP_MIN_PIXELS", "goes_in_strips", "process_big_png"]

#: PNGs with at least this many pixels are decoded strip by strip (when the layout allows it).
STRIP_MIN_PIXELS = 24_000_000


def goes_in_strips(layout: PngLayout | None, needs_resize: bool) -> bool:
    """Whether a PNG is big enough, resized anyway, and laid out so that strips decode on their own."""
    return (
        layout is not None
        and needs_resize
        and layout.strippable
        and layout.width * layout.height >= STRIP_MIN_PIXELS
    )


def process_big_png(
    data: bytes,
    layout: PngLayout,
    icc: bytes | None,
    *,
    orientation: int,
    out_size: tuple[int, int],
    resample: Image.Resampling,
) -> tuple[Image.Image, list[str]]:
    """Decode (every row: the verification), normalise and resize a big PNG strip by strip. Returns the
    output image in displayed orientation and the notes."""
    notes: list[str] = ["strip_decoded"]
    stored_out = (out_size[1], out_size[0]) if swaps_sides(orientation) else out_size
    fx, fy = reduce_factors((layout.width, layout.height), stored_out)
    reduced = (-(-layout.width // fx), -(-layout.height // fy))
    resizer: StripResizer | None = None
    convert: Callable[[Image.Image], Image.Image] | None = None
    # strips of whole reduce blocks, so reducing strip by strip equals reducing the whole image
    for strip in png_strips(data, layout, row_multiple=fy):
        if convert is None:
            convert = icc_converter(icc, strip.mode, notes)
        work, _had_alpha = normalise_mode(convert(strip), notes if resizer is None else [])
        if fx > 1 or fy > 1:
            work = work.reduce((fx, fy))
        if resizer is None:
            extent = (layout.width / fx, layout.height / fy)
            resizer = StripResizer(reduced, stored_out, work.mode, resample, extent)
        resizer.feed(work)
    if resizer is None:  # pragma: no cover - a PNG has at least one row
        raise Reject("decode_error", "PNG has no rows")
    out = resizer.result()
    notes.append("resized")
    if orientation != 1:
        out = out.transpose(ORIENT_OPS[orientation])
        notes.append(f"exif_orientation_{orientation}_applied")
    return out, notes
