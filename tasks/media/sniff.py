"""Format detection from a file's first bytes, for the files the decoders refuse.

Pillow and libav say "cannot identify" for a web page and for a damaged JPEG alike; the manifests should not.
These signature checks turn a refusal into the right code: bytes with no known signature are
``not_an_image``/``not_a_video``, bytes that start like a real format are damaged (``decode_error``,
``video_decode_error``), and a header that claims zero pixels is ``too_small``. They never decide what is
decoded: only Pillow's and libav's own probing opens a file.
"""

from __future__ import annotations

__all__ = ["image_header_dims", "image_magic", "looks_like_video"]

_HEIF_BRANDS = (b"heic", b"heix", b"hevc", b"heim", b"heis", b"mif1", b"msf1")


def image_magic(data: bytes) -> str | None:
    """Name of a raster format recognised from its signature (used to refine 'cannot identify')."""
    head = data[:32]
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if head[:2] == b"BM":
        return "bmp"
    if head[4:8] == b"ftyp" and head[8:12] in _HEIF_BRANDS:
        return "heif"
    if head[4:8] == b"ftyp" and head[8:12] in (b"avif", b"avis"):
        return "avif"
    if head.startswith(b"\xff\x0a") or head.startswith(b"\x00\x00\x00\x0cJXL \r\n\x87\n"):
        return "jxl"
    return None


def image_header_dims(magic: str, data: bytes) -> tuple[int, int] | None:
    """(width, height) straight from the header of simple formats Pillow refuses to open (e.g. 0 px)."""
    if magic == "png" and len(data) >= 24 and data[12:16] == b"IHDR":
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if magic == "gif" and len(data) >= 10:
        return int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    if magic == "bmp" and len(data) >= 26 and int.from_bytes(data[14:18], "little") >= 40:
        return int.from_bytes(data[18:22], "little", signed=True), int.from_bytes(
            data[22:26], "little", signed=True
        )
    return None


def looks_like_video(data: bytes) -> bool:
    """Whether ``data`` starts like a video container (MP4/MOV, Matroska/WebM, AVI, Ogg, FLV, MPEG-PS/TS)."""
    head = data[:64]
    return (
        head[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip")
        or head.startswith(b"\x1a\x45\xdf\xa3")  # Matroska / WebM
        or (head[:4] == b"RIFF" and head[8:12] == b"AVI ")
        or head.startswith(b"OggS")
        or head.startswith(b"FLV")
        or head.startswith(b"\x00\x00\x01\xba")  # MPEG-PS
        or (len(data) > 376 and data[0] == 0x47 and data[188] == 0x47 and data[376] == 0x47)  # MPEG-TS
    )
