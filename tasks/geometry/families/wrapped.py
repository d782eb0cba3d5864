"""What the tiled and LLaVA families share: media written into the text through the preset's ``text``
section, and uniform frame sampling.

The chat template writes ``text.image_placeholder`` per image; the processor replaces it by ``image_start +
image_pad * N + image_end``. A video becomes one such block per sampled frame, each after its frame label
(``text.video_frame``) and joined by ``text.video_frame_sep``. A subclass supplies only the token formulas.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from ....schemas.presets import ModelPreset, TextSpec
from ..frame_sampling import np_linspace_round
from ..pixel_bounds import PixelBounds
from .model_family import DEFAULT_VIDEO_FPS, ExpandedText, ModelFamily, VideoSpec

__all__ = ["WrappedFamily", "placeholder_re"]


@functools.lru_cache(maxsize=16)
def placeholder_re(*placeholders: str) -> re.Pattern[str]:
    """One regex matching any of ``placeholders``, the longest first."""
    alts = sorted({p for p in placeholders if p}, key=len, reverse=True)
    return re.compile("|".join(re.escape(p) for p in alts))


def _text_spec(preset: ModelPreset) -> TextSpec:
    if preset.text is None:  # the schema requires it outside the qwen family
        raise ValueError(f"preset {preset.name!r} has no text section")
    return preset.text


class WrappedFamily(ModelFamily):
    def resize_factor(self, preset: ModelPreset) -> int | None:
        return None

    def sample_frames(self, preset: ModelPreset, n_frames: int, video_fps: float) -> list[int]:
        """Megatron-LM ``linspace(0, F - 1, min(num_frames, F))`` rounded; InternVL budgets at
        max_num_frame."""
        return np_linspace_round(0, n_frames - 1, min(preset.max_frames, n_frames))

    def placeholders(self, preset: ModelPreset) -> tuple[str, str]:
        spec = _text_spec(preset)
        return spec.image_placeholder, spec.video_placeholder

    def count_placeholders(self, text: str, preset: ModelPreset) -> tuple[int, int]:
        img_ph, vid_ph = self.placeholders(preset)
        found = placeholder_re(img_ph, vid_ph).findall(text)
        return sum(1 for f in found if f == img_ph), sum(1 for f in found if f == vid_ph)

    def expand(
        self,
        text: str,
        preset: ModelPreset,
        image_sizes: Sequence[tuple[int, int]],
        videos: Sequence[VideoSpec],
        bounds: PixelBounds,
        spans: bool,
    ) -> ExpandedText:
        """Spans are always recorded (they cost nothing extra here)."""
        spec = _text_spec(preset)
        img_ph, vid_ph = self.placeholders(preset)
        if self.count_placeholders(text, preset) != (len(image_sizes), len(videos)):
            raise ValueError(f"message text contains a literal {img_ph} / {vid_ph} placeholder")
        n_images = len(image_sizes)
        lo, hi = bounds.image_min_pixels, bounds.image_max_pixels
        per_image = [
            self.image_tokens(preset, h, w, min_pixels=lo, max_pixels=hi, n_images=n_images).tokens
            for h, w in image_sizes
        ]
        out = _Writer()
        if spec.add_bos and not text.startswith(spec.bos_token):
            out.write(spec.bos_token)
        block = spec.image_start + spec.image_pad + spec.image_end
        per_video: list[int] = []
        images, vids = iter(per_image), iter(videos)
        pos = 0
        for m in placeholder_re(img_ph, vid_ph).finditer(text):
            out.write(text[pos : m.start()])
            pos = m.end()
            if m.group(0) == img_ph:
                out.span(block, next(images))
                continue
            v = next(vids)
            lay = self.video_layout(preset, v.n_sampled_frames, v.height, v.width, bounds.video_frame_cap)
            for k, label in enumerate(_frame_labels(spec, v)[: lay.groups]):
                if k:
                    out.write(spec.video_frame_sep)
                out.span(label + block, lay.per_group)
            per_video.append(lay.groups * lay.per_group)
        out.write(text[pos:])
        return ExpandedText(out.text(), len(out.ends), per_image, per_video, out.ends, out.tokens)


class _Writer:
    """Collects the expanded text and where each visual span ends."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._length = 0
        self.ends: list[int] = []
        self.tokens: list[int] = []

    def write(self, piece: str) -> None:
        self._parts.append(piece)
        self._length += len(piece)

    def span(self, piece: str, tokens: int) -> None:
        self.write(piece)
        self.ends.append(self._length)
        self.tokens.append(tokens)

    def text(self) -> str:
        return "".join(self._parts)


def _frame_labels(spec: TextSpec, v: VideoSpec) -> list[str]:
    if not spec.video_frame:
        return [""] * v.n_sampled_frames
    if "{t" in spec.video_frame and v.indices is None:
        raise ValueError("this model labels video frames with their time: pass the sampled frame indices")
    fps = DEFAULT_VIDEO_FPS if v.video_fps is None else v.video_fps
    idx = list(v.indices) if v.indices is not None else list(range(v.n_sampled_frames))
    if len(idx) != v.n_sampled_frames:
        raise ValueError(f"got {len(idx)} frame indices for {v.n_sampled_frames} sampled frames")
    return [spec.video_frame.format(i=k + 1, t=i / fps) for k, i in enumerate(idx)]
