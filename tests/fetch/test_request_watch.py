"""The request watchdog (``tasks/http/request_watch.py``) wakes only for a new earliest deadline, and still
expires a short deadline armed while it sleeps toward a long one."""

from __future__ import annotations

import time

from vlmforge.tasks.http.request_watch import _Watchdog


def test_a_shorter_deadline_armed_during_a_long_sleep_still_expires() -> None:
    dog = _Watchdog()
    far = dog.arm(time.monotonic() + 3600)
    near = dog.arm(time.monotonic() + 0.05)
    give_up = time.monotonic() + 60  # the watchdog expires it at once; 60 s is only a bound on a broken one
    while not near.expired and time.monotonic() < give_up:
        time.sleep(0.01)
    assert near.expired and not far.expired
    dog.disarm(far)


def test_later_deadlines_do_not_wake_the_watchdog() -> None:
    """Deadlines armed after an earlier one do not notify the sleeping watchdog (counted by its condition)."""
    dog = _Watchdog()
    first = dog.arm(time.monotonic() + 3600)
    notified: list[int] = []
    real_notify = dog._cond.notify
    dog._cond.notify = lambda n=1: (notified.append(n), real_notify(n))  # type: ignore[method-assign]
    later = [dog.arm(time.monotonic() + 3600 + i) for i in range(1, 50)]
    assert notified == []
    earlier = dog.arm(time.monotonic() + 1800)
    assert notified == [1]
    for w in [first, earlier, *later]:
        dog.disarm(w)
