"""``vlmforge ARGS`` as its console script runs it (:func:`vlmforge.flows.cli.main`: a usage error is one
``error:`` line and exit 2), in the test process: a subprocess costs 3 s of start-up a call. For commands
that end before any service would start (usage errors, ``query``); a test of the process itself (signals,
the environment, start-up) keeps a subprocess."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def vlmforge_in_process(*args: str) -> Ran:
    from vlmforge.flows.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv, sys.argv = sys.argv, ["vlmforge", *args]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    return Ran(code, out.getvalue(), err.getvalue())
