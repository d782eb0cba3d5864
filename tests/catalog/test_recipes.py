"""Recipe schema, the shipped catalog, and `vlmforge recipe init/check/list`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from vlmforge.flows.cli.recipe import register
from vlmforge.schemas.recipes import (
    ArchiveSource,
    Recipe,
    expand_env,
    parse_recipe,
    parse_recipe_yaml,
    ref_variables,
)
from vlmforge.tasks.catalog.recipe_files import (
    RecipeError,
    builtin_catalog_dir,
    find_recipe,
    load_recipe,
    recipe_for,
)
from vlmforge.tasks.catalog.recipe_init import draft_recipe, readme_urls, source_for_url


def base(**src: object) -> dict[str, object]:
    return {"subset": "s", "license": "MIT", "sources": [src]}


def error_text(data: object) -> str:
    with pytest.raises(ValidationError) as info:
        parse_recipe(data)
    return str(info.value)


def test_unknown_fields_are_refused_with_their_location() -> None:
    text = error_text(base(kind="http_files", url="https://h/{name}", urls="x"))
    assert "sources.0.http_files.urls" in text and "Extra inputs are not permitted" in text
    assert "licence" in error_text(
        {"subset": "s", "licence": "MIT", "license": "MIT", "sources": [{"kind": "release_tar"}]}
    )


def test_templates_are_checked() -> None:
    assert "unknown variable(s) file" in error_text(base(kind="http_files", url="https://h/{file}"))
    ok = parse_recipe(base(kind="http_files", url="https://h/{file}", match=r"(?P<file>[^/]+)$"))
    assert ok.sources[0].kind == "http_files"
    assert "not a plain variable" in error_text(base(kind="http_files", url="https://h/{name.__class__}"))
    assert "not a valid regex" in error_text(base(kind="http_files", url="https://h/{name}", match="("))
    assert "must start with http" in error_text(base(kind="http_files", url="ftp://h/{name}"))
    assert "64 lowercase hex" in error_text(base(kind="archive", url="https://h/a.zip", sha256="abc"))
    assert "format" in error_text(base(kind="archive", url="https://h/archive.bin"))
    assert "shards is set" in error_text(
        base(kind="archive", url="https://h/a.tar", shards={"start": 0, "stop": 3})
    )
    assert "owner/name" in error_text(base(kind="hf", repo="justaname", revision="main"))


def test_ref_variables_and_env() -> None:
    v = ref_variables("train/png/abc.d.png", None)
    assert v == {
        "ref": "train/png/abc.d.png",
        "name": "abc.d.png",
        "stem": "abc.d",
        "ext": "png",
        "dir": "train/png",
    }
    assert ref_variables("x.jpg", __import__("re").compile(r"^y")) is None
    with pytest.raises(Exception, match=r"\$\{VLMFORGE_NOPE\} is not set, or not allowed"):
        expand_env("${VLMFORGE_NOPE}/x")


def test_archive_shards_and_format() -> None:
    r = parse_recipe(
        base(kind="archive", url="https://h/cc-{shard}.tar", shards={"start": 0, "stop": 2, "width": 4})
    )
    src = r.sources[0]
    assert isinstance(src, ArchiveSource)
    assert src.shards is not None and src.shards.values() == ["0000", "0001", "0002"]
    assert (
        src.archive_format("https://h/x.tar.gz") == "tar" and src.archive_format("https://h/x.zip") == "zip"
    )


def test_default_recipe() -> None:
    r = Recipe.default("turing")
    assert [s.kind for s in r.sources] == ["local", "release_tar"] and not r.remote


def test_shipped_catalog_loads_and_names_licenses() -> None:
    folder = builtin_catalog_dir()
    files = sorted(folder.glob("*.yaml"))
    assert len(files) >= 15
    for p in files:
        r = load_recipe(p)
        assert r.license and r.subset == p.stem
        assert r.sources[0].kind == "release_tar"  # the release's own media are always tried first
    coco = find_recipe("aokvqa_1")
    assert coco is not None and coco.remote
    assert any(s.kind == "s3" for s in recipe_for("openimages_3").sources)
    assert recipe_for("turing").notes == "default: no recipe in the catalog"


def test_user_catalog_wins_and_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "aokvqa_1.yaml").write_text(
        "subset: aokvqa_1\nlicense: MIT\nsources:\n  - kind: release_tar\n"
    )
    assert recipe_for("aokvqa_1", [tmp_path]).license == "MIT"
    (tmp_path / "bad.yaml").write_text("subset: bad\nlicense: MIT\nsources:\n  - kind: archive\n    url: 3\n")
    with pytest.raises(RecipeError) as info:
        load_recipe(tmp_path / "bad.yaml")
    assert "bad.yaml" in str(info.value) and "sources.0.archive.url" in str(info.value)
    (tmp_path / "other.yaml").write_text("subset: mismatch\nlicense: MIT\nsources:\n  - kind: release_tar\n")
    with pytest.raises(RecipeError, match="name it mismatch.yaml"):
        load_recipe(tmp_path / "other.yaml")
    (tmp_path / "broken.yaml").write_text("subset: [\n")
    with pytest.raises(RecipeError, match="not valid YAML"):
        load_recipe(tmp_path / "broken.yaml")


def test_source_for_url() -> None:
    assert source_for_url("http://images.cocodataset.org/zips/train2017.zip") == {
        "kind": "archive",
        "url": "http://images.cocodataset.org/zips/train2017.zip",
        "member": "{ref}",
    }
    assert source_for_url("https://huggingface.co/datasets/pixparse/cc3m-wds") == {
        "kind": "hf",
        "repo": "pixparse/cc3m-wds",
        "revision": "main",
        "path": "{ref}",
    }
    assert source_for_url("https://huggingface.co/datasets/o/n/resolve/abc123/images.zip")["url"] == (  # type: ignore[index]
        "hf://datasets/o/n@abc123/images.zip"
    )
    assert source_for_url("s3://open-images-dataset/train")["url"] == "s3://open-images-dataset/train/{name}"  # type: ignore[index]
    assert source_for_url("https://open-images-dataset.s3.amazonaws.com/train/")["url"] == (  # type: ignore[index]
        "s3://open-images-dataset/train/{name}"
    )
    assert source_for_url("https://github.com/vis-nlp/ChartQA")["url"] == (  # type: ignore[index]
        "https://raw.githubusercontent.com/vis-nlp/ChartQA/main/{ref}"
    )
    assert source_for_url("https://arxiv.org/abs/2203.10244") is None
    assert readme_urls("see (https://a.org/x.zip), and https://a.org/x.zip.") == ["https://a.org/x.zip"]


@pytest.fixture
def release(tmp_path: Path) -> Path:
    sub = tmp_path / "rel" / "chartqa_1"
    sub.mkdir(parents=True)
    (sub / "README.md").write_text(
        "# ChartQA\n\nMedia: download the charts from https://github.com/vis-nlp/ChartQA and the archive\n"
        "[zip](https://example.org/data/ChartQA%20Dataset.zip). Paper: https://arxiv.org/abs/2203.10244\n\n"
        "License: GPL-3.0\n"
    )
    lines = [
        {
            "id": str(i),
            "messages": [
                {"role": "user", "content": [{"type": "image", "image": f"train/png/{i}.png"}, "q"]}
            ],
        }
        for i in range(3)
    ]
    (sub / "chartqa_1.jsonl").write_text("not json\n" + "\n".join(json.dumps(x) for x in lines) + "\n")
    return tmp_path / "rel"


def test_draft_recipe_from_readme(release: Path) -> None:
    d = draft_recipe(str(release), "chartqa_1")
    r = parse_recipe_yaml(d.text)
    assert r.status == "draft" and r.license == "GPL-3.0"
    assert [s.kind for s in r.sources] == ["release_tar", "local", "http_files", "archive"]
    assert d.sample_refs == ("train/png/0.png", "train/png/1.png", "train/png/2.png")
    assert "#   train/png/0.png" in d.text and "https://arxiv.org/abs/2203.10244" in d.text


def test_cli_recipe_init_check_list(release: Path, tmp_path: Path) -> None:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """vlmforge"""

    register(app)
    runner = CliRunner()
    out = tmp_path / "catalog" / "chartqa_1.yaml"
    out.parent.mkdir()
    res = runner.invoke(app, ["recipe", "init", "chartqa_1", "--release", str(release), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "drafted" in res.output and out.read_text().startswith("# DRAFT media recipe for chartqa_1")
    res = runner.invoke(app, ["recipe", "init", "chartqa_1", "--release", str(release), "--out", str(out)])
    assert res.exit_code != 0 and "--force" in str(res.exception)
    res = runner.invoke(app, ["recipe", "check", str(out)])
    assert res.exit_code == 0 and "ok (draft, GPL-3.0" in res.output
    res = runner.invoke(app, ["recipe", "list", "--catalog", str(out.parent)])
    assert (
        res.exit_code == 0
        and "chartqa_1" in res.output
        and "draft" in res.output
        and "openimages_1" in res.output
    )
    res = runner.invoke(app, ["recipe", "init", "nope", "--release", str(release)])
    assert res.exit_code != 0 and "not a subset" in str(res.exception)
