"""Every reject and drop code the pipeline records: the one list, with where it arises and what it means.

A reason in a manifest is ``code: detail`` (or the bare code): the code is a key of :data:`REASONS`, the
detail says what happened to this row. Build every reason with :func:`reason`, so an unregistered code fails
at once instead of reaching a manifest; README's reason tables are checked against this registry by the
tests (``tests/test_reasons.py``).

Levels say which column a code lands in:

- ``sample``: ``samples.reason`` (the line is rejected or dropped);
- ``media``: ``media.reason`` of one reference, and the cause inside a sample's
  ``media_error: <ref>: <cause>``; each such entry names the media kinds it rejects (``media_kinds``), from
  which the media stage's image and video lists are derived (:func:`media_codes`);
- ``fetch``: ``media.fetch_status``, the class of an upstream failure (the sample says ``fetch_failed``).

Adding a reason is one entry here plus the code that emits it (and its README row, which the test asks for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Stage = Literal["parse", "fetch", "media", "tokens", "knob", "batch"]
Status = Literal["rejected", "dropped"]
Level = Literal["sample", "media", "fetch"]
MediaKind = Literal["image", "video"]
IMAGE: Final[tuple[MediaKind, ...]] = ("image",)
VIDEO: Final[tuple[MediaKind, ...]] = ("video",)
BOTH: Final[tuple[MediaKind, ...]] = ("image", "video")


@dataclass(frozen=True)
class Reason:
    code: str
    stage: Stage
    status: Status
    level: Level
    meaning: str
    #: media level: the kinds of media item the code rejects (the media stage's lists derive from it)
    media_kinds: tuple[MediaKind, ...] = ()

    def __post_init__(self) -> None:
        if (self.level == "media") != bool(self.media_kinds):
            raise ValueError(
                f"reason {self.code!r}: media kinds are given for, and only for, media-level codes"
            )


def _entries(stage: Stage, status: Status, level: Level, meanings: dict[str, str]) -> dict[str, Reason]:
    return {code: Reason(code, stage, status, level, text) for code, text in meanings.items()}


def _media_entries(meanings: dict[str, tuple[tuple[MediaKind, ...], str]]) -> dict[str, Reason]:
    """Media-level rejects, each with the kinds of media item it applies to."""
    return {
        code: Reason(code, "media", "rejected", "media", text, kinds)
        for code, (kinds, text) in meanings.items()
    }


def media_codes(kind: MediaKind) -> tuple[str, ...]:
    """The media-level codes an item of ``kind`` can be rejected with."""
    return tuple(r.code for r in REASONS.values() if kind in r.media_kinds)


REASONS: Final[dict[str, Reason]] = {
    # ------------------------------------------------------------------ a line of the JSONL (parse)
    **_entries(
        "parse",
        "rejected",
        "sample",
        {
            "empty_line": "the line is blank",
            "invalid_utf8": "the line is not valid UTF-8 (the byte offset is given)",
            "invalid_json": "the line is not one JSON value (the parser's message and column)",
            "line_too_long": "the line is longer than the cap (16 MiB); it is never decoded",
            "invalid_record": "a field is missing, has the wrong type or nests too deep (field named)",
            "unsupported_part": "a content part of a type the pipeline does not take (audio, ...)",
            "unsafe_ref": "an absolute reference, one climbing out with `..`, or a URL not allowed",
            "placeholder_mismatch": "the <image>/<video> placeholders differ in number from the media",
            "duplicate_row": "identical to an earlier line of the subset",
            "no_assistant_turn": "the conversation has no assistant turn: nothing for a trainer to learn",
            "empty_turn": "a turn with neither text nor media (empty, blank or null content)",
            "unknown_role": "a turn's role is not system, user or assistant (the role is named)",
            "unreadable_source": "a `--format` source file that cannot be read (a `.parquet` that is not "
            "Parquet, ...): one line stands for the file, naming it and why",
        },
    ),
    # ------------------------------------------------------------------ a sample's media (batch)
    **_entries(
        "batch",
        "rejected",
        "sample",
        {
            "missing_media": "a reference found in no media root, release folder, release tar or store",
            "media_error": "a referenced image or video failed verification: `<ref>: <cause>`",
            "fetch_failed": "a referenced object could not be fetched upstream: `<class>: <detail>`",
            "duplicate_key": "two ids that sanitise to the same Energon sample key",
            "token_count_error": "the tokens could not be counted (the tokenizer's or template's error)",
        },
    ),
    # ------------------------------------------------------------------ knobs (Megatron-Bridge names)
    **_entries(
        "knob",
        "dropped",
        "sample",
        {
            "max_media_per_sample": "more image and video references than --max-media-per-sample (256 by "
            "default, repeats counted)",
            "max_num_images": "more images than --max-num-images",
            "max_visual_tokens": "more visual tokens than --max-visual-tokens",
            "seq_len": "more tokens than --seq-len (or nothing left to supervise after a truncation)",
        },
    ),
    # ------------------------------------------------------------------ one image or video (media)
    **_media_entries(
        {
            "zero_size": (BOTH, "the file is empty"),
            "not_an_image": (
                IMAGE,
                "the bytes are not an image format the pipeline reads (HTML page, text, ...)",
            ),
            "unsupported_format": (
                BOTH,
                "an image or video format vlmforge does not accept (XPM, FITS, SWF, HEIF without its plugin, "
                "...)",
            ),
            "truncated": (
                IMAGE,
                "the file ends before its data does (a body cut short, a release tar member whose header "
                "claims more bytes than the tar holds)",
            ),
            "decode_error": (IMAGE, "the decoder failed on the file's data"),
            "decompression_bomb": (BOTH, "the header claims more pixels than --max-image-pixels"),
            "decode_budget": (
                IMAGE,
                "decoding this format at this size would take more memory than one image may (priced per "
                "format from the header; README: Reliability)",
            ),
            "too_small": (IMAGE, "a displayed side is below --min-image-side (or the header claims zero)"),
            "aspect_ratio": (IMAGE, "the model's processor refuses the aspect ratio (over 200:1 for Qwen)"),
            "not_a_video": (VIDEO, "the bytes are not a video container"),
            "no_video_stream": (VIDEO, "the container holds no video stream"),
            "video_decode_error": (
                VIDEO,
                "the video stream does not decode (no decoder, no frames, corrupt data)",
            ),
            "video_timeout": (VIDEO, "decoding took longer than the video time limit"),
            "frame_selection": (VIDEO, "the model's frame sampling cannot pick frames from this video"),
        },
    ),
    # ------------------------------------------------------------------ one upstream object (fetch)
    # ``media.fetch_status`` classes (tasks/http/failures.py). ``truncated`` is shared with the media level
    # above (a body cut short upstream, or a file ending early): one code, one entry.
    **_entries(
        "fetch",
        "rejected",
        "fetch",
        {
            "dns_error": "the host name does not resolve (retried by a later run)",
            "connect_error": "no connection, TLS failure or connection reset (retried by a later run)",
            "timeout": "no answer in time, or the batch deadline came first (retried by a later run)",
            "http_404": "the server or object store says there is no such object",
            "http_4xx": "any other 4xx answer (403, 410...): the status code is in the detail",
            "http_429": "too many requests, Retry-After honoured (retried by a later run)",
            "http_5xx": "a server error (retried by a later run)",
            "too_large": "the object or archive member exceeds the size cap",
            "hash_mismatch": "the bytes differ from the published or expected sha256 / CRC-32",
            "html_page": "an HTML/XML page was served where media was expected",
            "circuit_open": "the host failed too often and was not tried (retried by a later run)",
            "not_found": "no such file in a local folder, the release or its media tars",
            "not_in_archive": "the member is not in the archive (or in none of its shards)",
            "unsafe_member": "a link, absolute or escaping member, or a release symlink leaving the subset",
            "bad_archive": "not a readable zip/tar, unsupported compression or encryption",
            "internal_address": "the url is on a loopback, private, link-local or metadata address its "
            "source does not declare (`allow_private: true`): nothing is sent",
            "root_not_allowed": "a `local` root outside the release and the --media-root folders: nothing is "
            "read",
            "not_media": "a JSON, text or other non-media body was served: the Content-Type is named, the "
            "bytes are neither stored nor quoted",
            "no_source": "no recipe source applies to the reference (or the reference is unsafe)",
            "source_error": "anything else a source raised, with its message",
            "match_budget": "a recipe source's `match` regex was not run to its end on the reference: over "
            "4,096 characters, or past its 0.25 s budget (a pattern that backtracks)",
            "opted_out": "the server's `X-Robots-Tag` forbids this use (noai, noimageai, noindex, "
            "noimageindex, for every crawler or for our User-Agent's token): the body is neither read nor "
            "stored (--ignore-robots-tag: your own servers only)",
        },
    ),
}


def reason(code: str, detail: str | None = None) -> str:
    """``code: detail`` (``code`` alone without a detail) for a registered code; ``KeyError`` otherwise."""
    if code not in REASONS:
        raise KeyError(f"unregistered reason code {code!r}: add it to schemas/reasons.py")
    return f"{code}: {detail}" if detail else code


def code_of(text: str) -> str:
    """The code of a reason string (what stands before the first colon)."""
    return text.split(":", 1)[0].strip()


def markdown_table() -> str:
    """README's reason table, generated from :data:`REASONS` (``python -m vlmforge.schemas.reasons``)."""
    rows = ["| code | stage | status | recorded in | meaning |", "|---|---|---|---|---|"]
    column = {"sample": "`samples.reason`", "media": "`media.reason`", "fetch": "`media.fetch_status`"}
    for r in REASONS.values():
        rows.append(f"| `{r.code}` | {r.stage} | {r.status} | {column[r.level]} | {r.meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
