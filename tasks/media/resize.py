"""Resizing to the model's size: the pixels the model's processor would compute, at less cost.

Images are resized once, here, to exactly the model's factor-aligned size, so training resizes nothing. The
filter defaults to bicubic, what Qwen's processors use (transformers ``Qwen2VLImageProcessor`` resample,
qwen-vl-utils ``Image.resize``). Three paths give the same pixels (to a level here and there):

- :func:`resize` hands RGB and L bicubic resizes to torch's antialiased bicubic kernel (written to match
  Pillow's, what transformers' fast processors call, 2x Pillow's speed on uint8) and the rest to Pillow;
- big downscales first box-reduce by an integer factor (Pillow's ``reducing_gap``);
- :class:`StripResizer` resizes an image that arrives in horizontal strips (big PNGs), holding only the
  rows under the filter window.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from PIL import Image

__all__ = ["RESAMPLE", "Resample", "StripResizer", "reduce_factors", "resize"]

#: Resampling filters offered, and their support in source pixels at scale 1 (Pillow's filter table).
Resample = Literal["bicubic", "lanczos"]
RESAMPLE: dict[str, Image.Resampling] = {
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
}
_FILTER_SUPPORT = {Image.Resampling.BICUBIC: 2.0, Image.Resampling.LANCZOS: 3.0}
#: Downscales by 2 x this or more first box-reduce by an integer factor that leaves at least this much for the
#: filter (Pillow's ``reducing_gap``): at 3 the result is indistinguishable from the fair resample (Pillow's
#: docs; here: mean error under 0.5 level), and a 50 MP -> 1 MP resize takes a third of the time. Smaller
#: downscales resize exactly as the model's processor does.
_REDUCING_GAP = 3.0

#: Resize RGB and L images with torch's antialiased bicubic kernel when torch is installed (it is: Energon
#: needs it). That kernel was written to match Pillow's (the pixels differ by a level at a few places) and is
#: what transformers' fast image processors call; on uint8 it is vectorised, 2x Pillow's here with the copies
#: in and out. It uses torch's intra-op threads (Ray sets OMP_NUM_THREADS to a task's CPUs).
TORCH_RESIZE = True
_torch_module: Any = None


def reduce_factors(src: tuple[int, int], out: tuple[int, int]) -> tuple[int, int]:
    """Pillow's ``reducing_gap`` factors for ``resize(out)`` of an image of size ``src``."""
    return (max(1, int(src[0] / out[0] / _REDUCING_GAP)), max(1, int(src[1] / out[1] / _REDUCING_GAP)))


def _torch() -> Any:
    """torch, imported on first use (False when it is missing)."""
    global _torch_module
    if _torch_module is None:
        try:
            import torch
            import torch.nn.functional
        except ImportError:  # pragma: no cover - a dependency of megatron-energon
            _torch_module = False
        else:
            # the tensors below view Pillow's read-only pixel copies and are never written to
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            _torch_module = torch
    return _torch_module


def pixels(img: Image.Image) -> tuple[np.ndarray, str]:
    """``img``'s pixels as an (h, w, channels) array and the raw mode that reads them back. An RGB image is
    viewed without a copy through Pillow's Arrow export, four bytes a pixel as Pillow stores it, when its
    rows lie in one block (images up to Pillow's block size, 16 MB: about 4 MP); otherwise it is copied."""
    if img.mode == "RGB":
        try:
            flat = pa.array(img).flatten()
        except (ValueError, pa.ArrowException):  # rows spread over several blocks
            pass
        else:
            # the data buffer read directly: Arrow's to_numpy imports pandas (2-3 s in every worker)
            view = np.frombuffer(flat.buffers()[1], dtype=np.uint8, count=len(flat), offset=flat.offset)
            return view.reshape(img.height, img.width, 4), "RGBX"
        return np.asarray(img), "RGB"
    return np.asarray(img)[..., None], "L"


def resize(img: Image.Image, size: tuple[int, int], resample: Image.Resampling) -> Image.Image:
    """``img.resize(size, resample)``: Pillow's, with a box pre-reduction for downscales past
    2 x ``_REDUCING_GAP``, or torch's antialiased bicubic for the other RGB and L bicubic resizes."""
    torch: Any = _torch() if TORCH_RESIZE and resample == Image.Resampling.BICUBIC else False
    if not torch or img.mode not in ("RGB", "L") or reduce_factors(img.size, size) != (1, 1):
        return img.resize(size, resample, reducing_gap=_REDUCING_GAP)
    src, rawmode = pixels(img)
    channels = src.shape[2]
    # channels-last in and out, the layout the vectorised uint8 kernel works in: with four channels it
    # neither unpacks the input nor packs the output, and Pillow reads the result back with one row copy
    out = torch.empty((1, channels, size[1], size[0]), dtype=torch.uint8, memory_format=torch.channels_last)
    torch.ops.aten._upsample_bicubic2d_aa.out(
        torch.from_numpy(src).permute(2, 0, 1)[None], [size[1], size[0]], False, None, None, out=out
    )
    return Image.frombytes(img.mode, size, out[0].permute(1, 2, 0).numpy(), "raw", rawmode)


class StripResizer:
    """``Image.resize(size, resample)`` fed with horizontal strips, top to bottom.

    Pillow resamples horizontally, then vertically, with separable filters, so each strip is resized
    horizontally on arrival and output rows are produced as soon as the source rows under their filter window
    are in. Only that window and the output are held, so memory does not grow with the source height. Output
    equals the in-memory resize up to floating-point rounding (a level here and there)."""

    def __init__(
        self,
        src_size: tuple[int, int],
        out_size: tuple[int, int],
        mode: str,
        resample: Image.Resampling,
        extent: tuple[float, float] | None = None,
    ) -> None:
        # ``extent``: the source area that maps onto the output, when it is not the whole source (a reduced
        # source whose last row and column are partial blocks: Pillow's reducing_gap resize does the same).
        (sw, sh), (ow, oh) = src_size, out_size
        self.sw, self.sh, self.ow, self.oh = sw, sh, ow, oh
        self.extent = extent or (float(sw), float(sh))
        self.resample = resample
        self.scale = self.extent[1] / oh
        self.support = _FILTER_SUPPORT[resample] * max(self.scale, 1.0)
        self.out = Image.new(mode, out_size)
        self.window: Image.Image | None = None  # horizontally resized source rows [top, fed)
        self.top = self.fed = self.done = 0

    def _first_row(self, o: int) -> int:
        return max(0, int((o + 0.5) * self.scale - self.support + 0.5))

    def _end_row(self, o: int) -> int:
        return min(self.sh, int((o + 0.5) * self.scale + self.support + 0.5))

    def _append(self, strip: Image.Image) -> Image.Image:
        """The window with ``strip`` resized horizontally (height unchanged) and added below it."""
        h = strip.height
        strip = strip.resize((self.ow, h), self.resample, box=(0.0, 0.0, self.extent[0], float(h)))
        self.fed += h
        if self.window is None:
            return strip
        grown = Image.new(strip.mode, (self.ow, self.window.height + h))
        grown.paste(self.window, (0, 0))
        grown.paste(strip, (0, self.window.height))
        return grown

    def feed(self, strip: Image.Image) -> None:
        window = self.window = self._append(strip)
        end = self.done
        while end < self.oh and self._end_row(end) <= self.fed:
            end += 1
        if end == self.done:
            return
        bottom = min(end * self.scale - self.top, float(window.height))  # fp: never past the rows held
        box = (0.0, self.done * self.scale - self.top, float(self.ow), bottom)
        part = window.resize((self.ow, end - self.done), self.resample, box=box)
        self.out.paste(part, (0, self.done))
        self.done = end
        if self.done < self.oh:
            first = self._first_row(self.done)
            self.window = window.crop((0, first - self.top, self.ow, window.height))
            self.top = first
        else:
            self.window = None

    def result(self) -> Image.Image:
        if self.done != self.oh:  # pragma: no cover - every row is produced once all strips are fed
            raise RuntimeError(f"strip resize produced {self.done} of {self.oh} rows")
        return self.out
