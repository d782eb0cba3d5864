"""A generated release of Nemotron Image Training v3's shape, sized by a parameter (``vlmforge sample-release
DIR --shape v3 --rows N``): 76 subsets of long-tailed sizes (:mod:`.shaped_plan`), single- and multi-image
rows, a few videos, text-only rows, media in the release's own tars and behind upstream recipes.

Layout written under ``dest``::

    release/<subset>/README.md, <subset>.jsonl       every subset
    release/<subset>/media/shard_000000.tar ...      ``tar`` subsets: their images, 1,000 a tar
    release/<subset>/clips/clip_0.mp4, clip_1.mp4    ``video`` subsets: tiny H.264 clips
    upstream/img/000000.jpg ...                      what the recipes fetch (serve ``upstream/`` over HTTP)
    recipes/<subset>.yaml                            ``image`` and ``multi`` subsets: an ``http_files`` source

Every upstream image is its own object (a reference never repeats), so the store holds one object per
reference and a fetch count says exactly what was fetched. The recipes' URL is
``${VLMFORGE_SHAPED_UPSTREAM}/img/{name}`` unless ``upstream_url`` is given: set the variable to where
``upstream/`` is served (every Ray node's processes need it), so the files stay the same whatever the port.
``upstream_dir`` points at a corpus already made with the same names (``img/{i:06d}.jpg``, the benchmarks'
corpus): then no upstream image is written. Deterministic: the same arguments give the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .chat import asst, dump, img, txt, user, vid
from .files import readme, write_files, write_jsonl, write_tar
from .sample_build import _prepare_dest
from .shaped_media import clip_bytes, image_bytes
from .shaped_plan import SUBSETS_V3, SubsetPlan, plan_release

__all__ = ["UPSTREAM_ENV", "ShapedRelease", "build_shaped_release", "write_recipes"]

UPSTREAM_ENV: Final[str] = "VLMFORGE_SHAPED_UPSTREAM"
TAR_MEMBERS: Final[int] = 1000
_WORDS: Final[tuple[str, ...]] = (
    "the", "a", "chart", "shows", "value", "year", "rate", "total", "answer", "table", "figure", "row",
    "column", "mean", "sum", "photo", "left", "right", "colour", "count",
)  # fmt: skip


@dataclass
class ShapedRelease:
    """What :func:`build_shaped_release` wrote: the release folder, the upstream folder to serve, the recipe
    folder, the plan, and the upstream image names (``img/000123.jpg``) the recipes fetch."""

    root: Path
    upstream: Path
    recipes: Path
    plan: list[SubsetPlan]
    upstream_refs: list[str] = field(default_factory=list)
    videos: int = 0

    @property
    def subsets(self) -> list[str]:
        return [p.name for p in self.plan]

    @property
    def total_lines(self) -> int:
        return sum(p.rows for p in self.plan)


class _Writer:
    """Builds the rows of one release: numbers the upstream images, writes tars, clips and JSONL."""

    def __init__(self, dest: Path, seed: int, write_upstream: bool) -> None:
        self.dest, self.seed, self.write_upstream = dest, seed, write_upstream
        self.release = dest / "release"
        self.next_image = 0
        self.upstream_refs: list[str] = []
        self.videos = 0

    def upstream_image(self) -> str:
        """A new upstream image's name (written under ``upstream/img/`` unless a corpus is given)."""
        i = self.next_image
        self.next_image += 1
        name = f"img/{i:06d}.jpg"
        if self.write_upstream:
            path = self.dest / "upstream" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(image_bytes(i, self.seed))
        self.upstream_refs.append(name)
        return name

    def rows(self, plan: SubsetPlan, rng: random.Random) -> list[str]:
        return [dump(r) for r in _ROWS[plan.kind](self, plan, rng)]


def _question(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(lo, hi)))


def _conversation(plan: SubsetPlan, i: int, content: list[Any], rng: random.Random) -> dict[str, Any]:
    answer = _question(rng, 4, 24) + "."
    return {"id": f"{plan.name}-{i:07d}", "messages": [user(*content), asst([txt(answer)])]}


def _image_rows(w: _Writer, plan: SubsetPlan, rng: random.Random) -> list[dict[str, Any]]:
    return [_conversation(plan, i, [img(w.upstream_image()), _question(rng, 4, 12) + "?"], rng)
            for i in range(plan.rows)]  # fmt: skip


def _multi_rows(w: _Writer, plan: SubsetPlan, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(plan.rows):
        parts: list[Any] = [img(w.upstream_image()) for _ in range(rng.randint(2, 4))]
        out.append(_conversation(plan, i, [*parts, txt("Which one differs?")], rng))
    return out


def _tar_rows(w: _Writer, plan: SubsetPlan, rng: random.Random) -> list[dict[str, Any]]:
    """One image a row, shipped in the release's tars (``media/shard_*.tar``, members ``images/<n>.jpg``)."""
    members: dict[str, bytes] = {}
    out = []
    for i in range(plan.rows):
        ref = f"images/{plan.rank:02d}{i:06d}.jpg"
        members[ref] = image_bytes(1_000_000 * (plan.rank + 1) + i, w.seed)
        out.append(_conversation(plan, i, [img(ref), txt(_question(rng, 4, 12) + "?")], rng))
        if len(members) == TAR_MEMBERS or i == plan.rows - 1:
            write_tar(w.release / plan.name / "media" / f"shard_{i // TAR_MEMBERS:06d}.tar", members)
            members = {}
    return out


def _video_rows(w: _Writer, plan: SubsetPlan, rng: random.Random) -> list[dict[str, Any]]:
    """Two tiny clips in the release (loose files), the rows alternating between them."""
    clips = w.release / plan.name / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    for j in range(min(2, plan.rows)):
        (clips / f"clip_{j}.mp4").write_bytes(clip_bytes(plan.rank * 2 + j))
        w.videos += 1
    return [_conversation(plan, i, [vid(f"clips/clip_{i % 2}.mp4"), txt("What moves?")], rng)
            for i in range(plan.rows)]  # fmt: skip


def _text_rows(w: _Writer, plan: SubsetPlan, rng: random.Random) -> list[dict[str, Any]]:
    return [_conversation(plan, i, [f"Q{i}: {_question(rng, 8, 30)}?"], rng) for i in range(plan.rows)]


#: Kind -> the builder of a subset's rows (and of its media in the release).
_ROWS: Final[dict[str, Callable[[_Writer, SubsetPlan, random.Random], list[dict[str, Any]]]]] = {
    "image": _image_rows,
    "multi": _multi_rows,
    "tar": _tar_rows,
    "video": _video_rows,
    "text": _text_rows,
}
_UPSTREAM_KINDS: Final[frozenset[str]] = frozenset({"image", "multi"})


def build_shaped_release(
    dest: Path,
    rows: int,
    *,
    mix: str = "v3",
    subsets: int = SUBSETS_V3,
    seed: int = 0,
    upstream_dir: Path | None = None,
    upstream_url: str | None = None,
    overwrite: bool = False,
) -> ShapedRelease:
    """Write a ``rows``-row release of ``mix`` (:data:`~.shaped_plan.MIXES`) with ``subsets`` subsets under
    ``dest`` (see the module's layout). Raises ``FileExistsError`` as
    :func:`.sample_build.build_sample_release` does."""
    dest = Path(dest)
    _prepare_dest(dest, overwrite)
    plan = plan_release(rows, mix=mix, subsets=subsets)
    w = _Writer(dest, seed, write_upstream=upstream_dir is None)
    for p in plan:
        rng = random.Random(f"{seed}:{p.name}")
        folder = w.release / p.name
        folder.mkdir(parents=True, exist_ok=True)
        write_jsonl(folder / f"{p.name}.jsonl", w.rows(p, rng))
        layout = [f"{p.name}/", f"  {p.name}.jsonl"]
        source = f"Generated subset of kind {p.kind} (rank {p.rank} by size) of a v3-shaped release."
        files = {f"{p.name}/README.md": readme(p.name, p.name, source, "https://example.invalid/", layout,
                                                "License: CC-BY-4.0")}  # fmt: skip
        write_files(w.release, files)
    upstream = upstream_dir if upstream_dir is not None else dest / "upstream"
    upstream.mkdir(parents=True, exist_ok=True)
    recipes = write_recipes(plan, dest / "recipes", upstream_url)
    return ShapedRelease(w.release, upstream, recipes, plan, w.upstream_refs, w.videos)


def write_recipes(plan: list[SubsetPlan], folder: Path, upstream_url: str | None = None) -> Path:
    """One ``http_files`` recipe per subset whose rows reference upstream images; ``upstream_url`` (default
    ``${VLMFORGE_SHAPED_UPSTREAM}``) is where ``upstream/`` is served."""
    base = (upstream_url or "${" + UPSTREAM_ENV + "}").rstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    for p in plan:
        if p.kind in _UPSTREAM_KINDS:
            text = (
                f"subset: {p.name}\nlicense: CC-BY-4.0\n"
                f'sources:\n  - kind: http_files\n    allow_private: true\n    url: "{base}/img/{{name}}"\n'
            )
            (folder / f"{p.name}.yaml").write_text(text)
    return folder
