"""Training-side glue for vlmforge Energon datasets.

Importable from a training environment that has only ``megatron-energon`` and ``vlmforge`` installed: keep the
imports light (no prefect, ray, polars, ...).

A vlmforge sample is a *crude* WebDataset sample (``dataset.yaml`` = ``CrudeWebdataset``) with the parts

* ``json``: the chat record (``{"id", "messages", ...}``); every typed media content part carries
  ``"part": "<n>.<ext>"`` naming the tar part that holds its bytes;
* ``0.jpg``, ``1.png``, ``2.mp4``, ...: the media, numbered in order of appearance; a video written with
  ``--video-mode frames`` is one image part per sampled frame (``2.0000.jpg``, ``2.0001.jpg``, ...) and its
  content part lists them under ``"frames"`` instead of ``"part"``.

:func:`cook_chat` turns such a sample into a :class:`ChatSample`; videos stay ``AVDecoder`` objects
(decode what you need in your encoder). :func:`cook_chat_frames` also decodes every video into a ``uint8``
frame tensor ``(T, 3, H, W)``: the frames named by the content part's ``frame_indices`` (the frames the
token count assumed) when present, else ``sampled_frames`` (a count) or :data:`DEFAULT_VIDEO_FRAMES`
frames spread uniformly. Use :class:`ChatTaskEncoder` (``ChatTaskEncoder(video_frames=True)`` for
decoded frames) or register :data:`COOKERS` / :data:`FRAME_COOKERS` on your own task encoder::

    class MyEncoder(DefaultTaskEncoder[ChatSample, MyEncoded, MyRaw, MyBatch]):
        cookers = FRAME_COOKERS

        def encode_sample(self, sample: ChatSample) -> MyEncoded:
            ...  # sample.messages holds the images / frame tensors in place of their parts
"""

from __future__ import annotations

import copy
import io
import json
from typing import Any

from megatron.energon import Cooker, DefaultTaskEncoder, Sample, basic_sample_keys, edataclass, stateless

__all__ = [
    "AV_EXTENSIONS",
    "COOKERS",
    "DEFAULT_VIDEO_FRAMES",
    "FRAME_COOKERS",
    "IMAGE_EXTENSIONS",
    "ChatSample",
    "ChatTaskEncoder",
    "cook_chat",
    "cook_chat_frames",
    "decode_video_frames",
    "media_part_names",
]

#: Part extensions decoded as images by Energon's default decoder (webdataset ``imagehandler``).
IMAGE_EXTENSIONS = frozenset(
    {"jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "webp", "gif", "bmp", "tif", "tiff"}
)
#: Part extensions decoded as ``AVDecoder`` by Energon's default decoder (video containers).
AV_EXTENSIONS = frozenset({"mp4", "avi", "mov", "webm", "mkv", "flv"})
#: Frames decoded per video by :func:`cook_chat_frames` when the record names neither indices nor a count.
DEFAULT_VIDEO_FRAMES = 16


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
    #: Videos in part order: ``AVDecoder`` with the default decoder (raw bytes with ``decoder = None``);
    #: ``uint8`` tensors ``(T, 3, H, W)`` from :func:`cook_chat_frames`. A video stored as frames is the
    #: list of its decoded frame images (a ``uint8`` tensor with :func:`cook_chat_frames`).
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


def decode_video_frames(video: Any, part: dict | None = None) -> Any:
    """Frames of one video as a ``uint8`` tensor ``(T, 3, H, W)``.

    ``video`` is an ``AVDecoder`` (Energon's default decoder) or the raw bytes (``decoder = None``).
    ``part`` is the video's content part from the record: its ``frame_indices`` (list of frame numbers)
    are decoded exactly; else ``sampled_frames`` (int) or :data:`DEFAULT_VIDEO_FRAMES` frames are taken
    uniformly over the video. Frames are turned upright (the video's rotation metadata applied).
    """
    import torch
    from megatron.energon.av import AVDecoder, get_single_frames_uniform

    from .tasks.media import display_rotation

    decoder = video if isinstance(video, AVDecoder) else AVDecoder(io.BytesIO(bytes(video)))
    info = part or {}
    indices = info.get("frame_indices")
    if isinstance(indices, list) and indices and all(isinstance(i, int) for i in indices):
        clips, _timestamps = decoder.get_video_clips([(i, i) for i in indices], video_unit="frames")
        frames = torch.cat([clip[:1] for clip in clips], dim=0)
    else:
        count = info.get("sampled_frames")
        n = count if isinstance(count, int) and count > 0 else DEFAULT_VIDEO_FRAMES
        frames = get_single_frames_uniform(decoder, n)
    # The decoder hands over frames as coded; turn them upright as a player shows them (rotation metadata).
    decoder.stream.seek(0)
    rotation = display_rotation(decoder.stream)
    decoder.stream.seek(0)
    return torch.rot90(frames, -(rotation // 90), dims=(2, 3)) if rotation else frames


def _frames_tensor(images: list[Any]) -> Any:
    """Stored frames (``--video-mode frames``) as one ``uint8`` tensor ``(T, 3, H, W)``."""
    import numpy as np
    import torch

    out = []
    for img in images:
        if isinstance(img, torch.Tensor):  # Energon's default decoder: float (3, H, W) in [0, 1]
            out.append((img * 255).round().clamp(0, 255).to(torch.uint8) if img.is_floating_point() else img)
            continue
        if isinstance(img, bytes | bytearray | memoryview):  # decoder = None: raw encoded bytes
            from PIL import Image

            img = Image.open(io.BytesIO(bytes(img)))
        arr = np.asarray(img.convert("RGB") if hasattr(img, "convert") else img)
        out.append(torch.from_numpy(np.ascontiguousarray(arr)).permute(2, 0, 1))
    return torch.stack(out)


def _cook(sample: dict, frames: bool) -> ChatSample:
    record = _record(sample)
    parts = media_part_names(sample)
    _check_extensions(sample, parts)
    messages = copy.deepcopy(record.get("messages", []))
    linked = _link_media(sample, messages, frames)
    _check_all_referenced(sample, parts, linked.referenced)
    return ChatSample(
        **basic_sample_keys(sample),
        messages=messages,
        images=[v for _i, v in sorted(linked.images, key=lambda t: t[0])],
        videos=[v for _i, v in sorted(linked.videos, key=lambda t: t[0])],
        record=record,
        parts=parts,
    )


def _record(sample: dict) -> dict:
    """The json part as a dict (``decoder = None`` keeps raw bytes)."""
    raw_record: Any = sample["json"]
    if isinstance(raw_record, bytes | str):
        raw_record = json.loads(raw_record)
    if not isinstance(raw_record, dict):
        raise ValueError(f"json part of {sample.get('__key__')!r} is not an object")
    return raw_record


def _check_extensions(sample: dict, parts: list[str]) -> None:
    for name in parts:
        ext = _extension(name)
        if ext not in IMAGE_EXTENSIONS and ext not in AV_EXTENSIONS:
            raise ValueError(f"sample {sample.get('__key__')!r}: unsupported media part {name!r}")


class _Linked:
    """Media values put into the messages: (part order, value) of images and videos, part names used."""

    def __init__(self) -> None:
        self.images: list[tuple[int, Any]] = []
        self.videos: list[tuple[int, Any]] = []
        self.referenced: list[str] = []


def _link_media(sample: dict, messages: list, frames: bool) -> _Linked:
    """Replace every linked content part's media entry (``part[part["type"]]``) by its decoded value."""
    linked = _Linked()
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for item in content:
            if isinstance(item, dict) and ("part" in item or "frames" in item):
                _link_item(sample, item, frames, linked)
    return linked


def _link_item(sample: dict, item: dict, frames: bool, linked: _Linked) -> None:
    # A video stored as frames (``--video-mode frames``) names one image part per sampled frame.
    names = item["frames"] if "frames" in item else [item["part"]]
    for name in names:
        if name not in sample or _part_index(name) is None:
            raise ValueError(f"sample {sample.get('__key__')!r}: record references missing part {name!r}")
    if "frames" in item:
        stored = [sample[name] for name in names]
        value = _frames_tensor(stored) if frames else stored
    else:
        value = sample[names[0]]
        if frames and _extension(names[0]) in AV_EXTENSIONS:
            value = decode_video_frames(value, item)
    kind = str(item.get("type", "media"))
    item[kind] = value
    order = _part_index(names[0]) or 0
    is_video = kind == "video" or _extension(names[0]) in AV_EXTENSIONS
    (linked.videos if is_video else linked.images).append((order, value))
    linked.referenced += names


def _check_all_referenced(sample: dict, parts: list[str], referenced: list[str]) -> None:
    unreferenced = sorted(set(parts) - set(referenced))
    if unreferenced:
        raise ValueError(
            f"sample {sample.get('__key__')!r}: media parts not referenced by the record: {unreferenced}"
        )


@stateless
def cook_chat(sample: dict) -> ChatSample:
    """Cook a crude vlmforge sample into a :class:`ChatSample` (videos left as ``AVDecoder``)."""
    return _cook(sample, frames=False)


@stateless
def cook_chat_frames(sample: dict) -> ChatSample:
    """Like :func:`cook_chat`, with every video decoded to frames (:func:`decode_video_frames`)."""
    return _cook(sample, frames=True)


COOKERS: list[Cooker] = [Cooker(cook_chat)]
FRAME_COOKERS: list[Cooker] = [Cooker(cook_chat_frames)]


class ChatTaskEncoder(DefaultTaskEncoder[ChatSample, ChatSample, list[ChatSample], list[ChatSample]]):
    """Minimal task encoder: cooks with :data:`COOKERS` (:data:`FRAME_COOKERS` with ``video_frames=True``),
    batches as plain lists (variable-size images)."""

    cookers = COOKERS

    def __init__(self, *, video_frames: bool = False) -> None:
        super().__init__()
        self.video_frames = video_frames
        self.cookers = FRAME_COOKERS if video_frames else COOKERS

    @stateless
    def batch(self, samples: list[ChatSample]) -> list[ChatSample]:
        return samples
