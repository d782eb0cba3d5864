"""Loading a model preset: the shipped YAML, a local model folder's files, single overrides, then the checks
of its family (the family registry in :mod:`.families` is the only place a family is named)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...schemas.presets import ModelPreset, merge_preset, preset_data
from .families import FAMILIES, family_of
from .model_files import ModelFiles, bos_overrides, chat_template

__all__ = ["check_preset", "load_preset", "model_dir_overrides"]


def load_preset(name: str, model_dir: str | Path | None = None, **overrides: Any) -> ModelPreset:
    """Load ``schemas/presets/<name>.yaml``.

    ``model_dir`` (a local model folder) overlays what its own files say (:func:`model_dir_overrides`);
    keyword overrides then replace single fields (validated). Nested sections merge key by key. The preset
    is then checked by its family (what its presets must set, the video samplers it takes).
    """
    data = preset_data(name)
    if model_dir is not None:
        merge_preset(data, model_dir_overrides(data, Path(model_dir)))
    merge_preset(data, overrides)
    return ModelPreset.model_validate(
        data, context={"families": tuple(FAMILIES), "family_check": check_preset}
    )


def check_preset(preset: ModelPreset) -> None:
    """What ``preset``'s family requires of its presets (ValueError saying what is missing)."""
    family_of(preset).check(preset)
    if preset.timestamps and not family_of(preset).timestamps:
        able = ", ".join(name for name, f in FAMILIES.items() if f.timestamps)
        raise ValueError(f"timestamps (Qwen3 per-group text) apply to the {able} family only")


def model_dir_overrides(base: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Preset fields a local model folder overrides: what its family reads from ``preprocessor_config.json``,
    ``video_preprocessor_config.json``, ``processor_config.json`` and ``config.json``
    (its family's ``read_folder``), then the chat template, ``tokenizer.json`` and the BOS settings of
    ``tokenizer_config.json``. Only keys the files actually carry are returned."""
    if not folder.is_dir():
        raise ValueError(f"model folder {str(folder)!r} does not exist")
    files = ModelFiles.read(folder)
    family = FAMILIES.get(base["family"]) if isinstance(base.get("family"), str) else None
    out = family.read_folder(base, files) if family is not None else {}
    template = chat_template(folder)
    if template is not None:
        out["chat_template"] = template
    if (folder / "tokenizer.json").is_file():
        out["tokenizer"] = str((folder / "tokenizer.json").resolve())
    if isinstance(base.get("text"), dict):
        text = bos_overrides(files.tokenizer_config)
        if text:
            out["text"] = {**out.get("text", {}), **text}
    return out
