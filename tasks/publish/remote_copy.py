"""An output on an object store (``s3://...``): its Energon datasets are built and read in a local copy.

The shard writer, Energon's index (SQLite) and its loader need a local folder, and an object store has no
folder rename to swap a dataset in. So for a remote ``OUT`` the publish stage builds ``energon/<subset>`` in
a local working copy (:func:`local_energon`, the same bytes a local ``OUT`` gets), then :func:`push_dataset`
uploads it file by file: each object is one PUT, so no reader ever sees a partial file under a final name,
and a rerun uploads the same bytes. The shards go up first, ``.nv-meta`` next and ``vlmforge-shards.json``
(the mark of a published subset) last; then objects the new version no longer has are deleted. A tar the
remote listing already names with the same sha256 and size is not uploaded again.

The working copy goes once uploaded (:func:`drop_local_copy`): a node's disk holds the subsets it is
publishing, not the output. Readers on any node (the read-back, ``vlmforge validate``) get a temporary local
copy with :func:`dataset_copy`, the metadataset and the split notes :func:`energon_view` (listings,
``.nv-meta`` and the yaml files only). A trainer reads the output on S3 directly: megatron-energon loads
``msc://<profile>/<prefix>/energon/<subset>`` through the Multi-Storage Client. For a local ``OUT`` all of
these are the output folder itself: nothing is copied and nothing changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..manifests import OutputLayout
from ..storage import atomic_write_bytes, is_local
from .listing import MANIFEST_NAME, published_subsets

__all__ = ["dataset_copy", "drop_local_copy", "energon_view", "local_energon", "push_dataset", "push_file"]

META = ".nv-meta"
#: what :func:`energon_view` leaves out of a dataset's ``.nv-meta``: Energon's sample index
VIEW_SKIPS = ("index.sqlite", "index.uuid")


def local_energon(layout: OutputLayout) -> Path:
    """The folder the Energon datasets of ``layout`` are built in: ``OUT/energon`` itself for a local
    output, else a local working copy named after the output's URL (one per output on this machine)."""
    if is_local(layout.fs):
        return Path(layout.energon)
    key = hashlib.sha256(layout.fs.unstrip_protocol(layout.energon).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "vlmforge-energon" / key


def _remote_names(layout: OutputLayout, folder: str) -> list[str]:
    return sorted(_remote_files(layout, folder))


def _remote_files(layout: OutputLayout, folder: str) -> dict[str, int]:
    """Relative path -> size of every object under ``energon/<folder>/`` (none when there is none)."""
    root = f"{layout.energon}/{folder}"
    layout.fs.invalidate_cache(root)
    try:
        found: dict[str, Any] = layout.fs.find(root, detail=True)
    except FileNotFoundError:
        return {}
    return {
        p[len(root) + 1 :]: int(info.get("size") or 0)
        for p, info in found.items()
        if p.startswith(root + "/")
    }


def _listed(listing: list[dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    """Shard name -> (sha256, bytes) as a listing (``vlmforge-shards.json``) records them."""
    return {
        e["shard"]: (e.get("sha256"), e.get("bytes")) for e in listing if isinstance(e, dict) and "shard" in e
    }


def _read_listing(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def _upload_order(name: str) -> int:
    """Shards and their ``.idx`` first, ``.nv-meta`` next, the listing (the published mark) last."""
    if name == MANIFEST_NAME:
        return 2
    return 1 if name.startswith(META + "/") else 0


def push_dataset(layout: OutputLayout, subset: str, local: Path) -> None:
    """Make ``energon/<subset>`` of a remote output hold exactly the files of the local dataset ``local``
    (see the module docstring); nothing for a local output."""
    if is_local(layout.fs):
        return
    root = f"{layout.energon}/{subset}"
    remote = _remote_files(layout, subset)
    before: dict[str, tuple[Any, Any]] = {}
    if MANIFEST_NAME in remote:
        with contextlib.suppress(OSError, ValueError):
            before = _listed(json.loads(layout.fs.cat_file(f"{root}/{MANIFEST_NAME}")))
    now = _listed(_read_listing(local / MANIFEST_NAME))
    names = sorted(
        (p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()),
        key=lambda n: (_upload_order(n), n),
    )
    for name in names:
        same = name in now and before.get(name) == now[name] and remote.get(name) == now[name][1]
        if not same:
            layout.fs.put_file(str(local / name), f"{root}/{name}")
    stale = sorted(set(remote) - set(names))
    if stale:
        layout.fs.rm([f"{root}/{name}" for name in stale])
    layout.fs.invalidate_cache(root)


def push_file(layout: OutputLayout, local: Path, name: str) -> None:
    """Upload one finished local file as ``energon/<name>`` of a remote output (one PUT); nothing for a
    local output."""
    if not is_local(layout.fs):
        atomic_write_bytes(layout.fs, f"{layout.energon}/{name}", local.read_bytes())


@contextlib.contextmanager
def dataset_copy(layout: OutputLayout, subset: str) -> Iterator[Path]:
    """A local folder holding ``energon/<subset>`` as published (absent when it is not published): the
    folder itself for a local output, else a temporary copy of the remote one, removed after the block."""
    if is_local(layout.fs):
        yield Path(layout.energon) / subset
        return
    with tempfile.TemporaryDirectory(prefix="vlmforge-energon-copy-") as tmp:
        dest = Path(tmp) / subset
        root = f"{layout.energon}/{subset}"
        remote = _remote_files(layout, subset)
        if MANIFEST_NAME in remote:
            for name in sorted(remote):
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                layout.fs.get_file(f"{root}/{name}", str(dest / name))
        yield dest


def drop_local_copy(layout: OutputLayout, subset: str) -> None:
    """Remove the local working copy of a remote output's ``energon/<subset>`` once it is uploaded, so a
    node's disk holds only the subsets it is publishing; nothing for a local output."""
    if not is_local(layout.fs):
        shutil.rmtree(local_energon(layout) / subset, ignore_errors=True)


@contextlib.contextmanager
def energon_view(layout: OutputLayout) -> Iterator[Path]:
    """A local folder to read ``OUT/energon`` from: the folder itself for a local output, else a temporary
    one holding each published dataset's listing, ``split.yaml`` and ``.info.json`` and the top-level yaml
    files (no shards)."""
    if is_local(layout.fs):
        yield Path(layout.energon)
        return
    with tempfile.TemporaryDirectory(prefix="vlmforge-energon-view-") as tmp:
        root = Path(tmp)
        for subset in published_subsets(layout.out):
            names = [MANIFEST_NAME] + [f"{META}/{n}" for n in _remote_names(layout, f"{subset}/{META}")]
            for name in names:
                if name.rsplit("/", 1)[-1] in VIEW_SKIPS:
                    continue
                target = root / subset / name
                target.parent.mkdir(parents=True, exist_ok=True)
                layout.fs.get_file(f"{layout.energon}/{subset}/{name}", str(target))
        with contextlib.suppress(FileNotFoundError):
            for path in layout.fs.glob(f"{layout.energon}/*.yaml"):
                layout.fs.get_file(path, str(root / path.rsplit("/", 1)[-1]))
        yield root
