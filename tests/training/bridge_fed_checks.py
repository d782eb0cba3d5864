"""What Megatron-Bridge's real ``QwenVLTaskEncoder`` does with a run's published datasets, against the run's
manifests: shared by the sample release's test (``test_bridge_fed_tokens.py``) and the benchmark-set
layouts' (``test_bridge_layouts.py``).

:func:`probe_runs` runs :mod:`bridge_fed_probe` once under the Bridge environment (:mod:`bridge_env`) over
several outputs; the ``*_mismatches`` functions return one line per sample whose manifest numbers differ from
what the encoder computed (empty when all agree).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from bridge_env import BridgeEnvUnavailable, bridge_python, run_in_bridge_env

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.trainers import TRAINERS
from vlmforge.tasks.batch.tokens_step import get_tokenizer
from vlmforge.tasks.geometry import VideoSpec, geometry_of
from vlmforge.tasks.ops.query import run_query
from vlmforge.tasks.tokens import FEED_PATHS, SampleTokens, TokenInput, fit_seq_len
from vlmforge.tasks.tokens.seq_len import SequenceLayout

__all__ = [
    "MODELS",
    "check_mismatches",
    "fed_mismatches",
    "cut_mismatches",
    "layout_mismatches",
    "limit_between",
    "manifest",
    "probe_runs",
    "require_bridge_env",
]

PROBE = Path(__file__).with_name("bridge_fed_probe.py")
MERGE = 2
MODELS = {"bridge-qwen3-vl": "qwen3_vl", "bridge-qwen2.5-vl": "qwen2_5_vl"}

Rows = dict[str, dict[str, Any]]
Media = dict[str, list[dict[str, Any]]]


def require_bridge_env() -> Path:
    """The Bridge environment (built once, cached); skips naming why it cannot be built."""
    try:
        return bridge_python()
    except BridgeEnvUnavailable as exc:
        pytest.skip(f"Megatron-Bridge 0.6.2 environment unavailable: {exc}")


def _tiktoken() -> Path:
    """The ``qwen.tiktoken`` vlmforge counts with (inside the dashscope wheel)."""
    spec = importlib.util.find_spec("dashscope")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"


def manifest(out: Path) -> tuple[Rows, Media]:
    """ok sample rows by key, and their media rows by key in part order."""
    ok = {r["key"]: r for r in run_query(str(out), "SELECT * FROM samples WHERE status = 'ok'").to_pylist()}
    media: Media = {}
    rows = run_query(
        str(out),
        "SELECT s.key, m.* FROM media m JOIN samples s USING (subset, line) WHERE s.status = 'ok' "
        "ORDER BY s.key, m.index",
    ).to_pylist()
    for m in rows:
        media.setdefault(m["key"], []).append(m)
    return ok, media


def limit_between(out: Path) -> int | None:
    """A ``max_visual_tokens`` between some sample's checked and fed counts (None: they never differ)."""
    ok, _ = manifest(out)
    apart = [r for r in ok.values() if r["encode_check_visual_tokens"] != r["visual_tokens"]]
    if not apart:
        return None
    return min(apart[0]["encode_check_visual_tokens"], apart[0]["visual_tokens"])


def probe_runs(runs: dict[str, tuple[str, Path]]) -> dict[str, Rows]:
    """name -> key -> the probe's line, for ``runs`` (name -> (model, output folder)), in one process; each
    run with a limit between its two counts also reports ``skipped_at_limit``."""
    groups = []
    for _, (model, out) in runs.items():
        datasets = ",".join(str(p.parent) for p in sorted((out / "energon").glob("*/.nv-meta")))
        limit = limit_between(out)
        groups.append(f"{model}{'' if limit is None else f'@{limit}'}={datasets}")
    lines = run_in_bridge_env(PROBE, [str(_tiktoken()), *groups]).splitlines()
    names = list(runs)
    by_name: dict[str, Rows] = {name: {} for name in names}
    for line in lines:
        row = json.loads(line)
        by_name[names[row["group"]]][row["key"]] = row
    return by_name


def _tokens(grid: list[list[int]]) -> list[int]:
    return [t * h * w // MERGE**2 for t, h, w in grid]


def fed_mismatches(out: Path, probed: Rows) -> list[str]:
    """ok samples whose ``visual_tokens`` (per image, per video, per sample) or ``total_tokens`` differ from
    what ``batch()`` feeds, padded or packed; a sample Bridge skips or does not see is a mismatch too."""
    ok, media = manifest(out)
    wrong = [f"{k}: published but not seen by Bridge" for k in sorted(set(ok) - set(probed))]
    wrong += [f"{k}: encode_sample skips it" for k, r in sorted(probed.items()) if r["status"] != "ok"]
    for key, row in sorted(ok.items()):
        if probed.get(key, {}).get("status") != "ok":
            continue
        rows = media.get(key, [])
        per_image = [m["visual_tokens"] for m in rows if m["kind"] == "image"]
        per_video = [m["visual_tokens"] for m in rows if m["kind"] == "video"]
        for path in ("fed", "fed_packed"):
            fed = probed[key][path]
            got = (per_image, per_video, row["visual_tokens"], row["total_tokens"])
            want = (fed["per_image"], fed["per_video"], fed["pads"], fed["tokens"])
            if got != want:
                wrong.append(f"{key} {path}: manifest {got}, Bridge feeds {want}")
    return wrong


def check_mismatches(out: Path, probed: Rows) -> list[str]:
    """ok samples whose ``encode_check_visual_tokens`` (per image, per video, per sample) differ from what
    ``encode_sample``'s ``max_visual_tokens`` check computes."""
    ok, media = manifest(out)
    wrong = []
    for key, row in sorted(ok.items()):
        if key not in probed:
            continue
        rows = media.get(key, [])
        col = "encode_check_visual_tokens"
        got = [m[col] for m in rows if m["kind"] == "image"] + [m[col] for m in rows if m["kind"] == "video"]
        probe = probed[key]
        want = _tokens(probe["check_image_grid"]) + _tokens(probe["check_video_grid"])
        if got != want or row[col] != sum(want):
            wrong.append(f"{key}: manifest {got} ({row[col]}), encode_sample {want}")
    return wrong


def layout_mismatches(out: Path, probed: Rows, trainer: str) -> list[str]:
    """ok samples whose fed sequence, as the trainer's feed path lays it out for ``--seq-len`` truncation
    (:meth:`~vlmforge.tasks.tokens.FeedPath.layout`, on the published turns and the manifest's media rows),
    is not Bridge's: its length, the end of its last visual span (its ``<|vision_end|>``) and its first
    supervised token must sit where ``batch()`` puts them, padded and packed."""
    cfg = RunConfig(**TRAINERS[trainer], release=str(out), out=str(out))
    geometry, tokenizer = geometry_of(cfg.tokens, cfg.media), get_tokenizer(cfg.tokens)
    feed = FEED_PATHS[cfg.tokens.feed_path]
    ok, media = manifest(out)
    wrong = []
    for key, row in sorted(ok.items()):
        probe = probed.get(key)
        if probe is None or probe["status"] != "ok":
            continue
        turns = probe["conversation"]
        messages = json.loads(turns) if isinstance(turns, str | bytes) else turns
        rows = media.get(key, [])
        sizes = [(m["out_height"], m["out_width"]) for m in rows if m["kind"] == "image"]
        videos = [
            VideoSpec(m["sampled_frames"], m["out_height"], m["out_width"], m["frame_indices"], m["fps"])
            for m in rows
            if m["kind"] == "video"
        ]
        lay = feed.layout(TokenInput(messages, sizes, videos, geometry.preset, tokenizer, geometry.bounds))
        got = (lay.total, lay.last_visual_end, lay.first_supervised)
        if lay.total != row["total_tokens"]:
            wrong.append(f"{key}: layout of {lay.total} tokens, manifest total_tokens {row['total_tokens']}")
        for path in ("fed", "fed_packed"):
            fed = probe[path]
            want = (fed["tokens"], fed["last_visual_end"], fed["first_supervised"])
            if got != want:
                wrong.append(
                    f"{key} {path}: vlmforge (total, last visual end, first supervised) {got}, Bridge {want}"
                )
    return wrong


def cut_mismatches(out: Path, probed: Rows, trainer: str) -> tuple[list[str], int]:
    """(ok samples where ``--seq-len-mode truncate`` decides otherwise than Bridge's padded ``batch()``, how
    many cuts were compared). Bridge's ``seq_length`` is put at the sample's first supervised token and one
    token before it: at the first, Bridge feeds ``seq_length`` tokens and still trains that token as the last
    position's target (vlmforge must truncate, to that length); one before, no target is left and
    ``batch()`` raises (vlmforge must drop). The layout is Bridge's own (:func:`layout_mismatches` shows
    vlmforge's is the same); cuts through a visual span are left out (vlmforge drops those whatever Bridge
    does: the pads would no longer match the image's features)."""
    cfg = RunConfig(**TRAINERS[trainer], release=str(out), out=str(out))
    feed = FEED_PATHS[cfg.tokens.feed_path]
    ok, _ = manifest(out)
    wrong, compared = [], 0
    for key, row in sorted(ok.items()):
        probe = probed.get(key)
        if probe is None or probe["status"] != "ok":
            continue
        fed = probe["fed"]
        lay = SequenceLayout(fed["tokens"], fed["last_visual_end"], fed["first_supervised"])
        tokens = SampleTokens(row["text_tokens"], row["visual_tokens"], row["total_tokens"], [], [])
        for length, bridge in (probe.get("cut_at") or {}).items():
            n = int(length)
            if n < lay.last_visual_end:
                continue
            compared += 1
            fit = fit_seq_len(tokens, n, mode="truncate", layout=lay, label_reach=feed.label_reach)
            trains = "raised" not in bridge and bridge["length"] == n and bridge["targets"] > 0
            if (fit.status == "truncated") != trains or (trains and fit.total_tokens != n):
                wrong.append(f"{key} at {n}: vlmforge {fit.status} ({fit.reason}), Bridge {bridge}")
    return wrong, compared
