"""Run configuration: every option a run takes, validated once, recorded with its outputs."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

# Bump when a change alters manifest or shard bytes for the same inputs and options; it is part of every
# batch fingerprint, so a new code version redoes exactly the work whose outputs it changes.
PIPELINE_VERSION = "3"


def _mask_secret_options(self: BaseModel, options: dict[str, Any]) -> dict[str, Any]:
    """JSON serialiser of a field of fsspec options: values of secret-looking keys become ``***``.

    Registered on each model with ``field_serializer(...)(_mask_secret_options)`` (pydantic reads the ``self``
    parameter as "a method of the model")."""
    from ..tasks.catalog.scan import redact_storage_options

    return redact_storage_options(options)


class StorageOptions(BaseModel):
    """fsspec options passed as a flow parameter: secret-looking values are masked whenever they are
    serialised (Prefect stores and shows flow-run parameters); the flow reads ``options`` itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    options: dict[str, Any] = Field(default_factory=dict)

    _mask_secrets = field_serializer("options", when_used="json")(_mask_secret_options)


class RunConfig(BaseModel):
    """Options of ``vlmforge run``; the CLI, the Prefect flow and the tests all build one of these."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    release: str = Field(description="release folder or fsspec URL")
    # Layout of the release: the Nemotron one, or a public set staged first (tasks/sources.py).
    source_format: Literal["nemotron", "mantis", "infovqa", "llava_video"] = "nemotron"
    source_configs: tuple[str, ...] = ()  # --config: configs of a staged source (empty: every config)
    out: str = Field(description="output folder")
    subsets: tuple[str, ...] = ()  # empty: every subset of the release
    media_roots: tuple[str, ...] = ()
    # fsspec options of the release (s3 endpoint, credentials, ...). Values of secret-looking keys are masked
    # whenever the options are serialised (the run record, Prefect's flow-run parameters and UI); workers get
    # the object itself. A deployment should take credentials from the environment instead.
    storage_options: dict[str, Any] = Field(default_factory=dict)
    license_allow: tuple[str, ...] = ()  # empty: every license; else SPDX ids or patterns (MIT, CC-BY-*)
    allowed_url_schemes: tuple[str, ...] = ()  # media references that may be URLs (http, https, s3, ...)
    # Fetch stage: content-addressed store (default OUT/store) and recipe folders searched before catalog/.
    store: str | None = None
    catalogs: tuple[str, ...] = ()
    fetch_concurrency: int = Field(default=16, gt=0)
    # Requests in flight to one upstream host across the whole run: the batches fetching at once (one per
    # cluster CPU) split it, each keeping at least one.
    fetch_per_host: int = Field(default=32, gt=0)
    # Wall-clock bound of one batch's fetches: what is unfinished then ends as `timeout` (retried next run).
    fetch_batch_timeout: float | None = Field(default=3600.0, gt=0)
    model: str = "qwen2_5_vl"
    model_dir: str | None = None  # a local model folder whose preprocessor_config.json overrides the preset
    tokenizer: str | None = None  # tokenizer.json or a model folder; None: the preset's built-in tokenizer
    # Knobs (Megatron-Bridge names). None means "no limit" except max_pixels/min_pixels (preset default).
    max_pixels: int | None = Field(default=None, gt=0)
    min_pixels: int | None = Field(default=None, gt=0)
    max_num_images: int | None = Field(default=None, ge=0)
    max_num_frames: int | None = Field(default=None, ge=2)
    frames_mode: Literal["uniform", "truncate"] = "uniform"
    max_visual_tokens: int | None = Field(default=None, gt=0)
    seq_len: int | None = Field(default=None, gt=0)
    seq_len_mode: Literal["drop", "truncate"] = "drop"  # truncate: cut text after the last visual token
    # Media handling.
    image_format: Literal["keep", "jpeg", "webp", "png"] = "keep"
    max_image_pixels: int = Field(default=256_000_000, gt=0)  # decompression-bomb limit, from the header
    min_image_side: int = Field(default=1, ge=1)  # a shorter displayed side is a too_small reject
    video_timeout_s: float = Field(default=120.0, gt=0)
    # keep: the video bytes go to the shard (decoded at training time, frames named by frame_indices);
    # frames: the sampled frames are written as images at the model's frame size.
    video_mode: Literal["keep", "frames"] = "keep"
    video_max_pixels: int | None = Field(default=None, gt=0)  # per-frame cap of --video-mode frames
    # Output.
    batch_lines: int = Field(default=2000, gt=0)
    shard_max_bytes: int = Field(default=1_000_000_000, gt=0)
    shard_max_samples: int = Field(default=10_000, gt=0)
    val_fraction: float = Field(default=0.0, ge=0.0, lt=1.0)
    skip_gate: bool = False
    max_reject_rate: float = Field(default=0.5, ge=0.0, le=1.0)
    gate_overrides: str | None = None  # JSON file of per-subset gate parameters (expectations/overrides.json)
    # Execution.
    ray_address: str | None = None
    num_cpus: int | None = Field(default=None, gt=0)

    @field_validator(
        "subsets",
        "media_roots",
        "license_allow",
        "allowed_url_schemes",
        "catalogs",
        "source_configs",
        mode="before",
    )
    @classmethod
    def _tuple(cls, v: object) -> object:
        return tuple(v) if isinstance(v, list) else v

    def media_fingerprint(self) -> str:
        """Hash of every option that changes a batch's manifests or media bytes."""
        keys = (
            "model",
            "model_dir",
            "tokenizer",
            "max_pixels",
            "min_pixels",
            "max_num_images",
            "max_num_frames",
            "frames_mode",
            "max_visual_tokens",
            "seq_len",
            "seq_len_mode",
            "min_image_side",
            "video_mode",
            "video_max_pixels",
            "allowed_url_schemes",
            "catalogs",
            "image_format",
            "max_image_pixels",
            "media_roots",
        )
        payload = {k: getattr(self, k) for k in keys} | {"pipeline_version": PIPELINE_VERSION}
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @property
    def store_url(self) -> str:
        return self.store or f"{self.out.rstrip('/')}/store"

    _mask_secrets = field_serializer("storage_options", when_used="json")(_mask_secret_options)
