"""A signal that lands inside code which wraps what it raised still stops the run cleanly.

The handler raises :class:`RunInterrupted` wherever the driver's main thread is. Prefect-Ray's ``submit``
serializes the task's context with pydantic, and pydantic reports an exception raised inside its serializer
as ``PydanticSerializationError`` (CI saw exactly this: Ctrl-C mid-``submit``, exit 1 and a traceback). The
guard must still print its one line and exit 130, whatever the interruption was wrapped in.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import signal, sys
    from vlmforge.flows.runtime.interrupt import stops_cleanly

    def serializer_that_wraps():  # as pydantic_core wraps an error raised inside a serializer
        try:
            signal.raise_signal(signal.{sig})
        except BaseException as exc:
            raise ValueError(f"Error calling function `_ser_model`: {{exc!r}}") from exc

    with stops_cleanly():
        serializer_that_wraps()
    print("not stopped")
    """
)


@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_wrapped_interruption_exits_as_the_signal_with_one_line(sig: str, code: int) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(sig=sig)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    how = "Ctrl-C" if sig == "SIGINT" else "SIGTERM"
    assert f"stopped ({how})" in proc.stderr
    assert "not stopped" not in proc.stdout
