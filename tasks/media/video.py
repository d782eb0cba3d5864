"""Verify one video referenced by a training record: :func:`probe_video`.

Pure functions over bytes; no I/O, no orchestration imports (PyAV is imported on first use, so image-only
workers stay light). ``vlmforge.tasks.media.frames`` builds on :func:`probe_video` to write sampled frames as
images.

A video is opened with PyAV from memory and its metadata read without a full decode; a frame size over the
pixel limit is refused from the header, before any frame is decoded. Then the frames the caller's sampler
chooses are decoded sequentially (stopping after the last needed one): a video whose sampled frames do not
decode would fail at training time, so it is rejected here. Everything runs under a wall-clock deadline that
also bounds time spent inside libav (its reads go through :class:`DeadlineReader`). The steps are the
methods of :class:`_Probe`, in the order :meth:`_Probe.run` calls them.
"""

from __future__ import annotations

import contextlib
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import IO, Any, Literal

from ...schemas.reasons import media_codes
from .deadline import DeadlineReader, VideoTimeout
from .formats import ACCEPTED_VIDEO_CONTAINERS, IMAGE_CONTAINERS
from .rejects import Reject, media_reason, short_detail
from .sniff import looks_like_video

__all__ = ["VIDEO_REASONS", "SampledFrame", "VideoResult", "display_rotation", "probe_video"]

#: The reasons a video can be rejected with (the video codes of ``schemas/reasons.py``).
VIDEO_REASONS: frozenset[str] = frozenset(media_reason(code) for code in media_codes("video"))


@dataclass(frozen=True)
class VideoResult:
    """Outcome of :func:`probe_video`.

    ``width``/``height`` are as displayed: when ``rotation`` (clockwise degrees, 0/90/180/270) is 90 or 270
    they are the coded size swapped. Decoders that do not auto-rotate (PyAV/decord) deliver coded-size
    frames: swap back when ``rotation in (90, 270)`` if the trainer sees unrotated frames.
    """

    status: Literal["ok", "rejected"]
    reason: str | None
    detail: str | None
    codec: str | None
    width: int
    height: int
    rotation: int
    fps: float
    frames: int
    duration: float
    sampled_indices: tuple[int, ...]


@dataclass(frozen=True)
class SampledFrame:
    """A frame the sampler picked, handed to ``probe_video(on_frame=...)`` during the verification decode."""

    #: 0-based position among the sampled frames (in presentation order).
    position: int
    #: Number of sampled frames (distinct indices).
    count: int
    #: Index of the frame in presentation order.
    index: int
    #: Clockwise degrees (0/90/180/270) to turn the frame to display it.
    rotation: int
    #: The decoded ``av.VideoFrame`` at coded (unrotated) size; valid only during the call.
    frame: Any


@dataclass
class _Known:
    """The metadata read so far (a reject reports it; rotation is only ever reported by an accepted video)."""

    codec: str | None = None
    width: int = 0  # coded size
    height: int = 0
    fps: float = 0.0
    frames: int = 0
    duration: float = 0.0

    def rejected(self, reason: str, detail: str | None) -> VideoResult:
        return VideoResult(
            status="rejected",
            reason=media_reason(reason),
            detail=detail,
            codec=self.codec,
            width=self.width,
            height=self.height,
            rotation=0,
            fps=self.fps,
            frames=self.frames,
            duration=self.duration,
            sampled_indices=(),
        )


def _rotation_from_degrees(ccw_degrees: float) -> int:
    """Display-matrix angle (counter-clockwise, as FFmpeg/PyAV report it) -> clockwise 'rotate' tag."""
    return int(round(-ccw_degrees / 90.0)) * 90 % 360


def _rotation_from_tag(stream: Any) -> int:
    """The stream's clockwise ``rotate`` metadata tag, rounded to a quarter turn (0 when absent or bad)."""
    rotate_tag = stream.metadata.get("rotate") if stream.metadata else None
    if rotate_tag is None:
        return 0
    try:
        return int(round(float(rotate_tag) / 90.0)) * 90 % 360
    except ValueError:
        return 0


def display_rotation(source: IO[bytes] | bytes) -> int:
    """Clockwise degrees (0/90/180/270) to turn a video's frames to display them, as :func:`probe_video`
    reads it: the stream's ``rotate`` tag, else the first frame's display matrix. For decoders that hand
    over frames at coded size (PyAV, Energon's ``AVDecoder``, decord)."""
    import av

    src = io.BytesIO(bytes(source)) if isinstance(source, bytes | bytearray | memoryview) else source
    with av.open(src, mode="r", metadata_errors="ignore") as container:
        if not container.streams.video:
            return 0
        stream = container.streams.video[0]
        rotation = _rotation_from_tag(stream)
        if rotation:
            return rotation
        for frame in container.decode(stream):
            return _rotation_from_degrees(float(getattr(frame, "rotation", 0) or 0))
    return 0


def _is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` was raised because the deadline passed inside libav (it wraps our exception)."""
    return isinstance(exc.__cause__ or exc.__context__, VideoTimeout)


def probe_video(
    data: bytes,
    *,
    choose_frames: Callable[[int, float], list[int]],
    timeout_s: float = 60.0,
    max_frame_pixels: int = 100_000_000,
    on_frame: Callable[[SampledFrame], None] | None = None,
) -> VideoResult:
    """Read a video's metadata, then verify that the frames ``choose_frames(n_frames, fps)`` picks decode.

    Frame indices count decoded frames in presentation order. A coded frame size over ``max_frame_pixels``
    is a ``decompression_bomb`` reject, decided from the header before the sampled frames are decoded.
    ``on_frame`` is called with every sampled frame, in order, as it is decoded (an exception from it makes
    the video a ``video_decode_error`` reject). Never raises for bad input; bounded by ``timeout_s`` of
    wall-clock time, ``on_frame`` included.
    """
    if not data:
        return _Known().rejected("zero_size", "empty payload")
    deadline = time.monotonic() + timeout_s
    import av  # local import keeps image-only workers light

    probe = _Probe(av, data, deadline, max_frame_pixels)
    try:
        return probe.run(choose_frames, on_frame)
    except Reject as rej:
        return probe.known.rejected(rej.reason, rej.detail)
    except VideoTimeout as exc:
        return probe.known.rejected("video_timeout", short_detail(exc))
    except Exception as exc:
        code = "video_timeout" if _is_timeout(exc) else "video_decode_error"
        return probe.known.rejected(code, short_detail(exc))
    finally:
        probe.close()


class _Probe:
    """One video's verification: each step reads what it needs, records what it learns in ``known`` and
    raises :class:`Reject` (or times out) when the video fails."""

    def __init__(self, av: Any, data: bytes, deadline: float, max_frame_pixels: int) -> None:
        self.av = av
        self.data = data
        self.deadline = deadline
        self.max_frame_pixels = max_frame_pixels
        self.known = _Known()
        self.container: Any = None

    def run(
        self,
        choose_frames: Callable[[int, float], list[int]],
        on_frame: Callable[[SampledFrame], None] | None,
    ) -> VideoResult:
        self._open()
        stream = self._video_stream()
        self._read_header(stream)
        rotation = _rotation_from_tag(stream)
        stream = self._count_frames(stream)
        indices = self._choose(choose_frames)
        rotation = self._decode_sampled(stream, indices, rotation, on_frame)
        return self._accepted(indices, rotation)

    def close(self) -> None:
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.close()

    def _check_deadline(self, what: str) -> None:
        if time.monotonic() > self.deadline:
            raise VideoTimeout(what)

    def _reader(self) -> IO[bytes]:
        return DeadlineReader(self.data, self.deadline)  # type: ignore[return-value]

    def _open(self) -> None:
        """Open the container; bytes libav cannot open are ``not_a_video`` unless they start like a video."""
        try:
            self.container = self.av.open(self._reader(), mode="r", metadata_errors="ignore")
        except VideoTimeout:
            raise
        except Exception as exc:
            if _is_timeout(exc):
                raise VideoTimeout(str(exc)) from exc
            code = "video_decode_error" if looks_like_video(self.data) else "not_a_video"
            raise Reject(code, short_detail(exc)) from exc

    def _video_stream(self) -> Any:
        """The first video stream; still images and animated graphics libav opens are not videos here, and
        a container that is not one of :data:`ACCEPTED_VIDEO_CONTAINERS` (Flash, raw streams, ...) is
        ``unsupported_format``."""
        container = self.container
        fmt_name = container.format.name or ""
        if fmt_name in IMAGE_CONTAINERS or fmt_name.endswith("_pipe"):
            raise Reject("not_a_video", f"container format {fmt_name!r} is an image format")
        if not container.streams.video:
            raise Reject("no_video_stream", f"streams: {[s.type for s in container.streams]}")
        if fmt_name not in ACCEPTED_VIDEO_CONTAINERS:
            long_name = container.format.long_name or fmt_name
            raise Reject("unsupported_format", f"{fmt_name}: {long_name} is not an accepted video container")
        stream = container.streams.video[0]
        if stream.codec_context is None:
            raise Reject("video_decode_error", "no decoder for the video stream's codec")
        return stream

    def _read_header(self, stream: Any) -> None:
        """Codec, coded size, frame rate and duration; a frame size over the pixel limit is a bomb."""
        cc, known = stream.codec_context, self.known
        known.codec = cc.name
        known.width, known.height = int(cc.width or 0), int(cc.height or 0)
        rate: Fraction | None = stream.average_rate or stream.guessed_rate or stream.base_rate
        known.fps = float(rate) if rate else 0.0
        if stream.duration is not None and stream.time_base is not None:
            known.duration = float(stream.duration * stream.time_base)
        elif self.container.duration is not None:
            known.duration = self.container.duration / self.av.time_base
        width, height, limit = known.width, known.height, self.max_frame_pixels
        if width * height > limit:
            raise Reject(
                "decompression_bomb",
                f"header claims {width}x{height} = {width * height} px per frame > {limit}",
            )

    def _count_frames(self, stream: Any) -> Any:
        """The frame count (from the header, else by demuxing), completing fps and duration from it. Returns
        the stream to decode (a fresh one when packets were counted)."""
        known = self.known
        fps, duration = known.fps, known.duration
        n_frames = int(stream.frames or 0)
        if n_frames <= 0:
            n_frames = self._count_packets(stream)
            if n_frames <= 0 and duration > 0 and fps > 0:
                n_frames = int(round(duration * fps))
            stream = self._reopen()
        if n_frames <= 0:
            raise Reject("video_decode_error", "no frames in video stream")
        if fps <= 0 and duration > 0:
            fps = n_frames / duration
        if duration <= 0 and fps > 0:
            duration = n_frames / fps
        known.frames, known.fps, known.duration = n_frames, fps, duration
        return stream

    def _count_packets(self, stream: Any) -> int:
        """The container has no frame count (e.g. WebM): count packets by demuxing only (no decode)."""
        counted = 0
        for packet in self.container.demux(stream):
            self._check_deadline("timeout while counting packets")
            if packet.size > 0:
                counted += 1
        return counted

    def _reopen(self) -> Any:
        """Start decoding from a fresh demuxer rather than trusting a seek back to 0."""
        self.container.close()
        self.container = self.av.open(self._reader(), mode="r", metadata_errors="ignore")
        return self.container.streams.video[0]

    def _choose(self, choose_frames: Callable[[int, float], list[int]]) -> list[int]:
        """The sampler's frame indices, distinct and sorted; a failing or out-of-range sampler is a reject."""
        n_frames = self.known.frames
        try:
            indices = sorted({int(i) for i in choose_frames(n_frames, self.known.fps)})
        except Exception as exc:
            raise Reject("frame_selection", short_detail(exc)) from exc
        if indices and (indices[0] < 0 or indices[-1] >= n_frames):
            raise Reject("frame_selection", f"indices outside [0, {n_frames}): {indices[0]}..{indices[-1]}")
        return indices

    def _decode_sampled(
        self,
        stream: Any,
        indices: list[int],
        rotation: int,
        on_frame: Callable[[SampledFrame], None] | None,
    ) -> int:
        """Decode sequentially up to the last needed frame (always at least the first), handing each sampled
        frame to ``on_frame``. Returns the rotation (from the first frame's display matrix when untagged)."""
        last_needed = indices[-1] if indices else 0
        position = {index: pos for pos, index in enumerate(indices)}
        rotation_known = rotation != 0
        found = decoded = 0
        stream.thread_type = "AUTO"
        for frame in self.container.decode(stream):
            self._check_deadline(f"timeout after decoding {decoded} frames")
            if not rotation_known:
                rotation_known = True
                rotation = _rotation_from_degrees(float(getattr(frame, "rotation", 0) or 0))
            self._check_frame(frame, decoded)
            pos = position.get(decoded)
            if pos is not None:
                found += 1
                if on_frame is not None:
                    _hand_over(on_frame, SampledFrame(pos, len(indices), decoded, rotation, frame))
            decoded += 1
            if decoded > last_needed:
                break
        self._check_deadline(f"timeout after decoding {decoded} frames")
        self._check_all_found(indices, decoded, found)
        return rotation

    def _check_frame(self, frame: Any, decoded: int) -> None:
        if frame.width * frame.height > self.max_frame_pixels:
            raise Reject(
                "decompression_bomb",
                f"frame {decoded} is {frame.width}x{frame.height} px > {self.max_frame_pixels}",
            )
        if getattr(frame, "is_corrupt", False):
            # the decoder concealed an error in this frame (and frames referencing it inherit the damage)
            raise Reject("video_decode_error", f"frame {decoded} is corrupt (decoder concealed errors)")

    def _check_all_found(self, indices: list[int], decoded: int, found: int) -> None:
        if decoded == 0:
            raise Reject("video_decode_error", "no frame could be decoded")
        if found < len(indices):
            missing = min(i for i in indices if i >= decoded)
            raise Reject(
                "video_decode_error",
                f"only {decoded} of {self.known.frames} frames decodable; missing sampled index {missing}",
            )

    def _accepted(self, indices: list[int], rotation: int) -> VideoResult:
        known = self.known
        width, height = (known.height, known.width) if rotation in (90, 270) else (known.width, known.height)
        return VideoResult(
            status="ok",
            reason=None,
            detail=None,
            codec=known.codec,
            width=width,
            height=height,
            rotation=rotation,
            fps=known.fps,
            frames=known.frames,
            duration=known.duration,
            sampled_indices=tuple(indices),
        )


def _hand_over(on_frame: Callable[[SampledFrame], None], sampled: SampledFrame) -> None:
    """Call the caller's frame hook; its failure (but a timeout) is the video's ``video_decode_error``."""
    try:
        on_frame(sampled)
    except VideoTimeout:
        raise
    except Exception as exc:
        raise Reject("video_decode_error", short_detail(f"frame {sampled.index}: {exc}")) from exc
