"""Run configuration: every option a run takes, validated once, recorded with its outputs.

A :class:`RunConfig` is made of sub-models, one per concern. Which of them change a batch's manifests and
media is said ONCE, by :data:`BATCH_INPUTS` (hashed whole into every batch fingerprint) and
:data:`BATCH_NEUTRAL` (the explicit, short list of what cannot change them); a test checks that every
sub-model is in exactly one of the two, so a new option is fingerprinted by default of being placed.

Options stay flat where people type them (CLI flags, ``prefect.yaml`` parameters, older run records):
``RunConfig(release=..., out=..., max_pixels=...)`` distributes flat keys to their sub-models, and
:meth:`RunConfig.flat` gives the flat form back.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from .option_values import comma_list, size_bytes, storage_pairs
from .redact import redact_options

# Bump when a change alters manifest or shard bytes for the same inputs and options; it is part of every
# batch fingerprint, so a new code version redoes exactly the work whose outputs it changes.
PIPELINE_VERSION = "4"
# The manifest columns this version writes (schemas/rows.py: manifest_fingerprint()). A new column changes
# them: tests/schemas/test_manifest_version.py fails until PIPELINE_VERSION is bumped and this updated.
PIPELINE_MANIFEST_FINGERPRINT = "0213c592c5b40389"

# Defaults a stage also needs when called without a config (tests, benchmarks, other commands): declared here
# once, used by the fields below and by the stages' parameters (tests/schemas/test_option_defaults.py).
DEFAULT_BATCH_LINES: Final = 10_000
DEFAULT_BATCH_MEDIA: Final = 256
DEFAULT_MAX_IMAGE_PIXELS: Final = 256_000_000
DEFAULT_SHARD_MAX_BYTES: Final = 1_000_000_000
DEFAULT_SHARD_MAX_SAMPLES: Final = 10_000


def _mask_secret_options(self: BaseModel, options: dict[str, Any]) -> dict[str, Any]:
    """JSON serialiser of a field of fsspec options: every value but known-harmless ones becomes ``***``.

    Registered on each model with ``field_serializer(...)(_mask_secret_options)`` (pydantic reads the ``self``
    parameter as "a method of the model")."""
    return redact_options(options)


def _tuples(v: object) -> object:
    return tuple(v) if isinstance(v, list) else v


def flag(name: str | None = None, **extra: Any) -> dict[str, Any]:
    """CLI facts of an option beyond its type, default and help (its ``description``): the flag's name when
    it is not ``--<field-name>`` and how it reads (``metavar``, ``shown_default``). A field with a
    ``description`` is a ``vlmforge run`` option (flows/cli/options.py makes the flag from the field)."""
    return {"flag": name, **extra} if name else extra


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StorageOptions(_Options):
    """fsspec options passed as a flow parameter: values are masked whenever they are serialised (Prefect
    stores and shows flow-run parameters); the flow reads ``options`` itself."""

    options: dict[str, Any] = Field(default_factory=dict)

    _mask_secrets = field_serializer("options", when_used="json")(_mask_secret_options)


class SourceOptions(_Options):
    """What to read: the release, its layout and the subsets. The batch fingerprint holds the JSONL's own
    hash, so none of these changes a batch's output by itself."""

    model_config = ConfigDict(title="Source")

    release: str = Field(description="release folder or fsspec URL (one folder per subset)")
    # Layout of the release: the Nemotron one, or a public set staged first (tasks/staging/: LAYOUTS).
    source_format: Literal["nemotron", "mantis", "infovqa", "llava_video"] = Field(
        default="nemotron",
        description="layout of RELEASE (other than nemotron: staged first)",
        json_schema_extra=flag("--format"),
    )
    source_configs: tuple[str, ...] = Field(
        default=(),
        description="only this config of a --format source (repeatable; default: all)",
        json_schema_extra=flag("--config"),
    )
    subsets: tuple[str, ...] = Field(
        default=(), description="only this subset (repeatable)", json_schema_extra=flag("--subset")
    )
    # fsspec options of the release (s3 endpoint, credentials, ...). Masked whenever serialised (the run
    # record, Prefect's flow-run parameters and UI); workers get the object itself. A deployment should take
    # credentials from the environment instead.
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="fsspec option of the release, key=value (repeatable)",
        json_schema_extra=flag("--storage-option", metavar="K=V"),
    )
    license_allow: tuple[str, ...] = Field(
        default=(), description="only subsets under these licenses (SPDX ids or patterns, comma-separated)"
    )
    # A trial run: the first N lines of each subset's JSONL; the rest are counted (subsets.beyond_limit), not
    # processed. The batch plan covers those lines only, so the batch and publish fingerprints differ from a
    # whole run's: a later run without it completes the subset.
    limit: int | None = Field(
        default=None,
        gt=0,
        description="at most N rows per subset, the first N lines of its JSONL (a trial run; the rest are "
        "counted as beyond_limit, and the published subset is partial)",
        json_schema_extra=flag("--limit", metavar="N"),
    )

    _tuple = field_validator("source_configs", "subsets", mode="before")(_tuples)

    @field_validator("storage_options", mode="before")
    @classmethod
    def _pairs(cls, v: object) -> object:
        return storage_pairs(v) if isinstance(v, list | tuple) else v

    @field_validator("license_allow", mode="before")
    @classmethod
    def _commas(cls, v: object) -> object:
        return comma_list(v) if isinstance(v, list | tuple) else v

    _mask_secrets = field_serializer("storage_options", when_used="json")(_mask_secret_options)


class FetchOptions(_Options):
    """How media are fetched: where the content store is and how hard upstream hosts are pushed. Objects
    are stored by content hash, so none of these changes what a batch writes (a batch with transient
    failures is not committed)."""

    model_config = ConfigDict(title="Fetch")

    store: str | None = Field(
        default=None, description="content-addressed media store, any fsspec URL (default OUT/store)"
    )
    fetch_concurrency: int = Field(default=16, gt=0, description="fetch threads per batch")
    fetch_per_host: int = Field(
        default=32,
        gt=0,
        description="requests in flight per upstream host across the run (the batches fetching at once "
        "split it; each keeps at least 1)",
    )
    # Wall-clock bound of one batch's fetches: what is unfinished then ends as `timeout` (retried next run).
    fetch_batch_timeout: float | None = Field(
        default=3600.0,
        gt=0,
        description="seconds one batch may spend fetching; what is unfinished ends as timeout",
    )
    # Wall-clock bound of one HTTP request: connect, status line, headers, redirects and body together.
    fetch_request_timeout: float = Field(
        default=300.0,
        gt=0,
        description="seconds one HTTP request may take: connect, headers, redirects and body together",
    )
    # Environment variables recipes may read as ${NAME} (tasks/fetch/recipe_env.py), like the variables'
    # values themselves not fingerprinted: they say where media come from, not what they are.
    env_allow: tuple[str, ...] = Field(
        default=(),
        description="environment variable a recipe may read as ${NAME} (repeatable; its value is masked)",
        json_schema_extra=flag("--env-allow", metavar="NAME"),
    )

    # None: vlmforge's own (tasks/http/opt_out.py: DEFAULT_USER_AGENT). Its first word is the token an
    # ``X-Robots-Tag: <token>: noai`` names.
    user_agent: str | None = Field(
        default=None,
        min_length=1,
        description="User-Agent of HTTP fetches (default: vlmforge/<version> (compatible; vlmforge; ...)); "
        "its product token is the crawler name X-Robots-Tag directives may address",
    )

    _env_tuple = field_validator("env_allow", mode="before")(_tuples)


class MediaOptions(_Options):
    """Where references resolve and how media are verified, converted and stored."""

    model_config = ConfigDict(title="Media")

    media_roots: tuple[str, ...] = Field(
        default=(),
        description="folder searched first for media (repeatable)",
        json_schema_extra=flag("--media-root"),
    )
    allowed_url_schemes: tuple[str, ...] = Field(
        default=(),
        description="media references may be URLs of this scheme (repeatable)",
        json_schema_extra=flag("--allow-url-scheme"),
    )
    catalogs: tuple[str, ...] = Field(
        default=(),
        description="folder of <subset>.yaml media recipes, before recipes/ (repeatable)",
        json_schema_extra=flag("--recipes"),
    )
    image_format: Literal["keep", "jpeg", "webp", "png"] = Field(
        default="keep", description="stored image format"
    )
    max_image_pixels: int = Field(
        default=DEFAULT_MAX_IMAGE_PIXELS,
        gt=0,
        description="decompression-bomb limit, checked from the header",
    )
    min_image_side: int = Field(default=1, ge=1, description="reject images with a shorter side (too_small)")
    video_timeout_s: float = Field(default=120.0, gt=0)
    # keep: the video bytes go to the shard (decoded at training time, frames named by frame_indices);
    # frames: the sampled frames are written as images at the model's frame size.
    video_mode: Literal["keep", "frames"] = Field(
        default="keep",
        description="keep (video bytes, decoded in training) | frames (sampled frames as images)",
    )
    video_max_pixels: int | None = Field(
        default=None, gt=0, description="--video-mode frames: cap on each frame's pixels"
    )
    # Pillow format names accepted besides tasks/media/formats.py's list
    extra_image_formats: tuple[str, ...] = Field(
        default=(),
        description="also accept images in this Pillow format (XPM, FITS, ...; repeatable; list in README)",
        json_schema_extra=flag("--accept-image-format"),
    )

    # An upstream's X-Robots-Tag noai / noimageai / noindex / noimageindex (img2dataset's defaults) rejects
    # the reference (opted_out). It decides which media a batch may use: part of the batch fingerprint.
    ignore_robots_tag: bool = Field(
        default=False,
        description="fetch media whose server answers X-Robots-Tag noai, noimageai, noindex or noimageindex "
        "(otherwise: rejected, opted_out); only for your own servers",
    )

    _tuple = field_validator(
        "media_roots", "allowed_url_schemes", "catalogs", "extra_image_formats", mode="before"
    )(_tuples)


class TokenOptions(_Options):
    """The target model and the knobs (Megatron-Bridge names). None means "no limit" except
    max_pixels/min_pixels (the preset's default)."""

    model_config = ConfigDict(title="Model and knobs")

    model: str = Field(default="qwen2_5_vl", description="model preset for token counts and resize")
    model_dir: str | None = Field(
        default=None, description="local model folder: its preprocessor_config.json overrides the preset"
    )
    # None: the preset's built-in tokenizer
    tokenizer: str | None = Field(default=None, description="tokenizer.json or model folder")
    max_pixels: int | None = Field(default=None, gt=0, description="resize images above this many pixels")
    min_pixels: int | None = Field(default=None, gt=0, description="model min pixels (default: preset)")
    max_num_images: int | None = Field(default=None, ge=0, description="drop samples with more images")
    max_media_per_sample: int | None = Field(
        default=256, ge=1, description="drop samples with more image and video references (default cap)"
    )
    max_num_frames: int | None = Field(default=None, ge=2, description="cap sampled frames per video")
    frames_mode: Literal["uniform", "truncate"] = Field(
        default="uniform", description="over --max-num-frames"
    )
    max_visual_tokens: int | None = Field(
        default=None, gt=0, description="drop samples with more visual tokens"
    )
    seq_len: int | None = Field(default=None, gt=0, description="drop samples longer than this")
    seq_len_mode: Literal["drop", "truncate"] = Field(
        default="drop", description="drop | truncate (cut text after the last visual token, keep a target)"
    )
    # What the trainer's batch path feeds the model: the processor on the stored pixels, or Megatron-Bridge's
    # Qwen-VL collate (qwen-vl-utils first, then the processor; tasks/tokens/feed_paths.py: FEED_PATHS)
    feed_path: Literal["processor", "bridge_collate"] = Field(
        default="processor",
        description="processor | bridge_collate (count what Megatron-Bridge's batch() feeds; by --trainer)",
    )


class BatchOptions(_Options):
    """How lines are cut into batches and which split an ok sample lands in."""

    model_config = ConfigDict(title="Batches and splits")

    # Lines per batch at most. 10,000 text rows are ~1 s of work: at 2,000, Prefect's and Ray's per-task
    # cost was a third of a text subset's batch stage (200,000 rows: 34.6 s wall, at 10,000: 17.1 s).
    batch_lines: int = Field(
        default=DEFAULT_BATCH_LINES,
        gt=0,
        description="JSONL lines per batch at most (the unit of work; media cap it sooner)",
    )
    # A line over it is a batch of its own: work sized by work, not lines. An image batch is ~10 core-s at
    # 256; raise it on a large cluster to spread Prefect's and Ray's ~0.5 CPU-s a task over more work.
    batch_media: int = Field(
        default=DEFAULT_BATCH_MEDIA,
        gt=0,
        description="media references per batch at most (images and videos)",
    )
    val_fraction: float = Field(default=0.0, ge=0.0, lt=1.0, description="share of samples in the val split")


class ShardOptions(_Options):
    """Shard sizes of the published datasets (publish reads the manifests; batches are not affected)."""

    model_config = ConfigDict(title="Shards")

    shard_max_bytes: int = Field(
        default=DEFAULT_SHARD_MAX_BYTES,
        gt=0,
        description="target bytes per shard (1GB, 500MB, ...)",
        json_schema_extra=flag("--shard-size", metavar="SIZE", shown_default="1GB"),
    )
    shard_max_samples: int = Field(
        default=DEFAULT_SHARD_MAX_SAMPLES, gt=0, description="samples per shard at most"
    )
    # Energon sample format (tasks/publish/formats: FORMATS)
    sample_format: Literal["bridge", "crude"] = Field(
        default="bridge",
        description="bridge (Megatron-Bridge's ChatMLWebdataset: images and sampled frames, pickled) | crude "
        "(CrudeWebdataset + vlmforge's cooker: media parts as stored, video bytes with frame_indices)",
    )

    @field_validator("shard_max_bytes", mode="before")
    @classmethod
    def _size(cls, v: object) -> object:
        return size_bytes(v) if isinstance(v, str) else v


class GateOptions(_Options):
    model_config = ConfigDict(title="Quality gate")

    skip_gate: bool = Field(default=False, description="publish without the quality gate (debugging)")
    max_reject_rate: float = Field(
        default=0.5, ge=0.0, le=1.0, description="gate: highest reject rate a subset may have"
    )
    # expectations/overrides.json shows the form
    gate_overrides: str | None = Field(default=None, description="JSON file of per-subset gate parameters")


class ExecutionOptions(_Options):
    model_config = ConfigDict(title="Execution")

    executor: Literal["ray", "local"] = Field(
        default="ray",
        description="where tasks run: ray (a local Ray, or --ray-address) or local (threads of this process, "
        "no Ray: for a quick look or debugging; same outputs)",
    )
    ray_address: str | None = Field(default=None, description="existing Ray cluster (default: local)")
    num_cpus: int | None = Field(
        default=None, gt=0, description="CPUs for the local Ray (threads, with --executor local)"
    )


# The sub-models whose every field can change a batch's samples/media parts: hashed whole.
BATCH_INPUTS: Final = ("media", "tokens", "batches")
# Everything else, said explicitly: the output folder, what to read, how to fetch, and what happens after
# the batches (shards, gate, execution).
BATCH_NEUTRAL: Final = ("out", "source", "fetch", "shards", "gate", "execution")


# The options of every command that reads media recipes (``run``, ``catalog --estimate``, ``refresh``,
# ``recipe``): where recipes are, the variables they may read, where media and the release are. Declared once,
# here; flows/cli/options.py makes each command's flags from these fields (the same names, types and help).
RECIPE_OPTIONS: Final = ("catalogs", "env_allow", "media_roots", "allowed_url_schemes", "storage_options")


class RunConfig(_Options):
    """Options of ``vlmforge run``; the CLI, the Prefect flow and the tests all build one of these."""

    out: str = Field(description="output folder", json_schema_extra=flag("--out", short="-o"))
    source: SourceOptions
    fetch: FetchOptions = FetchOptions()
    media: MediaOptions = MediaOptions()
    tokens: TokenOptions = TokenOptions()
    batches: BatchOptions = BatchOptions()
    shards: ShardOptions = ShardOptions()
    gate: GateOptions = GateOptions()
    execution: ExecutionOptions = ExecutionOptions()

    @model_validator(mode="before")
    @classmethod
    def _nest_flat_options(cls, data: Any) -> Any:
        """Flat keys (``max_pixels=...``) go to the sub-model that holds them; nested input passes."""
        if not isinstance(data, dict):
            return data
        nested: dict[str, Any] = {}
        for key, value in data.items():
            owner = _OWNER.get(key)
            if owner is None:
                nested[key] = value
            else:
                sub = nested.setdefault(owner, {})
                if isinstance(sub, BaseModel):
                    sub = nested[owner] = sub.model_dump()
                sub[key] = value
        return nested

    @classmethod
    def of(cls, **options: Any) -> RunConfig:
        """A config from flat options (the CLI's names): the typed ``RunConfig(max_pixels=...)``."""
        return cls(**options)

    def flat(self) -> dict[str, Any]:
        """Every option by its flat name (the CLI's and ``prefect.yaml``'s)."""
        out: dict[str, Any] = {"out": self.out}
        for name in _SUBMODELS:
            out.update(dict(getattr(self, name)))
        return out

    @staticmethod
    def flatten(options: dict[str, Any]) -> dict[str, Any]:
        """A recorded config (nested, or flat as older runs wrote it) as flat options."""
        out: dict[str, Any] = {}
        for key, value in options.items():
            if key in _SUBMODELS and isinstance(value, dict):
                out.update(value)
            else:
                out[key] = value
        return out

    def replace(self, **flat: Any) -> RunConfig:
        """A copy with some options changed, by flat name (validated like a new config)."""
        return RunConfig.of(**(self.flat() | flat))

    def media_fingerprint(self) -> str:
        """Hash of every option that changes a batch's manifests or media bytes: :func:`batch_inputs_hash`
        of the :data:`BATCH_INPUTS` sub-models."""
        return batch_inputs_hash({name: getattr(self, name) for name in BATCH_INPUTS})

    @property
    def store_url(self) -> str:
        return self.fetch.store or f"{self.out.rstrip('/')}/store"


def batch_inputs_hash(inputs: dict[str, BaseModel]) -> str:
    """Hash of the sub-models named by :data:`BATCH_INPUTS` (by those names), whole, and the code version:
    the one formula of a run's and a batch stage's (``schemas/stage_options.py``) media fingerprint."""
    if set(inputs) != set(BATCH_INPUTS):
        raise ValueError(f"a batch fingerprint hashes {BATCH_INPUTS}, not {tuple(sorted(inputs))}")
    payload: dict[str, Any] = {name: model.model_dump(mode="json") for name, model in inputs.items()}
    payload["pipeline_version"] = PIPELINE_VERSION
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


_SUBMODELS: Final = tuple(
    name
    for name, field in RunConfig.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, _Options)
)
# flat option name -> the sub-model holding it (option names are unique across sub-models)
_OWNER: Final = {
    key: name
    for name in _SUBMODELS
    for key in RunConfig.model_fields[name].annotation.model_fields  # type: ignore[union-attr]
}
