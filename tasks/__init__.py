"""The stage functions: plain functions, no Prefect and no Ray (``flows/`` wraps them).

Two orders, each declared once: :data:`STAGES` is the order data moves in (a run stages a public set, catalogs
the release, then each batch parses, fetches, sizes, verifies and counts, and the gate, publish, validate and
ops follow); :data:`IMPORT_ORDER` is the order stages may import each other: a stage imports only the front
doors (package ``__init__``) of the stages before it there, and the shared modules (:data:`SHARED`, and
``schemas``). They differ where a stage reuses a later one's tools: ``staging`` reads archives with the
``archives`` stage's readers and sniffs media with the media stage's, so it comes after them in the import
order; the ``estimate`` sizes a run before it starts with every stage's own code (and reads earlier outputs
through ``ops``), so it comes last.
``tests/test_layout.py`` enforces the import order and that both list the same stages.
"""

#: Stages in the order data moves through them; a stage's package ``__init__`` is its front door.
STAGES = (
    "sample_release",  # a generated release for the demo and the tests (vlmforge sample-release, make demo)
    "staging",  # public benchmark sets staged into the release layout (--format)
    "catalog",  # what a release holds, before any media work
    "estimate",  # what a run of it will fetch, store and take (catalog --estimate, the run's disk check)
    "parse",  # JSONL lines to normalised records or rejects
    "http",  # the polite, bounded HTTP client fetch goes through, and the failure classes of a fetch
    "archives",  # zip and tar read by ranges or streamed: fetch serves members from them, staging sets too
    "fetch",  # media bytes from wherever they live into the content store
    "geometry",  # the target model's geometry: resize rule, frames, visual tokens per media item
    "media",  # verify, orient, convert and resize what was fetched
    "tokens",  # exact per-sample token counts (text + visual)
    "batch",  # the hub: one batch of lines from bytes to committed manifest parts (parse .. tokens)
    "gate",  # Great Expectations suites over DuckDB profiles
    "publish",  # committed manifests to a live Energon dataset
    "validate",  # a published dataset checked as the trainer reads it (the read-back, vlmforge validate)
    "ops",  # what people run on a finished output
)
#: Stages in import order: each imports only the front doors of those before it.
IMPORT_ORDER = (
    "sample_release",  # writes files only: imports no stage
    "catalog",
    "parse",
    "http",  # imports no stage
    "archives",  # after http (range requests, failure classes) and parse (member names as references)
    "fetch",
    "geometry",  # before media: media sizes what it stores by it
    "media",
    "tokens",
    "staging",  # after archives and media: their archive readers and media sniffer
    "batch",
    "gate",
    "publish",
    "validate",  # reads what publish wrote, through its front door
    "ops",
    "estimate",  # runs every earlier stage's code without its side effects, and reads outputs through ops
)
#: Modules every stage may import: they import nothing of the stages.
SHARED = ("errors", "storage", "manifests")
