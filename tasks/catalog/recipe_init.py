"""Draft a media recipe for a subset from its README's URLs, for a person to review.

The draft lists the release's own media first (when the subset ships any), then one source per URL the
README names that looks like a media location: archives (``.zip``/``.tar*``), Hugging Face dataset repos,
S3 buckets, GitHub repositories, and plain folders. It quotes a few of the subset's references so the
reviewer can write the ``match``/``member`` templates, and is written with ``status: draft``: the fetch
stage refuses it until the reviewer sets ``status: ready``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from ...schemas.recipes import SOURCE_KINDS, SOURCE_MODELS, parse_recipe
from ...schemas.records import MEDIA_TYPES
from ...schemas.url_shapes import UrlShape
from ..errors import ReleaseError
from ..storage import url_to_fs
from .licenses import detect_license

_URL = re.compile(r"""(?:https?|s3)://[^\s<>()\[\]"'`]+""")


@dataclass(frozen=True)
class DraftShape:
    """One README URL shape (declared by its source model in ``schemas/recipes.py``) and its kind."""

    kind: str
    shape: UrlShape

    def draft(self, url: str) -> dict[str, Any] | None:
        fields = self.shape.source_fields(url)
        return None if fields is None else {"kind": self.kind, **fields}


#: README URL shapes of every source model, in the order they are tried (their ranks); the first that matches
#: drafts the source.
URL_SHAPES: tuple[DraftShape, ...] = tuple(
    sorted(
        (
            DraftShape(kind, shape)
            for model, kind in zip(SOURCE_MODELS, SOURCE_KINDS, strict=True)
            for shape in model.url_shapes
        ),
        key=lambda d: d.shape.rank,
    )
)


@dataclass(frozen=True)
class Draft:
    subset: str
    text: str  # the YAML to write
    urls: tuple[str, ...]  # every URL the README names
    sample_refs: tuple[str, ...]


def readme_urls(readme: str) -> list[str]:
    """URLs named in a README, in order, without duplicates or trailing punctuation."""
    return list(dict.fromkeys(u.rstrip(".,;:") for u in _URL.findall(readme)))


def source_for_url(url: str) -> dict[str, Any] | None:
    """A recipe source drafted from one URL (the first of :data:`URL_SHAPES` it has), or None when the URL
    does not look like a media location."""
    return next((source for shape in URL_SHAPES if (source := shape.draft(url)) is not None), None)


def sample_refs(fs: Any, jsonl: str, count: int = 5, max_lines: int = 2000) -> list[str]:
    """The first few media references of a JSONL (bad lines skipped)."""
    refs: list[str] = []
    with fs.open(jsonl, "rb") as f:
        for i, raw in enumerate(f):
            if i >= max_lines or len(refs) >= count:
                break
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            for msg in obj.get("messages", []) if isinstance(obj, dict) else []:
                content = msg.get("content") if isinstance(msg, dict) else None
                for part in content if isinstance(content, list) else []:
                    kind = part.get("type") if isinstance(part, dict) else None
                    if kind in MEDIA_TYPES and isinstance(part.get(kind), str) and len(refs) < count:
                        refs.append(part[kind])
    return list(dict.fromkeys(refs))


def draft_recipe(release: str, subset: str) -> Draft:
    """Draft the recipe of ``subset`` in ``release`` (a folder or fsspec URL)."""
    fs, root = url_to_fs(release)
    folder = f"{root}/{subset}"
    jsonl = f"{folder}/{subset}.jsonl"
    if not fs.exists(jsonl):
        raise ReleaseError(f"{subset!r} is not a subset of {release!r} (no {subset}/{subset}.jsonl)")
    readme = ""
    if fs.exists(f"{folder}/README.md"):
        readme = fs.cat_file(f"{folder}/README.md").decode("utf-8", errors="replace")
    urls = readme_urls(readme)
    refs = sample_refs(fs, jsonl)
    data = _draft_data(subset, readme, urls)
    parse_recipe(data)  # the draft must validate as it is written
    body = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110)
    return Draft(subset, "\n".join(_draft_header(subset, urls, refs)) + "\n" + body, tuple(urls), tuple(refs))


def _draft_data(subset: str, readme: str, urls: list[str]) -> dict[str, Any]:
    """The recipe fields: the release's own media first, then one source per media-like URL."""
    license_id, license_text = detect_license(readme)
    sources: list[dict[str, Any]] = [{"kind": "release_tar"}, {"kind": "local"}]
    for url in urls:
        src = source_for_url(url)
        if src is not None and src not in sources:
            sources.append(src)
    return {
        "subset": subset,
        "status": "draft",
        "title": None,
        "upstream": next((u for u in urls if source_for_url(u) is None), urls[0] if urls else None),
        "license": license_id,
        "license_url": None,
        "license_note": license_text,
        "notes": "Drafted from README.md by `vlmforge recipe init`: check every source, fill match/member "
        "templates against the sample references, pin revisions, then set status: ready.",
        "sources": sources,
    }


def _draft_header(subset: str, urls: list[str], refs: list[str]) -> list[str]:
    """The comment lines above the YAML: how to review it, sample references, URLs not drafted."""
    header = [
        f"# DRAFT media recipe for {subset}, written by `vlmforge recipe init` from {subset}/README.md.",
        "# Review it: sources are tried in order for each reference; templates use {ref} {name} {stem} {ext}",
        "# {dir} and the named groups of `match`. The fetch stage refuses it until `status: ready`.",
        "#",
        "# Sample references from the JSONL:",
        *[f"#   {r}" for r in refs or ["(none found in the first lines)"]],
    ]
    skipped = [u for u in urls if source_for_url(u) is None]
    if skipped:
        header += [
            "#",
            "# Other URLs in the README (not drafted as sources):",
            *[f"#   {u}" for u in skipped],
        ]
    return header
