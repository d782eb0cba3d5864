"""``--out`` and the store against the release and the media roots (``flows/cli/overlap.py``): the pure
comparison of places, local (symlinks resolved) and fsspec URLs (protocol + path). The real CLI refusing
these before start-up is ``tests/reliability/test_hostile_round2_a.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlmforge.flows.cli.overlap import Place, overlap_problem, place_of
from vlmforge.schemas.config import RunConfig


def cfg(release: str, out: str, **extra: object) -> RunConfig:
    return RunConfig.of(release=release, out=out, **extra)


def test_local_places_resolve_symlinks_and_file_urls(tmp_path: Path) -> None:
    (tmp_path / "rel").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "rel")
    real = place_of(str(tmp_path / "rel"))
    assert place_of(str(tmp_path / "alias")) == real
    assert place_of(f"file://{tmp_path}/rel/") == real
    assert place_of(str(tmp_path / "alias" / "not-yet" / "out")).path == f"{real.path}/not-yet/out"


def test_urls_compare_by_canonical_protocol_and_path() -> None:
    assert place_of("s3://bucket/prefix/") == Place("s3", "/bucket/prefix")
    assert place_of("s3a://bucket/prefix") == place_of("s3://bucket/prefix")  # one filesystem, two names
    assert place_of("simplecache::s3://bucket/prefix") == place_of("s3://bucket/prefix")
    assert place_of("s3://bucket/prefix").holds(place_of("s3://bucket/prefix/out"))
    assert not place_of("s3://bucket/prefix").holds(place_of("s3://bucket/prefix2"))
    assert not place_of("s3://bucket/p").holds(place_of("/bucket/p"))  # other protocol, other place


@pytest.mark.parametrize(
    ("release", "out", "extra", "words"),
    [
        ("{t}/rel", "{t}/rel", {}, "--out {t}/rel is the release"),
        ("{t}/rel", "{t}/rel/energon", {}, "is inside the release"),
        ("{t}/rel", "{t}", {}, "holds the release"),
        ("{t}/rel", "{t}/alias/sub", {}, "is inside the release"),
        ("{t}/rel", "{t}/out", {"media_roots": ("{t}/out/m",)}, "holds --media-root"),
        ("{t}/rel", "{t}/out", {"store": "{t}/rel/store"}, "the store {t}/rel/store is inside the release"),
        ("{t}/rel", "{t}/out", {"store": "{t}/m"}, "the store {t}/m holds --media-root"),
        ("{t}/rel", "{t}/out", {"store": "{t}", "media_roots": ()}, "the store {t} holds the release"),
        ("{t}/rel", "{t}/out", {"store": "{t}/out/energon"}, "is inside --out"),
        ("{t}/rel", "{t}/out/x", {"store": "{t}/out"}, "holds --out"),
        ("s3://b/rel", "s3://b/rel/out", {}, "is inside the release"),
    ],
)
def test_an_output_overlapping_an_input_is_named(
    tmp_path: Path, release: str, out: str, extra: dict[str, object], words: str
) -> None:
    (tmp_path / "rel").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "rel")
    t = str(tmp_path.resolve())

    def fill(v: object) -> object:
        return tuple(str(x).format(t=t) for x in v) if isinstance(v, tuple) else str(v).format(t=t)

    extra = {k: fill(v) for k, v in extra.items()}
    if "media_roots" not in extra:
        extra["media_roots"] = (f"{t}/m/images",)
    found = overlap_problem(cfg(release.format(t=t), out.format(t=t), **extra))
    assert found is not None and words.format(t=t) in found[0], found


def test_separate_folders_and_the_default_store_pass(tmp_path: Path) -> None:
    t = str(tmp_path)
    assert overlap_problem(cfg(f"{t}/rel", f"{t}/out", media_roots=(f"{t}/media",))) is None
    assert overlap_problem(cfg(f"{t}/rel", f"{t}/out", store=f"{t}/out/store")) is None
    assert overlap_problem(cfg(f"{t}/rel", f"{t}/out", store=f"{t}/store")) is None
    assert overlap_problem(cfg(f"{t}/rel", f"{t}/rel2")) is None  # a shared prefix is not a folder
    assert overlap_problem(cfg("hf://datasets/org/set", f"{t}/out")) is None
