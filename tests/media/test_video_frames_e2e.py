"""``--video-mode frames`` end to end: the sampled frames are written as images at the model's frame size,
the token count matches what was written, and training reads exactly those frames through the cooker."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_flow

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.manifests import OutputLayout, read_table

pytestmark = pytest.mark.slow
SUBSET = "video_qa"


def test_videos_become_their_sampled_frames(
    prefect_harness: None, sample_release: Path, tmp_path: Path
) -> None:
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    from vlmforge.energon import ChatSample, ChatTaskEncoder

    cfg = RunConfig(
        release=str(sample_release),
        out=str(tmp_path / "out"),
        subsets=(SUBSET,),
        video_mode="frames",
        sample_format="crude",  # read back below through vlmforge's own cooker
    )
    summary = run_flow(cfg)
    outcome = summary.subsets[0]
    assert outcome.published and outcome.validation == "ok", (outcome.gate, outcome.validation)

    layout = OutputLayout(cfg.out)
    videos = {
        m["line"]: m
        for m in read_table(layout, "media", SUBSET).to_pylist()
        if m["kind"] == "video" and m["status"] == "ok"
    }
    assert videos
    for m in videos.values():
        assert len(m["frame_sha256"]) == m["sampled_frames"] == len(m["frame_indices"]) >= 2
        assert m["out_width"] % 28 == 0 and m["out_height"] % 28 == 0  # the model's grid: no resize later
        assert m["kept_original"] is False

    ds = get_val_dataset(
        str(Path(cfg.out) / "energon" / SUBSET),
        split_part="train",
        worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
        batch_size=None,
        task_encoder=ChatTaskEncoder(video_frames=True),
    )
    seen = 0
    for sample in get_loader(ds):
        assert isinstance(sample, ChatSample)
        line = sample.record["vlmforge"]["line"]
        for video in sample.videos:
            m = videos[line]
            assert tuple(video.shape) == (m["sampled_frames"], 3, m["out_height"], m["out_width"])
            assert str(video.dtype) == "torch.uint8"
        seen += len(sample.videos)
    assert seen == len(videos)
