"""The system's clocks past freezegun and time-machine, and the instant a test has frozen.

Neither library is imported: each is looked up in `sys.modules`. Why the real clocks must be read
past both: docs/explanation/interfaces.md, "Frozen time in tests".
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
    """Return the system's monotonic clock in nanoseconds, past freezegun (time-machine leaves it alone)."""
    api = _freezegun()
    return time.monotonic_ns() if api is None else int(api.real_monotonic_ns())


def monotonic() -> float:
    """Return the system's monotonic clock in seconds, for timeouts in real seconds."""
    return monotonic_ns() / 1e9


def time_ns() -> int:
    """Return the system's wall clock in nanoseconds since the epoch, past freezegun and time-machine."""
    machine = _time_machine()
    if machine is not None:
        return int(machine.escape_hatch.time.time_ns())
    api = _freezegun()
    return time.time_ns() if api is None else int(api.real_time_ns())


def frozen_by() -> str | None:
    """Return which tool has frozen (or moved) the time now: "freezegun", "time-machine", or None."""
    if _freezegun() is not None:
        return "freezegun"
    if _time_machine() is not None:
        return "time-machine"
    return None


def frozen_time_us() -> int | None:
    """Return the instant a test froze time at, in whole microseconds, or None.

    freezegun's is read from its factory: its ``time.time()`` is a float, and real on some stacks.
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
