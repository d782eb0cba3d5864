"""Media recipes: where a subset's media references come from (user-editable YAML under ``recipes/``).

A recipe lists sources, tried in order for every reference; the first one that yields the object wins:

- ``release_tar``: the subset's own media in the release (loose files under ``<subset>/`` and
  ``<subset>/media/``, then members of ``<subset>/media/shard_*.tar``), exactly as the pipeline resolves them.
- ``local``: a folder holding the upstream layout (default: each ``--media-root``).
- ``http_files``: one URL per reference, from a template.
- ``archive``: a zip (read through its central directory with range requests) or a tar (streamed once)
  at a URL, with the member path as a template and the archive's sha256 when it is published.
- ``s3``: an object per reference, ``s3://bucket/prefix/{name}``.
- ``hf``: a file per reference in a Hugging Face repo at a pinned revision.

Templates name variables in braces: ``{ref}`` (the normalised reference), ``{name}`` (its last path
component), ``{stem}``, ``{ext}`` (without the dot), ``{dir}`` (``""`` at top level), ``{shard}`` (archives
with ``shards``), and the named groups of the source's ``match`` regex. A reference that the regex does not
match is not looked up in that source. The regex runs with a budget (``recipe_match.py``: a time limit per
search, a cap on the reference's length), so a pattern that backtracks rejects a reference instead of
hanging its batch.

``${NAME}`` takes a value from the environment, only where the schema says a value may come from there and
only when the user allows that variable (``vlmforge run --env-allow NAME``): as the whole start of a
``local`` root or of an ``http_files`` / ``archive`` url (a mirror's location, ``${COCO_ROOT}/train2017``),
or as a whole ``storage_options`` value (a key or token). Never inside a URL's path or query, so a recipe
cannot send a variable to a host it names. A source whose variable is unset or not allowed is skipped with a
reason; an expanded value is a secret everywhere (written back as ``${NAME}``: ``schemas/redact.py``).

Each kind is one model here (listed in the ``Source`` union; ``remote`` says whether it needs the network;
``url_shapes`` the README URLs ``vlmforge recipe init`` drafts it from) and one module
``tasks/fetch/sources/<kind>.py`` (its fetch and its sizer) registered in ``tasks/fetch/sources/__init__.py``.

RECIPE BREAKING CHANGE rule: renaming a field or a variable breaks users' recipes; add, never repurpose.
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .recipe_checks import (
    ENV_RE,
    env_placement_problem,
    header_problem,
    storage_option_problem,
    template_fields,
)
from .recipe_locations import ALLOW_PRIVATE_HELP, location_problem
from .recipe_match import Pattern, compile_match, search_bounded
from .safe_yaml import load_limited
from .subset_names import subset_name_problem
from .url_shapes import UrlShape

BASE_VARIABLES: frozenset[str] = frozenset({"ref", "name", "stem", "ext", "dir"})
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class UnsetVariable(Exception):
    """A ``${NAME}`` in a template names an environment variable that is not set."""


def expand_env(text: str) -> str:
    """``text`` when it names no ``${NAME}``; else raises UnsetVariable. Values are put in by
    ``tasks/fetch/recipe_env.py`` (allowed variables only) before templates are filled, so one left here
    was unset or not allowed; this never reads the environment."""
    m = ENV_RE.search(text)
    if m is not None:
        name = m.group(1)
        raise UnsetVariable(f"${{{name}}} is not set, or not allowed (pass --env-allow {name} to allow it)")
    return text


def check_expanded(values: Any) -> None:
    """Raise UnsetVariable when ``values`` (storage options, headers: nested dicts and lists of strings)
    still name a ``${NAME}``: it was unset or not allowed, and must not reach fsspec or a server literally."""
    if isinstance(values, str):
        expand_env(values)
    elif isinstance(values, dict):
        for v in values.values():
            check_expanded(v)
    elif isinstance(values, list):
        for v in values:
            check_expanded(v)


def fill(template: str, variables: dict[str, str]) -> str:
    """``template`` with its variables and ``${ENV}`` parts filled in."""
    return expand_env(template).format_map(variables)


def ref_variables(ref: str, match: Pattern | None) -> dict[str, str] | None:
    """Template variables of one normalised reference, or None when ``match`` does not match it. Raises
    :class:`~.recipe_match.MatchBudgetError` when the search is refused or outruns its budget."""
    name = posixpath.basename(ref)
    stem, dot, ext = name.rpartition(".")
    if not dot:
        stem, ext = name, ""
    variables = {"ref": ref, "name": name, "stem": stem, "ext": ext, "dir": posixpath.dirname(ref)}
    if match is not None:
        m = search_bounded(match, ref)
        if m is None:
            return None
        variables |= {k: v or "" for k, v in m.groupdict().items()}
    return variables


# Where an upstream's redirects may lead (tasks/http/redirects.py): same_host (default), any_public_host
# (never to loopback, private or link-local addresses unless the recipe's URL names one), any_host.
# Whatever the policy, only http(s), never https -> http.
RedirectPolicy = Literal["same_host", "any_public_host", "any_host"]
REDIRECTS_FIELD_HELP = "where redirects may lead: same_host (default) | any_public_host | any_host"


# README URL pieces the url_shapes below share: an archive's suffix, a Hugging Face dataset repo
_ARCHIVE_EXT = r"\.(?i:zip|tar|tgz|tar\.gz|tar\.bz2|tar\.xz)"
_HF = r"^https?://huggingface\.co/datasets/([\w.-]+/[\w.-]+)"


def _github_fields(m: re.Match[str]) -> dict[str, Any]:
    branch, path = m.group(2) or "main", (m.group(3) or "").rstrip("/")
    base = f"https://raw.githubusercontent.com/{m.group(1)}/{branch}/"
    return {"url": base + (f"{path}/" if path else "") + "{ref}", "max_concurrency": 4}


def _s3_http_fields(m: re.Match[str]) -> dict[str, Any]:
    prefix = m.group(2).rstrip("/")
    return {"url": f"s3://{m.group(1)}/{prefix + '/' if prefix else ''}{{name}}", "anon": True}


def _hf_fields(m: re.Match[str]) -> dict[str, Any]:
    path = m.group(3) or ""
    return {
        "repo": m.group(1),
        "revision": m.group(2) or "main",
        "path": f"{path.rstrip('/')}/{{ref}}" if path else "{ref}",
    }


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _SourceBase(_Model):
    """One entry of a recipe's ``sources``; each kind is answered by ``tasks/fetch/sources/<kind>.py``."""

    remote: ClassVar[bool] = True  # needs the network or an object store (False: read in place)
    # README URLs `vlmforge recipe init` drafts as a source of this kind (none: never drafted from a URL)
    url_shapes: ClassVar[tuple[UrlShape, ...]] = ()
    # template fields that may start with ${NAME} (a mirror location); other fields may name no variable
    env_locations: ClassVar[frozenset[str]] = frozenset()
    match: str | None = Field(
        default=None, description="regex searched in the normalised reference; named groups become variables"
    )

    @field_validator("match")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        if v is not None:
            compile_match(v)  # the engine that runs it (recipe_match.py); ValueError with its words
        return v

    def compiled_match(self) -> Pattern | None:
        return compile_match(self.match) if self.match else None

    def _check_templates(self, extra: frozenset[str], **templates: str | None) -> None:
        allowed = BASE_VARIABLES | extra
        if self.match:
            allowed = allowed | set(compile_match(self.match).groupindex)
        for field, template in templates.items():
            if template is None:
                continue
            problem = env_placement_problem(field, template, location=field in self.env_locations)
            if problem:
                raise ValueError(problem)
            unknown = sorted(set(template_fields(template)) - allowed)
            if unknown:
                raise ValueError(
                    f"{field} {template!r} uses unknown variable(s) {', '.join(unknown)}; "
                    f"known: {', '.join(sorted(allowed))}"
                )


class ReleaseTarSource(_SourceBase):
    """The subset's own media in the release, in the pipeline's resolution order."""

    kind: Literal["release_tar"]
    remote: ClassVar[bool] = False


class LocalSource(_SourceBase):
    """A folder (local path or fsspec URL) holding the upstream files in the documented layout."""

    kind: Literal["local"]
    remote: ClassVar[bool] = False
    env_locations: ClassVar[frozenset[str]] = frozenset({"root"})
    root: str | None = Field(default=None, description="folder; None: each --media-root of the run")
    path: str = Field(default="{ref}", description="file path under root (template)")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options of root")

    @model_validator(mode="after")
    def _templates(self) -> LocalSource:
        problem = location_problem("root", self.root) if self.root else None
        if problem:
            raise ValueError(problem)
        self._check_templates(frozenset(), path=self.path, root=self.root)
        problem = storage_option_problem(self.storage_options)
        if problem:
            raise ValueError(problem)
        return self


class HttpFilesSource(_SourceBase):
    """One HTTP(S) URL per reference."""

    kind: Literal["http_files"]
    env_locations: ClassVar[frozenset[str]] = frozenset({"url"})
    url_shapes: ClassVar[tuple[UrlShape, ...]] = (
        # a GitHub repository or a folder in it, read from raw.githubusercontent.com
        UrlShape(
            60,
            re.compile(
                r"^https?://github\.com/([\w.-]+/[\w.-]+?)(?:\.git)?(?:/(?:tree|blob)/([^/]+)/?(.*))?/?$"
            ),
            _github_fields,
        ),
        # a plain folder
        UrlShape(70, re.compile(r".*/$"), lambda m: {"url": m.string + "{ref}"}),
    )
    url: str = Field(description="URL template, e.g. https://host/images/{name}")
    max_concurrency: int | None = Field(default=None, gt=0, description="requests in flight to this host")
    redirects: RedirectPolicy = Field(default="same_host", description=REDIRECTS_FIELD_HELP)
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="request headers sent to the url's own scheme, host and port only, e.g. Authorization: "
        "Bearer ${TOKEN}",
    )
    allow_private: bool = Field(default=False, description=ALLOW_PRIVATE_HELP)

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            problem = header_problem(name, value)
            if problem:
                raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _templates(self) -> HttpFilesSource:
        if not self.url.startswith(("http://", "https://", "${")):
            raise ValueError(f"url {self.url!r} must start with http:// or https://")
        self._check_templates(frozenset(), url=self.url)
        return self


class ShardRange(_Model):
    """``{shard}`` takes every value from ``start`` to ``stop`` (inclusive), zero-padded to ``width``."""

    start: int = Field(ge=0)
    stop: int = Field(ge=0)
    width: int = Field(default=0, ge=0, le=12)

    @model_validator(mode="after")
    def _order(self) -> ShardRange:
        if self.stop < self.start:
            raise ValueError(f"stop ({self.stop}) is below start ({self.start})")
        if self.stop - self.start >= 100_000:
            raise ValueError("more than 100000 shards")
        return self

    def values(self) -> list[str]:
        return [str(i).zfill(self.width) for i in range(self.start, self.stop + 1)]


class ArchiveSource(_SourceBase):
    """A zip or tar at a URL (http(s), s3://, hf://, or a local path); only referenced members are read."""

    kind: Literal["archive"]
    env_locations: ClassVar[frozenset[str]] = frozenset({"url"})
    url_shapes: ClassVar[tuple[UrlShape, ...]] = (
        # an archive in a Hugging Face dataset repo (before the repo's own shape)
        UrlShape(
            10,
            re.compile(_HF + r"/(?:tree|resolve|blob)/([^/]+)/?(.*" + _ARCHIVE_EXT + ")$"),
            lambda m: {"url": f"hf://datasets/{m.group(1)}@{m.group(2)}/{m.group(3)}", "member": "{ref}"},
        ),
        # any other archive (its query string aside)
        UrlShape(
            30,
            re.compile(r"[^?]*" + _ARCHIVE_EXT + r"(?:\?.*)?$"),
            lambda m: {"url": m.string, "member": "{ref}"},
        ),
    )
    url: str = Field(description="archive URL (template: variables pick the archive per reference)")
    format: Literal["zip", "tar"] | None = Field(default=None, description="default: from the URL suffix")
    member: str = Field(default="{ref}", description="member path inside the archive (template)")
    sha256: str | dict[str, str] | None = Field(
        default=None, description="published sha256 of the archive (or a map archive URL -> sha256)"
    )
    size: int | None = Field(default=None, ge=0, description="published size in bytes (informational)")
    extract: Literal["referenced", "all"] = Field(
        default="referenced",
        description="tar only: 'all' stores every member while streaming, so later batches need no stream",
    )
    shards: ShardRange | None = Field(default=None, description="archives named by a {shard} range")
    max_concurrency: int | None = Field(default=None, gt=0)
    redirects: RedirectPolicy = Field(default="same_host", description=REDIRECTS_FIELD_HELP)
    allow_private: bool = Field(default=False, description=ALLOW_PRIVATE_HELP)
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="fsspec options for s3:// or hf:// archives (anon, endpoint_url...)"
    )

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str | dict[str, str] | None) -> str | dict[str, str] | None:
        values = [v] if isinstance(v, str) else list(v.values()) if isinstance(v, dict) else []
        for s in values:
            if not _SHA256_RE.match(s):
                raise ValueError(f"sha256 {s!r} is not 64 lowercase hex digits")
        return v

    @model_validator(mode="after")
    def _templates(self) -> ArchiveSource:
        problem = location_problem("url", self.url)
        if problem:
            raise ValueError(problem)
        extra = frozenset({"shard"}) if self.shards else frozenset()
        self._check_templates(extra, url=self.url, member=self.member)
        problem = storage_option_problem(self.storage_options)
        if problem:
            raise ValueError(problem)
        if self.shards and "shard" not in template_fields(self.url):
            raise ValueError("shards is set but url does not use {shard}")
        if self.archive_format(self.url) is None:
            raise ValueError(f"cannot tell the format of {self.url!r}: set format: zip or format: tar")
        return self

    def archive_format(self, url: str) -> Literal["zip", "tar"] | None:
        if self.format:
            return self.format
        low = url.lower().split("?", 1)[0]
        if low.endswith(".zip"):
            return "zip"
        if low.endswith((".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")):
            return "tar"
        return None

    def expected_sha256(self, url: str) -> str | None:
        if isinstance(self.sha256, dict):
            return self.sha256.get(url)
        return self.sha256


class S3Source(_SourceBase):
    """One S3 object per reference."""

    kind: Literal["s3"]
    url_shapes: ClassVar[tuple[UrlShape, ...]] = (
        UrlShape(
            40, re.compile(r"s3://"), lambda m: {"url": f"{m.string.rstrip('/')}/{{name}}", "anon": True}
        ),
        # a bucket by its HTTP name (before a plain folder)
        UrlShape(
            50,
            re.compile(r"^https?://([a-z0-9.-]+)\.s3[.-]?(?:[a-z0-9-]+\.)?amazonaws\.com/(.*)$"),
            _s3_http_fields,
        ),
    )
    url: str = Field(description="s3://bucket/prefix/{name}")
    anon: bool = Field(default=True, description="unsigned requests (public buckets)")
    endpoint_url: str | None = None
    region: str | None = None

    @model_validator(mode="after")
    def _templates(self) -> S3Source:
        if not self.url.startswith("s3://"):
            raise ValueError(f"url {self.url!r} must start with s3://")
        self._check_templates(frozenset(), url=self.url)
        return self


class HfSource(_SourceBase):
    """One file per reference in a Hugging Face repo at a pinned revision (read through fsspec ``hf://``)."""

    kind: Literal["hf"]
    url_shapes: ClassVar[tuple[UrlShape, ...]] = (
        # a Hugging Face dataset repo or a folder in it
        UrlShape(20, re.compile(_HF + r"(?:/(?:tree|resolve|blob)/([^/]+)/?(.*))?"), _hf_fields),
    )
    repo: str = Field(description="owner/name")
    revision: str = Field(min_length=1, description="commit sha (preferred), tag or branch")
    repo_type: Literal["dataset", "model"] = "dataset"
    path: str = Field(default="{ref}", description="file path in the repo (template)")

    @field_validator("repo")
    @classmethod
    def _repo(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError(f"repo {v!r} must be owner/name")
        return v

    @model_validator(mode="after")
    def _templates(self) -> HfSource:
        self._check_templates(frozenset(), path=self.path)
        return self

    def fsspec_url(self, path: str) -> str:
        """``hf://datasets/owner/name@revision/path`` (a revision with '/' is percent-encoded)."""
        prefix = "datasets/" if self.repo_type == "dataset" else ""
        revision = self.revision.replace("/", "%2F")
        return f"hf://{prefix}{self.repo}@{revision}/{path.lstrip('/')}"


Source = Annotated[
    ReleaseTarSource | LocalSource | HttpFilesSource | ArchiveSource | S3Source | HfSource,
    Field(discriminator="kind"),
]
SOURCE_MODELS: tuple[type[_SourceBase], ...] = get_args(get_args(Source)[0])
SOURCE_KINDS: tuple[str, ...] = tuple(get_args(m.model_fields["kind"].annotation)[0] for m in SOURCE_MODELS)
REMOTE_KINDS: frozenset[str] = frozenset(
    k for m, k in zip(SOURCE_MODELS, SOURCE_KINDS, strict=True) if m.remote
)


class Recipe(_Model):
    """Where one subset's media come from, and under which terms."""

    subset: str
    status: Literal["draft", "ready"] = Field(
        default="ready", description="draft: written by `vlmforge recipe init`, refused until reviewed"
    )
    title: str | None = None
    upstream: str | None = Field(default=None, description="homepage of the upstream media")
    license: str = Field(min_length=1, description="SPDX id, LicenseRef-..., or 'unknown'")
    license_url: str | None = None
    license_note: str | None = None
    notes: str | None = None
    sources: list[Source] = Field(min_length=1)

    @field_validator("subset")
    @classmethod
    def _subset(cls, v: str) -> str:
        problem = subset_name_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @property
    def remote(self) -> bool:
        """True when a source needs the network (or an object store)."""
        return any(s.remote for s in self.sources)

    @property
    def fetches(self) -> bool:
        """True when the fetch stage answers the subset's references: a source other than the release's own
        media (a remote one, or a ``local`` folder)."""
        return any(s.kind != "release_tar" for s in self.sources)

    @classmethod
    def default(cls, subset: str) -> Recipe:
        """What the pipeline does without a recipe: media roots, then the release's own media."""
        return cls(
            subset=subset,
            license="unknown",
            notes="default: no recipe in the catalog",
            sources=[LocalSource(kind="local"), ReleaseTarSource(kind="release_tar")],
        )


def parse_recipe(data: Any) -> Recipe:
    """A Recipe from decoded YAML/JSON; raises pydantic.ValidationError naming the field path."""
    return Recipe.model_validate(data)


def parse_recipe_yaml(text: str) -> Recipe:
    """A Recipe from YAML text (read with :mod:`.safe_yaml`'s limits); raises yaml.YAMLError or
    pydantic.ValidationError."""
    return parse_recipe(load_limited(text))
