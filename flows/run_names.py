"""Flow run names that tell runs apart in the Prefect UI: the release and the output folder.

Every run of one release was named ``run sample-release``, whatever its output; the output folder is what
separates a user's runs (a trial, the real one, another model's), so the name carries both.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

MAX_PART = 40


def run_name() -> str:
    """``run <release> -> <out>`` of the flow run being created (Prefect calls this for the name)."""
    from prefect.runtime import flow_run

    from .runtime.interrupt import note_flow_run

    note_flow_run(flow_run.get_id())  # the run a Ctrl-C or SIGTERM of this process cancels
    cfg = flow_run.parameters.get("cfg")
    return name_of(_field(cfg, "source", "release"), _field(cfg, None, "out"))


def name_of(release: str | None, out: str | None) -> str:
    return f"run {short(release, 1)} -> {short(out, 2)}"


def short(path: str | None, parts: int) -> str:
    """The last ``parts`` parts of a path or URL (the whole when short enough), never empty."""
    if not path:
        return "?"
    text = path.rstrip("/")
    if len(text) <= MAX_PART:
        return text
    tail = PurePosixPath(text.split("://", 1)[-1]).parts[-parts:]
    return ".../" + "/".join(tail)


def _field(cfg: Any, section: str | None, name: str) -> str | None:
    """``cfg.section.name`` of a RunConfig, or of its dict form (parameters as the API returns them)."""
    if cfg is None:
        return None
    if isinstance(cfg, dict):
        holder = cfg.get(section, {}) if section else cfg
        value = holder.get(name) if isinstance(holder, dict) else None
    else:
        value = getattr(getattr(cfg, section) if section else cfg, name, None)
    return str(value) if value is not None else None
