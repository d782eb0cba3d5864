"""Frame-index arithmetic shared by the video samplers, and the ``--max-num-frames`` knob.

Each family's sampler decides HOW MANY frames a video gives (:meth:`ModelFamily.sample_frames`); the index
spacing is one of two linspace roundings that must match numpy's and torch's bit for bit, so they live here
once. :func:`thin_frames` then applies the pipeline's own cap, whatever the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

__all__ = ["FramesMode", "VideoTooShortError", "np_linspace_round", "thin_frames", "torch_linspace_round"]

FramesMode = Literal["uniform", "truncate"]


class VideoTooShortError(ValueError):
    """Video with fewer frames than one temporal patch (2 for Qwen)."""


def np_linspace_round(start: float, stop: float, num: int) -> list[int]:
    """``np.linspace(start, stop, num).round().astype(int)``: float64 ``i * step + start``, last = stop,
    ties to even."""
    if num <= 0:
        return []
    if num == 1:
        return [round(start)]
    step = (stop - start) / (num - 1)
    values = [i * step + start for i in range(num - 1)] + [stop]
    return [round(v) for v in values]


def torch_linspace_round(start: float, end: float, steps: int) -> list[int]:
    """``torch.linspace(start, end, steps).round().long()`` per the CPU scalar kernel (first half counted
    from ``start``, second half from ``end``), evaluated in float64 (torch: float32). For an even ``steps``
    the exact values are never ties; float32 vs float64 can only differ for clips of tens of thousands of
    frames (and then only the indices, never the token count)."""
    if steps <= 0:
        return []
    if steps == 1:
        return [round(start)]
    step = (end - start) / (steps - 1)
    halfway = steps // 2
    values = [start + step * i if i < halfway else end - step * (steps - i - 1) for i in range(steps)]
    return [round(v) for v in values]


def thin_frames(
    indices: Sequence[int], max_num_frames: int | None, mode: FramesMode, temporal_patch_size: int
) -> list[int]:
    """The ``max_num_frames`` knob over a sampler's ``indices``: ``"uniform"`` keeps an evenly spread subset
    (count rounded down to a multiple of the temporal patch size), ``"truncate"`` keeps the first
    ``max_num_frames`` (Megatron-Bridge ``QwenVLTaskEncoder``: ``v[:max_num_frames]``)."""
    if max_num_frames is None or len(indices) <= max_num_frames:
        return list(indices)
    if mode == "truncate":
        if max_num_frames < 1:
            raise ValueError(f"max_num_frames must be >= 1, got {max_num_frames}")
        return list(indices[:max_num_frames])
    if mode == "uniform":
        tps = temporal_patch_size
        keep = (max_num_frames // tps) * tps
        if keep < tps:
            raise ValueError(f"max_num_frames must be >= {tps} in uniform mode, got {max_num_frames}")
        return [indices[p] for p in np_linspace_round(0, len(indices) - 1, keep)]
    raise ValueError(f"unknown max_num_frames mode {mode!r}; expected 'uniform' or 'truncate'")
