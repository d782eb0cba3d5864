"""The whole flow over a subset whose media live upstream: a media recipe sends the fetch stage to a real
HTTP server on 127.0.0.1, each object is fetched once, and a rerun fetches nothing. The same run exercises
``--seq-len-mode truncate`` and ``--skip-gate`` end to end."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from conftest import run_flow
from http_fixture import HttpFixture
from PIL import Image

from vlmforge.schemas.config import RunConfig
from vlmforge.tasks.manifests import OutputLayout, read_table
from vlmforge.tasks.validate import validate_subset

pytestmark = pytest.mark.slow
SUBSET = "remote_photos"
LONG_ANSWER = " ".join(f"word{i}" for i in range(400))  # ~800 text tokens: cut to fit --seq-len


def _jpeg(seed: int) -> bytes:
    from skimage import data

    img = Image.fromarray(data.astronaut()).rotate(seed * 7).resize((320 + 16 * seed, 240))
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _release(root: Path) -> Path:
    folder = root / "release" / SUBSET
    folder.mkdir(parents=True)
    (folder / "README.md").write_text("# remote photos\n\nLicense: CC0-1.0\n")
    rows = []
    for i, name in enumerate(["a.jpg", "b.jpg", "a.jpg", "gone.jpg"]):  # a.jpg twice: fetched once
        answer = LONG_ANSWER if i == 1 else f"photo {i}"
        rows.append(
            {
                "id": f"r{i}",
                "messages": [
                    {"role": "user", "content": [{"type": "image", "image": f"img/{name}"}, "What is it?"]},
                    {"role": "assistant", "content": answer},
                ],
            }
        )
    (folder / f"{SUBSET}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root / "release"


def test_remote_media_are_fetched_once_and_the_run_reconciles(prefect_harness: None, tmp_path: Path) -> None:
    with HttpFixture() as srv:
        srv.add("/media/a.jpg", _jpeg(1))
        srv.add("/media/b.jpg", _jpeg(2))
        recipes = tmp_path / "recipes"
        recipes.mkdir()
        (recipes / f"{SUBSET}.yaml").write_text(
            f"subset: {SUBSET}\nlicense: CC0-1.0\n"
            f"sources:\n  - kind: http_files\n    allow_private: true\n    url: {srv.url('/media/{name}')}\n"
        )
        cfg = RunConfig(
            release=str(_release(tmp_path)),
            out=str(tmp_path / "out"),
            catalogs=(str(recipes),),
            seq_len=600,
            seq_len_mode="truncate",
            skip_gate=True,
        )
        first = run_flow(cfg)
        outcome = first.subsets[0]
        assert (outcome.stats.lines, outcome.stats.ok, outcome.stats.rejected) == (4, 3, 1)
        assert outcome.published and outcome.validation == "ok"
        assert outcome.stats.fetched == 2 and outcome.stats.truncated == 1
        assert srv.completed("/media/a.jpg") == 1 and srv.completed("/media/b.jpg") == 1

        layout = OutputLayout(cfg.out)
        samples = {r["sample_id"]: r for r in read_table(layout, "samples", SUBSET).to_pylist()}
        assert samples["r3"]["status"] == "rejected" and samples["r3"]["reason"].startswith("fetch_failed")
        cut = samples["r1"]
        assert cut["status"] == "ok" and cut["truncated_tokens"] > 0
        assert cut["total_tokens"] == 600 == cut["text_tokens"] + cut["visual_tokens"]
        media = read_table(layout, "media", SUBSET).to_pylist()
        by_ref = {m["ref"]: m for m in media}
        assert by_ref["img/a.jpg"]["upstream"] == srv.url("/media/a.jpg")
        assert by_ref["img/a.jpg"]["fetch_status"] == "ok"
        assert by_ref["img/gone.jpg"]["fetch_status"] == "http_404"

        subsets = read_table(layout, "subsets", SUBSET).to_pylist()[0]
        assert subsets["skip_gate"] is True and subsets["published"] is True
        assert subsets["media_recipe_sha256"]  # a recipe change is visible to `vlmforge refresh`
        run = json.loads(next((Path(cfg.out) / "runs").glob("*.json")).read_text())
        assert run["config"]["gate"]["skip_gate"] is True

        again = run_flow(cfg)
        assert again.subsets[0].stats.skipped_batches == again.subsets[0].stats.batches
        assert srv.completed("/media/a.jpg") == 1 and srv.completed("/media/b.jpg") == 1
        assert validate_subset(cfg.out, SUBSET).ok
