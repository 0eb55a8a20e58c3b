"""Where persched reads time and waits: the `Clock` protocol and the system clock.

A scheduler takes a `Clock`, so that tests drive time with `persched.testing.FakeClock` or follow
frozen time with `persched.testing.FrozenTimeClock`. `SystemClock` reads the real clocks even inside
a frozen test. A clock tells time in whole microseconds, so an instant read here, a slot computed
from it and the value the database stores are one and the same number.
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable

from . import _realtime

__all__ = ["Clock", "SecondsClock", "SystemClock", "exact_clock", "tells_real_time"]


@runtime_checkable
class Clock(Protocol):
    """Wall time and monotonic time in whole microseconds, and waiting on a condition."""

    def now_us(self) -> int:
        """Return the wall-clock time as whole microseconds since the Unix epoch (UTC)."""
        ...

    def monotonic_us(self) -> int:
        """Return a monotonic time in whole microseconds (only differences matter)."""
        ...

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond` (held by the caller) for at most `timeout` seconds.

        `None` waits until notified. It may return early; callers re-check their predicate and the time.
        """
        ...


@runtime_checkable
class SecondsClock(Protocol):
    """A clock in float seconds: `now()`, `monotonic()`, `wait()`; `exact_clock` adapts it."""

    def now(self) -> float:
        """Return the wall-clock time as UTC epoch seconds."""
        ...

    def monotonic(self) -> float:
        """Return a monotonic time in seconds."""
        ...

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond` for at most `timeout` seconds."""
        ...


class SystemClock:
    """The real clock: the system's wall and monotonic clocks, and `Condition.wait`.

    Real even where freezegun or time-machine froze time, so it never mixes frozen and real
    readings (`persched.testing.FrozenTimeClock` follows frozen time).
    """

    #: Its wall time claims to be the world's, so the scheduler checks it
    #: against the database's clock (`tells_real_time`).
    real_time: bool = True

    def now_us(self) -> int:
        """Return the wall-clock time in whole microseconds since the epoch."""
        return _realtime.time_ns() // 1000

    def monotonic_us(self) -> int:
        """Return the monotonic time in whole microseconds."""
        return _realtime.monotonic_ns() // 1000

    def now(self) -> float:
        """Return the wall-clock time as epoch seconds."""
        return _realtime.time_ns() / 1e9

    def monotonic(self) -> float:
        """Return the monotonic time in seconds."""
        return _realtime.monotonic()

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        """Wait on `cond`, clamping `timeout` to what `threading` accepts."""
        if timeout is not None:
            timeout = min(max(timeout, 0.0), threading.TIMEOUT_MAX)
        cond.wait(timeout)


class _FromSeconds:
    """A `SecondsClock` read as a `Clock` (each reading rounded to the microsecond)."""

    def __init__(self, clock: SecondsClock) -> None:
        self._clock = clock
        self.real_time = tells_real_time(clock)

    def now_us(self) -> int:
        return round(self._clock.now() * 1_000_000)

    def monotonic_us(self) -> int:
        return round(self._clock.monotonic() * 1_000_000)

    def wait(self, cond: threading.Condition, timeout: float | None) -> None:
        self._clock.wait(cond, timeout)


def exact_clock(clock: Clock | SecondsClock) -> Clock:
    """Return `clock` as a `Clock`; a clock in float seconds is adapted.

    Raises:
        TypeError: `clock` has neither ``now_us``/``monotonic_us`` nor ``now``/``monotonic``, or no ``wait``.
    """
    if isinstance(clock, Clock):
        return clock
    if isinstance(clock, SecondsClock):
        return _FromSeconds(clock)
    raise TypeError(f"clock: needs now_us(), monotonic_us() and wait(cond, timeout), got {clock!r}")


def tells_real_time(clock: object) -> bool:
    """Whether `clock`'s wall time claims to be the world's (its ``real_time`` attribute, default False).

    A scheduler measures such a clock against the database's and keeps to the database's time
    beyond ``max_clock_skew_seconds`` (docs/multi.md, "What skew does"). A test's clock is never
    compared.
    """
    return getattr(clock, "real_time", False) is True
