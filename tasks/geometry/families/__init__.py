"""Model families: one module per family behind :class:`~.base.ModelFamily`, found by ``preset.family``.

Adding a family: its preset YAML, a module here implementing ``ModelFamily``, one line in :data:`FAMILIES`,
its test (and schemas/presets.py when it needs new preset fields).
"""

from __future__ import annotations

from ....schemas.presets import ModelPreset
from .llava import LlavaFamily
from .model_family import ModelFamily
from .qwen import QwenFamily
from .tiled import TiledFamily

__all__ = ["FAMILIES", "family_of"]

FAMILIES: dict[str, ModelFamily] = {
    "qwen": QwenFamily(),
    "internvl": TiledFamily(),
    "nemotron_vl": TiledFamily(),
    "llava": LlavaFamily(),
}


def family_of(preset: ModelPreset) -> ModelFamily:
    """The family implementation of ``preset`` (KeyError names an unregistered family)."""
    try:
        return FAMILIES[preset.family]
    except KeyError:
        raise KeyError(f"no model family {preset.family!r} registered in tasks/geometry/families") from None
