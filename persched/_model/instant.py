"""Whole-microsecond instants and durations, and their only conversions from and to floats and datetimes.

docs/reference/behaviour.md, "Time is exact to the microsecond", is the rule; docs/design.md, "Time",
the reasons. `Instant(now + lease)` names a sum again, so mypy keeps floats out.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Final, NewType

__all__ = [
    "US_PER_SECOND",
    "Instant",
    "Micros",
    "from_datetime",
    "from_naive_utc",
    "micros",
    "seconds",
    "to_datetime",
]

Instant = NewType("Instant", int)  # microseconds since 1970-01-01T00:00:00Z
Micros = NewType("Micros", int)  # a duration in microseconds

US_PER_SECOND: Final = 1_000_000
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_NAIVE_EPOCH: Final = datetime(1970, 1, 1)
_ONE_US: Final = timedelta(microseconds=1)


def micros(value: float) -> int:
    """Round seconds (a float or int) to whole microseconds, exactly (half to even).

    The float's exact binary value is rounded, once, here: never a product of floats.
    """
    if isinstance(value, int):
        return value * US_PER_SECOND
    # The float's exact ratio, in integers (cheaper than a Fraction); inf and nan raise OverflowError and ValueError.
    numerator, denominator = value.as_integer_ratio()
    whole, rest = divmod(numerator * US_PER_SECOND, denominator)
    if 2 * rest > denominator or (2 * rest == denominator and whole % 2):
        whole += 1  # past the half, or on it and odd: half to even
    return whole


def seconds(us: int) -> float:
    """Return microseconds as float seconds, for public fields such as `Job.interval_seconds`."""
    return us / US_PER_SECOND


def to_datetime(us: int) -> datetime:
    """Return an instant as an aware UTC datetime (exact)."""
    return _EPOCH + timedelta(microseconds=us)


def from_datetime(dt: datetime) -> Instant:
    """Return an aware datetime as an instant (exact); a naive one is read as UTC (SQLite's raw values)."""
    if dt.tzinfo is None:
        return from_naive_utc(dt)
    return Instant((dt - _EPOCH) // _ONE_US)


def from_naive_utc(dt: datetime) -> Instant:
    """Return a naive datetime that holds UTC as an instant (exact)."""
    return Instant((dt - _NAIVE_EPOCH) // _ONE_US)
