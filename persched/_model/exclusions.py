"""Excluded dates (``exclude=``): the days on which a job has no slot, pure.

Entries are kept canonical (`validate_exclude`) and compiled into disjoint spans (`Exclusions`);
`ExcludingSlots` passes over whole spans, never slot by slot (docs/explanation/interfaces.md, "Excluded dates").
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from typing import TYPE_CHECKING, Final
from zoneinfo import ZoneInfo

from ..errors import InvalidJobError
from .checks import shown
from .instant import Instant, from_datetime
from .triggers import NEVER

if TYPE_CHECKING:
    from .triggers import Slots

__all__ = ["MAX_EXCLUDE_ENTRIES", "ExcludingSlots", "Exclusions", "exclusions_of", "validate_exclude"]

MAX_EXCLUDE_ENTRIES: Final = 1000
_DAY: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_ACCEPTED: Final = "a date ('2026-12-25' or a datetime.date) or an inclusive range of dates ('2026-12-24/2026-12-26')"
_EARLIEST: Final = Instant(-(2**62))  # the start of a span that begins before any datetime in UTC


def validate_exclude(value: object) -> tuple[str, ...] | None:
    """Return the canonical entries of ``exclude=`` (ISO text, sorted, each once; None for none).

    Raises:
        InvalidJobError: ("exclude", reason): not a collection of entries, more than
            `MAX_EXCLUDE_ENTRIES`, or an entry that is not a date or a range of dates (named).
    """
    if value is None:
        return None
    if isinstance(value, (str, bytes, bytearray, Mapping, date)) or not isinstance(value, Collection):
        raise InvalidJobError("exclude", f"must be a list of entries, each {_ACCEPTED}; got {shown(value)}")
    if len(value) > MAX_EXCLUDE_ENTRIES:
        raise InvalidJobError("exclude", f"must have at most {MAX_EXCLUDE_ENTRIES} entries, got {len(value)}")
    return tuple(sorted({_canonical(i, entry) for i, entry in enumerate(value)})) or None


def _canonical(index: int, entry: object) -> str:
    def refused(reason: str) -> InvalidJobError:
        return InvalidJobError("exclude", f"entry {index} {shown(entry)} {reason}")

    if isinstance(entry, datetime):  # a datetime is a date subclass, but an instant, not a day
        raise refused("is a datetime, not a date: give its .date() or 'YYYY-MM-DD'")
    if isinstance(entry, date):
        first = last = entry
    elif isinstance(entry, str):
        parts = entry.split("/")
        if len(parts) > 2:
            raise refused(f"is not {_ACCEPTED}")
        days = [day for part in parts if (day := _day(part)) is not None]
        if len(days) != len(parts):
            raise refused(f"is not {_ACCEPTED}: write each date as YYYY-MM-DD, a day that exists")
        first, last = days[0], days[-1]
    else:  # bool, numbers, nested lists, None ...
        raise refused(f"is not {_ACCEPTED}")
    if last < first:
        raise refused("is a reversed range: its first date must not be after its last")
    if last == date.max:  # no day follows it: every slot from `first` on would be excluded, for ever
        raise refused(f"excludes every slot from {first.isoformat()} on: give end_at to end the job instead")
    return first.isoformat() if first == last else f"{first.isoformat()}/{last.isoformat()}"


def _day(text: str) -> date | None:
    if not _DAY.fullmatch(text):
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:  # 2026-02-30
        return None


def _range(entry: str) -> tuple[int, int]:
    """A canonical entry's (first, last) day, as ordinals."""
    first, _, last = entry.partition("/")
    return date.fromisoformat(first).toordinal(), date.fromisoformat(last or first).toordinal()


@dataclass(frozen=True)
class Exclusions:
    """Canonical entries compiled into disjoint spans ``[starts[i], ends[i])`` of instants, ascending."""

    starts: tuple[Instant, ...]
    ends: tuple[Instant, ...]

    def span_of(self, t: Instant) -> int | None:
        """The index of the span holding `t`, or None."""
        i = bisect.bisect_right(self.starts, t) - 1
        return i if i >= 0 and t < self.ends[i] else None

    def first_allowed(self, t: Instant) -> Instant:
        """`t`, or the end of the span holding it (the spans are disjoint and not adjacent)."""
        i = self.span_of(t)
        return t if i is None else self.ends[i]


@functools.lru_cache(maxsize=1024)
def exclusions_of(entries: tuple[str, ...], timezone: str) -> Exclusions:
    """Compile canonical entries (`validate_exclude`) for a job in `timezone` (cached)."""
    merged: list[list[int]] = []
    for first, last in sorted(_range(entry) for entry in entries):
        if merged and first <= merged[-1][1] + 1:  # overlapping or adjacent: one span
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    zone = ZoneInfo(timezone)
    return Exclusions(
        tuple(_midnight(first, zone) for first, _ in merged),
        tuple(_midnight(last + 1, zone) for _, last in merged),
    )


def _midnight(ordinal: int, zone: ZoneInfo) -> Instant:
    """The first instant of a day in `zone` (in a gap at midnight: the gap's end, as fold=0 maps it)."""
    if ordinal > date.max.toordinal():
        return NEVER
    try:
        return from_datetime(datetime.combine(date.fromordinal(ordinal), time(), tzinfo=zone))
    except OverflowError:  # the first day of year 1 east of UTC
        return _EARLIEST


@dataclass(frozen=True)
class ExcludingSlots:
    """The slots of `grid` that fall in no span of `exclusions` (`persched._model.triggers.Slots`)."""

    grid: Slots
    exclusions: Exclusions

    def next_after(self, t: Instant) -> Instant:
        s = self.grid.next_after(t)
        while s < NEVER:
            i = self.exclusions.span_of(s)
            if i is None:
                return s
            s = self.grid.next_after(Instant(max(s, self.exclusions.ends[i] - 1)))  # strictly past the span
        return NEVER

    def latest_at_or_before(self, t: Instant) -> Instant | None:
        s = self.grid.latest_at_or_before(t)
        while s is not None:
            i = self.exclusions.span_of(s)
            if i is None:
                return s
            s = self.grid.latest_at_or_before(Instant(min(s, self.exclusions.starts[i]) - 1))
        return None

    def recent_slots(self, floor: Instant, t: Instant, n: int) -> list[Instant]:
        slots: list[Instant] = []
        s = self.latest_at_or_before(t)
        while s is not None and s >= floor and len(slots) < n:
            slots.append(s)
            s = self.latest_at_or_before(Instant(s - 1))
        return slots[::-1]

    def count_between(self, a: Instant, b: Instant) -> int | None:
        count = self.grid.count_between(a, b)
        starts, ends = self.exclusions.starts, self.exclusions.ends
        i = max(bisect.bisect_right(starts, a) - 1, 0)
        while count is not None and i < len(starts) and starts[i] <= b:
            if ends[i] > a:  # the span overlaps [a, b]: its slots are none
                inside = self.grid.count_between(Instant(max(a, starts[i])), Instant(min(b, ends[i] - 1)))
                count = None if inside is None else count - inside
            i += 1
        return count

    def describe(self) -> str:
        return f"{self.grid.describe()}, with excluded dates"
