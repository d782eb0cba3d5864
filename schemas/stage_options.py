"""What each stage reads of a run: one small frozen model per stage, built from a :class:`RunConfig` in one
place (each model's ``of``), so an option can be followed from the command line to the stage that uses it.

A stage takes whole the config sub-models it reads most of (and those its fingerprint hashes whole), and
single values otherwise. What a stage is not given it cannot depend on: the batch stage sees no shard or
gate option, the gate no fetch option, publish no fetch or media option beyond its batches' fingerprints.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from .config import (
    BatchOptions,
    FetchOptions,
    GateOptions,
    MediaOptions,
    RunConfig,
    ShardOptions,
    TokenOptions,
    batch_inputs_hash,
)


class _StageOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BatchWork(_StageOptions):
    """What the batch stage reads: where it writes, where media are stored and fetched from, and the
    options that change a batch's output (``media``, ``tokens``, ``batches``: hashed whole, as
    :data:`~.config.BATCH_INPUTS` says)."""

    out: str
    store: str  # the content store's URL (``--store``, else OUT/store)
    staged: bool  # the release was staged from a ``--format`` source: its media are store objects
    fetch: FetchOptions
    media: MediaOptions
    tokens: TokenOptions
    batches: BatchOptions

    @classmethod
    def of(cls, cfg: RunConfig) -> BatchWork:
        return cls(
            out=cfg.out,
            store=cfg.store_url,
            staged=cfg.source.source_format != "nemotron",
            fetch=cfg.fetch,
            media=cfg.media,
            tokens=cfg.tokens,
            batches=cfg.batches,
        )

    def media_fingerprint(self) -> str:
        """The run's :meth:`RunConfig.media_fingerprint` (the same formula over the same sub-models)."""
        return batch_inputs_hash({"media": self.media, "tokens": self.tokens, "batches": self.batches})


class GateWork(_StageOptions):
    """What the gate reads: the manifests under ``out``, the gate options, and the model and knobs whose
    limits its expectations check (``tokens`` and ``media`` make the model's geometry)."""

    out: str
    gate: GateOptions
    tokens: TokenOptions
    media: MediaOptions

    @classmethod
    def of(cls, cfg: RunConfig) -> GateWork:
        return cls(out=cfg.out, gate=cfg.gate, tokens=cfg.tokens, media=cfg.media)


class PublishWork(_StageOptions):
    """What publish reads: the shard options, whether the gate runs (its ``shards`` suite), the store the
    media come from, and, for the publish fingerprint, the batch stage's options (every batch's fingerprint
    is part of it) and the gate's."""

    out: str
    store: str
    shards: ShardOptions
    gate: GateOptions
    batch: BatchWork

    @classmethod
    def of(cls, cfg: RunConfig) -> PublishWork:
        return cls(
            out=cfg.out, store=cfg.store_url, shards=cfg.shards, gate=cfg.gate, batch=BatchWork.of(cfg)
        )


class RunStages(_StageOptions):
    """The options of each stage of one run, built together from its config (the flow hands each stage its
    own)."""

    batch: BatchWork
    gate: GateWork
    publish: PublishWork

    @classmethod
    def of(cls, cfg: RunConfig) -> RunStages:
        return cls(batch=BatchWork.of(cfg), gate=GateWork.of(cfg), publish=PublishWork.of(cfg))
