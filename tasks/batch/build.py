"""The per-batch unit of work: parse a range of JSONL lines, verify and normalise their media, count tokens,
apply the knobs, and commit the batch's manifest parts.

A batch is the unit Prefect and Ray see. Its ``samples`` part is written last and carries the batch
fingerprint, so it doubles as the completion marker: a rerun skips batches whose part is current.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from typing import Any

from ...schemas.config import RunConfig
from ...schemas.manifests import MEDIA, SAMPLES, empty_row
from ...schemas.presets import ModelPreset, load_preset
from ...schemas.records import MediaRef, Record, SubsetEntry
from ..catalog.layouts import is_store_ref, read_store_ref
from ..fetch.acquire import (
    FetchContext,
    FetchOptions,
    FetchOutcome,
    FetchStats,
    FetchStream,
    find_recipe,
    outcome_columns,
    read_outcome,
)
from ..fetch.http import HttpOptions
from ..fetch.resolve import MediaResolver, MissingMedia
from ..manifests import (
    FINGERPRINT_KEY,
    STATS_KEY,
    OutputLayout,
    part_metadata,
    write_part,
    write_records_part,
)
from ..media.frames import frame_part_names, model_frame_size, sample_frames
from ..media.image import probe_video, process_image
from ..parse.records import parse_batch
from ..publish.shards import sanitize_key, split_for_key
from ..storage import ContentStore, sha256_bytes, url_to_fs
from ..tokens.count import (
    AspectRatioError,
    TextTokenizer,
    VideoSpec,
    count_sample_tokens,
    sample_video_frames,
    smart_resize,
)
from ..tokens.seq_len import apply_seq_len

VIDEO_EXTS = {"mp4", "mov", "webm", "mkv", "avi"}


@dataclass
class BatchStats:
    """Counts of one batch; ``+`` merges them (datatrove-style) into subset and run totals."""

    lines: int = 0
    ok: int = 0
    rejected: int = 0
    dropped: int = 0
    images: int = 0
    videos: int = 0
    media_rejected: int = 0
    text_tokens: int = 0
    visual_tokens: int = 0
    out_bytes: int = 0
    truncated: int = 0  # ok samples whose text was cut to fit --seq-len (--seq-len-mode truncate)
    fetched: int = 0  # media objects transferred from upstream by this batch
    fetch_failed: int = 0  # references whose fetch failed (transient ones are retried by the next run)
    fetch_bytes: int = 0
    seconds: float = 0.0
    batches: int = 0
    skipped_batches: int = 0
    # Per-stage wall time inside the batches run (not skipped) by this run, for the ``runs`` table.
    setup_seconds: float = 0.0  # model preset, tokenizer, reading the batch's JSONL bytes
    parse_seconds: float = 0.0
    media_seconds: float = 0.0  # resolve / fetch, verify, resize, store
    tokens_seconds: float = 0.0  # token counts and knobs
    write_seconds: float = 0.0  # manifest parts
    media_refs: int = 0  # distinct references processed
    media_bytes: int = 0  # upstream bytes of those references

    def __add__(self, other: BatchStats) -> BatchStats:
        return BatchStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BatchStats:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


_RUN_ONLY = (
    "setup_seconds",
    "parse_seconds",
    "media_seconds",
    "tokens_seconds",
    "write_seconds",
    "media_refs",
    "media_bytes",
)


@lru_cache(maxsize=4)
def _tokenizer(model: str, model_dir: str | None, path: str | None) -> TextTokenizer:
    return TextTokenizer.for_preset(load_preset(model, model_dir), path or model_dir)


def get_tokenizer(cfg: RunConfig) -> TextTokenizer:
    """The run's text tokenizer (cached per worker process: building one costs ~1 s)."""
    return _tokenizer(cfg.model, cfg.model_dir, cfg.tokenizer)


def preset_for(cfg: RunConfig) -> ModelPreset:
    return load_preset(cfg.model, cfg.model_dir)


def batch_fingerprint(entry: SubsetEntry, index: int, cfg: RunConfig) -> str:
    start, end = entry.batch_offsets[index], entry.batch_offsets[index + 1]
    payload = f"{entry.jsonl_sha256}:{start}:{end}:{cfg.batch_lines}:{cfg.media_fingerprint()}"
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def batch_is_current(
    layout: OutputLayout, entry: SubsetEntry, index: int, cfg: RunConfig
) -> BatchStats | None:
    """The committed stats of the batch when its samples part matches the current fingerprint."""
    meta = part_metadata(layout, layout.part("samples", entry.subset, index))
    if not meta or meta.get(FINGERPRINT_KEY) != batch_fingerprint(entry, index, cfg).encode():
        return None
    stats = BatchStats.from_dict(json.loads(meta.get(STATS_KEY, b"{}")))
    stats.skipped_batches = 1
    for name in _RUN_ONLY:  # work done by an earlier run is not this run's
        setattr(stats, name, 0 if isinstance(getattr(stats, name), int) else 0.0)
    return stats


@dataclass
class _MediaOutcome:
    row: dict[str, Any]
    ok: bool
    sample_reason: str | None
    out_hw: tuple[int, int] | None = None
    video: VideoSpec | None = None


class _MediaStage:
    """Resolves, verifies, normalises and stores the media of one batch (results cached per reference)."""

    def __init__(
        self,
        entry: SubsetEntry,
        cfg: RunConfig,
        preset: ModelPreset,
        store: ContentStore,
        host_share: int = 1,
    ) -> None:
        self.cfg, self.preset, self.store = cfg, preset, store
        self.host_share = host_share
        self.entry = entry
        self.resolver = MediaResolver(
            entry.path, entry.media_tars, cfg.media_roots, storage_options=entry.storage_options
        )
        self.max_pixels = cfg.max_pixels or preset.max_pixels
        self.min_pixels = cfg.min_pixels or preset.min_pixels
        self._cache: dict[tuple[str, str], _MediaOutcome] = {}
        # With a media recipe that names remote sources, the fetch stage answers every reference.
        recipe = find_recipe(entry.subset, cfg.catalogs)
        self.recipe = recipe if recipe is not None and recipe.remote else None
        self.fetched: dict[str, FetchOutcome] = {}
        self.fetch_stats = FetchStats()
        # A staged source layout (--format): its references ``store/<sha256>/<name>`` name store objects.
        self.staged = cfg.source_format != "nemotron"

    def prefetch(self, refs: list[str], wanted: list[MediaRef]) -> None:
        """Fetch the batch's references (each distinct upstream object once, into the store), and process
        the ``wanted`` media as their objects arrive: this thread decodes while the fetch threads wait on
        the network, so a batch costs about the longer of the two rather than their sum."""
        if self.recipe is None or not refs:
            return
        options = FetchOptions(
            concurrency=self.cfg.fetch_concurrency,
            http=HttpOptions(per_host=self.cfg.fetch_per_host),
            batch_timeout=self.cfg.fetch_batch_timeout,
            host_share=self.host_share,
        )
        context = FetchContext(self.entry.path, self.entry.media_tars, self.cfg.media_roots)
        by_ref: dict[str, list[MediaRef]] = {}
        for m in wanted:
            by_ref.setdefault(m.ref, []).append(m)
        stream = FetchStream(sorted(set(refs)), self.recipe, self.store, context=context, options=options)
        for outcome in stream:
            self.fetched[outcome.ref] = outcome
            for m in by_ref.get(outcome.ref, ()):
                self.process(m)
        result = stream.result()
        self.fetched = result.outcomes
        self.fetch_stats = result.stats

    @property
    def transient_failures(self) -> int:
        return sum(1 for o in self.fetched.values() if o.transient)

    def target_size(self, height: int, width: int) -> tuple[int, int]:
        try:
            return smart_resize(height, width, self.preset.factor, self.min_pixels, self.max_pixels)
        except AspectRatioError as exc:
            raise ValueError(str(exc)) from exc

    def choose_frames(self, n_frames: int, fps: float) -> list[int]:
        return sample_video_frames(
            self.preset, n_frames, fps, max_num_frames=self.cfg.max_num_frames, mode=self.cfg.frames_mode
        )

    def process(self, ref: MediaRef) -> _MediaOutcome:
        cached = self._cache.get((ref.kind, ref.ref))
        if cached is None:
            cached = self._process(ref)
            self._cache[(ref.kind, ref.ref)] = cached
        return cached

    def _process(self, ref: MediaRef) -> _MediaOutcome:
        row = empty_row(MEDIA) | {"ref": ref.ref, "kind": ref.kind}
        staged = read_store_ref(self.store, ref.ref) if self.staged else None
        fetched = self.fetched.get(ref.ref)
        if staged is not None:  # a media object a source layout staged into the store (tasks/sources.py)
            data = staged
            row["source"] = "store"
        elif self.staged and is_store_ref(ref.ref):
            row |= {
                "status": "rejected",
                "reason": "missing_media: not in the content store (rerun to restage)",
            }
            return _MediaOutcome(row, False, f"missing_media: {ref.ref}")
        elif fetched is not None:
            row |= outcome_columns(fetched) | {"source": fetched.source}
            if not fetched.ok:
                row |= {"status": "rejected", "reason": f"fetch_failed: {fetched.reason()}"}
                return _MediaOutcome(row, False, f"fetch_failed: {ref.ref}: {fetched.status}")
            data = read_outcome(fetched, self.store)
        else:
            try:
                resolved = self.resolver.resolve(ref.ref)
            except MissingMedia as exc:
                row |= {"status": "rejected", "reason": f"missing_media: {exc}"}
                return _MediaOutcome(row, False, f"missing_media: {ref.ref}")
            data = resolved.data
            row["source"] = resolved.source
        # a stored object's name is its sha256, hashed by the fetch as it arrived: not hashed again here
        known = (
            fetched.sha256 if staged is None and fetched is not None and fetched.location is None else None
        )
        row |= {"sha256": known or sha256_bytes(data), "bytes": len(data)}
        if ref.kind == "image":
            return self._image(row, ref, data)
        return self._video(row, ref, data)

    def _image(self, row: dict[str, Any], ref: MediaRef, data: bytes) -> _MediaOutcome:
        res = process_image(
            data,
            target_size=self.target_size,
            max_pixels=self.max_pixels,
            max_image_pixels=self.cfg.max_image_pixels,
            image_format=self.cfg.image_format,
            min_pixels=self.min_pixels,
            min_side=self.cfg.min_image_side,
        )
        row |= {"format": res.format, "width": res.width, "height": res.height, "notes": ",".join(res.notes)}
        if res.status != "ok" or res.out_bytes is None:
            detail = f" ({res.detail})" if res.detail else ""
            row |= {"status": "rejected", "reason": f"{res.reason}{detail}"}
            return _MediaOutcome(row, False, f"media_error: {ref.ref}: {res.reason}")
        out_sha = row["sha256"] if res.kept_original else sha256_bytes(res.out_bytes)
        self.store.put(res.out_bytes, out_sha)
        row |= {
            "status": "ok",
            "out_sha256": out_sha,
            "out_bytes": len(res.out_bytes),
            "out_ext": res.out_ext,
            "out_width": res.out_width,
            "out_height": res.out_height,
            "kept_original": res.kept_original,
        }
        return _MediaOutcome(row, True, None, out_hw=(res.out_height, res.out_width))

    def _video(self, row: dict[str, Any], ref: MediaRef, data: bytes) -> _MediaOutcome:
        if self.cfg.video_mode == "frames":
            return self._video_frames(row, ref, data)
        res = probe_video(data, choose_frames=self.choose_frames, timeout_s=self.cfg.video_timeout_s)
        row |= {
            "format": res.codec,
            "width": res.width,
            "height": res.height,
            "frames": res.frames,
            "fps": res.fps,
        }
        if res.status != "ok":
            detail = f" ({res.detail})" if res.detail else ""
            row |= {"status": "rejected", "reason": f"{res.reason}{detail}"}
            return _MediaOutcome(row, False, f"media_error: {ref.ref}: {res.reason}")
        ext = ref.ref.rsplit(".", 1)[-1].lower() if "." in ref.ref else "mp4"
        # The video is kept as is (decoded at training time); only its sampled frames were verified.
        self.store.put(data, row["sha256"])
        row |= {
            "status": "ok",
            "out_sha256": row["sha256"],
            "out_bytes": len(data),
            "out_ext": ext if ext in VIDEO_EXTS else "mp4",
            "out_width": res.width,
            "out_height": res.height,
            "kept_original": True,
            "sampled_frames": len(res.sampled_indices),
            "frame_indices": list(res.sampled_indices),
        }
        # Decoders hand training the frames as stored (rotation is metadata), so tokens use the stored size.
        stored_h, stored_w = (res.width, res.height) if res.rotation in (90, 270) else (res.height, res.width)
        spec = VideoSpec(
            n_sampled_frames=len(res.sampled_indices),
            height=stored_h,
            width=stored_w,
            indices=list(res.sampled_indices),
            video_fps=res.fps,
        )
        return _MediaOutcome(row, True, None, video=spec)

    def _video_frames(self, row: dict[str, Any], ref: MediaRef, data: bytes) -> _MediaOutcome:
        """``--video-mode frames``: the sampled frames, upright, at the model's frame size, stored as images;
        training reads them as they are (no video decode, no resize)."""
        fmt = "jpeg" if self.cfg.image_format == "keep" else self.cfg.image_format
        vf = sample_frames(
            data,
            choose_frames=self.choose_frames,
            frame_size=model_frame_size(self.preset, video_max_pixels=self.cfg.video_max_pixels),
            image_format=fmt,
            timeout_s=self.cfg.video_timeout_s,
        )
        res = vf.video
        row |= {"format": res.codec, "width": res.width, "height": res.height, "frames": res.frames}
        row["fps"] = res.fps
        if vf.status != "ok" or vf.ext is None:
            detail = f" ({res.detail})" if res.detail else ""
            row |= {"status": "rejected", "reason": f"{res.reason}{detail}"}
            return _MediaOutcome(row, False, f"media_error: {ref.ref}: {res.reason}")
        shas = [self.store.put(frame) for frame in vf.frames]
        # The frame list is itself a stored object, so out_sha256 names one thing like every other row.
        listing = json.dumps(shas, separators=(",", ":")).encode()
        row |= {
            "status": "ok",
            "out_sha256": self.store.put(listing),
            "out_bytes": sum(len(f) for f in vf.frames),
            "out_ext": vf.ext,
            "out_width": vf.width,
            "out_height": vf.height,
            "kept_original": False,
            "sampled_frames": len(vf.frames),
            "frame_indices": list(res.sampled_indices),
            "frame_sha256": shas,
            "frame_bytes": [len(f) for f in vf.frames],
        }
        spec = VideoSpec(
            n_sampled_frames=len(vf.frames),
            height=vf.height,
            width=vf.width,
            indices=list(res.sampled_indices),
            video_fps=res.fps,
        )
        return _MediaOutcome(row, True, None, video=spec)


@dataclass(frozen=True)
class _Counts:
    """A sample's token counts as written (after --seq-len-mode truncate)."""

    text_tokens: int
    visual_tokens: int
    total_tokens: int
    truncated_tokens: int = 0


def _n_images(record: Record) -> int:
    return sum(1 for m in record.media if m.kind == "image")


def _knob_drop(cfg: RunConfig, n_images: int) -> str | None:
    if cfg.max_num_images is not None and n_images > cfg.max_num_images:
        return f"max_num_images: {n_images} images > {cfg.max_num_images}"
    return None


def _shard_record(
    record: Record, subset: str, key: str, media_rows: list[dict[str, Any]], tokens: Any
) -> str:
    """The ``json`` part of the sample: the normalised record, media parts linked to their tar part names,
    token counts and provenance, so a training-side filter needs no second lookup."""
    # Media indices were assigned in this same traversal order by the parser.
    rows = iter(sorted(media_rows, key=lambda r: r["index"]))
    messages = []
    for msg in record.messages:
        content = []
        for part in msg["content"]:
            if part["type"] in ("image", "video"):
                r = next(rows)
                names = (
                    {"frames": frame_part_names(r["index"], len(r["frame_sha256"]), r["out_ext"])}
                    if r.get("frame_sha256")
                    else {"part": f"{r['index']}.{r['out_ext']}"}
                )
                part = {
                    "type": part["type"],
                    "index": r["index"],
                    **names,
                    "ref": part["ref"],
                    "width": r["out_width"],
                    "height": r["out_height"],
                    "sha256": r["sha256"],
                    # The frames the token count assumed: the cooker decodes exactly these.
                    **({"frame_indices": r["frame_indices"]} if r.get("frame_indices") else {}),
                    **({"metadata": part["metadata"]} if "metadata" in part else {}),
                }
            content.append(part)
        messages.append({"role": msg["role"], "content": content})
    doc = {
        "id": record.sample_id,
        "messages": messages,
        "vlmforge": {
            "subset": subset,
            "line": record.line,
            "key": key,
            "text_tokens": tokens.text_tokens,
            "visual_tokens": tokens.visual_tokens,
            "total_tokens": tokens.total_tokens,
            "truncated_tokens": tokens.truncated_tokens,
        },
    }
    return json.dumps(doc, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def build_batch(
    entry: SubsetEntry, index: int, cfg: RunConfig, *, force: bool = False, host_share: int = 1
) -> BatchStats:
    """Process batch ``index`` of ``entry`` and commit its manifest parts; skip it when already current.
    ``host_share``: the batches fetching at once across the run, which split the per-host limits."""
    layout = OutputLayout(cfg.out)
    if not force:
        done = batch_is_current(layout, entry, index, cfg)
        if done is not None:
            return done
    t0 = time.perf_counter()
    preset = preset_for(cfg)
    tokenizer = get_tokenizer(cfg)
    media = _MediaStage(entry, cfg, preset, ContentStore(cfg.store_url), host_share)
    fs, path = url_to_fs(entry.jsonl, **entry.storage_options)
    start, end = entry.batch_offsets[index], entry.batch_offsets[index + 1]
    with fs.open(path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    first_line = index * cfg.batch_lines + 1
    last_line = first_line + cfg.batch_lines - 1
    t_parse = time.perf_counter()
    items = parse_batch(
        data,
        first_line,
        allowed_schemes=cfg.allowed_url_schemes,
        duplicates=entry.duplicates_in(first_line, last_line),
        conflicts=entry.conflicts_in(first_line, last_line),
        subset=entry.subset,
    )
    t_media = time.perf_counter()
    parsed = [it for it in items if isinstance(it, Record)]
    media.prefetch(
        [m.ref for it in parsed for m in it.media],
        [m for it in parsed if not _knob_drop(cfg, _n_images(it)) for m in it.media],
    )
    media_s = time.perf_counter() - t_media
    tokens_s = 0.0

    sample_rows: list[dict[str, Any]] = []
    media_rows: list[dict[str, Any]] = []
    records: list[tuple[int, str]] = []
    keys_seen: dict[str, int] = {}
    stats = BatchStats(batches=1, setup_seconds=t_parse - t0, parse_seconds=t_media - t_parse)
    for item in items:
        stats.lines += 1
        row = empty_row(SAMPLES) | {"subset": entry.subset, "line": item.line, "n_images": 0, "n_videos": 0}
        if not isinstance(item, Record):
            row |= {"status": "rejected", "reason": item.reason, "sample_id": item.sample_id}
            sample_rows.append(row)
            stats.rejected += 1
            continue
        n_images = _n_images(item)
        n_videos = len(item.media) - n_images
        row |= {
            "sample_id": item.sample_id,
            "n_images": n_images,
            "n_videos": n_videos,
            "id_conflict_of": item.id_conflict_of,
        }
        drop = _knob_drop(cfg, n_images)
        if drop:
            row |= {"status": "dropped", "reason": drop}
            sample_rows.append(row)
            stats.dropped += 1
            continue
        t_item = time.perf_counter()
        outcomes = [media.process(m) for m in item.media]
        t_tokens = time.perf_counter()
        media_s += t_tokens - t_item
        this_media = []
        for m, o in zip(item.media, outcomes, strict=True):
            mrow = dict(o.row) | {"subset": entry.subset, "sample_id": item.sample_id, "line": item.line}
            mrow["index"] = m.index
            this_media.append(mrow)
        media_rows.extend(this_media)
        failed = next((o for o in outcomes if not o.ok), None)
        if failed is not None:
            row |= {"status": "rejected", "reason": failed.sample_reason}
            sample_rows.append(row)
            stats.rejected += 1
            stats.media_rejected += sum(1 for o in outcomes if not o.ok)
            continue
        t_tokens = time.perf_counter()
        image_sizes = [o.out_hw for o in outcomes if o.out_hw is not None]
        videos = [o.video for o in outcomes if o.video is not None]
        try:
            tokens = count_sample_tokens(
                item.messages, preset, tokenizer, image_sizes, videos, max_pixels=cfg.max_pixels
            )
        except ValueError as exc:  # e.g. a video too short for the model's temporal patch
            row |= {"status": "rejected", "reason": f"token_count_error: {exc}"}
            sample_rows.append(row)
            stats.rejected += 1
            continue
        per_item = iter([*tokens.per_image])
        per_video = iter([*tokens.per_video])
        for mrow in this_media:
            mrow["visual_tokens"] = next(per_item) if mrow["kind"] == "image" else next(per_video)
        row |= {
            "text_tokens": tokens.text_tokens,
            "visual_tokens": tokens.visual_tokens,
            "total_tokens": tokens.total_tokens,
        }
        if cfg.max_visual_tokens is not None and tokens.visual_tokens > cfg.max_visual_tokens:
            row |= {
                "status": "dropped",
                "reason": f"max_visual_tokens: {tokens.visual_tokens} > {cfg.max_visual_tokens}",
            }
            sample_rows.append(row)
            stats.dropped += 1
            continue
        fit = apply_seq_len(
            item.messages,
            preset,
            tokenizer,
            image_sizes,
            videos,
            tokens,
            seq_len=cfg.seq_len,
            mode=cfg.seq_len_mode,
            max_pixels=cfg.max_pixels,
        )
        if fit.status == "dropped":
            row |= {"status": "dropped", "reason": fit.reason}
            sample_rows.append(row)
            stats.dropped += 1
            continue
        tokens_s += time.perf_counter() - t_tokens
        counts = _Counts(fit.text_tokens, tokens.visual_tokens, fit.total_tokens, fit.truncated_tokens)
        if fit.truncated_tokens:
            row |= {
                "text_tokens": counts.text_tokens,
                "total_tokens": counts.total_tokens,
                "truncated_tokens": counts.truncated_tokens,
            }
            stats.truncated += 1
        key = item.key or sanitize_key(entry.subset, item.sample_id)
        if key in keys_seen:
            row |= {
                "status": "rejected",
                "reason": f"duplicate_key: {key} already used by line {keys_seen[key]}",
            }
            sample_rows.append(row)
            stats.rejected += 1
            continue
        keys_seen[key] = item.line
        row |= {"status": "ok", "key": key, "split": split_for_key(key, cfg.val_fraction)}
        sample_rows.append(row)
        records.append((item.line, _shard_record(item, entry.subset, key, this_media, counts)))
        stats.ok += 1
        stats.images += n_images
        stats.videos += n_videos
        stats.text_tokens += counts.text_tokens
        stats.visual_tokens += counts.visual_tokens
        stats.out_bytes += sum(m["out_bytes"] or 0 for m in this_media)
    stats.fetched = media.fetch_stats.fetched
    stats.fetch_failed = media.fetch_stats.failed
    stats.fetch_bytes = media.fetch_stats.bytes_fetched
    stats.media_seconds, stats.tokens_seconds = media_s, tokens_s
    stats.media_refs = len(media._cache)
    stats.media_bytes = sum(o.row.get("bytes") or 0 for o in media._cache.values())
    t_write = time.perf_counter()

    fp = batch_fingerprint(entry, index, cfg)
    if media.transient_failures:
        # Outcomes of flaky hosts are recorded, but the batch is not marked current: the next run retries it.
        fp += ":retry"
    write_part(layout, "media", entry.subset, index, media_rows, fingerprint=fp)
    write_records_part(layout, entry.subset, index, records, fp)
    stats.write_seconds = time.perf_counter() - t_write
    stats.seconds = time.perf_counter() - t0
    # Written last: its fingerprint marks the batch complete.
    write_part(layout, "samples", entry.subset, index, sample_rows, fingerprint=fp, stats=asdict(stats))
    return stats
