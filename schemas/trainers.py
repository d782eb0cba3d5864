"""Named trainer presets (``vlmforge run --trainer NAME``): the model and knobs that make vlmforge count, drop
and keep what one training recipe's data path does. Data only: each preset is a dict of flat ``RunConfig``
option names (the CLI's) to values; the CLI applies a preset's values to every option the user did not give
explicitly, before the config is built.

Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge 0.6.2): the Qwen-VL recipes build
``megatron.bridge.models.qwen_vl.data.energon.QwenVLTaskEncoder`` from ``QwenVLEnergonTaskEncoderConfig``
(``src/megatron/bridge/data/builders/energon.py``), whose defaults are ``min_pixels=200704`` and
``max_pixels=1003520`` (passed to the HF image processor: its ``smart_resize`` bounds), ``max_num_images=10``
(more images: the sample is skipped), ``max_num_frames=60`` (a longer video keeps its FIRST 60 frames:
``--frames-mode truncate``), ``max_visual_tokens=16384`` (more visual tokens, counted as
``prod(image_grid_thw) // merge**2``: skipped), and ``max_padding_length=config.seq_length``, 4096 in the
Qwen2.5-VL and Qwen3-VL recipes (``recipes/qwen_vl/h100/qwen25_vl.py``, ``qwen3_vl.py``). Bridge cuts a
longer sequence instead of skipping it (``pad_or_truncate_sequence_batch``), so the preset uses
``--seq-len-mode truncate`` (cut text after the last visual token; a sample whose visual tokens alone do not
fit is dropped, since a cut through an image would break the model's image-token check).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# The QwenVLTaskEncoder defaults every Bridge Qwen-VL recipe uses (see the module text for the sources).
_BRIDGE_QWEN_VL: Final[Mapping[str, Any]] = {
    "min_pixels": 200_704,
    "max_pixels": 1_003_520,
    "max_num_images": 10,
    "max_num_frames": 60,
    "frames_mode": "truncate",
    "max_visual_tokens": 16_384,
    "seq_len": 4096,
    "seq_len_mode": "truncate",
    # Bridge's `videos` part is a list of frame images: written at the model's frame size when the batch
    # samples them (`frames`), instead of decoded from the kept video at publish time.
    "sample_format": "bridge",
    # NVIDIA's converter for this release holds out 5% by the same key hash (a recipe validates on it).
    "val_fraction": 0.05,
    "video_mode": "frames",
    # batch() feeds what qwen2_5_collate_fn makes of a sample (qwen-vl-utils, then the processor): counted
    # so, images stored on the processor's grid (both paths then agree on them; tasks/tokens/feed_paths.py)
    "feed_path": "bridge_collate",
}

TRAINERS: Final[Mapping[str, Mapping[str, Any]]] = {
    "bridge-qwen2.5-vl": {"model": "qwen2_5_vl", **_BRIDGE_QWEN_VL},
    "bridge-qwen3-vl": {"model": "qwen3_vl", **_BRIDGE_QWEN_VL},
}
