"""Run configuration: every option a run takes, validated once, recorded with its outputs."""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Bump when a change alters manifest or shard bytes for the same inputs and options; it is part of every
# batch fingerprint, so a new code version redoes exactly the work whose outputs it changes.
PIPELINE_VERSION = "1"


class RunConfig(BaseModel):
    """Options of ``vlmforge run``; the CLI, the Prefect flow and the tests all build one of these."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    release: str = Field(description="release folder or fsspec URL")
    out: str = Field(description="output folder")
    subsets: tuple[str, ...] = ()  # empty: every subset of the release
    media_roots: tuple[str, ...] = ()
    model: str = "qwen2_5_vl"
    tokenizer: str | None = None  # tokenizer.json or a model folder; None: the preset's built-in tokenizer
    # Knobs (Megatron-Bridge names). None means "no limit" except max_pixels/min_pixels (preset default).
    max_pixels: int | None = Field(default=None, gt=0)
    min_pixels: int | None = Field(default=None, gt=0)
    max_num_images: int | None = Field(default=None, ge=0)
    max_num_frames: int | None = Field(default=None, ge=2)
    frames_mode: Literal["uniform", "truncate"] = "uniform"
    max_visual_tokens: int | None = Field(default=None, gt=0)
    seq_len: int | None = Field(default=None, gt=0)
    # Media handling.
    image_format: Literal["keep", "jpeg", "webp", "png"] = "keep"
    max_image_pixels: int = Field(default=256_000_000, gt=0)  # decompression-bomb limit, from the header
    video_timeout_s: float = Field(default=120.0, gt=0)
    # Output.
    batch_lines: int = Field(default=2000, gt=0)
    shard_max_bytes: int = Field(default=1_000_000_000, gt=0)
    shard_max_samples: int = Field(default=10_000, gt=0)
    val_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)
    skip_gate: bool = False
    max_reject_rate: float = Field(default=0.5, ge=0.0, le=1.0)
    # Execution.
    ray_address: str | None = None
    num_cpus: int | None = Field(default=None, gt=0)

    @field_validator("subsets", "media_roots", mode="before")
    @classmethod
    def _tuple(cls, v: object) -> object:
        return tuple(v) if isinstance(v, list) else v

    def media_fingerprint(self) -> str:
        """Hash of every option that changes a batch's manifests or media bytes."""
        keys = (
            "model",
            "tokenizer",
            "max_pixels",
            "min_pixels",
            "max_num_images",
            "max_num_frames",
            "frames_mode",
            "max_visual_tokens",
            "seq_len",
            "image_format",
            "max_image_pixels",
            "media_roots",
        )
        payload = {k: getattr(self, k) for k in keys} | {"pipeline_version": PIPELINE_VERSION}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
