"""The outputs the Megatron-Bridge tests read, and Bridge's encoder over all of them in one probe process.

The sample release run with each Bridge trainer (``test_bridge_fed_tokens.py``) and the three benchmark-set
layouts' replicas run with each (``test_bridge_layouts.py``) are session fixtures of ``tests/conftest.py``
built here, so that :func:`probe_all` runs :mod:`bridge_fed_probe` once over the four outputs: the probe's
Python imports megatron-core, transformers and torch (~50 s on 2 cores) once per test session, not once per
module.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bridge_fed_checks import MODELS, probe_runs
from conftest import run_flow

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.trainers import TRAINERS

# The layout replicas are the staging tests' own (tests/catalog is on sys.path when pytest collects it too).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "catalog"))
from test_sources import LLAVA_CONFIG, build_infovqa, build_llava_video, build_mantis  # noqa: E402

__all__ = ["LAYOUTS", "QWEN3_TRAINER", "SAMPLE_SUBSETS", "TRAINER", "layout_runs", "probe_all", "sample_runs"]

TRAINER = "bridge-qwen2.5-vl"
QWEN3_TRAINER = "bridge-qwen3-vl"
# every image kind, multi-image samples and both videos of the sample release (bad_rows adds only rejects)
SAMPLE_SUBSETS = ("photo_vqa", "multi_image", "video_qa")
# --format -> (--config, the subset it publishes, its ok samples: see the builders; Mantis' 12-image row is
# dropped by the trainer's --max-num-images 10, as Bridge's encoder skips it)
LAYOUTS = {
    "mantis": ("nlvr2", "nlvr2", 2),
    "infovqa": ("train", "infovqa_train", 2),
    "llava_video": (LLAVA_CONFIG, LLAVA_CONFIG, 2),
}


def sample_runs(sample_release: Path, base: Path) -> dict[str, Path]:
    """The sample release run with each Bridge trainer; trainer -> output folder."""
    out: dict[str, Path] = {}
    for trainer in MODELS:
        cfg = RunConfig(
            **TRAINERS[trainer],
            release=str(sample_release),
            out=str(base / trainer),
            subsets=SAMPLE_SUBSETS,
            max_reject_rate=0.9,
            num_cpus=2,
            skip_gate=True,  # the gate is covered by the pipeline tests
        )
        summary = run_flow(cfg)
        assert summary.failed == [], [(s.gate, s.error) for s in summary.subsets]
        out[trainer] = base / trainer
    return out


def layout_runs(base: Path) -> dict[str, Path]:
    """The three layouts' replicas (built once), each run with each trainer into one output folder per
    trainer; trainer -> output folder."""
    releases = {
        "mantis": build_mantis(base / "Mantis-Instruct"),
        "infovqa": build_infovqa(base / "InfoVQA"),
        "llava_video": build_llava_video(base / "LLaVA-Video-178K", base / "videos"),
    }
    return {trainer: _run_layouts(trainer, base, releases) for trainer in (TRAINER, QWEN3_TRAINER)}


def _run_layouts(trainer: str, base: Path, releases: dict[str, Path]) -> Path:
    out = base / f"out-{trainer}"
    for fmt, (config, subset, _) in LAYOUTS.items():
        cfg = RunConfig(
            **TRAINERS[trainer],
            release=str(releases[fmt]),
            out=str(out),
            source_format=fmt,
            source_configs=(config,),
            max_reject_rate=0.6,
            batch_lines=3,
            num_cpus=2,
            skip_gate=True,  # the gate is covered over the sample release and the staging tests
        )
        summary = run_flow(cfg)
        assert summary.failed == [], (trainer, fmt, [(s.gate, s.error) for s in summary.subsets])
        assert [s.subset for s in summary.subsets] == [subset]
    return out


def probe_all(
    samples: dict[str, Path], layouts: dict[str, Path]
) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``{"sample" | "layouts": trainer -> key -> the probe's line}`` for every output, in one process."""
    runs = {("sample", t): (MODELS[t], out) for t, out in samples.items()}
    runs |= {("layouts", t): (MODELS[t], out) for t, out in layouts.items()}
    probed = probe_runs({f"{kind} {t}": run for (kind, t), run in runs.items()})
    by_kind: dict[str, dict[str, dict[str, dict[str, Any]]]] = {"sample": {}, "layouts": {}}
    for kind, trainer in runs:
        by_kind[kind][trainer] = probed[f"{kind} {trainer}"]
    return by_kind
