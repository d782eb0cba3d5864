"""The names people type for a model, mapped to the preset that counts its tokens.

Presets are named ``qwen2_5_vl``, ``qwen3_vl``, ``internvl``, ... (``schemas/presets/``); people type a hub
repository (``Qwen/Qwen2.5-VL-7B-Instruct``), a family with dashes (``qwen3-vl``) or a slightly wrong name.
:func:`preset_for` maps the first two to a preset (the size and the instruct/base variant share the
preset's geometry: the vision config is the family's); :func:`closest_presets` suggests one for the rest.
Pure functions over the list of known presets; this module imports nothing of the project.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

# Normalised name prefixes that do not start with their preset's name (checked before the presets' own).
ALIASES: tuple[tuple[str, str], ...] = (
    ("llava_v1_6", "llava_next"),
    ("llava_next", "llava_next"),
    ("llava_v1_5", "llava_1_5"),
    ("llava_1_6", "llava_next"),
    ("llama_3_1_nemotron_nano_vl", "nemotron_vl"),
    ("llama_nemotron_nano_vl", "nemotron_vl"),
    ("nemotron_nano_vl", "nemotron_vl"),
    ("nemotron_nano_12b_v2_vl", "nemotron_vl"),
    ("internvl2_5", "internvl"),
    ("internvl3", "internvl"),
    ("internvl2", "internvl"),
    ("qwen2_5vl", "qwen2_5_vl"),
    ("qwen3vl", "qwen3_vl"),
    ("qwen2vl", "qwen2_vl"),
)


def normalise(name: str) -> str:
    """``Qwen/Qwen2.5-VL-7B-Instruct`` -> ``qwen2_5_vl_7b_instruct``: the repository's last part, lower
    case, every run of ``-``, ``.``, ``_`` and spaces one ``_``."""
    last = name.strip().rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[-._\s]+", "_", last.lower()).strip("_")


def preset_for(name: str, known: Sequence[str]) -> str | None:
    """The preset ``name`` means: itself when it is one, else the longest preset (or alias) its normalised
    form starts with, whole words only (``qwen2_vl`` never matches ``qwen2_5_vl_7b``); None when none."""
    if name in known:
        return name
    norm = normalise(name)
    candidates = [(a, p) for a, p in ALIASES if p in known] + [(p, p) for p in known]
    best: tuple[int, str] | None = None
    for prefix, preset in candidates:
        whole = norm == prefix or norm.startswith(prefix + "_")
        if whole and (best is None or len(prefix) > best[0]):
            best = (len(prefix), preset)
    return best[1] if best else None


def closest_presets(name: str, known: Sequence[str], n: int = 2) -> list[str]:
    """Presets that look like ``name`` (difflib over the normalised forms), best first."""
    return difflib.get_close_matches(normalise(name), list(known), n=n, cutoff=0.4)
