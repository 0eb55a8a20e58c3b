"""The system's clocks as they are, whatever a test has frozen, and the time a test has frozen.

Test suites freeze time with freezegun or time-machine, and a scheduler may
run inside such a test. Each tool changes what ``time.time()`` answers in its
own way, and neither tells persched's threads the same thing every time:

- freezegun rebinds ``time.time``, ``time.monotonic``, ``time.perf_counter``
  (and their ``_ns`` twins) on the `time` module and on every module that
  imported them, and answers frozen or real time depending on the caller's
  stack (its ignore list holds `threading`), so one thread can see both;
- time-machine swaps the C implementation of the wall-clock functions
  (``time.time``, ``time.time_ns``, ``clock_gettime(CLOCK_REALTIME)``) for every
  caller, and leaves the monotonic clock alone.

`monotonic_ns` and `time_ns` read the real clocks past both, so that the
default clock (`persched.clock.SystemClock`) and every real-seconds timeout a
caller passes mean the same thing inside a frozen test as outside it.
`frozen_time_us` reads the instant a test froze, for
`persched.testing.FrozenTimeClock`. Neither library is imported here: each is
looked up in `sys.modules`, so they cost nothing to those who use neither.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from typing import Any, Final

__all__ = ["frozen_by", "frozen_time_us", "monotonic", "monotonic_ns", "time_ns"]

_EPOCH: Final = datetime(1970, 1, 1)  # freezegun's frozen instants are naive UTC datetimes


def _freezegun() -> Any:  # noqa: ANN401 - freezegun.api while time is frozen by it, else None
    api = sys.modules.get("freezegun.api")
    return api if api is not None and getattr(api, "freeze_factories", None) else None


def _time_machine() -> Any:  # noqa: ANN401 - the time_machine module while it travels, else None
    module = sys.modules.get("time_machine")
    return module if module is not None and getattr(module, "traveller_stack", None) else None


def monotonic_ns() -> int:
    """The system's monotonic clock in nanoseconds (freezegun freezes ``time.monotonic_ns``; time-machine does not)."""
    api = _freezegun()
    return time.monotonic_ns() if api is None else int(api.real_monotonic_ns())


def monotonic() -> float:
    """The system's monotonic clock in seconds: for timeouts that callers give in real seconds."""
    return monotonic_ns() / 1e9


def time_ns() -> int:
    """The system's wall clock in nanoseconds since the epoch, past freezegun and time-machine."""
    machine = _time_machine()
    if machine is not None:
        return int(machine.escape_hatch.time.time_ns())
    api = _freezegun()
    return time.time_ns() if api is None else int(api.real_time_ns())


def frozen_by() -> str | None:
    """Which tool has frozen (or moved) the time now: "freezegun", "time-machine", or None."""
    if _freezegun() is not None:
        return "freezegun"
    if _time_machine() is not None:
        return "time-machine"
    return None


def frozen_time_us() -> int | None:
    """The instant a test has frozen time at, in whole microseconds since the epoch; None when none has.

    freezegun's instant is read from its factory, exact to the microsecond (its
    ``time.time()`` is a float, and answers real time on some callers' stacks);
    time-machine's is its ``time.time_ns()``, which it answers to every caller.
    """
    api = _freezegun()
    if api is not None:
        frozen: datetime = api.freeze_factories[-1]()
        if frozen.tzinfo is not None:  # freezegun keeps naive UTC; an aware instant is taken at its word
            frozen = frozen.astimezone(timezone.utc).replace(tzinfo=None)
        delta = frozen - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if _time_machine() is not None:
        return time.time_ns() // 1000
    return None
