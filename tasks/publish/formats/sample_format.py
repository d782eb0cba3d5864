"""The one interface of an Energon sample format: what a sample becomes inside a shard, and how Energon is
told to read it.

The shard writer is the same for every format (deterministic tars, journal, prepare, swap); a format only
decides the tar members of one sample (a record part held in memory, then media parts read when the shard
is written) and the text of ``.nv-meta/dataset.yaml``. A new format is one module in this package, added
to :data:`~vlmforge.tasks.publish.formats.FORMATS`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from ..samples import MediaPart

__all__ = ["SampleFormat", "TarParts", "record_json"]


def record_json(record: dict[str, Any], text: str | None = None) -> str:
    """The vlmforge record as compact sorted JSON: ``text`` when the caller already holds it (the batch
    stage wrote the ``records`` part this way: a 200,000-row publish spent ~1 s encoding it again)."""
    if text is not None:
        return text
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class TarParts:
    """One sample's tar members, named ``<key>.<name>`` in the shard, in write order: the record first
    (bytes in memory), then the media parts (loaded when their shard is written)."""

    record_name: str
    record: bytes
    media: tuple[MediaPart, ...]


class SampleFormat(ABC):
    """How samples are stored for one Energon dataset class."""

    #: The registry name (``FORMATS[name]``); also recorded in the resume journal's header.
    name: ClassVar[str]
    #: ``.nv-meta/dataset.yaml``: the Energon class that loads the shards (and its options).
    dataset_yaml: ClassVar[str]
    #: Further ``.nv-meta`` files (name -> text) the format ships, e.g. a config for its own read-back.
    extra_configs: ClassVar[dict[str, str]] = {}
    #: The ``.nv-meta`` config vlmforge's read-back loads (None: ``dataset.yaml``).
    read_config: ClassVar[str | None] = None

    @abstractmethod
    def encode(
        self, record: dict[str, Any], media: tuple[MediaPart, ...], text: str | None = None
    ) -> TarParts:
        """The tar members of a sample with this vlmforge ``record`` and its ``media`` (in order of
        appearance); ``text``, when given, is :func:`record_json` of ``record``. Must be deterministic: the
        shard's bytes depend only on what this returns."""

    def read_encoder(self) -> Any:
        """The Energon task encoder vlmforge's read-back loads :attr:`read_config` with: it yields
        :class:`vlmforge.energon.ChatSample` (``parts``: media part names, ``record``: the vlmforge record)
        and raises on a sample that does not parse. Needs megatron-energon, never the trainer's packages."""
        from ....energon import ChatTaskEncoder

        return ChatTaskEncoder()
