"""Mistakes on the command line are found before start-up: one line with a hint, exit 2, no traceback
(issue 33).

Each case runs ``vlmforge run``'s console entry (in the test process; one case as its own process) and checks
that it ends before the run says which Ray it uses (its first line once the checks pass), so neither Prefect
nor Ray was started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_in_process import Ran, vlmforge_in_process

from vlmforge.flows.cli.preflight import OVERRIDES_HINT, resolve_model
from vlmforge.schemas.model_names import preset_for
from vlmforge.schemas.presets import list_presets


def vlmforge(*args: str) -> Ran:
    return vlmforge_in_process(*args)


def vlmforge_process(*args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ.copy() | {"COLUMNS": "80"}
    env.pop("PREFECT_API_URL", None)  # a run that got past the checks would start its own services
    return subprocess.run(
        [sys.executable, "-m", "vlmforge.flows.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_error_line(done: Ran | subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2, f"exit {done.returncode}: {lines}"
    assert "Traceback" not in done.stderr and not any(line.startswith("Ray:") for line in lines), lines
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], lines
    return errors[0]


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("preflight") / "release"
    for name in ("docvqa", "chartqa_1"):
        sub = root / name
        sub.mkdir(parents=True)
        (sub / f"{name}.jsonl").write_text(json.dumps({"id": "a", "messages": []}) + "\n")
    return root


def test_hub_and_dashed_model_names_map_to_presets() -> None:
    known = list_presets()
    assert preset_for("Qwen/Qwen2.5-VL-7B-Instruct", known) == "qwen2_5_vl"
    assert preset_for("Qwen/Qwen2-VL-2B-Instruct", known) == "qwen2_vl"
    assert preset_for("qwen3-vl", known) == "qwen3_vl"
    assert preset_for("Qwen/Qwen3-VL-8B-Instruct", known) == "qwen3_vl"
    assert preset_for("OpenGVLab/InternVL2_5-8B", known) == "internvl"
    assert preset_for("llava-hf/llava-1.5-7b-hf", known) == "llava_1_5"
    assert preset_for("llava-hf/llava-v1.6-mistral-7b-hf", known) == "llava_next"
    assert preset_for("nvidia/Llama-3.1-Nemotron-Nano-VL-8B-V1", known) == "nemotron_vl"
    assert preset_for("qwen", known) is None and preset_for("qwen2_vlx", known) is None
    assert resolve_model("qwen3_vl") == "qwen3_vl"


def test_an_unknown_model_names_the_closest_preset(release: Path, tmp_path: Path) -> None:
    line = one_error_line(vlmforge("run", str(release), "--out", str(tmp_path), "--model", "qwen25_vl"))
    assert "--model qwen25_vl: no model preset" in line and "did you mean --model qwen2_5_vl?" in line


def test_a_hub_name_is_accepted_and_said(release: Path, tmp_path: Path) -> None:
    # the name passes (one note line), and the next check stops the run before start-up
    done = vlmforge(
        "run", str(release), "--out", str(tmp_path / "o"), "--model", "Qwen/Qwen2.5-VL-7B-Instruct",
        "--gate-overrides", str(tmp_path / "none.json"),
    )  # fmt: skip
    line = one_error_line(done)
    assert "model: Qwen/Qwen2.5-VL-7B-Instruct counts tokens with the preset qwen2_5_vl" in done.stderr
    assert line.startswith(f"error: --gate-overrides {tmp_path / 'none.json'}: cannot read it")


def test_a_missing_release_suggests_the_near_folder(release: Path, tmp_path: Path) -> None:
    line = one_error_line(vlmforge("run", str(release) + "s", "--out", str(tmp_path)))
    assert f"release {release}s: no such folder; did you mean {release}?" in line


def test_a_subset_folder_given_as_the_release(release: Path, tmp_path: Path) -> None:
    line = one_error_line(vlmforge("run", str(release / "docvqa"), "--out", str(tmp_path)))
    assert "is one subset's folder (it holds docvqa.jsonl)" in line
    assert f"vlmforge run {release} --subset docvqa" in line


def test_a_folder_without_subsets(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    line = one_error_line(vlmforge("run", str(tmp_path / "empty"), "--out", str(tmp_path / "o")))
    assert "no subsets (a subset is a folder <name> holding <name>.jsonl)" in line


def test_an_unknown_subset_names_the_closest(release: Path, tmp_path: Path) -> None:
    line = one_error_line(vlmforge("run", str(release), "--out", str(tmp_path), "--subset", "docvq"))
    assert "--subset docvq: not in release" in line and "did you mean --subset docvqa?" in line


def test_a_broken_recipe(release: Path, tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "docvqa.yaml").write_text("subset: docvqa\nsources: [\n")
    line = one_error_line(vlmforge("run", str(release), "--out", str(tmp_path), "--recipes", str(recipes)))
    assert f"{recipes / 'docvqa.yaml'}: not valid YAML" in line


def test_bad_gate_overrides(release: Path, tmp_path: Path) -> None:
    bad = tmp_path / "overrides.json"
    bad.write_text("{not json")
    line = one_error_line(vlmforge("run", str(release), "--out", str(tmp_path), "--gate-overrides", str(bad)))
    assert f"--gate-overrides {bad}: not JSON (line 1, column 2" in line
    bad.write_text('{"subsets": {"docvqa": {"max_pixels": "x"}}}')
    line = one_error_line(vlmforge("run", str(release), "--out", str(tmp_path), "--gate-overrides", str(bad)))
    assert "subsets.docvqa.max_pixels: expected a number or null" in line
    assert line.endswith(f"; {OVERRIDES_HINT}") and "(expectations/overrides.json)" in OVERRIDES_HINT


def test_options_that_contradict(release: Path, tmp_path: Path) -> None:
    line = one_error_line(vlmforge("run", str(release), "--out", str(tmp_path), "--video-max-pixels", "1000"))
    assert (
        "--video-max-pixels has no effect as given; it caps sampled frames: add --video-mode frames" in line
    )
    line = one_error_line(
        vlmforge("run", str(release), "--out", str(tmp_path), "--min-pixels", "900", "--max-pixels", "800")
    )
    assert "--min-pixels 900 is above --max-pixels 800" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--trainer", "bridge-qwen3vl"],
            "--trainer bridge-qwen3vl: unknown trainer (known: bridge-qwen2.5-vl",
        ),
        (["--trainer", "bridge-qwen3vl"], "did you mean --trainer bridge-qwen3-vl?"),
        (["--max-pixels", "abc"], "--max-pixels: input should be a valid integer"),
        (
            ["--max-pixels", "-5"],
            "--max-pixels -5: input should be greater than 0; see `vlmforge run --help`",
        ),
        (
            ["--seq-len", "0", "--fetch-concurrency", "0"],
            "--fetch-concurrency 0: input should be greater than 0; --seq-len 0",
        ),
        (["--shard-size", "1XB"], "--shard-size 1XB: invalid size '1XB'"),
        (["--batch-media", "0"], "--batch-media 0: input should be greater than 0"),
        (["--video-mode", "bogus"], "--video-mode: 'bogus' is not one of 'keep', 'frames'"),
        (["--max-pixels-x", "1"], "No such option: --max-pixels-x"),
        (["--accept-image-format", "zzz"], "--accept-image-format: image format(s) ZZZ unknown to Pillow"),
    ],
)
def test_bad_option_values_are_one_line(
    release: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    """Values click or the run config refuse: one line through the app's group, exit 2, no box."""
    from typer.testing import CliRunner

    from vlmforge.flows.cli import app

    done = CliRunner().invoke(app, ["run", str(release), "--out", str(tmp_path / "o"), *args])
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert done.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (done.exit_code, lines)
    assert expected in lines[0] and "╭" not in done.output and "Usage:" not in done.output, lines[0]


def test_bad_values_end_the_real_cli_in_one_line(release: Path, tmp_path: Path) -> None:
    line = one_error_line(vlmforge_process("run", str(release), "--out", str(tmp_path), "--trainer", "llama"))
    assert line.startswith("error: --trainer llama: unknown trainer") and "README" in line
    line = one_error_line(
        vlmforge_process("run", str(release), "--out", str(tmp_path), "--max-pixels", "abc")
    )
    assert line == (
        "error: --max-pixels: input should be a valid integer, unable to parse string as an integer; "
        "see `vlmforge run --help`"
    )
    line = one_error_line(vlmforge_process("run", "--out", str(tmp_path)))
    assert line == "error: Missing argument 'release'; see `vlmforge run --help`"


def test_a_kept_video_with_a_bridge_trainer_is_refused(release: Path, tmp_path: Path) -> None:
    """Bridge's ChatMLWebdataset reads a video only as frame images (issue 32)."""
    trainer = ("--trainer", "bridge-qwen3-vl", "--video-mode", "keep")
    line = one_error_line(vlmforge("run", str(release), "--out", str(tmp_path), *trainer))
    assert "--video-mode keep with a Bridge trainer" in line and "use --video-mode frames" in line
