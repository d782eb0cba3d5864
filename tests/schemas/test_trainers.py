"""``--trainer NAME``: each preset is a valid set of run options, and the CLI applies it under the options the
user typed (an explicit flag wins even when it repeats the flag's own default)."""

from __future__ import annotations

import pytest
import typer

from vlmforge.flows.cli import app
from vlmforge.flows.cli.options import with_trainer
from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.trainers import TRAINERS
from vlmforge.tasks.errors import UsageError

RUN = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]


def _applied(*args: str) -> RunConfig:
    """The config ``vlmforge run R --out O *args`` builds (click parses the real command line)."""
    ctx = RUN.make_context("run", ["R", "--out", "O", *args])
    names = {key for preset in TRAINERS.values() for key in preset}
    options = {"release": "R", "out": "O"} | {k: ctx.params[k] for k in names}
    return RunConfig.of(**with_trainer(ctx, ctx.params["trainer"], options))


def test_every_preset_names_run_options_and_validates() -> None:
    cli_params = {p.name for p in RUN.params}
    flat = set(RunConfig.of(release="r", out="o").flat())
    for name, preset in TRAINERS.items():
        assert set(preset) <= cli_params & flat, name
        assert {
            k: v for k, v in RunConfig.of(release="r", out="o", **preset).flat().items() if k in preset
        } == preset


def test_bridge_presets_are_the_qwen_vl_task_encoder_defaults() -> None:
    for name, model in (("bridge-qwen2.5-vl", "qwen2_5_vl"), ("bridge-qwen3-vl", "qwen3_vl")):
        tokens = _applied("--trainer", name).tokens
        assert tokens.model == model
        assert (tokens.min_pixels, tokens.max_pixels) == (200_704, 1_003_520)
        assert (tokens.max_num_images, tokens.max_visual_tokens) == (10, 16_384)
        assert (tokens.max_num_frames, tokens.frames_mode) == (60, "truncate")  # Bridge keeps the first 60
        assert (tokens.seq_len, tokens.seq_len_mode) == (4096, "truncate")
        cfg = _applied("--trainer", name)
        assert (cfg.shards.sample_format, cfg.media.video_mode) == (
            "bridge",
            "frames",
        )  # frames at model size


def test_explicit_flags_override_the_trainer() -> None:
    tokens = _applied(
        "--trainer",
        "bridge-qwen3-vl",
        "--max-num-images",
        "32",
        "--frames-mode",
        "uniform",
        "--seq-len",
        "8192",
    ).tokens
    assert (tokens.max_num_images, tokens.frames_mode, tokens.seq_len) == (32, "uniform", 8192)
    assert (tokens.model, tokens.max_pixels, tokens.max_num_frames) == ("qwen3_vl", 1_003_520, 60)
    # without --trainer nothing changes
    plain = _applied().tokens
    assert (plain.model, plain.max_num_images, plain.frames_mode, plain.seq_len) == (
        "qwen2_5_vl",
        None,
        "uniform",
        None,
    )


def test_an_unknown_trainer_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(
        UsageError, match=r"--trainer bridge-llama: unknown trainer \(known: bridge-qwen2.5-vl"
    ):
        _applied("--trainer", "bridge-llama")
