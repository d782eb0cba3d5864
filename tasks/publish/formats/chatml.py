"""The ``bridge`` format: Megatron-Bridge's ``ChatMLWebdataset``, read by Bridge's VLM recipes as it stands.

Part layout of one sample with key ``<key>`` (tar members in this order, GNU tar, mtime 0, mode 0644):

``<key>.json``
    The conversation, UTF-8 JSON, compact (``separators=(",", ":")``, ``ensure_ascii=False``): a list of
    turns ``{"role": <str>, "content": [<part>, ...]}`` in record order, each part one of
    ``{"type": "text", "text": <str>}``, ``{"type": "image"}``, ``{"type": "video"}``, in the record's order.
    No references, no sizes: the n-th ``image`` part is the n-th entry of ``jpgs``, the n-th ``video`` part
    the n-th entry of ``videos`` (what Bridge's ``cook_chatml_sample`` and its conversation processing do).
``<key>.jpgs``
    A pickle of a ``list[bytes]``: the sample's images in placeholder order, each the encoded image file
    the media stage stored (upright, resized for the model, as counted). ``[]`` when the sample has none.
``<key>.videos``
    A pickle of a ``list[list[bytes]]``: per video placeholder, the encoded frame images vlmforge sampled
    (``frame_indices`` of the manifest, in order), upright, at the model's frame size. ``[]`` when none.
    A video kept as a file (``--video-mode keep``) is decoded at publish time: exactly its
    ``frame_indices``, upright, JPEG at the displayed size (:mod:`.kept_video`); frames mode is the fast path.
``<key>.vlmforge.json``
    vlmforge's own record (compact sorted JSON: ``id``, ``messages`` with each media part's ``ref``,
    ``sha256``, ``width``/``height``, tar names (``part`` / ``frames``) and ``frame_indices``, and the
    ``vlmforge`` block: subset, line, key, token counts). Not in the field map: Bridge never reads it.

Both pickles are protocol 4 with no globals (:mod:`.pickled`), so Bridge's restricted unpickler
(builtins only) loads them. ``.nv-meta/dataset.yaml`` names Bridge's class and maps every field to a part
each sample has (energon refuses a sample missing a mapped part)::

    __module__: megatron.bridge.data.energon.task_encoder_utils
    __class__: ChatMLWebdataset
    field_map: {imgs: jpgs, conversation: json, videos: videos}

``.nv-meta/dataset_parts.yaml`` (a ``CrudeWebdataset`` over the same shards) is how vlmforge reads the
dataset back without ``megatron.bridge`` installed (:mod:`.chatml_read`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..samples import MediaPart
from .kept_video import kept_video_frames
from .pickled import pickled_list, pickled_list_size, pickled_nested, pickled_nested_size
from .sample_format import SampleFormat, TarParts, record_json

__all__ = ["DATASET_YAML", "READ_CONFIG", "READ_YAML", "BridgeFormat"]

DATASET_YAML = (
    "__module__: megatron.bridge.data.energon.task_encoder_utils\n"
    "__class__: ChatMLWebdataset\n"
    "field_map:\n"
    "  imgs: jpgs\n"
    "  conversation: json\n"
    "  videos: videos\n"
    "subflavors: {}\n"
)
#: The ``.nv-meta`` config vlmforge's read-back loads (no megatron.bridge import): the parts, raw.
READ_CONFIG = "dataset_parts.yaml"
READ_YAML = (
    "# vlmforge's read-back of this ChatMLWebdataset without megatron.bridge (trainers use dataset.yaml)\n"
    "__module__: megatron.energon\n"
    "__class__: CrudeWebdataset\n"
    "subflavors: {}\n"
)
SIDECAR = "vlmforge.json"


def _composed(name: str, parts: Sequence[MediaPart], size: int, load: Callable[[], bytes]) -> MediaPart:
    """A part built from other parts. Its ``sha256`` is an identity over theirs (its bytes are a pure
    function of them), so the resume journal keeps a finished shard without reading any media."""
    ident = hashlib.sha256(f"vlmforge-bridge/{name}".encode())
    for part in parts:
        ident.update(f"\0{part.size}\0{part.sha256}".encode())
    return MediaPart(name=name, size=size, sha256=ident.hexdigest(), load=load)


@functools.cache
def _no_media(name: str) -> MediaPart:
    """The ``jpgs`` or ``videos`` part of a sample without images or videos: always the same bytes, so made
    once (a text-only row otherwise paid two hashes and a pickle for it, ~15% of its publish)."""
    return _jpgs([]) if name == "jpgs" else _videos([])


def _jpgs(images: list[MediaPart]) -> MediaPart:
    size = pickled_list_size([p.size for p in images])
    return _composed("jpgs", images, size, lambda: pickled_list([p.load() for p in images]))


def _videos(videos: list[list[MediaPart]]) -> MediaPart:
    size = pickled_nested_size([[p.size for p in frames] for frames in videos])
    flat = [p for frames in videos for p in frames]
    # the frame counts are part of the identity (the same frames split otherwise are other bytes)
    shape = MediaPart.from_bytes("shape", json.dumps([len(f) for f in videos]).encode())
    return _composed(
        "videos", [shape, *flat], size, lambda: pickled_nested([[p.load() for p in f] for f in videos])
    )


class _Media:
    """The record's media content parts mapped onto the given media parts, in order."""

    def __init__(self, key: str, media: tuple[MediaPart, ...]) -> None:
        self.key = key
        self.by_name = {part.name: part for part in media}
        self.used: set[str] = set()
        self.images: list[MediaPart] = []
        self.videos: list[list[MediaPart]] = []

    def take(self, part: dict[str, Any]) -> dict[str, str]:
        kind = part.get("type")
        if kind == "image" and isinstance(part.get("part"), str):
            self.images.append(self._get(part["part"]))
        elif kind == "video" and isinstance(part.get("frames"), list):
            self.videos.append([self._get(name) for name in part["frames"]])
        elif kind == "video" and isinstance(part.get("part"), str):
            video = self._get(part["part"])
            what = f"sample {self.key!r}: video {video.name!r}"
            frames = kept_video_frames(video.load(), list(part.get("frame_indices") or []), what)
            stem = video.name.split(".", 1)[0]
            self.videos.append([MediaPart.from_bytes(f"{stem}.{k:04d}.jpg", f) for k, f in enumerate(frames)])
        else:
            raise ValueError(f"sample {self.key!r}: {kind} part without its tar part name")
        return {"type": str(kind)}

    def _get(self, name: str) -> MediaPart:
        if name not in self.by_name or name in self.used:
            raise ValueError(f"sample {self.key!r}: media part {name!r} missing or used twice")
        self.used.add(name)
        return self.by_name[name]

    def check_all_used(self) -> None:
        left = sorted(set(self.by_name) - self.used)
        if left:
            raise ValueError(f"sample {self.key!r}: media parts not referenced by the record: {left}")


def _conversation(record: dict[str, Any], media: _Media) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for message in record.get("messages") or []:
        content: list[dict[str, str]] = []
        for part in message["content"]:
            if part.get("type") == "text":
                content.append({"type": "text", "text": part["text"]})
            else:
                content.append(media.take(part))
        turns.append({"role": message["role"], "content": content})
    if not turns:
        raise ValueError(f"sample {media.key!r}: no messages")
    return turns


class BridgeFormat(SampleFormat):
    """Megatron-Bridge's ``ChatMLWebdataset`` (the layout in this module's docstring)."""

    name: ClassVar[str] = "bridge"
    dataset_yaml: ClassVar[str] = DATASET_YAML
    extra_configs: ClassVar[dict[str, str]] = {READ_CONFIG: READ_YAML}
    read_config: ClassVar[str | None] = READ_CONFIG

    def encode(
        self, record: dict[str, Any], media: tuple[MediaPart, ...], text: str | None = None
    ) -> TarParts:
        key = str((record.get("vlmforge") or {}).get("key") or record.get("id"))
        linked = _Media(key, media)
        turns = _conversation(record, linked)
        linked.check_all_used()
        conversation = json.dumps(turns, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        sidecar = record_json(record, text)
        parts = (
            _jpgs(linked.images) if linked.images else _no_media("jpgs"),
            _videos(linked.videos) if linked.videos else _no_media("videos"),
            MediaPart.from_bytes(SIDECAR, sidecar.encode()),
        )
        return TarParts(record_name="json", record=conversation, media=parts)

    def read_encoder(self) -> Any:
        from .chatml_read import BridgePartsEncoder

        return BridgePartsEncoder()
