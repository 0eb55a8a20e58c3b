"""Clocks for tests of one's own schedules: `FakeClock` never sleeps, `FrozenTimeClock` follows frozen time.

::

    clock = FakeClock()
    with JobScheduler(tmp_path / "jobs.db", clock=clock) as sched:
        sched.schedule("report", send_report, 60.0)
        clock.advance(60)                      # exactly one interval: exactly one run
        assert sched.wait_idle(timeout=10)     # it has run and been recorded

docs/tutorials/testing.md shows each clock in a pytest test.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import TYPE_CHECKING

from . import _realtime
from ._model.instant import micros, seconds
from .clock import SystemClock, tells_real_time

if TYPE_CHECKING:
    from .clock import Clock

__all__ = ["FakeClock", "FrozenTimeClock", "ShiftedClock"]


class _InSeconds:
    """A `Clock`'s readings in float seconds too (`persched.clock.SecondsClock`)."""

    def now(self: Clock) -> float:
        """Return `now_us` as epoch seconds."""
        return seconds(self.now_us())

    def monotonic(self: Clock) -> float:
        """Return `monotonic_us` in seconds."""
        return seconds(self.monotonic_us())


class FakeClock(_InSeconds):
    """A clock that moves only when told to.

    Pass it as ``JobScheduler(..., clock=FakeClock())``: runs become due only when ``advance()``
    moves time past them, and then run on the scheduler's real worker threads
    (``JobScheduler.wait_idle()`` waits until they are recorded). Waits end when notified or when
    ``advance()`` passes their deadline, never on real time.

    Lock order: a scheduler's condition, then this clock's lock. ``advance()`` holds its lock only
    to move time and copy the waiters, and wakes them after releasing it.

    Args:
        start: The initial wall time as epoch seconds, rounded to the
            microsecond; default: the real time now.
    """

    def __init__(self, start: float | None = None) -> None:
        self._lock = threading.Lock()
        self._wall = time.time_ns() // 1000 if start is None else micros(start)
        self._mono = 1_000_000_000  # microseconds; any value would do
        self._conds: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    def now_us(self) -> int:
        """Return the fake wall time as whole microseconds since the epoch."""
        with self._lock:
            return self._wall

    def monotonic_us(self) -> int:
        """Return the fake monotonic time in whole microseconds."""
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move wall and monotonic time forward together (rounded to the microsecond); wake every waiter."""
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

        `advance()` notifies every condition that ever waited here; the caller re-checks its deadline
        against `monotonic_us()`. A timeout <= 0 returns at once.
        """
        if timeout is not None and timeout <= 0:
            return
        with self._lock:
            first_wait = cond not in self._conds
            self._conds.add(cond)
        if first_wait:
            # An advance() between the caller's reading of the time and this registration woke
            # nothing: return, and let the caller re-check.
            return
        # A lost wake-up must not hang a test; callers loop on their predicate, so an early return is harmless.
        cond.wait(1.0)

    def _wake_all(self) -> None:
        with self._lock:
            conds = list(self._conds)
        for cond in conds:
            with cond:
                cond.notify_all()


class FrozenTimeClock(_InSeconds):
    """A clock that reads the time a test froze with freezegun or time-machine.

    Pass it as ``JobScheduler(..., clock=FrozenTimeClock())`` inside ``freeze_time(...)`` or
    ``time_machine.travel(..., tick=False)``. The scheduler's "now" is the frozen instant, and runs
    become due when the test moves time (``frozen.tick()``, ``traveller.shift()``, ...).
    ``JobScheduler.wait_idle()`` then catches up by itself and returns once the runs due there have
    run. Every timeout a caller passes stays in real seconds. With ``tick=True`` time, and the runs,
    flow from the frozen instant. Outside frozen time it reads the real clock.

    A forward move moves wall and monotonic time together. A move back steps the wall clock alone,
    as NTP does: a running scheduler neither re-runs nor bursts (docs/reference/behaviour.md,
    "Clock corrections across a restart").

    Nothing moves the frozen time while the test waits, so waiting threads look again every
    `poll_seconds` of real time (`wait_idle` wakes the dispatcher itself).

    Args:
        poll_seconds: Real seconds between two looks at the frozen time by a
            waiting thread (default 0.05).
    """

    def __init__(self, poll_seconds: float = 0.05) -> None:
        if not 0 < poll_seconds <= 60:
            raise ValueError(f"poll_seconds: must be > 0 and at most 60, got {poll_seconds!r}")
        self._poll = poll_seconds
        self._lock = threading.Lock()
        self._last_wall = self.now_us()
        self._mono = 1_000_000_000  # microseconds; any value would do

    def now_us(self) -> int:
        """Return the frozen wall time (the real time outside frozen time) in whole microseconds."""
        frozen = _realtime.frozen_time_us()
        return _realtime.time_ns() // 1000 if frozen is None else frozen

    def monotonic_us(self) -> int:
        """Return a monotonic time that moves with the frozen time's forward moves, in whole microseconds."""
        wall = self.now_us()
        with self._lock:
            self._mono += max(0, wall - self._last_wall)
            self._last_wall = wall
            return self._mono

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond` for a notification, at most `poll_seconds` (or `timeout`, if less) of real time.

        The caller re-checks its deadline against `monotonic_us()`, which moves with the frozen time.
        """
        if timeout is not None and timeout <= 0:
            return
        cond.wait(self._poll if timeout is None else min(timeout, self._poll))


class ShiftedClock(_InSeconds):
    """A clock whose wall time is `seconds` off another clock's, its monotonic time untouched.

    A host whose clock is wrong: ``ShiftedClock(7200)`` plays an instance two hours ahead of the
    others, ``ShiftedClock(-7200)`` one behind. Over the real clock (the default `base`) it claims
    to tell real time, so the scheduler measures it against the database's clock as a real host's
    (docs/multi.md, "What skew does"); over a `FakeClock` it tells the test's time.

    Args:
        seconds: How far the wall time is ahead (negative: behind), rounded to the microsecond.
        base: The clock it shifts; default: the real clock (`persched.clock.SystemClock`).
    """

    def __init__(self, seconds: float, base: Clock | None = None) -> None:
        self._shift = micros(seconds)
        self._base: Clock = SystemClock() if base is None else base
        self.real_time = tells_real_time(self._base)

    def now_us(self) -> int:
        """Return the base clock's wall time, shifted, in whole microseconds."""
        return self._base.now_us() + self._shift

    def monotonic_us(self) -> int:
        """Return the base clock's monotonic time (a wrong wall clock leaves it alone)."""
        return self._base.monotonic_us()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait as the base clock waits."""
        self._base.wait(cond, timeout)
