"""Catalog stage: list a release's subsets with content hashes, row counts, license and batch plan.

The release is a local folder or any fsspec URL (``hf://datasets/<org>/<name>@<revision>``,
``s3://bucket/prefix``, ``file://...``), read through one code path; ``storage_options`` are passed to
fsspec (s3 endpoint, profile, ...) and travel with each entry so workers open the same files.

One streaming pass over each JSONL hashes it, counts its lines, records where every batch of
``batch_lines`` lines starts (so parse batches can seek straight to their bytes) and finds duplicates
across the whole subset, which no single batch could see:

* a row identical (byte for byte, ignoring a trailing ``\\r``) to an earlier row: ``duplicate_rows``,
  rejected as ``duplicate_row`` by the batch that owns it;
* a row whose id (as an Energon key) repeats an earlier row's with other content: ``id_conflicts``, kept
  under the distinct key ``<key>__line<N>`` and flagged.

The pass keeps 16 bytes per line (two 64-bit hashes; about 32 MB at peak per million lines while
resolving) and re-reads the file once, only when candidates were found, to confirm them exactly.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from fsspec import AbstractFileSystem

from ...schemas.records import SubsetEntry
from ..errors import ReleaseError, scrub, secret_values
from ..publish.shards import sanitize_key
from ..storage import is_local, url_to_fs

CHUNK = 8 * 1024 * 1024

# ----------------------------------------------------------------------------------------------------
# Licenses
# ----------------------------------------------------------------------------------------------------

# SPDX ids we recognise in a README, longest first so CC-BY-SA-4.0 is not read as CC-BY-4.0.
_SPDX = (
    "CC-BY-NC-SA-4.0",
    "CC-BY-NC-ND-4.0",
    "CC-BY-NC-4.0",
    "CC-BY-SA-4.0",
    "CC-BY-SA-3.0",
    "CC-BY-ND-4.0",
    "CC-BY-4.0",
    "CC-BY-3.0",
    "CC-BY-2.0",
    "CC0-1.0",
    "CDLA-Permissive-2.0",
    "CDLA-Permissive-1.0",
    "CDLA-Sharing-1.0",
    "ODC-By-1.0",
    "ODbL-1.0",
    "PDDL-1.0",
    "Apache-2.0",
    "MIT",
    "BSD-3-Clause",
    "BSD-2-Clause",
    "GPL-3.0",
    "GPL-2.0",
    "LGPL-3.0",
    "AGPL-3.0",
    "MPL-2.0",
    "Unlicense",
    "OpenRAIL",
)
_SPDX_RE = re.compile(
    r"(?<![A-Za-z0-9-])(" + "|".join(re.escape(s) for s in _SPDX) + r")(?![A-Za-z0-9.-]*\d)", re.IGNORECASE
)
# Names and URLs people write instead of the id (checked after the ids; first match in the text wins).
_LICENSE_WORDS: tuple[tuple[str, str], ...] = (
    (r"creativecommons\.org/licenses/by-nc-sa/4\.0", "CC-BY-NC-SA-4.0"),
    (r"creativecommons\.org/licenses/by-nc-nd/4\.0", "CC-BY-NC-ND-4.0"),
    (r"creativecommons\.org/licenses/by-nc/4\.0", "CC-BY-NC-4.0"),
    (r"creativecommons\.org/licenses/by-sa/4\.0", "CC-BY-SA-4.0"),
    (r"creativecommons\.org/licenses/by-sa/3\.0", "CC-BY-SA-3.0"),
    (r"creativecommons\.org/licenses/by-nd/4\.0", "CC-BY-ND-4.0"),
    (r"creativecommons\.org/licenses/by/4\.0", "CC-BY-4.0"),
    (r"creativecommons\.org/licenses/by/3\.0", "CC-BY-3.0"),
    (r"creativecommons\.org/licenses/by/2\.0", "CC-BY-2.0"),
    (r"creativecommons\.org/publicdomain/zero/1\.0", "CC0-1.0"),
    (r"attribution[- ]non-?commercial[- ]share-?alike 4\.0", "CC-BY-NC-SA-4.0"),
    (r"attribution[- ]non-?commercial[- ]no-?deriv\w* 4\.0", "CC-BY-NC-ND-4.0"),
    (r"attribution[- ]non-?commercial 4\.0", "CC-BY-NC-4.0"),
    (r"attribution[- ]share-?alike 4\.0", "CC-BY-SA-4.0"),
    (r"attribution[- ]share-?alike 3\.0", "CC-BY-SA-3.0"),
    (r"attribution[- ]no-?deriv\w* 4\.0", "CC-BY-ND-4.0"),
    (r"creative commons attribution 4\.0|\bCC[- ]BY 4\.0", "CC-BY-4.0"),
    (r"creative commons attribution 3\.0|\bCC[- ]BY 3\.0", "CC-BY-3.0"),
    (r"\bCC[- ]BY[- ]SA 4\.0", "CC-BY-SA-4.0"),
    (r"\bCC[- ]?0\b|creative commons zero|public domain dedication", "CC0-1.0"),
    (
        r"community data license agreement\W+permissive\W+version 2\.0|\bCDLA[- ]Permissive[- ]2",
        "CDLA-Permissive-2.0",
    ),
    (r"community data license agreement\W+permissive\W+version 1\.0", "CDLA-Permissive-1.0"),
    (r"open data commons attribution|\bODC[- ]BY\b", "ODC-By-1.0"),
    (r"open database license|\bODbL\b", "ODbL-1.0"),
    (r"apache license,? (?:version )?2\.0|\bapache[- ]2(?:\.0)?\b", "Apache-2.0"),
    (r"\bMIT license\b|\bthe MIT\b|\bMIT-licensed\b", "MIT"),
    (r"\bBSD[- ]3[- ]clause\b|\b3-clause BSD\b|new BSD license", "BSD-3-Clause"),
    (r"\bBSD[- ]2[- ]clause\b|\b2-clause BSD\b|simplified BSD license", "BSD-2-Clause"),
    (r"GNU Lesser General Public License,? v(?:ersion )?3|\bLGPL[- ]?v?3", "LGPL-3.0"),
    (r"GNU Affero General Public License,? v(?:ersion )?3|\bAGPL[- ]?v?3", "AGPL-3.0"),
    (r"GNU General Public License,? v(?:ersion )?3|\bGPL[- ]?v?3\b", "GPL-3.0"),
    (r"GNU General Public License,? v(?:ersion )?2|\bGPL[- ]?v?2\b", "GPL-2.0"),
    (r"mozilla public license,? (?:version )?2\.0", "MPL-2.0"),
)
_LICENSE_WORDS_RE = [(re.compile(p, re.IGNORECASE), spdx) for p, spdx in _LICENSE_WORDS]
_LICENSE_LINE = re.compile(r"^\W*(?:license|licence|licensing|terms)\b\W*(.*)$", re.IGNORECASE | re.MULTILINE)
_FRONT_MATTER = re.compile(r"\A\ufeff?---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.DOTALL)


def _spdx_in(text: str) -> str | None:
    m = _SPDX_RE.search(text)
    if m:
        return next(s for s in _SPDX if s.lower() == m.group(1).lower())
    hits = [(m.start(), spdx) for rx, spdx in _LICENSE_WORDS_RE if (m := rx.search(text))]
    return min(hits)[1] if hits else None


def _front_matter_license(readme: str) -> tuple[str | None, str | None]:
    """``license:`` of a Hugging Face dataset card's YAML header: (spdx id, words) when present."""
    m = _FRONT_MATTER.match(readme)
    if not m:
        return None, None
    import yaml

    try:
        meta = yaml.safe_load(m.group(1))
    except yaml.YAMLError:
        return None, None
    if not isinstance(meta, dict) or not meta.get("license"):
        return None, None
    value = meta["license"]
    values = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    for v in values:
        spdx = _spdx_in(v)
        if spdx:
            return spdx, None
    named = meta.get("license_name") or meta.get("license_link")
    return None, str(named or ", ".join(values))


def _license_section(readme: str) -> list[str]:
    """The words of each ``License: ...`` line, or of the paragraph under a ``## License`` heading."""
    out: list[str] = []
    for m in _LICENSE_LINE.finditer(readme):
        words = m.group(1).strip()
        if not words:  # a heading: take the next non-empty paragraph
            rest = readme[m.end() :].lstrip("\n")
            para = re.split(r"\n\s*\n|\n#", rest, maxsplit=1)[0]
            words = " ".join(para.split())
        if words:
            out.append(words)
    return out


def detect_license(readme: str) -> tuple[str, str | None]:
    """SPDX id of the README's license, else ``unknown`` and the README's own words.

    Looked up in order: the dataset card's YAML ``license:``, the ``License:`` line or ``## License``
    section, then anywhere in the text (ids such as ``CC-BY-4.0``, names such as "Creative Commons
    Attribution-ShareAlike 4.0" or "Apache License, Version 2.0", and creativecommons.org URLs).
    """
    spdx, words = _front_matter_license(readme)
    if spdx:
        return spdx, None
    lines = _license_section(readme)
    for text in lines:
        spdx = _spdx_in(text)
        if spdx:
            return spdx, None
    body = _FRONT_MATTER.sub("", readme, count=1)
    spdx = _spdx_in(body) if not words else None
    if spdx:
        return spdx, None
    said = words or next(iter(lines), None)
    return "unknown", said[:500] if said else None


# ----------------------------------------------------------------------------------------------------
# Upstream media sources named by a README
# ----------------------------------------------------------------------------------------------------

_URL_RE = re.compile(r"""(?:https?|ftp|s3|gs|hf)://[^\s<>()\[\]{}"'`|]+""", re.IGNORECASE)
_BARE_HF_RE = re.compile(r"(?<![\w/.])huggingface\.co/(datasets/[\w.-]+/[\w.-]+)", re.IGNORECASE)
_S3_HOST_RE = re.compile(
    r"^https?://(?:(?P<vbucket>[a-z0-9.-]+)\.s3[.-](?:[a-z0-9-]+\.)?amazonaws\.com"
    r"|s3[.-](?:[a-z0-9-]+\.)?amazonaws\.com/(?P<pbucket>[a-z0-9.-]+))(?P<rest>/.*)?$",
    re.IGNORECASE,
)
_HF_URL_RE = re.compile(
    r"^https?://huggingface\.co/(?P<kind>datasets|spaces)?/?(?P<repo>[\w.-]+/[\w.-]+)", re.IGNORECASE
)
# Hosts of links that are not media: licenses, papers, badges.
_NOT_MEDIA = re.compile(
    r"^https?://(?:www\.)?(?:creativecommons\.org|opensource\.org|spdx\.org|choosealicense\.com|arxiv\.org"
    r"|doi\.org|img\.shields\.io|www\.apache\.org/licenses|www\.gnu\.org/licenses|scholar\.google)",
    re.IGNORECASE,
)


def _canonical_source(url: str) -> str | None:
    url = url.rstrip(".,;:!?*_")
    if _NOT_MEDIA.match(url):
        return None
    m = _S3_HOST_RE.match(url)
    if m:
        bucket = m.group("vbucket") or m.group("pbucket")
        return f"s3://{bucket}"
    m = _HF_URL_RE.match(url)
    if m:
        kind = m.group("kind") or "models"
        repo = m.group("repo")
        if kind == "models" and repo.split("/", 1)[0] in ("docs", "blog", "papers", "spaces", "datasets"):
            return None
        return f"hf://{kind}/{repo}"
    if url.lower().startswith("s3://"):
        return "s3://" + url[5:].split("/", 1)[0]
    if url.lower().startswith("hf://"):
        parts = url[5:].split("/")
        return "hf://" + "/".join(parts[:3]) if len(parts) >= 3 else url
    return url


def find_media_sources(readme: str) -> tuple[str, ...]:
    """Upstream media sources a README names, in order of appearance, without repeats.

    URLs are kept as written (minus trailing punctuation); Hugging Face repositories become
    ``hf://datasets/<org>/<name>`` and S3 objects ``s3://<bucket>``. License, paper and badge links are
    left out.
    """
    found: list[str] = []
    spans = [(m.start(), m.group(0)) for m in _URL_RE.finditer(readme)]
    spans += [(m.start(), "https://huggingface.co/" + m.group(1)) for m in _BARE_HF_RE.finditer(readme)]
    for _, url in sorted(spans):
        src = _canonical_source(url)
        if src and src not in found:
            found.append(src)
    return tuple(found)


# ----------------------------------------------------------------------------------------------------
# Release revision
# ----------------------------------------------------------------------------------------------------

_HF_RELEASE_RE = re.compile(
    r"^hf://(?:(datasets|models|spaces)/)?([^/@]+/[^/@]+)(?:@([^/]+))?", re.IGNORECASE
)
_SNAPSHOT_RE = re.compile(r"/snapshots/([0-9a-f]{40})(?:/|$)")


def release_revision(
    release: str, fs: AbstractFileSystem | None = None, root: str | None = None
) -> str | None:
    """The revision a release is pinned to, when it says one.

    ``hf://datasets/<org>/<name>@<rev>`` gives ``<rev>`` (URL-decoded: ``refs%2Fpr%2F9`` is
    ``refs/pr/9``); a Hugging Face cache snapshot folder (``.../snapshots/<commit>``) gives its commit;
    a git checkout gives its HEAD commit. Anything else: None.
    """
    m = _HF_RELEASE_RE.match(release)
    if m:
        return urllib.parse.unquote(m.group(3)) if m.group(3) else None
    path = root if root is not None else release
    m2 = _SNAPSHOT_RE.search(path.rstrip("/") + "/")
    if m2:
        return m2.group(1)
    if fs is not None and is_local(fs):
        return _git_head(fs, path)
    return None


def _git_head(fs: AbstractFileSystem, root: str) -> str | None:
    git = f"{root}/.git"
    try:
        head = fs.cat_file(f"{git}/HEAD").decode().strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.split(":", 1)[1].strip()
        if fs.exists(f"{git}/{ref}"):
            return str(fs.cat_file(f"{git}/{ref}").decode().strip()) or None
        if fs.exists(f"{git}/packed-refs"):
            for line in fs.cat_file(f"{git}/packed-refs").decode().splitlines():
                sha, _, name = line.partition(" ")
                if name == ref:
                    return sha
    except (OSError, UnicodeDecodeError):
        return None
    return None


# ----------------------------------------------------------------------------------------------------
# The JSONL scan
# ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JsonlScan:
    sha256: str
    size: int
    rows: int
    offsets: tuple[int, ...]
    duplicate_rows: tuple[tuple[int, int], ...] = ()
    id_conflicts: tuple[tuple[int, int, str], ...] = ()


def _iter_lines(
    fs: AbstractFileSystem, path: str, h: Any = None, size: list[int] | None = None
) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line without its newline, byte offset of its start) in one streaming pass.

    Memory stays bounded by the chunk size plus the longest line. ``h`` (a hashlib object) is fed every
    byte; ``size[0]`` ends as the number of bytes read.
    """
    tail = b""
    tail_pos = 0
    read = 0
    line = 0
    with fs.open(path, "rb", block_size=CHUNK) as f:
        while chunk := f.read(CHUNK):
            if h is not None:
                h.update(chunk)
            read += len(chunk)
            data = tail + chunk if tail else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                tail = data
                continue
            start = tail_pos
            for raw in data[:cut].split(b"\n"):
                line += 1
                yield line, raw, start
                start += len(raw) + 1
            tail, tail_pos = data[cut + 1 :], tail_pos + cut + 1
    if size is not None:
        size[0] = read
    if tail:
        yield line + 1, tail, tail_pos


_ID_SIMPLE = re.compile(rb'\{\s*"id"\s*:\s*"([^"\\]*)"')  # {"id": "plain"} (no escapes): the common case
_ID_FAST = re.compile(rb'^\s*\{\s*"id"\s*:\s*(?:"((?:[^"\\]|\\.)*)"|(-?\d+)\s*[,}])')


def _line_id(raw: bytes) -> str | None:
    """The record id the parser will see for this line (None when it has none or is not JSON)."""
    m = _ID_SIMPLE.match(raw)
    if m is None:
        m = _ID_FAST.match(raw)
    if m is not None and raw.count(b'"id"') == 1:
        if m.lastindex == 2 and m.group(2) is not None:
            return str(int(m.group(2)))
        text = m.group(1)
        if b"\\" not in text:
            try:
                return text.decode("utf-8") if text.strip() else None
            except UnicodeDecodeError:
                return None
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    sid = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(sid, int) and not isinstance(sid, bool):
        return str(sid)
    return sid if isinstance(sid, str) and sid.strip() else None


def _hash64(value: bytes | str) -> int:
    h = hash(value)  # SipHash: fast; candidates are confirmed exactly before anything is reported
    return h if h != 0 else 1


def _equal_groups(values: array) -> list[list[int]]:
    """Groups (of 0-based positions, ascending) of equal non-zero values; only groups of two or more."""
    import numpy as np

    arr = np.frombuffer(values, dtype=np.int64) if len(values) else np.zeros(0, np.int64)
    order = np.argsort(arr, kind="stable")
    srt = arr[order]
    same = (srt[1:] == srt[:-1]) & (srt[1:] != 0)
    if not same.any():
        return []
    groups: list[list[int]] = []
    idx = np.flatnonzero(same)
    current: list[int] = []
    prev = -2
    for i in idx.tolist():
        if i != prev + 1:
            if current:
                groups.append(current)
            current = [int(order[i])]
        current.append(int(order[i + 1]))
        prev = i
    if current:
        groups.append(current)
    return [sorted(g) for g in groups]


def scan_subset_jsonl(
    fs: AbstractFileSystem, path: str, batch_lines: int, *, subset: str | None = None, dedup: bool = True
) -> JsonlScan:
    """Hash, count, plan batches and (with ``dedup`` and a ``subset`` name) find duplicates in one pass.

    A final line without a trailing newline counts as a line; a trailing newline does not start one.
    """
    h = hashlib.sha256()
    offsets = [0]
    rows = 0
    row_h = array("q")
    key_h = array("q")
    dedup = dedup and subset is not None
    total = [0]
    for line, raw, start in _iter_lines(fs, path, h, total):
        rows = line
        if line > 1 and (line - 1) % batch_lines == 0:
            offsets.append(start)
        if not dedup:
            continue
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if not raw.strip():
            row_h.append(0)
            key_h.append(0)
            continue
        row_h.append(_hash64(raw))
        sid = _line_id(raw)
        key_h.append(_hash64(sanitize_key(subset, sid)) if sid is not None else 0)  # type: ignore[arg-type]
    size = total[0]
    if offsets[-1] != size:
        offsets.append(size)
    if not dedup:
        return JsonlScan(h.hexdigest(), size, rows, tuple(offsets))
    duplicates, conflicts = _resolve_duplicates(fs, path, subset, row_h, key_h)  # type: ignore[arg-type]
    return JsonlScan(h.hexdigest(), size, rows, tuple(offsets), duplicates, conflicts)


def _resolve_duplicates(
    fs: AbstractFileSystem, path: str, subset: str, row_h: array, key_h: array
) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int, str], ...]]:
    row_groups = _equal_groups(row_h)
    key_groups = _equal_groups(key_h)
    if not row_groups and not key_groups:
        return (), ()
    wanted = {i + 1 for g in row_groups + key_groups for i in g}
    # Confirm exactly: a strong digest of each candidate row and its key, from a second pass.
    seen: dict[int, tuple[bytes, str | None]] = {}
    for line, raw, _ in _iter_lines(fs, path):
        if line in wanted:
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            sid = _line_id(raw)
            seen[line] = (
                hashlib.blake2b(raw, digest_size=16).digest(),
                sanitize_key(subset, sid) if sid else None,
            )
    duplicates: dict[int, int] = {}
    for g in row_groups:
        first_by_digest: dict[bytes, int] = {}
        for i in g:
            line = i + 1
            digest = seen[line][0]
            if digest in first_by_digest:
                duplicates[line] = first_by_digest[digest]
            else:
                first_by_digest[digest] = line
    taken = key_h  # every key of the subset, as hashes: a distinct key must not collide with any of them
    import numpy as np

    taken_sorted = np.sort(np.frombuffer(taken, dtype=np.int64)) if len(taken) else np.zeros(0, np.int64)
    new_keys: set[str] = set()

    def is_taken(key: str) -> bool:
        hv = _hash64(key)
        pos = int(np.searchsorted(taken_sorted, hv))
        return key in new_keys or (pos < len(taken_sorted) and int(taken_sorted[pos]) == hv)

    conflicts: list[tuple[int, int, str]] = []
    for g in key_groups:
        first_by_key: dict[str, int] = {}
        for i in g:
            line = i + 1
            if line in duplicates:
                continue
            key = seen[line][1]
            if key is None:
                continue
            if key not in first_by_key:
                first_by_key[key] = line
                continue
            distinct = f"{key}__line{line}"
            n = 2
            while is_taken(distinct):
                distinct, n = f"{key}__line{line}_{n}", n + 1
            new_keys.add(distinct)
            conflicts.append((line, first_by_key[key], distinct))
    return tuple(sorted(duplicates.items())), tuple(sorted(conflicts))


def scan_jsonl(fs: AbstractFileSystem, path: str, batch_lines: int) -> tuple[str, int, int, tuple[int, ...]]:
    """(sha256, size, lines, batch offsets) of a JSONL file in one streaming pass (no duplicate search)."""
    s = scan_subset_jsonl(fs, path, batch_lines, dedup=False)
    return s.sha256, s.size, s.rows, s.offsets


# ----------------------------------------------------------------------------------------------------
# The release
# ----------------------------------------------------------------------------------------------------


def list_subset_names(fs: AbstractFileSystem, root: str) -> list[str]:
    """Folders of the release that hold ``<name>/<name>.jsonl``, sorted."""
    names = []
    for entry in fs.ls(root, detail=True):
        if entry["type"] != "directory":
            continue
        name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
        if name.startswith((".", "_")):
            continue
        if fs.exists(f"{root}/{name}/{name}.jsonl"):
            names.append(name)
    return sorted(names)


def recipe_fingerprint(recipe: Any) -> str:
    """sha256 of a media recipe's canonical JSON (a pydantic model, a mapping, or its YAML/JSON text)."""
    if hasattr(recipe, "model_dump"):
        recipe = recipe.model_dump(mode="json")
    if isinstance(recipe, str | bytes):
        data = recipe.encode() if isinstance(recipe, str) else recipe
    else:
        data = orjson.dumps(recipe, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()


def catalog_release(
    release: str,
    *,
    subsets: Iterable[str] = (),
    batch_lines: int = 2000,
    storage_options: Mapping[str, Any] | None = None,
    recipe_fingerprints: Mapping[str, str] | None = None,
    dedup: bool = True,
) -> list[SubsetEntry]:
    """Catalog every subset of ``release`` (or the named ones), without touching media.

    ``release`` is a folder or an fsspec URL; ``storage_options`` go to fsspec and are carried by every
    entry. ``recipe_fingerprints`` (subset -> :func:`recipe_fingerprint` of its media recipe) lets a
    refresh see a recipe change.
    """
    options = dict(storage_options or {})
    secrets = secret_values(options)  # never echoed: errors name the release, not its credentials
    try:
        fs, root = url_to_fs(release, **options)
    except (ImportError, ValueError, TypeError) as exc:
        raise ReleaseError(scrub(f"cannot open release {release!r}: {exc}", secrets)) from None
    try:
        is_dir = fs.isdir(root)
    except Exception as exc:  # noqa: BLE001 - any backend failure (bad option, auth, network) is a usage error
        raise ReleaseError(
            scrub(f"cannot read release {release!r}: {type(exc).__name__}: {exc}", secrets)
        ) from None
    if not is_dir:
        raise ReleaseError(f"release {release!r} is not a folder (expected one folder per subset)")
    available = list_subset_names(fs, root)
    wanted = list(subsets) or available
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        raise ReleaseError(
            f"subset(s) {', '.join(unknown)} not found in {release!r}; "
            f"available: {', '.join(available) or '(none: no <name>/<name>.jsonl found)'}"
        )
    local = is_local(fs)

    def url(path: str) -> str:  # a path other processes can open: plain when local, else with its protocol
        return path if local else str(fs.unstrip_protocol(path))

    revision = release_revision(release, fs, root)
    recipes = dict(recipe_fingerprints or {})
    entries = []
    for name in sorted(set(wanted)):
        folder = f"{root}/{name}"
        jsonl = f"{folder}/{name}.jsonl"
        readme_path = f"{folder}/README.md"
        readme_sha, license_id, license_text = None, "unknown", None
        sources: tuple[str, ...] = ()
        if fs.exists(readme_path):
            raw = fs.cat_file(readme_path)
            readme_sha = hashlib.sha256(raw).hexdigest()
            text = raw.decode("utf-8", errors="replace")
            license_id, license_text = detect_license(text)
            sources = find_media_sources(text)
        scan = scan_subset_jsonl(fs, jsonl, batch_lines, subset=name, dedup=dedup)
        tars: tuple[str, ...] = ()
        if fs.isdir(f"{folder}/media"):
            tars = tuple(sorted(url(p) for p in fs.glob(f"{folder}/media/shard_*.tar") if fs.isfile(p)))
        entries.append(
            SubsetEntry(
                subset=name,
                path=url(folder),
                jsonl=url(jsonl),
                readme_sha256=readme_sha,
                jsonl_sha256=scan.sha256,
                jsonl_bytes=scan.size,
                rows=scan.rows,
                license=license_id,
                license_text=license_text,
                media_tars=tars,
                batch_offsets=scan.offsets,
                storage_options=options,
                release=release,
                revision=revision,
                media_sources=sources,
                media_recipe_sha256=recipes.get(name),
                duplicate_rows=scan.duplicate_rows,
                id_conflicts=scan.id_conflicts,
            )
        )
    return entries


def parse_storage_options(pairs: Iterable[str] | None) -> dict[str, Any]:
    """``--storage-option key=value`` pairs as fsspec storage options.

    A value that reads as JSON (``true``, ``3``, ``{"a": 1}``) is taken as such, anything else as a string;
    a dotted key nests (``client_kwargs.endpoint_url=http://127.0.0.1:9000``).
    """
    out: dict[str, Any] = {}
    for i, pair in enumerate(pairs or (), 1):
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:  # the text is not echoed: it may be a secret given without its key
            raise ReleaseError(f"--storage-option #{i}: expected key=value (got no '=' or no key)")
        try:
            value: Any = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = text
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                raise ReleaseError(f"--storage-option {pair!r}: {p!r} is already set to a value")
            node = child
        node[leaf] = value
    return out


_SECRET_WORDS = ("secret", "token", "password", "key", "credential", "session")


def redact_storage_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to log or record: values of keys naming a secret become ``***``."""
    out: dict[str, Any] = {}
    for k, v in options.items():
        if isinstance(v, Mapping):
            out[k] = redact_storage_options(v)
        elif any(w in k.lower() for w in _SECRET_WORDS) and k.lower() not in ("anon",):
            out[k] = "***"
        else:
            out[k] = v
    return out


def recipe_fingerprints_from_dir(folder: str, subsets: Iterable[str]) -> dict[str, str]:
    """sha256 of each ``<folder>/<subset>.yaml`` that exists (the recipe's text, as written)."""
    out: dict[str, str] = {}
    for name in subsets:
        p = Path(folder) / f"{name}.yaml"
        if p.is_file():
            out[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out
