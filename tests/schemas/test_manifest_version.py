"""A change to the manifest columns comes with a new PIPELINE_VERSION: otherwise the batch fingerprints stay
the same, a rerun keeps every earlier batch, and one subset's parts mix old and new columns."""

from __future__ import annotations

import dataclasses

from vlmforge.schemas import config
from vlmforge.schemas.rows import MediaRow, SampleRow, manifest_fingerprint


def manifest_version_problem(version: str, recorded: str, fingerprint: str) -> str | None:
    """What the developer must do when the recorded fingerprint is not the columns' (None: nothing)."""
    if fingerprint == recorded:
        return None
    return (
        f"the manifest columns (schemas/rows.py) are not the ones recorded for PIPELINE_VERSION {version!r}: "
        f"in schemas/config.py bump PIPELINE_VERSION (so batches written before are redone, not mixed with "
        f"the new columns) and set PIPELINE_MANIFEST_FINGERPRINT = {fingerprint!r}"
    )


def test_manifest_columns_are_recorded_for_the_pipeline_version() -> None:
    problem = manifest_version_problem(
        config.PIPELINE_VERSION, config.PIPELINE_MANIFEST_FINGERPRINT, manifest_fingerprint()
    )
    assert problem is None, problem


def test_a_new_or_retyped_column_changes_the_fingerprint() -> None:
    """A column added, retyped or made nullable is seen; the message says what to change."""
    before = manifest_fingerprint()

    @dataclasses.dataclass(slots=True, kw_only=True)
    class WithColumn(SampleRow):
        blur_score: float | None = None

    @dataclasses.dataclass(slots=True, kw_only=True)
    class Retyped(MediaRow):
        bytes: str | None = None  # type: ignore[assignment]

    @dataclasses.dataclass(slots=True, kw_only=True)
    class Nullable(SampleRow):
        line: int | None = None  # type: ignore[assignment]

    changed = [
        manifest_fingerprint(samples=WithColumn),
        manifest_fingerprint(media=Retyped),
        manifest_fingerprint(samples=Nullable),
    ]
    assert len({before, *changed}) == 4, changed
    problem = manifest_version_problem("4", before, changed[0])
    assert problem is not None and "bump PIPELINE_VERSION" in problem and repr(changed[0]) in problem
