"""Outputs never touch inputs: ``--out`` and the store may not overlap the release or a media root.

A run writes and deletes under OUT (manifests, ``energon/<subset>`` swapped into place, ``staging/``,
``quality/``) and under the store. An OUT equal to, inside or around the release let publishing one subset
delete the release's own ``REL/energon/<subset>/...`` files; so before anything starts, each pair of an
output (OUT, the store) and an input (the release, each ``--media-root``) is compared, in both directions,
and the first overlap is one usage error (exit 2). The store may live inside OUT only as ``OUT/store`` (the
default place), where the run writes nothing else.

Places are compared by protocol and path: a local path (or ``file://`` URL) with its symlinks resolved, an
fsspec URL (``s3://b/p``, ``hf://...``; the target of a ``a::b`` chain) by its filesystem's canonical
protocol and stripped path. Nothing is listed or opened, so remote places cost no request.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

from ...schemas.config import RunConfig

STORE_IN_OUT = "store"  # the one folder of OUT the store may be (the default: OUT/store)


@dataclass(frozen=True)
class Place:
    """A location as compared: canonical protocol (``file`` for local paths) and an absolute path."""

    protocol: str
    path: str

    def holds(self, other: Place) -> bool:
        """``other`` is this place or lies inside it."""
        if self.protocol != other.protocol:
            return False
        return other.path == self.path or other.path.startswith(self.path.rstrip("/") + "/")


def place_of(url: str) -> Place:
    """The :class:`Place` of a local path or fsspec URL (symlinks of a local path resolved)."""
    import fsspec.core

    target = url.split("::")[-1]
    protocol, rest = fsspec.core.split_protocol(target)
    if protocol in (None, "file", "local"):
        return Place("file", os.path.realpath(os.path.expanduser(rest)))
    canonical, path = protocol, rest
    try:
        cls = fsspec.get_filesystem_class(protocol)
        names = cls.protocol if isinstance(cls.protocol, tuple | list) else (cls.protocol,)
        canonical = str(names[0]) if names else protocol
        path = str(cls._strip_protocol(target))
    except (ImportError, ValueError, TypeError, AttributeError):
        pass  # an implementation that cannot be imported here: compare the URL as written
    return Place(canonical, posixpath.normpath("/" + path.strip("/")))


def overlap_problem(cfg: RunConfig) -> tuple[str, str] | None:
    """(problem, hint) for the first output that overlaps an input, or None when none does."""
    out, store = place_of(cfg.out), place_of(cfg.store_url)
    inputs = [("the release", cfg.source.release)]
    inputs += [(f"--media-root {root}", root) for root in cfg.media.media_roots]
    outputs = [(f"--out {cfg.out}", out, "--out"), (f"the store {cfg.store_url}", store, "--store")]
    for what, output, flag in outputs:
        for name, url in inputs:
            given = place_of(url)
            relation = _relation(output, given)
            if relation is not None:
                where = f"{name} ({url})" if name == "the release" else name
                return (
                    f"{what} {relation} {where}: a run writes and deletes files in its output",
                    f"give {flag} a folder apart from the release and the media roots (not in, not around)",
                )
    if store.holds(out):
        return (
            f"the store {cfg.store_url} holds --out {cfg.out}",
            "give --store a folder outside --out, or leave it out (default OUT/store)",
        )
    own = Place(out.protocol, out.path.rstrip("/") + "/" + STORE_IN_OUT)
    if out.holds(store) and not own.holds(store):
        return (
            f"the store {cfg.store_url} is inside --out {cfg.out}, where the run writes its own folders",
            f"give --store a folder outside --out, or {cfg.out.rstrip('/')}/{STORE_IN_OUT} (the default)",
        )
    return None


def _relation(output: Place, given: Place) -> str | None:
    if output == given:
        return "is"
    if given.holds(output):
        return "is inside"
    if output.holds(given):
        return "holds"
    return None
