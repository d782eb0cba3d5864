"""A local model folder's own config files (``--model-dir``), read once for the family that overlays them on
its preset (each family's ``read_folder``), and the folder facts every family shares (chat template, BOS)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ModelFiles", "as_dict", "bos_overrides", "chat_template", "read_json"]


def read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not readable JSON ({exc})") from exc
    return doc if isinstance(doc, dict) else {}


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def chat_template(folder: Path) -> str | None:
    """The model's own chat template: chat_template.jinja, chat_template.json, then tokenizer_config.json."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    for name in ("chat_template.json", "processor_config.json", "tokenizer_config.json"):
        tpl = read_json(folder / name).get("chat_template")
        if isinstance(tpl, str):
            return tpl
        if isinstance(tpl, list):  # [{"name": "default", "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
            chosen = named.get("default") or next(iter(named.values()), None)
            if isinstance(chosen, str):
                return chosen
    return None


@dataclass(frozen=True)
class ModelFiles:
    """The JSON config files of a local model folder, each ``{}`` when absent."""

    preprocessor: dict[str, Any]  # preprocessor_config.json
    video_preprocessor: dict[str, Any]  # video_preprocessor_config.json
    processor: dict[str, Any]  # processor_config.json
    config: dict[str, Any]  # config.json
    tokenizer_config: dict[str, Any]  # tokenizer_config.json

    @classmethod
    def read(cls, folder: Path) -> ModelFiles:
        return cls(
            read_json(folder / "preprocessor_config.json"),
            read_json(folder / "video_preprocessor_config.json"),
            read_json(folder / "processor_config.json"),
            read_json(folder / "config.json"),
            read_json(folder / "tokenizer_config.json"),
        )


def bos_overrides(tok_cfg: dict[str, Any]) -> dict[str, Any]:
    text: dict[str, Any] = {}
    bos = tok_cfg.get("bos_token")
    if isinstance(bos, dict):
        bos = bos.get("content")
    if isinstance(bos, str):
        text["bos_token"] = bos
    if isinstance(tok_cfg.get("add_bos_token"), bool):
        text["add_bos"] = tok_cfg["add_bos_token"]
    return text
