"""The stage functions: plain functions, no Prefect and no Ray (``flows/`` wraps them).

:data:`STAGES` is the import order: a stage imports only the front doors (package ``__init__``) of the stages
before it, and the shared modules (:data:`SHARED`, and ``schemas``). ``tests/test_layout.py`` enforces it.
"""

#: Stages in import order; a stage's package ``__init__`` is its front door.
STAGES = (
    "catalog",  # what a release holds, before any media work
    "parse",  # JSONL lines to normalised records or rejects
    "fetch",  # media bytes from wherever they live into the content store
    "geometry",  # the target model's geometry: resize rule, frames, visual tokens per media item
    "media",  # verify, orient, convert and resize what was fetched
    "tokens",  # exact per-sample token counts (text + visual)
    "staging",  # public benchmark sets staged into the release layout (reads archives, sniffs media)
    "batch",  # the hub: one batch of lines from bytes to committed manifest parts
    "gate",  # Great Expectations suites over DuckDB profiles
    "publish",  # committed manifests to a live Energon dataset
    "ops",  # what people run on a finished output
)
#: Modules every stage may import: they import nothing of the stages.
SHARED = ("errors", "storage", "manifests")
