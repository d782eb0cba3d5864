"""Great Expectations, quietly: no analytics, no progress bars, nothing written outside our folders.

Both the gate (:mod:`.validate`) and the Data Docs (:mod:`.docs`) open GX through here. GX itself is
imported inside :func:`quiet_context` because it takes seconds to import and ``vlmforge quality`` or a run
with ``--skip-gate`` never needs it.
"""

from __future__ import annotations

import os
from typing import Any

# Great Expectations reads this at import time; the gate must never phone home.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")


def quiet_context() -> Any:
    """A new ephemeral GX context whose progress bars are off (they would flood CI and Prefect task logs)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return ctx
