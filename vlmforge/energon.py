"""Training-side glue for vlmforge Energon datasets.

Importable from a training environment that has only ``megatron-energon`` and ``vlmforge`` installed: keep the
imports light (no prefect, ray, polars, ...).

A vlmforge sample is a *crude* WebDataset sample (``dataset.yaml`` = ``CrudeWebdataset``) with the parts

* ``json``: the chat record (``{"id", "messages", ...}``); every typed media content part carries
  ``"part": "<n>.<ext>"`` naming the tar part that holds its bytes;
* ``0.jpg``, ``1.png``, ``2.mp4``, ...: the media, numbered in order of appearance.

:func:`cook_chat` turns such a sample into a :class:`ChatSample`. Use :class:`ChatTaskEncoder` (or register
:data:`COOKERS` on your own task encoder).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from megatron.energon import Cooker, DefaultTaskEncoder, Sample, basic_sample_keys, edataclass, stateless

__all__ = [
    "AV_EXTENSIONS",
    "COOKERS",
    "IMAGE_EXTENSIONS",
    "ChatSample",
    "ChatTaskEncoder",
    "cook_chat",
    "media_part_names",
]

#: Part extensions decoded as images by Energon's default decoder (webdataset ``imagehandler``).
IMAGE_EXTENSIONS = frozenset(
    {"jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "webp", "gif", "bmp", "tif", "tiff"}
)
#: Part extensions decoded as ``AVDecoder`` by Energon's default decoder (video containers).
AV_EXTENSIONS = frozenset({"mp4", "avi", "mov", "webm", "mkv", "flv"})


@edataclass
class ChatSample(Sample):
    """A multi-turn chat sample with its media.

    ``messages`` is a deep copy of ``record["messages"]`` where the value of every linked media part
    (``part["image"]`` / ``part["video"]``, i.e. the entry named by ``part["type"]``) is replaced by the
    decoded object; ``part["part"]`` still names the tar part. ``record`` is the json part unchanged.
    """

    #: Chat turns; linked media content parts hold decoded objects.
    messages: list[dict]
    #: Decoded images (``torch.float32`` ``(3, H, W)`` in [0, 1] with the default decoder), in part order.
    images: list
    #: Videos (``AVDecoder`` with the default decoder, raw bytes with ``decoder = None``), in part order.
    videos: list
    #: The json part (the original record).
    record: dict
    #: Media part names in numeric order (``["0.jpg", "1.png", ..., "10.jpg"]``), images and videos mixed.
    parts: list[str]


def _part_index(part: str) -> int | None:
    prefix, dot, _ext = part.partition(".")
    if not dot or not prefix.isdigit():
        return None
    return int(prefix)


def media_part_names(sample: dict) -> list[str]:
    """Media part names of a crude sample (``<n>.<ext>``), sorted by their numeric prefix (10 after 9)."""
    indexed = [(idx, name) for name in sample if (idx := _part_index(name)) is not None]
    return [name for _idx, name in sorted(indexed)]


def _extension(part: str) -> str:
    return part.rsplit(".", 1)[-1].lower()


@stateless
def cook_chat(sample: dict) -> ChatSample:
    """Cook a crude vlmforge sample into a :class:`ChatSample` (see module docstring)."""
    raw_record: Any = sample["json"]
    if isinstance(raw_record, bytes | str):  # decoder = None keeps raw bytes
        raw_record = json.loads(raw_record)
    if not isinstance(raw_record, dict):
        raise ValueError(f"json part of {sample.get('__key__')!r} is not an object")
    record: dict = raw_record

    parts = media_part_names(sample)
    images: list = []
    videos: list = []
    for name in parts:
        ext = _extension(name)
        if ext in IMAGE_EXTENSIONS:
            images.append(sample[name])
        elif ext in AV_EXTENSIONS:
            videos.append(sample[name])
        else:
            raise ValueError(f"sample {sample.get('__key__')!r}: unsupported media part {name!r}")

    messages = copy.deepcopy(record.get("messages", []))
    referenced: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for item in content:
            if not isinstance(item, dict) or "part" not in item:
                continue
            name = item["part"]
            if name not in sample or _part_index(name) is None:
                raise ValueError(f"sample {sample.get('__key__')!r}: record references missing part {name!r}")
            item[str(item.get("type", "media"))] = sample[name]
            referenced.append(name)
    unreferenced = sorted(set(parts) - set(referenced))
    if unreferenced:
        raise ValueError(
            f"sample {sample.get('__key__')!r}: media parts not referenced by the record: {unreferenced}"
        )

    return ChatSample(
        **basic_sample_keys(sample),
        messages=messages,
        images=images,
        videos=videos,
        record=record,
        parts=parts,
    )


COOKERS: list[Cooker] = [Cooker(cook_chat)]


class ChatTaskEncoder(DefaultTaskEncoder[ChatSample, ChatSample, list[ChatSample], list[ChatSample]]):
    """Minimal task encoder: cooks with :data:`COOKERS`, batches as plain lists (variable-size images)."""

    cookers = COOKERS

    @stateless
    def batch(self, samples: list[ChatSample]) -> list[ChatSample]:
        return samples
