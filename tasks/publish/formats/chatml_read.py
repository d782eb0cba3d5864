"""vlmforge's own reader of the ``bridge`` format: the parts Bridge reads, parsed the same way, no Bridge.

Megatron-Bridge needs Python 3.12 and megatron-core to import; vlmforge's read-back and ``vlmforge
validate`` must work where it is not installed. So the dataset is loaded through megatron-energon with
``.nv-meta/dataset_parts.yaml`` (a ``CrudeWebdataset`` over the same shards) and :func:`cook_bridge_parts`
reads each sample as Bridge does: ``json`` the conversation (turns of role / content parts), ``jpgs`` a
pickled ``list[bytes]``, ``videos`` a pickled ``list[list[bytes]]`` (loaded refusing every global), each
image and frame an encoded image PIL opens. It raises (a sample error for the read-back) where Bridge would
fail or silently misalign: a part missing, a placeholder count other than the media count, an image or
frame that does not decode, a video whose frame count is not what the record names.
"""

from __future__ import annotations

import io
import json
from typing import Any

from megatron.energon import Cooker, DefaultTaskEncoder, basic_sample_keys, stateless
from PIL import Image

from ....energon import ChatSample, media_part_names
from .pickled import load_plain

__all__ = ["BridgePartsEncoder", "cook_bridge_parts"]


def _key(sample: dict) -> str:
    return str(sample.get("__key__"))


def _json(sample: dict, name: str) -> Any:
    if name not in sample:
        raise ValueError(f"sample {_key(sample)!r}: no {name!r} part")
    value = sample[name]
    return json.loads(value) if isinstance(value, bytes | str) else value


def _byte_list(value: Any, what: str) -> list[bytes]:
    if not isinstance(value, list) or not all(isinstance(item, bytes) for item in value):
        raise ValueError(f"{what} is not a list of bytes")
    return value


def _pickled(sample: dict, name: str) -> Any:
    if name not in sample or not isinstance(sample[name], bytes):
        raise ValueError(f"sample {_key(sample)!r}: no {name!r} part")
    return load_plain(sample[name])


def _decodable(data: bytes, what: str) -> None:
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    except Exception as exc:
        raise ValueError(f"{what} does not decode: {type(exc).__name__}: {exc}") from exc


def _placeholders(sample: dict, turns: Any) -> dict[str, int]:
    if not isinstance(turns, list) or not turns:
        raise ValueError(f"sample {_key(sample)!r}: the conversation is not a non-empty list of turns")
    counts = {"image": 0, "video": 0}
    for turn in turns:
        if not isinstance(turn, dict) or not isinstance(turn.get("role"), str):
            raise ValueError(f"sample {_key(sample)!r}: a turn without a role: {turn!r:.80}")
        content = turn.get("content")
        for part in content if isinstance(content, list) else []:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in counts:
                counts[kind] += 1
            elif kind != "text" or not isinstance(part.get("text"), str):
                raise ValueError(
                    f"sample {_key(sample)!r}: content part {part!r:.80} is not text/image/video"
                )
    return counts


def _record_frames(record: dict) -> list[int]:
    """Frames per video as the vlmforge record names them (stored frames, or a kept video's
    ``frame_indices``), in order."""
    return [
        len(part["frames"] if "frames" in part else part.get("frame_indices") or [])
        for message in record.get("messages") or []
        for part in message.get("content") or []
        if isinstance(part, dict) and part.get("type") == "video"
    ]


def _record_parts(record: dict) -> list[str]:
    names: list[str] = []
    for message in record.get("messages") or []:
        for part in message.get("content") or []:
            if isinstance(part, dict) and ("part" in part or "frames" in part):
                names += part["frames"] if "frames" in part else [part["part"]]
    return media_part_names(dict.fromkeys(names))


def _check_counts(key: str, counts: dict[str, int], images: list, videos: list, record: dict) -> None:
    if counts["image"] != len(images):
        raise ValueError(f"sample {key!r}: {counts['image']} image placeholders, {len(images)} images")
    if counts["video"] != len(videos):
        raise ValueError(f"sample {key!r}: {counts['video']} video placeholders, {len(videos)} videos")
    frames = [len(v) for v in videos]
    if frames != _record_frames(record):
        raise ValueError(
            f"sample {key!r}: videos have {frames} frames, the record names {_record_frames(record)}"
        )


@stateless
def cook_bridge_parts(sample: dict) -> ChatSample:
    """One ``bridge`` sample (raw parts) as a :class:`~vlmforge.energon.ChatSample`: ``messages`` the
    conversation, ``images`` the image bytes, ``videos`` per video its frame bytes, ``record`` the
    ``vlmforge.json`` record, ``parts`` the media part names it names (as the crude format's)."""
    key = _key(sample)
    turns = _json(sample, "json")
    counts = _placeholders(sample, turns)
    images = _byte_list(_pickled(sample, "jpgs"), f"sample {key!r}: jpgs")
    raw_videos = _pickled(sample, "videos")
    if not isinstance(raw_videos, list):
        raise ValueError(f"sample {key!r}: videos is not a list")
    videos = [_byte_list(v, f"sample {key!r}: video {i}") for i, v in enumerate(raw_videos)]
    record = _json(sample, "vlmforge.json")
    if not isinstance(record, dict):
        raise ValueError(f"sample {key!r}: vlmforge.json is not an object")
    _check_counts(key, counts, images, videos, record)
    for i, data in enumerate(images):
        _decodable(data, f"sample {key!r}: image {i}")
    for i, frames in enumerate(videos):
        for j, data in enumerate(frames):
            _decodable(data, f"sample {key!r}: video {i} frame {j}")
    return ChatSample(
        **basic_sample_keys(sample),
        messages=turns,
        images=images,
        videos=videos,
        record=record,
        parts=_record_parts(record),
    )


class BridgePartsEncoder(DefaultTaskEncoder[ChatSample, ChatSample, list[ChatSample], list[ChatSample]]):
    """Cooks ``bridge`` samples with :func:`cook_bridge_parts`; batches are plain lists."""

    cookers = [Cooker(cook_bridge_parts)]

    @stateless
    def batch(self, samples: list[ChatSample]) -> list[ChatSample]:
        return samples
