"""Test helpers for users of persched: a fake clock that never sleeps.

A test of one's own schedule needs no sleep and no polling loop::

    clock = FakeClock()                                   # any start instant works
    with JobScheduler(tmp_path / "jobs.db", clock=clock) as sched:
        sched.schedule("report", send_report, 60.0)
        for _ in range(3):
            clock.advance(60)                             # exactly one interval
            assert sched.wait_idle(timeout=10)            # every due run has run and been recorded
        assert len(sched.runs("report")) == 3

Time is exact to the microsecond (SPEC §1): ``advance(seconds)`` is rounded to
whole microseconds once, and slots are whole microseconds too, so advancing by
exactly a job's interval makes exactly one more run, at any start instant.
"""

from __future__ import annotations

import threading
import time
import weakref

from ._instant import micros, seconds

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that moves only when told to.

    Pass it as ``JobScheduler(..., clock=FakeClock())``: runs become due only
    when ``advance()`` moves time past them, and are then dispatched to the
    scheduler's real worker threads (``JobScheduler.wait_idle()`` waits until
    they have finished and been recorded). Waits never time out on real time;
    they return when notified or when ``advance()`` moves time past their
    deadline.

    Lock order: a scheduler's condition, then this clock's lock. ``advance()``
    takes its own lock only to move time and copy the waiters, and wakes them
    after releasing it.

    Args:
        start: The initial wall time as epoch seconds, rounded to the
            microsecond; default: the real time now.
    """

    def __init__(self, start: float | None = None) -> None:
        self._lock = threading.Lock()
        self._wall = time.time_ns() // 1000 if start is None else micros(start)
        self._mono = 1_000_000_000  # microseconds; any value would do
        self._conds: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    def now(self) -> float:
        """Return the fake wall time as epoch seconds."""
        return seconds(self.now_us())

    def now_us(self) -> int:
        """Return the fake wall time as whole microseconds since the epoch."""
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        """Return the fake monotonic time in seconds."""
        return seconds(self.monotonic_us())

    def monotonic_us(self) -> int:
        """Return the fake monotonic time in whole microseconds."""
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move wall and monotonic time forward together (rounded once to the
        microsecond) and wake every waiter."""
        if not seconds >= 0:
            raise ValueError(f"seconds: must be >= 0, got {seconds!r}")
        step = micros(seconds)
        with self._lock:
            self._wall += step
            self._mono += step
        self._wake_all()

    def step_wall(self, seconds: float) -> None:
        """Step only the wall clock (an NTP step), forward or back; monotonic stays."""
        step = micros(seconds)
        with self._lock:
            self._wall += step
        self._wake_all()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond` until notified; `timeout` counts fake seconds.

        Time only moves in `advance()`, which notifies every condition that
        ever waited here; the caller re-checks its deadline against
        `monotonic_us()`. A zero or negative timeout returns at once.
        """
        if timeout is not None and timeout <= 0:
            return
        with self._lock:
            first_wait = cond not in self._conds
            self._conds.add(cond)
        if first_wait:
            # The caller read the time before this cond was registered, so an
            # advance() in between did not wake it: return and let it re-check.
            return
        # A real-time bound keeps a lost wake-up from hanging a test forever;
        # callers loop on their predicate, so an early return is harmless.
        cond.wait(1.0)

    def _wake_all(self) -> None:
        with self._lock:
            conds = list(self._conds)
        for cond in conds:
            with cond:
                cond.notify_all()
