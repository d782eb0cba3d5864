"""Great Expectations, quietly: no analytics, no progress bars, nothing written outside our folders.

Both the gate (:mod:`.validate`) and the Data Docs (:mod:`.docs`) open GX through here. GX itself is
imported inside :func:`quiet_context` because it takes seconds to import and ``vlmforge quality`` or a run
with ``--skip-gate`` never needs it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

# Great Expectations reads this at import time; the gate must never phone home.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")


#: Held around every use of GX. GX keeps state per process that is not thread-safe (the gate's one context,
#: the pyparsing parser of suite parameters: two validations at once in one process failed with
#: "SuiteParameterParser.push_first() missing 1 required positional argument"). A Ray worker runs one task
#: at a time anyway; the local executor's threads take turns here.
GX_LOCK = threading.RLock()


def quiet_context() -> Any:
    """A new ephemeral GX context whose progress bars are off (they would flood CI and Prefect task logs)."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return ctx
