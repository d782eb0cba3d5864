"""Upstream media sources a subset's README names (URLs, Hugging Face repositories, S3 buckets).

Releases that ship no media say where it lives; the catalog keeps those places (``media_sources``) so a
person drafting a media recipe (``recipe_init.py``) and a refresh see them. License, paper and badge links
are left out.
"""

from __future__ import annotations

import re

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
