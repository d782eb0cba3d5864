"""InternVL and Nemotron VL: dynamic tiling (docs/visual-tokens.md §3).

An image (at its stored size, :func:`~..resize.pipeline_size`) is resized to the ``cols x rows`` grid of
``tile_size`` tiles whose aspect ratio fits it best, plus one thumbnail tile when the grid has more than one;
every tile is ``tokens_per_tile`` tokens. The two models differ only in how the grid is picked
(``tiling.ratio``): InternVL's closest ratio or Megatron-LM's area-weighted score.
A video is one tile per sampled frame.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from ....schemas.presets import ModelPreset, TilingSpec
from ..model_files import ModelFiles, as_dict
from ..resize_rule import AspectRatioError, check_aspect, pipeline_size
from .model_family import ImageTokens, VideoLayout, check_sampled
from .wrapped import WrappedFamily

__all__ = ["TiledFamily", "tile_count", "tile_grid"]


@functools.lru_cache(maxsize=64)
def _target_grids(min_tiles: int, max_tiles: int) -> tuple[tuple[int, int], ...]:
    """Candidate (cols, rows) grids, ordered exactly as InternVL's ``dynamic_preprocess`` orders them: a set
    comprehension sorted by tile count (ties keep the set's iteration order, which CPython fixes for int
    tuples)."""
    grids = {
        (i, j)
        for n in range(min_tiles, max_tiles + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if min_tiles <= i * j <= max_tiles
    }
    return tuple(sorted(grids, key=lambda g: g[0] * g[1]))


def _closest_ratio(
    aspect: float, grids: Sequence[tuple[int, int]], width: int, height: int, size: int
) -> tuple[int, int]:
    """InternVL ``find_closest_aspect_ratio``: smallest |ratio difference|; on an exact tie the later (larger)
    grid wins when the image covers more than half of it."""
    best_diff = math.inf
    best = (1, 1)
    area = width * height
    for cols, rows in grids:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best_diff, best = diff, (cols, rows)
        elif diff == best_diff and area > 0.5 * size * size * cols * rows:
            best = (cols, rows)
    return best


def _area_weighted_ratio(
    aspect: float, grids: Sequence[tuple[int, int]], width: int, height: int, size: int
) -> tuple[int, int]:
    """Megatron-LM ``find_closest_area_weighted_aspect_ratio`` (Llama-Nemotron-Nano-VL): maximise
    ``min(tiles * size^2 / area, 0.6) * min(r / aspect, aspect / r)``; the first maximum wins."""
    best_score = -math.inf
    best = (1, 1)
    area = width * height
    for cols, rows in grids:
        r = cols / rows
        score = min((cols * rows * size * size) / area, 0.6) * min(r / aspect, aspect / r)
        if score > best_score:
            best_score, best = score, (cols, rows)
    return best


_RATIO_PICKERS = {"closest": _closest_ratio, "area_weighted": _area_weighted_ratio}


def tile_grid(
    width: int, height: int, tiling: TilingSpec, *, max_tiles: int | None = None
) -> tuple[int, int]:
    """(cols, rows) of the tile grid an image of ``width`` x ``height`` is resized to (thumbnail not
    included).

    ``max_tiles`` overrides ``tiling.max_tiles`` (e.g. InternVL's per-image share of a multi-image sample)."""
    if width <= 0 or height <= 0:
        raise AspectRatioError(f"image has a side of size <= 0: height={height}, width={width}")
    hi = tiling.max_tiles if max_tiles is None else max_tiles
    lo = min(tiling.min_tiles, hi)
    grids = _target_grids(lo, hi)
    return _RATIO_PICKERS[tiling.ratio](width / height, grids, width, height, tiling.tile_size)


def tile_count(width: int, height: int, tiling: TilingSpec, *, max_tiles: int | None = None) -> int:
    """Tiles of one image including the thumbnail (added when the grid has more than one tile)."""
    cols, rows = tile_grid(width, height, tiling, max_tiles=max_tiles)
    return _with_thumbnail(cols * rows, tiling)


def _with_thumbnail(grid_tiles: int, tiling: TilingSpec) -> int:
    return grid_tiles + (1 if tiling.thumbnail and grid_tiles != 1 else 0)


def _tiling(preset: ModelPreset) -> TilingSpec:
    if preset.tiling is None:  # the schema requires it for a tiled family
        raise ValueError(f"preset {preset.name!r} has no tiling section")
    return preset.tiling


class TiledFamily(WrappedFamily):
    requires = (("text", "a text section (placeholders and wrappers)"), ("tiling", "a tiling section"))
    video_samplers = ("uniform", "none")

    def read_folder(self, base: dict[str, Any], files: ModelFiles) -> dict[str, Any]:
        """InternVL / Nemotron ``config.json`` tiling keys (or the HF processor's), tokens per tile, and the
        HF-format InternVL's own media tokens."""
        pre, proc, cfg, tok_cfg = files.preprocessor, files.processor, files.config, files.tokenizer_config
        out: dict[str, Any] = {}
        tiling: dict[str, Any] = {}
        vision = as_dict(cfg.get("vision_config"))
        tile = cfg.get("force_image_size", as_dict(pre.get("size")).get("height"))
        if isinstance(tile, int):
            tiling["tile_size"] = tile
        for src, dst in (
            ("max_dynamic_patch", "max_tiles"),
            ("min_dynamic_patch", "min_tiles"),
            ("use_thumbnail", "thumbnail"),
        ):
            if src in cfg:
                tiling[dst] = cfg[src]
        for src, dst in (("max_patches", "max_tiles"), ("min_patches", "min_tiles")):
            if isinstance(pre.get(src), int):
                tiling[dst] = pre[src]
        if pre.get("crop_to_patches") is False:
            tiling["max_tiles"] = tiling["min_tiles"] = 1
        patch = vision.get("patch_size")
        ratio = cfg.get("downsample_ratio")
        if isinstance(tile, int) and isinstance(patch, int) and isinstance(ratio, int | float):
            tiling["tokens_per_tile"] = int((tile // patch) ** 2 * ratio**2)
        if isinstance(proc.get("image_seq_length"), int):
            tiling["tokens_per_tile"] = proc["image_seq_length"]
        ctx = tok_cfg.get("context_image_token")
        if isinstance(ctx, str):  # HF-format InternVL (InternVLProcessor): its own tokens and frame labels
            tiling["multi_image"] = "per_image"
            out["text"] = {
                "image_placeholder": ctx,
                "image_suffix": "",
                "image_pad": ctx,
                "image_start": str(tok_cfg.get("start_image_token", "<img>")),
                "image_end": str(tok_cfg.get("end_image_token", "</img>")),
                "video_placeholder": str(tok_cfg.get("video_token", "<video>")),
                "video_suffix": "",
                "video_frame": "Frame{i}: ",
                "video_frame_sep": "\n",
            }
        if tiling:
            out["tiling"] = tiling
        return out

    def compute_image_tokens(
        self,
        preset: ModelPreset,
        height: int,
        width: int,
        min_pixels: int,
        max_pixels: int,
        n_images: int,
    ) -> ImageTokens:
        """``tiles * tokens_per_tile`` for the tile grid of the stored size; ``n_images`` (the images of the
        sample) splits the tile budget when ``tiling.multi_image`` is ``split``."""
        h, w = pipeline_size(preset, height, width, min_pixels=min_pixels, max_pixels=max_pixels)
        t = _tiling(preset)
        max_tiles = max(1, t.max_tiles // max(1, n_images)) if t.multi_image == "split" else t.max_tiles
        cols, rows = tile_grid(w, h, t, max_tiles=max_tiles)
        tiles = _with_thumbnail(cols * rows, t)
        return ImageTokens(
            tokens=tiles * t.tokens_per_tile,
            resized_height=rows * t.tile_size,
            resized_width=cols * t.tile_size,
            tiles=tiles,
        )

    def video_layout(
        self, preset: ModelPreset, n_sampled: int, height: int, width: int, frame_cap: int | None
    ) -> VideoLayout:
        """One tile per frame: a group is one frame."""
        check_sampled(n_sampled)
        if preset.video_sampler == "none":
            raise ValueError(f"model preset {preset.name!r} takes no video input")
        t = _tiling(preset)
        check_aspect(height, width, preset.aspect_ratio_limit)
        return VideoLayout(n_sampled, t.tokens_per_tile, t.tile_size, t.tile_size)
