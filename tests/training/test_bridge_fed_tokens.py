"""The manifests count what Megatron-Bridge feeds the model (issue 32), proven with Bridge 0.6.2's encoder.

The sample release runs through the real pipeline with ``--trainer bridge-qwen3-vl`` and
``--trainer bridge-qwen2.5-vl``; then Bridge's real ``QwenVLTaskEncoder`` (megatron-bridge 0.6.2,
megatron-core 0.19.2, transformers 5.12.1, qwen-vl-utils 0.0.14, in a cached Python 3.12 environment:
:mod:`bridge_env`) reads every published dataset (:mod:`bridge_fed_probe`): ``encode_sample`` on each sample,
then ``batch([sample])`` in its padded and its in-batch packed form, counting the image and video pad ids in
``input_ids``. Per sample, the manifests must hold exactly those numbers: ``visual_tokens`` per image, per
video and per sample = the pads ``batch()`` feeds, ``total_tokens`` = the sequence it feeds (text with the
same ``qwen.tiktoken`` vocabulary vlmforge counts with, converted by transformers; the hub tokenizer is not
reachable), and ``encode_check_visual_tokens`` = what ``encode_sample``'s ``max_visual_tokens`` check
computes; drops follow that check (the probe reruns ``encode_sample`` with a limit between the two counts).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bridge_fed_checks import (
    MODELS,
    check_mismatches,
    cut_mismatches,
    fed_mismatches,
    layout_mismatches,
    limit_between,
    manifest,
)

pytestmark = pytest.mark.slow

Probed = dict[str, dict[str, dict[str, Any]]]


@pytest.fixture(scope="module")
def runs(bridge_sample_runs: dict[str, Path]) -> dict[str, Path]:
    """trainer -> the sample release's output with that trainer (a session fixture: tests/conftest.py)."""
    return bridge_sample_runs


@pytest.fixture(scope="module")
def probed(bridge_probed: dict[str, Probed]) -> Probed:
    """trainer -> key -> what Bridge's encoder did with the published sample (the session's one probe)."""
    return bridge_probed["sample"]


@pytest.mark.parametrize("trainer", list(MODELS))
def test_bridge_keeps_every_ok_sample(trainer: str, runs: dict[str, Path], probed: Probed) -> None:
    ok, _ = manifest(runs[trainer])
    assert len(ok) >= 15 and set(probed[trainer]) == set(ok)
    assert all(r["status"] == "ok" for r in probed[trainer].values())


@pytest.mark.parametrize("trainer", list(MODELS))
def test_visual_and_total_tokens_are_what_batch_feeds(
    trainer: str, runs: dict[str, Path], probed: Probed
) -> None:
    """Per image, per video and per sample, padded and packed batch alike; and the sequence length."""
    assert fed_mismatches(runs[trainer], probed[trainer]) == []
    _, media = manifest(runs[trainer])
    assert any(m["kind"] == "video" for rows in media.values() for m in rows)  # where the paths differ


@pytest.mark.parametrize("trainer", list(MODELS))
def test_truncation_points_are_where_batch_puts_them(
    trainer: str, runs: dict[str, Path], probed: Probed
) -> None:
    """``--seq-len-mode truncate`` decides on the fed sequence's layout: its last visual span's end and its
    first supervised token are at Bridge's positions in ``input_ids`` (Qwen3's videos: the per-group blocks
    inside the template's kept wrappers), for every sample, padded and packed."""
    assert layout_mismatches(runs[trainer], probed[trainer], trainer) == []


@pytest.mark.parametrize("trainer", list(MODELS))
def test_truncation_keeps_exactly_what_batch_still_trains(
    trainer: str, runs: dict[str, Path], probed: Probed
) -> None:
    """With seq_length at a sample's first supervised token Bridge still trains it (the labels are shifted
    before the cut): vlmforge truncates to that length; one token earlier batch() raises: vlmforge drops."""
    wrong, compared = cut_mismatches(runs[trainer], probed[trainer], trainer)
    assert wrong == []
    assert compared >= 30  # both edges of (nearly) every ok sample


@pytest.mark.parametrize("trainer", list(MODELS))
def test_encode_check_visual_tokens_are_what_encode_sample_counts(
    trainer: str, runs: dict[str, Path], probed: Probed
) -> None:
    assert check_mismatches(runs[trainer], probed[trainer]) == []
    ok, _ = manifest(runs[trainer])
    # the two numbers are kept where they differ (the videos): the check above can tell them apart
    assert any(r["encode_check_visual_tokens"] != r["visual_tokens"] for r in ok.values())


@pytest.mark.parametrize("trainer", list(MODELS))
def test_drops_follow_encode_samples_check_not_the_fed_count(
    trainer: str, runs: dict[str, Path], probed: Probed
) -> None:
    """At a max_visual_tokens between a sample's two counts, Bridge's encode_sample skips exactly the samples
    whose encode_check_visual_tokens exceed it (what vlmforge's knob drops on)."""
    limit = limit_between(runs[trainer])
    assert limit is not None
    ok, _ = manifest(runs[trainer])
    skipped = {k for k, r in probed[trainer].items() if r["skipped_at_limit"]}
    assert skipped == {k for k, r in ok.items() if r["encode_check_visual_tokens"] > limit}
    assert skipped != {k for k, r in ok.items() if r["visual_tokens"] > limit}
