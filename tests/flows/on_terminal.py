"""A command on a pseudo-terminal that is its controlling terminal, as a user's shell runs it, its stage
events reported to the test (:mod:`reliability.stage_events`): what the Ctrl-C tests type into."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import subprocess
import termios
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from reliability.stage_events import StageEvents


def _take_terminal() -> None:  # in the child, after setsid: the pty on fd 0 becomes its controlling tty
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """The terminal's side the user holds: what the command printed, and the keys typed into it."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.screen = bytearray()
        self.proc: subprocess.Popen[bytes] | None = None
        self.events: StageEvents | None = None
        self._grew = threading.Condition()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait(self, timeout: float) -> int:
        """The command's exit code (``timeout`` is a hang guard)."""
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    @property
    def text(self) -> str:
        return self.screen.decode(errors="replace")

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)  # Ctrl-C (b"\x03"): the kernel signals the foreground process group

    def wait_for(self, shown: bytes, timeout: float) -> bool:
        """Until the command has printed ``shown`` (an event, not a clock; ``timeout`` is a hang guard)."""
        with self._grew:
            return self._grew.wait_for(lambda: shown in self.screen, timeout)

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the child closed the terminal
                return
            if not chunk:
                return
            with self._grew:
                self.screen.extend(chunk)
                self._grew.notify_all()


@contextlib.contextmanager
def on_terminal(
    cmd: list[str],
    env: Mapping[str, str],
    on_event: Callable[[Terminal, str], None],
    cwd: Path | None = None,
) -> Iterator[Terminal]:
    """Start ``cmd`` in a session of its own on a new pseudo-terminal; ``on_event(terminal, event)`` runs at
    each of its stage events while the run waits. On the way out a command still running is killed with its
    group, and the screen is read to its end."""
    master, slave = pty.openpty()
    term = Terminal(master)
    with StageEvents(lambda event: on_event(term, event)) as events:
        term.events = events
        term.proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=dict(env) | events.env,
            start_new_session=True,
            preexec_fn=_take_terminal,
        )
        os.close(slave)
        reader = threading.Thread(target=term._read, daemon=True)
        reader.start()
        try:
            yield term
        finally:
            if term.proc.poll() is None:
                os.killpg(term.proc.pid, 9)
            reader.join(timeout=30)
            os.close(master)
