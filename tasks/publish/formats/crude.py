"""The ``CrudeWebdataset`` format: the vlmforge record as the ``json`` part, each media part as it is.

A sample is ``<key>.json`` (the record, compact sorted JSON) followed by its media parts ``<key>.0.jpg``,
``<key>.1.png``, ``<key>.2.mp4``, ... Energon loads it as a crude sample; the training side cooks it with
:mod:`vlmforge.energon` (``ChatTaskEncoder`` / ``COOKERS``), which needs only megatron-energon installed.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..samples import MediaPart
from .sample_format import SampleFormat, TarParts, record_json

__all__ = ["DATASET_YAML", "CrudeFormat"]

DATASET_YAML = "__module__: megatron.energon\n__class__: CrudeWebdataset\n"


class CrudeFormat(SampleFormat):
    name: ClassVar[str] = "crude"
    dataset_yaml: ClassVar[str] = DATASET_YAML

    def encode(
        self, record: dict[str, Any], media: tuple[MediaPart, ...], text: str | None = None
    ) -> TarParts:
        return TarParts(record_name="json", record=record_json(record, text).encode("utf-8"), media=media)
