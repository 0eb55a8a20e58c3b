"""Where persched reads time and waits: the `Clock` protocol and the system clock.

Only this module reads the system clock. The scheduler takes a `Clock` so that
tests (and users testing their own schedules) can drive time with
`persched.testing.FakeClock` instead of sleeping.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Wall time, monotonic time and waiting on a condition."""

    def now(self) -> float:
        """Return the wall-clock time as UTC epoch seconds."""
        ...

    def monotonic(self) -> float:
        """Return a monotonic time in seconds (only differences matter)."""
        ...

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond` (held by the caller) for at most `timeout` seconds.

        `None` waits until notified. May return early (spuriously); callers
        re-check their predicate and the time.
        """
        ...


class SystemClock:
    """The real clock: `time.time`, `time.monotonic` and `Condition.wait`."""

    def now(self) -> float:
        """Return `time.time()`."""
        return time.time()

    def monotonic(self) -> float:
        """Return `time.monotonic()`."""
        return time.monotonic()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond`, clamping `timeout` to what `threading` accepts."""
        if timeout is not None:
            timeout = min(max(timeout, 0.0), threading.TIMEOUT_MAX)
        cond.wait(timeout)
