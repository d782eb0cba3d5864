"""Ctrl-C and SIGTERM stop a run cleanly: the flow run is marked Cancelled, one line says how to resume.

The services a run starts do not take the terminal's signal: the embedded Prefect server runs in a session of
its own (:func:`flows.runtime.embedded.spawn_prefect_server`) and Ray's processes block SIGINT (Ray starts
them so). Only the driver sees it. Before, Ctrl-C killed the Prefect server while the driver went on: every
batch was still committed, then minutes of ``Error logging to API`` and a flow run Running forever.

Now the first SIGINT or SIGTERM raises :class:`RunInterrupted` in the driver's main thread, wherever it
waits. Prefect's engine sees it leave the flow (it records a crash, as for any interruption) and the task
runner's exit stops the run's own Ray, which ends the batches in flight the way a kill would: nothing
partial under a final name (writes are atomic), and their batches are simply not committed, so the next run
of the same command skips every committed batch and does the rest. :func:`cancels_flow_run`, inside the
Prefect API's lifetime, then forces the flow run (and its parents, and its unfinished task runs) to
Cancelled. :func:`stops_cleanly`, outermost, prints the one line and exits ``128 + signal`` (130 for
Ctrl-C, 143 for SIGTERM). A second Ctrl-C while it stops ends the process at once, and with it every
service the run started (:mod:`.own_processes`): its Prefect server unless another run of the project
reports to it, its Ray's processes; the flow run is marked Cancelled first if the API answers within
5 s (1 s measured).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
# Prefect's own loggers, silenced once the run is stopping: its crash report of the interruption
# ("Crash detected! ... KeyboardInterrupt", "Finished in state Crashed") would bury the one line.
PREFECT_RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs", "prefect.task_runner", "prefect")


class RunInterrupted(KeyboardInterrupt):
    """Raised in the main thread by the first SIGINT or SIGTERM of a guarded command."""

    def __init__(self, signum: int) -> None:
        super().__init__(NAMES.get(signal.Signals(signum), f"signal {signum}"))
        self.signum = signum


@dataclass
class _Stopping:
    signum: int | None = None
    flow_run_ids: list[str] = field(default_factory=list)
    sigints: int = 0


_state = _Stopping()


def interrupted() -> bool:
    """Whether this process was asked to stop (tests, and code that must not start new work)."""
    return _state.signum is not None


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if signum == signal.SIGINT:
        _state.sigints += 1
    if _state.signum is not None:  # already stopping (or Prefect passing SIGTERM on to us)
        if signum == signal.SIGINT and _state.sigints == 2:
            _stop_at_once(signum)
        return
    _state.signum = signum
    _state.flow_run_ids = _current_flow_runs() or _state.flow_run_ids
    if signum == signal.SIGINT:
        os.write(2, b"\nstopping (Ctrl-C): the run is being cancelled; Ctrl-C again stops it at once\n")
    raise RunInterrupted(signum)


def _stop_at_once(signum: int, cancel_within_s: float = 5.0) -> None:
    """The second Ctrl-C: mark the flow run Cancelled (best effort, ``cancel_within_s`` at most), take the
    run's services down (:func:`.own_processes.abandon_all`), exit ``128 + signum``. Further presses
    meanwhile are ignored (the handler runs once per count)."""
    from . import own_processes

    os.write(2, b"\nstopping at once (second Ctrl-C); the next run resumes all the same\n")
    if _state.flow_run_ids:
        # in this thread's context: Prefect's settings (the run's API URL) are a context variable
        context = contextvars.copy_context()
        marking = threading.Thread(
            target=context.run, args=(_mark_quietly, _state.flow_run_ids[0]), daemon=True
        )
        marking.start()
        marking.join(cancel_within_s)
    own_processes.abandon_all()
    os._exit(128 + signum)


def _mark_quietly(flow_run_id: str) -> None:
    with contextlib.suppress(Exception):  # the API already gone: the state is lost, not the exit
        mark_cancelled(flow_run_id)


def _current_flow_runs() -> list[str]:
    """The flow run executing in the main thread (the innermost, a subflow of ``refresh`` included)."""
    try:
        from prefect.context import FlowRunContext

        ctx = FlowRunContext.get()
    except Exception:  # noqa: BLE001 - no Prefect, no context: nothing to cancel
        return []
    run = getattr(ctx, "flow_run", None) if ctx is not None else None
    return [str(run.id)] if run is not None else []


class _Silenced(logging.Filter):
    """Prefect's own report of the interruption: after our handler ran, or when Prefect's SIGTERM handler
    ran before it (during a flow Prefect raises its own TerminationSignal first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _state.signum is not None:
            return False
        text = record.getMessage()
        return "termination signal" not in text and "KeyboardInterrupt" not in text


def note_flow_run(flow_run_id: str | None) -> None:
    """The flow run this process runs (named by ``flows.run_names``, inside the run): the one to cancel
    when a signal lands where no flow run context is visible."""
    if flow_run_id:
        _state.flow_run_ids = [flow_run_id]


def _arm() -> None:
    for s in SIGNALS:
        signal.signal(s, _on_signal)


def _interruption(exc: BaseException) -> int | None:
    """The signal behind ``exc`` when it is an interruption: ours (:class:`RunInterrupted`), Prefect's
    ``TerminationSignal`` (its SIGTERM handler, during a flow), Ray's driver handler (``sys.exit(15)``), or
    any error once this process was signalled. The handler raises wherever the main thread is, and code
    there may wrap what it raised: pydantic's serializer, mid-``submit`` of a Ray task, reports it as a
    ``PydanticSerializationError`` naming ``RunInterrupted``. Whatever fails after the signal fails because
    of it, and the user asked to stop."""
    from prefect.exceptions import TerminationSignal

    if _state.signum is not None and isinstance(exc, Exception):
        return _state.signum
    if isinstance(exc, KeyboardInterrupt):
        return _state.signum or getattr(exc, "signum", None) or int(signal.SIGINT)
    if isinstance(exc, TerminationSignal):
        return int(exc.signal)
    if isinstance(exc, SystemExit) and exc.code == signal.SIGTERM:
        return int(signal.SIGTERM)
    return None


@contextlib.contextmanager
def stops_cleanly(what: str = "run") -> Iterator[None]:
    """Guard a command: SIGINT/SIGTERM raise :class:`RunInterrupted`; leaving the block that way prints
    one line (what stopped, how to resume) and exits ``128 + signal``."""
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    _arm()
    silenced = _Silenced()
    for name in PREFECT_RUN_LOGGERS:
        logging.getLogger(name).addFilter(silenced)
    try:
        yield
    except BaseException as exc:
        signum = _interruption(exc)
        if signum is None:
            raise
        _state.signum = signum
        sys.stderr.write("\n" + stopped_line(what, signum) + "\n")
        sys.stderr.flush()
        raise SystemExit(128 + signum) from None
    finally:
        for name in PREFECT_RUN_LOGGERS:
            logging.getLogger(name).removeFilter(silenced)
        for s, handler in previous.items():
            signal.signal(s, handler)


def stopped_line(what: str, signum: int) -> str:
    """The one line a stopped command prints: what happened and the command that resumes it."""
    how = NAMES.get(signal.Signals(signum), f"signal {signum}")
    again = shlex.join(["vlmforge", *sys.argv[1:]])
    return (
        f"stopped ({how}): the {what} is cancelled, batches in flight were abandoned; "
        f"committed batches are kept, resume with: {again}"
    )


@contextlib.contextmanager
def cancels_flow_run() -> Iterator[None]:
    """Inside the Prefect API's lifetime: when the block is interrupted, mark the flow run the signal
    landed in, its parent flow runs and their unfinished task runs Cancelled, then let the interruption go
    on."""
    _arm()  # again: Ray's start installed a SIGTERM handler of its own (sys.exit) for its driver
    try:
        yield
    except BaseException as exc:
        signum = _interruption(exc)
        if signum is not None and _state.flow_run_ids:
            _state.signum = _state.signum or signum
            with contextlib.suppress(Exception):  # the API gone as well: the state is lost, not the exit
                mark_cancelled(_state.flow_run_ids[0])
        raise


def mark_cancelled(flow_run_id: str) -> list[str]:
    """Force flow run ``flow_run_id``, the flow runs above it and their task runs that had not finished to
    Cancelled; returns the flow run ids cancelled (innermost first)."""
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.states import Cancelled

    why = f"stopped by {NAMES.get(signal.Signals(_state.signum or signal.SIGINT), 'a signal')}"
    done: list[str] = []
    with get_client(sync_client=True) as client:
        run_id: UUID | None = UUID(flow_run_id)
        while run_id is not None and str(run_id) not in done:
            run = client.read_flow_run(run_id)
            client.set_flow_run_state(run_id, Cancelled(message=why), force=True)
            done.append(str(run_id))
            tasks = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
            for t in tasks:
                if t.state is None or not t.state.is_final():
                    client.set_task_run_state(t.id, Cancelled(message=why), force=True)
            parent = run.parent_task_run_id
            run_id = client.read_task_run(parent).flow_run_id if parent is not None else None
    return done
