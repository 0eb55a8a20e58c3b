"""Test helpers for users of persched: a fake clock that never sleeps."""

from __future__ import annotations

import threading
import time
import weakref

__all__ = ["FakeClock"]


class FakeClock:
    """A clock that moves only when told to.

    Pass it as ``JobScheduler(..., clock=FakeClock())``: runs become due only
    when ``advance()`` moves time past them, and are then dispatched to the
    scheduler's real worker threads. Waits never time out on real time; they
    return when notified or when ``advance()`` moves time past their deadline.

    Lock order: a scheduler's condition, then this clock's lock. ``advance()``
    takes its own lock only to move time and copy the waiters, and wakes them
    after releasing it.

    Args:
        start: The initial wall time as epoch seconds; default: the real time now.
    """

    def __init__(self, start: float | None = None) -> None:
        self._lock = threading.Lock()
        self._wall = time.time() if start is None else float(start)
        self._mono = 1_000.0
        self._conds: weakref.WeakSet[threading.Condition] = weakref.WeakSet()

    def now(self) -> float:
        """Return the fake wall time as epoch seconds."""
        with self._lock:
            return self._wall

    def monotonic(self) -> float:
        """Return the fake monotonic time."""
        with self._lock:
            return self._mono

    def advance(self, seconds: float) -> None:
        """Move wall and monotonic time forward together and wake every waiter."""
        if not seconds >= 0:
            raise ValueError(f"seconds: must be >= 0, got {seconds!r}")
        with self._lock:
            self._wall += seconds
            self._mono += seconds
        self._wake_all()

    def step_wall(self, seconds: float) -> None:
        """Step only the wall clock (an NTP step), forward or back; monotonic stays."""
        with self._lock:
            self._wall += seconds
        self._wake_all()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond` until notified; `timeout` counts fake seconds.

        Time only moves in `advance()`, which notifies every condition that
        ever waited here; the caller re-checks its deadline against
        `monotonic()`. A zero or negative timeout returns at once.
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
