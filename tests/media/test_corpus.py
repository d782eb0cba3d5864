"""A corpus test on real third-party media (``corpus_fixture``): every file of Pillow's own test images, real
videos from two video libraries' sdists and the shared real-media folder, one JSONL line each, through the
pipeline's own stage functions as a run calls them, minus Prefect and Ray: the batch hub (parse -> fetch ->
media -> tokens -> manifests), publishing (Energon shards in Bridge's format) and ``vlmforge validate``'s
check of the published subset.

Each file's verdict from the library that reads it is the reference:

- an image decodes when ``Image.open(f).load()`` succeeds (Pillow, the trainer's reader); a video when PyAV
  decodes at least one frame of its first video stream;
- nothing the library cannot decode is ok; a file the library decodes and vlmforge refuses has a reason that
  says why (a policy: format not accepted, with Pillow's format name; bomb; size; aspect ratio), never
  "broken"; the few known exceptions are listed in ``ALLOWED`` with why;
- every published image is Pillow's upright image (``ImageOps.exif_transpose``): a kept original decodes to
  exactly its pixels; a re-encoded one matches it, resized the same way, better than any other of the 8
  orientations and within a tolerance for lossy encoding;
- validate, reading the shards back, agrees with the run.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import re
import shutil
import tarfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from corpus_fixture import PILLOW, VIDEOS, Unavailable, fetch_sdist, files_under, real_media_dir
from PIL import Image, ImageCms, ImageOps

from vlmforge.schemas.config import RunConfig
from vlmforge.schemas.records import SubsetEntry
from vlmforge.schemas.stage_options import BatchWork, GateWork
from vlmforge.tasks.batch.batch_pipeline import build_batch
from vlmforge.tasks.gate.check import gate_subset
from vlmforge.tasks.gate.results import GateResult
from vlmforge.tasks.manifests import OutputLayout, read_table
from vlmforge.tasks.publish.publish import publish_subset
from vlmforge.tasks.validate import ValidationReport, validate_subset

pytestmark = [
    pytest.mark.corpus,
    # ~1,100 third-party files through the media stage and `vlmforge validate`, fetched from PyPI at test
    # time: an integration test, not the inner loop's (make check)
    pytest.mark.slow,
    # the corpus is made of odd files: Pillow warns about many of them, on purpose
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning"),
]

SUBSET = "corpus"
VIDEO_EXTS = {".mp4", ".mov", ".avi", ".mkv", ".webm", ".flv", ".ts", ".mpg", ".ogv", ".wmv", ".m4v"}
# A library-decodable file may be refused for these reasons (a policy, not a verdict on the data).
POLICY_CODES = {"unsupported_format", "decompression_bomb", "too_small", "aspect_ratio"}

# Files whose vlmforge verdict may differ from the library's, each with why (keyed by corpus name). These are
# known vlmforge bugs: remove an entry when it is fixed (the test fails on a stale entry). None today.
ALLOWED: dict[str, str] = {}


@dataclass(frozen=True)
class Item:
    name: str  # "<source>/<relative path>": the reference in the release
    path: Path
    kind: str  # image | video


def _corpus() -> tuple[list[Item], list[str]]:
    items: list[Item] = []
    missing: list[str] = []
    sources: list[tuple[str, Callable[[], Path]]] = [("pillow", lambda: fetch_sdist(PILLOW))]
    sources += [(s.project, lambda s=s: fetch_sdist(s)) for s in VIDEOS]  # type: ignore[misc]
    for label, get in sources:
        try:
            folder = get()
        except Unavailable as exc:
            missing.append(f"{label}: {exc}")
            continue
        items += [_item(label, folder, p) for p in files_under(folder)]
    shared = real_media_dir()
    if shared.is_dir():
        items += [_item("shared", shared, p) for p in files_under(shared) if p.suffix != ".md"]
    else:
        missing.append(f"shared real-media: not found at {shared}")
    return items, missing


def _item(label: str, folder: Path, path: Path) -> Item:
    kind = "video" if path.suffix.lower() in VIDEO_EXTS else "image"
    return Item(f"{label}/{path.relative_to(folder).as_posix()}", path, kind)


# --------------------------------------------------------------------------------------------------------
# the libraries' verdicts
# --------------------------------------------------------------------------------------------------------


def pillow_decodes(path: Path) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as im:
                im.load()
        return True
    except Exception:
        return False


def pyav_decodes(path: Path) -> bool:
    import av

    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            for _ in container.decode(stream):
                return True
    except Exception:
        return False
    return False


# --------------------------------------------------------------------------------------------------------
# the pipeline over the corpus
# --------------------------------------------------------------------------------------------------------


def _line(i: int, item: Item) -> str:
    part = {"type": item.kind, item.kind: f"media/{item.name}"}
    return json.dumps(
        {
            "id": f"c{i}",
            "messages": [
                {"role": "user", "content": [part, {"type": "text", "text": "What is shown?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Something."}]},
            ],
        }
    )


def _release(root: Path, items: list[Item]) -> SubsetEntry:
    folder = root / SUBSET
    for item in items:
        dest = folder / "media" / item.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(item.path, dest)  # a copy: the release refuses symlinks leaving the subset
    data = "".join(_line(i, item) + "\n" for i, item in enumerate(items)).encode()
    jsonl = folder / f"{SUBSET}.jsonl"
    jsonl.write_bytes(data)
    return SubsetEntry(
        subset=SUBSET,
        path=str(folder),
        jsonl=str(jsonl),
        readme_sha256=None,
        jsonl_sha256=hashlib.sha256(data).hexdigest(),
        jsonl_bytes=len(data),
        rows=len(items),
        license="MIT",
        license_text=None,
        batch_offsets=(0, len(data)),
        release=str(root),
    )


@dataclass(frozen=True)
class Outcome:
    item: Item
    decodes: bool  # the library's verdict
    media: dict[str, Any]  # vlmforge's media row
    sample: dict[str, Any]
    published: list[bytes] | None  # the images of the sample as published (None: not published)


@dataclass(frozen=True)
class Corpus:
    outcomes: list[Outcome]
    validation: ValidationReport  # ``vlmforge validate`` of the published subset
    gate: GateResult  # the quality gate over the corpus's manifests


def _published_images(dataset: Path) -> dict[str, list[bytes]]:
    """Key -> the ``jpgs`` list of each sample in the dataset's tars (Bridge's ChatML format). The pickles
    are the ones this test's run just wrote."""
    images: dict[str, list[bytes]] = {}
    for shard in sorted(dataset.glob("*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar:
                if member.isfile() and member.name.endswith(".jpgs"):
                    fh = tar.extractfile(member)
                    assert fh is not None
                    images[member.name.rsplit(".", 1)[0]] = pickle.loads(fh.read())  # noqa: S301
    return images


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    items, missing = _corpus()
    if not any(i.name.startswith("pillow/") for i in items):
        pytest.skip("corpus unavailable: " + "; ".join(missing))
    if missing:
        warnings.warn("corpus sources skipped: " + "; ".join(missing), stacklevel=1)
    root = tmp_path_factory.mktemp("corpus")
    entry = _release(root, items)
    # the new-user options: every subset must publish at --max-reject-rate 1.0
    cfg = RunConfig.of(
        release=str(root), out=str(root / "out"), max_pixels=1003520, max_num_images=32, max_reject_rate=1.0
    )
    # the pipeline's own stage functions, as a run calls them (no Prefect, no Ray): batch, gate, publish,
    # validate
    build_batch(entry, 0, BatchWork.of(cfg))
    gate = gate_subset(GateWork.of(cfg), entry, run_id="corpus")
    layout = OutputLayout(cfg.out)
    publish_subset(layout, SUBSET, shard_max_bytes=10**9, shard_max_samples=10**6)
    validation = validate_subset(cfg.out, SUBSET)
    published = _published_images(Path(layout.energon) / SUBSET)
    samples = read_table(layout, "samples", SUBSET).to_pylist()
    media = {m["line"]: m for m in read_table(layout, "media", SUBSET).to_pylist()}
    assert len(samples) == len(items)  # every line accounted for
    outcomes = []
    for i, (item, sample) in enumerate(zip(items, samples, strict=True)):
        assert sample["line"] == i + 1 and i + 1 in media, sample
        verdict = pyav_decodes(item.path) if item.kind == "video" else pillow_decodes(item.path)
        images = published.get(sample["key"]) if sample["status"] == "ok" else None
        outcomes.append(Outcome(item, verdict, media[i + 1], sample, images))
    return Corpus(outcomes, validation, gate)


def _code_and_detail(reason: str) -> tuple[str, str]:
    """A media row's reason is ``code: detail`` (``schemas.reasons.reason``)."""
    match = re.fullmatch(r"([a-z0-9_]+)(?:: (.*))?", reason, re.DOTALL)
    assert match, reason
    return match.group(1), match.group(2) or ""


def _disagreement(o: Outcome) -> str | None:
    status, reason = o.media["status"], o.media["reason"] or ""
    if status == "ok" and o.sample["status"] != "ok":
        return f"media ok but sample {o.sample['status']}: {o.sample['reason']}"
    if status == "ok" and not o.decodes:
        return "ok, but the library cannot decode it"
    if status != "ok" and o.decodes:
        code, detail = _code_and_detail(reason)
        if code not in POLICY_CODES:
            return f"the library decodes it, vlmforge says {reason}"
        if code == "unsupported_format" and o.item.kind == "image":
            with Image.open(o.item.path) as im:
                if detail.upper() != str(im.format).upper():
                    return f"{reason} does not name Pillow's format {im.format}"
    return None


def test_vlmforge_agrees_with_the_libraries_on_every_file(corpus: Corpus) -> None:
    outcomes = corpus.outcomes
    mismatches = []
    for o in outcomes:
        problem = _disagreement(o)
        if problem and o.item.name not in ALLOWED:
            mismatches.append(
                f"{o.item.name}: status={o.media['status']} reason={o.media['reason']}: {problem}"
            )
    assert mismatches == [], f"{len(mismatches)} of {len(outcomes)} files:\n" + "\n".join(mismatches)
    present = {o.item.name: o for o in outcomes}
    stale = [name for name in ALLOWED if name in present and _disagreement(present[name]) is None]
    assert stale == [], f"fixed: remove from ALLOWED: {stale}"


def test_vlmforge_validate_agrees_with_the_run(corpus: Corpus) -> None:
    """Every ok sample is published, and ``vlmforge validate`` (every media part decoded as the trainer will)
    finds nothing wrong: the run's verdict and validate's are the same."""
    ok = [o for o in corpus.outcomes if o.sample["status"] == "ok"]
    assert corpus.validation.ok, corpus.validation.problems[:20]
    assert sum(corpus.validation.counts.values()) == len(ok)
    assert all(o.published is not None for o in ok if o.item.kind == "image")


def pyav_displayed_size(path: Path) -> tuple[int, int]:
    """The first frame's size as displayed: PyAV's frame size turned by the frame's display rotation."""
    import av

    with av.open(str(path)) as container:
        frame = next(container.decode(container.streams.video[0]))
        turned = round(float(getattr(frame, "rotation", 0) or 0)) % 180 == 90
        return (frame.height, frame.width) if turned else (frame.width, frame.height)


def test_every_ok_video_has_pyavs_displayed_size(corpus: Corpus) -> None:
    """Rotated videos (decord's 180 and 270 degree MOVs, when the shared folder is there) are recorded with
    the size they are displayed at, as PyAV's frame rotation gives it."""
    videos = [o for o in corpus.outcomes if o.item.kind == "video" and o.media["status"] == "ok"]
    assert len(videos) >= 5
    wrong = []
    for o in videos:
        recorded, pyav = (o.media["width"], o.media["height"]), pyav_displayed_size(o.item.path)
        if recorded != pyav:
            wrong.append(f"{o.item.name}: manifest {recorded}, PyAV {pyav}")
    assert wrong == []


def test_the_corpus_exercises_both_verdicts(corpus: Corpus) -> None:
    outcomes = corpus.outcomes
    images = [o for o in outcomes if o.item.kind == "image"]
    assert len(images) > 500
    assert sum(o.media["status"] == "ok" for o in images) > 300
    assert sum(not o.decodes for o in images) > 50  # broken, truncated, hostile files
    oriented = [o for o in images if "orientation" in o.item.name and o.media["status"] == "ok"]
    assert len(oriented) >= 8


# --------------------------------------------------------------------------------------------------------
# orientation and pixels
# --------------------------------------------------------------------------------------------------------

ORIENTATIONS: list[Image.Transpose | None] = [None, *Image.Transpose]
_HIGH_BIT = {"I;16", "I;16L", "I;16B", "I;16N", "I", "F"}
_SRGB = ImageCms.createProfile("sRGB")


def _eight_bit(img: Image.Image) -> Image.Image:
    """High-bit greyscale scaled by its effective bit depth (vlmforge's documented normalisation)."""
    arr = np.asarray(img)
    if img.mode == "F":
        farr = np.nan_to_num(arr.astype(np.float64))
        peak = float(farr.max()) if farr.size else 0.0
        out = np.clip(np.rint(farr * 255.0 if peak <= 1.0 else farr), 0, 255).astype(np.uint8)
    else:
        iarr = np.clip(arr.astype(np.int64), 0, 65535)
        shift = max(0, int(iarr.max()).bit_length() - 8) if iarr.size else 0
        out = (iarr >> shift).astype(np.uint8)
    return Image.fromarray(out, mode="L")


def _upright(path: Path, *, normalised: bool) -> Image.Image:
    """Pillow's upright first frame (``exif_transpose``); ``normalised``: as vlmforge's re-encode documents
    it, done here with Pillow alone: the embedded profile applied to sRGB, alpha on white, high-bit
    greyscale scaled by its bit depth, 8-bit RGB."""
    with Image.open(path) as im:
        im.load()
        icc = im.info.get("icc_profile")
        img = ImageOps.exif_transpose(im)
    if not normalised:
        return img
    if icc and img.mode in ("RGB", "RGBA", "CMYK"):
        try:
            src = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            if not (ImageCms.getProfileDescription(src) or "").strip().lower().startswith("srgb"):
                out_mode = "RGBA" if img.mode == "RGBA" else "RGB"
                img = ImageCms.profileToProfile(img, src, _SRGB, outputMode=out_mode) or img
        except ImageCms.PyCMSError:
            pass  # an unusable profile is dropped
    if img.mode in _HIGH_BIT:
        return _eight_bit(img).convert("RGB")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (img.mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        white = Image.new("RGB", rgba.size, (255, 255, 255))
        white.paste(rgba.convert("RGB"), mask=rgba.getchannel("A"))
        return white
    return img.convert("RGB")


def _mean_error(a: Image.Image, b: Image.Image) -> float:
    return float(np.abs(np.asarray(a, dtype=np.float32) - np.asarray(b, dtype=np.float32)).mean())


THUMB = 64  # the orientation race is run on thumbnails: cheap, and orientation shows at any scale


def _orientation_errors(out: Image.Image, upright: Image.Image) -> list[float]:
    """Mean absolute error of a thumbnail of ``out`` against each orientation of ``upright`` (None first)."""
    scale = min(1.0, THUMB / max(out.size))
    size = (max(1, round(out.width * scale)), max(1, round(out.height * scale)))
    small = out.resize(size, Image.Resampling.BILINEAR)
    src = upright.copy()
    src.thumbnail((4 * THUMB, 4 * THUMB), Image.Resampling.BILINEAR)
    errors = []
    for op in ORIENTATIONS:
        cand = src if op is None else src.transpose(op)
        errors.append(_mean_error(small, cand.resize(size, Image.Resampling.BILINEAR)))
    return errors


# Mean absolute error allowed, in 8-bit levels. Kept originals must decode to Pillow's pixels exactly.
# A re-encoded JPEG (quality 92) of a noisy image (Pillow's emboss and clipboard BMPs) differs by up to ~10
# levels on average; lossless outputs differ only where vlmforge's resize (torch's bicubic kernel, box
# pre-reduction) rounds differently from Pillow's bicubic.
TOLERANCE = {"jpg": 12.0, "png": 1.5, "webp": 1.5}


def _pixel_problem(o: Outcome) -> str | None:
    if o.published is None or len(o.published) != 1:
        return f"published as {None if o.published is None else len(o.published)} images, not 1"
    with Image.open(io.BytesIO(o.published[0])) as stored:
        stored.load()
        if stored.size != (o.media["out_width"], o.media["out_height"]):
            return f"stored size {stored.size} differs from the manifest's"
        if o.media["kept_original"]:
            upright = _upright(o.item.path, normalised=False)
            if upright.size != stored.size or not np.array_equal(np.asarray(upright), np.asarray(stored)):
                return "kept original, but not Pillow's upright pixels"
            return None
        out = stored.convert("RGB")
    upright = _upright(o.item.path, normalised=True)
    races = _orientation_errors(out, upright)
    if races[0] > min(races) + 0.5:
        named = {
            op.name if op is not None else "upright": round(e, 1)
            for op, e in zip(ORIENTATIONS, races, strict=True)
        }
        return f"another orientation matches better: {named}"
    expected = upright if upright.size == out.size else upright.resize(out.size, Image.Resampling.BICUBIC)
    error, tolerance = _mean_error(out, expected), TOLERANCE.get(o.media["out_ext"], 0.0)
    if error > tolerance:
        return f"mean error {error:.1f} levels over {tolerance} ({o.media['out_ext']})"
    return None


def test_every_ok_image_is_pillows_upright_image(corpus: Corpus) -> None:
    ok = [o for o in corpus.outcomes if o.item.kind == "image" and o.sample["status"] == "ok"]
    wrong = []
    for o in ok:
        problem = _pixel_problem(o)
        if problem:
            wrong.append(f"{o.item.name} ({o.media['format']}, notes={o.media['notes']}): {problem}")
    assert len(ok) > 300
    assert wrong == [], (
        f"{len(wrong)} of {len(ok)} ok images differ from Pillow's upright pixels:\n" + "\n".join(wrong)
    )


def test_the_pixel_check_catches_a_wrong_orientation(corpus: Corpus) -> None:
    """The check above can fail: an EXIF-rotated photo published as stored, or turned the other way, is
    caught."""
    rotated = next(o for o in corpus.outcomes if o.item.name == "pillow/hopper_orientation_6.jpg")
    assert rotated.sample["status"] == "ok" and _pixel_problem(rotated) is None
    with Image.open(rotated.item.path) as im:
        as_stored = encode_png(im.convert("RGB"))
        upright = ImageOps.exif_transpose(im)
    turned_back = encode_png(upright.transpose(Image.Transpose.ROTATE_180))
    for wrong in (as_stored, turned_back):
        problem = _pixel_problem(replace(rotated, published=[wrong]))
        assert problem is not None and "another orientation" in problem, problem


def encode_png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_the_gate_passes_the_corpus_at_max_reject_rate_one(corpus: Corpus) -> None:
    """Rejected odd files are not a reason to hold the subset back: the gate judges what is published."""
    assert corpus.gate.passed, corpus.gate.summary()
