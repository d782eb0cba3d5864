"""``--max-pixels`` / ``--min-pixels`` are resolved in one place (``PixelBounds.of``, through
``ModelGeometry.of``) and reach every use as explicit parameters: no lower function falls back to the
preset."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from vlmforge.schemas.config import MediaOptions, TokenOptions
from vlmforge.schemas.presets import ModelPreset
from vlmforge.tasks.geometry import (
    ModelGeometry,
    PixelBounds,
    image_tokens,
    load_preset,
    sample_video_frames,
    video_tokens,
)
from vlmforge.tasks.geometry.media_tokens import image_tokens_batch
from vlmforge.tasks.geometry.resize_rule import pipeline_size
from vlmforge.tasks.tokens import TextTokenizer, TokenInput, count_sample_tokens
from vlmforge.tasks.tokens.count import expand_sample
from vlmforge.tasks.tokens.feed_paths import fed_geometry

TASKS = Path(__file__).resolve().parents[2] / "tasks"
RESOLVER = TASKS / "geometry" / "pixel_bounds.py"


@pytest.fixture(scope="module")
def q3() -> ModelPreset:
    return load_preset("qwen3_vl")


def geometry(preset: ModelPreset, **knobs: Any) -> ModelGeometry:
    return ModelGeometry.of(preset, TokenOptions(**knobs), MediaOptions())


def test_bounds_with_and_without_max_pixels(q3: ModelPreset) -> None:
    # not given: the preset's image bounds, and videos keep the preset's own video bounds (no frame cap)
    own = geometry(q3).bounds
    assert own == PixelBounds(q3.min_pixels, q3.max_pixels, None)
    # given: the image bound, and the same number caps every video frame
    given = geometry(q3, max_pixels=1_003_520, min_pixels=200_704).bounds
    assert given == PixelBounds(200_704, 1_003_520, 1_003_520)
    # the preset itself is left as loaded: nothing can read a knob off it
    assert geometry(q3, max_pixels=1_003_520, min_pixels=200_704).preset is q3


def test_no_max_pixels_is_no_frame_cap_not_the_image_bound(q3: ModelPreset) -> None:
    """A 4-frame 40x40 clip: the preset's video bounds give it 2 tokens; capping its frames at the preset's
    image ``max_pixels`` would first resize each frame within the image bounds (64x64: 8 tokens)."""
    idx = sample_video_frames(q3, 4, 2.0)
    own = geometry(q3).video_tokens(len(idx), 40, 40, indices=idx, video_fps=2.0)
    assert own.tokens == 2
    image_capped = video_tokens(q3, len(idx), 40, 40, frame_cap=q3.max_pixels, indices=idx, video_fps=2.0)
    assert image_capped.tokens == 8


def test_lower_functions_require_the_resolved_values(q3: ModelPreset) -> None:
    tok = TextTokenizer.for_preset(q3)
    calls = {
        "image_tokens": lambda: image_tokens(q3, 100, 100),  # type: ignore[call-arg]
        "image_tokens_batch": lambda: image_tokens_batch(q3, [100], [100]),  # type: ignore[call-arg]
        "pipeline_size": lambda: pipeline_size(q3, 100, 100),  # type: ignore[call-arg]
        "video_tokens": lambda: video_tokens(q3, 4, 100, 100, indices=[0, 1, 2, 3]),  # type: ignore[call-arg]
        "count_sample_tokens": lambda: count_sample_tokens([], q3, tok, [], []),  # type: ignore[call-arg]
        "expand_sample": lambda: expand_sample([], q3, [], []),  # type: ignore[call-arg]
        "fed_geometry": lambda: fed_geometry(q3),  # type: ignore[call-arg]
        "TokenInput": lambda: TokenInput([], [], [], q3, tok),  # type: ignore[call-arg]
    }
    for name, call in calls.items():
        try:
            call()
        except TypeError as exc:
            assert "missing" in str(exc), (name, exc)
        else:
            pytest.fail(f"{name} ran without the resolved pixel bounds: it defaults them somewhere")


def _preset_bound_reads(path: Path) -> list[str]:
    """``<...preset...>.max_pixels`` / ``.min_pixels`` attribute reads in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("max_pixels", "min_pixels"):
            owner = ast.unparse(node.value)
            if "preset" in owner.lower():
                found.append(f"{path.relative_to(TASKS.parent)}:{node.lineno}: {owner}.{node.attr}")
    return found


def test_only_the_resolver_reads_the_presets_image_bounds() -> None:
    reads = [r for p in sorted(TASKS.rglob("*.py")) if p != RESOLVER for r in _preset_bound_reads(p)]
    assert reads == [], "a second place defaults the pixel bounds to the preset's: " + "; ".join(reads)
    assert _preset_bound_reads(RESOLVER)  # the scan sees the one place that does


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    from vlmforge.flows.cli.tokens import register

    application = typer.Typer(pretty_exceptions_enable=False)
    register(application)
    return application


def test_tokens_command_counts_with_the_runs_geometry(app: typer.Typer) -> None:
    """The command's default model is the declared one, and its counts are ModelGeometry's for its knobs."""
    res = CliRunner().invoke(app, ["tokens", "--image", "1920x1080", "--video", "1280x720:30@30", "--json"])
    assert res.exit_code == 0, res.output
    declared = TokenOptions().model
    assert json.loads(res.output)["model"] == declared
    videos = []
    for knobs in ({}, {"max_pixels": 200_704}):
        flags = [a for k, v in knobs.items() for a in (f"--{k.replace('_', '-')}", str(v))]
        args = [
            "tokens",
            "--model",
            "qwen2_5_vl",
            *flags,
            "--image",
            "1920x1080",
            "--video",
            "1280x720:30@30",
        ]
        res = CliRunner().invoke(app, [*args, "--json"])
        assert res.exit_code == 0, res.output
        g = geometry(load_preset("qwen2_5_vl"), **knobs)
        idx = g.choose_frames(30, 30.0)
        want_video = g.video_tokens(len(idx), 720, 1280, indices=idx, video_fps=30.0).tokens
        doc = json.loads(res.output)
        assert (doc["images"], doc["videos"]) == ([g.image_tokens(1080, 1920).tokens], [want_video])
        videos.append(want_video)
    assert videos[1] < videos[0]  # --max-pixels capped the video's frames too, as in a run
