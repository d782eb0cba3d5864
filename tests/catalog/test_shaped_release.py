"""The v3-shaped generated release (tasks/sample_release/shaped.py): 76 long-tailed subsets of every row
kind, media in release tars, loose clips and behind upstream recipes, the same bytes every time."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections import Counter
from pathlib import Path

import pytest
from PIL import Image

from vlmforge.tasks.catalog import catalog_release, load_recipe
from vlmforge.tasks.sample_release.shaped import ShapedRelease, build_shaped_release
from vlmforge.tasks.sample_release.shaped_plan import plan_release, zipf_sizes

ROWS = 600


def _hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def shaped(tmp_path_factory: pytest.TempPathFactory) -> ShapedRelease:
    return build_shaped_release(tmp_path_factory.mktemp("shaped") / "v3", ROWS)


def _records(rel: ShapedRelease, subset: str) -> list[dict]:
    text = (rel.root / subset / f"{subset}.jsonl").read_text("utf-8")
    return [json.loads(line) for line in text.splitlines()]


def _parts(record: dict, kind: str) -> list[str]:
    return [p[kind] for m in record["messages"] if isinstance(m["content"], list)
            for p in m["content"] if isinstance(p, dict) and p.get("type") == kind]  # fmt: skip


def test_zipf_sizes_are_long_tailed_and_sum_to_the_rows() -> None:
    sizes = zipf_sizes(20_000, 76)
    assert sum(sizes) == 20_000 and len(sizes) == 76
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] > 40 * sizes[-1] and sizes[-1] >= 1  # a few large subsets, a long tail of small ones
    assert zipf_sizes(10, 76) == [1] * 10 + [0] * 66  # fewer rows than subsets: the tail is empty
    with pytest.raises(ValueError, match="unknown mix"):
        plan_release(10, mix="nope")


def test_76_subsets_of_every_kind_and_the_rows_asked_for(shaped: ShapedRelease) -> None:
    assert len(shaped.subsets) == 76 and shaped.total_lines == ROWS
    assert sorted(p.name for p in shaped.root.iterdir()) == sorted(shaped.subsets)
    kinds = Counter(p.kind for p in shaped.plan)
    assert set(kinds) == {"image", "multi", "tar", "video", "text"} and kinds["video"] == 2
    entries = catalog_release(str(shaped.root), batch_lines=50)
    assert {e.subset: e.rows for e in entries} == {p.name: p.rows for p in shaped.plan}
    assert {e.license for e in entries} == {"CC-BY-4.0"}
    assert not any(e.duplicate_rows for e in entries)


def test_rows_reference_the_media_of_their_kind(shaped: ShapedRelease) -> None:
    served: list[str] = []
    for p in shaped.plan:
        records = _records(shaped, p.name)
        assert len(records) == p.rows and len({r["id"] for r in records}) == p.rows
        images = [ref for r in records for ref in _parts(r, "image")]
        videos = [ref for r in records for ref in _parts(r, "video")]
        per_row = [len(_parts(r, "image")) for r in records]
        if p.kind == "text":
            assert images == videos == []
        elif p.kind == "video":
            assert images == [] and len(videos) == p.rows
            assert {(shaped.root / p.name / v).is_file() for v in videos} == {True}
        elif p.kind == "tar":
            members: set[str] = set()
            for tar in sorted((shaped.root / p.name / "media").glob("shard_*.tar")):
                with tarfile.open(tar) as tf:
                    members |= set(tf.getnames())
            assert set(images) == members and per_row == [1] * p.rows
        else:
            assert (p.kind == "image" and per_row == [1] * p.rows) or (
                p.kind == "multi" and min(per_row) >= 2
            )
            assert (shaped.recipes / f"{p.name}.yaml").is_file()
            served += images
    # every upstream reference is its own file under upstream/, and its own object (no two alike)
    assert served == shaped.upstream_refs and len(set(served)) == len(served)
    blobs = [(shaped.upstream / ref).read_bytes() for ref in served]
    assert len({hashlib.sha256(b).hexdigest() for b in blobs}) == len(blobs)
    with Image.open(shaped.upstream / served[0]) as im:
        assert im.format == "JPEG" and max(im.size) <= 384


def test_recipes_load_and_point_at_the_served_folder(shaped: ShapedRelease, tmp_path: Path) -> None:
    names = sorted(p.stem for p in shaped.recipes.glob("*.yaml"))
    assert names == sorted(p.name for p in shaped.plan if p.kind in ("image", "multi"))
    recipe = load_recipe(shaped.recipes / f"{names[0]}.yaml")
    assert recipe.subset == names[0] and recipe.sources[0].kind == "http_files"
    assert "${VLMFORGE_SHAPED_UPSTREAM}/img/{name}" in (shaped.recipes / f"{names[0]}.yaml").read_text()


def test_the_same_arguments_give_the_same_bytes(shaped: ShapedRelease, tmp_path: Path) -> None:
    again = build_shaped_release(tmp_path / "again", ROWS)
    assert _hashes(again.root) == _hashes(shaped.root)
    assert _hashes(again.upstream) == _hashes(shaped.upstream)
    assert _hashes(again.recipes) == _hashes(shaped.recipes)
    other = build_shaped_release(tmp_path / "other", ROWS, seed=1)
    assert _hashes(other.upstream) != _hashes(shaped.upstream)


def test_an_existing_corpus_is_referenced_not_written(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rel = build_shaped_release(
        tmp_path / "r", 200, mix="images", upstream_dir=corpus, upstream_url="http://h:1"
    )
    assert rel.upstream == corpus and not any(corpus.iterdir()) and not (tmp_path / "r" / "upstream").exists()
    assert rel.upstream_refs == [f"img/{i:06d}.jpg" for i in range(200)]
    assert '"http://h:1/img/{name}"' in (rel.recipes / "s00_image.yaml").read_text()
    text = build_shaped_release(tmp_path / "t", 1000, mix="text")
    assert text.upstream_refs == [] and not list(text.recipes.iterdir())
    with pytest.raises(FileExistsError):
        build_shaped_release(tmp_path / "t", 1000, mix="text")


def test_the_release_not_each_subset_is_split_for_the_cores(shaped: ShapedRelease, tmp_path: Path) -> None:
    """A run asks the catalog for twice its CPUs of batches so every core has work to the end: 76 subsets
    give the cores that work by themselves, so a small subset is no longer cut into that many batches of a
    row or two (each a task run and three manifest parts); one subset still is."""
    many = catalog_release(str(shaped.root), batch_lines=10_000, min_batches=4)
    batches = {e.subset: len(e.batch_offsets) - 1 for e in many}
    assert set(batches.values()) == {1}
    one = build_shaped_release(tmp_path / "one", 40, mix="text", subsets=1)
    (entry,) = catalog_release(str(one.root), batch_lines=10_000, min_batches=4)
    assert len(entry.batch_offsets) - 1 == 4
    two = build_shaped_release(tmp_path / "two", 40, mix="text", subsets=2)
    entries = catalog_release(str(two.root), batch_lines=10_000, min_batches=4)
    assert [len(e.batch_offsets) - 1 for e in entries] == [2, 2]
