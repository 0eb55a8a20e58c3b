"""How far this instance's time is from the database's clock, and keeping to the database's time.

Instances that share a database compare due times with their own time
(`persched._engine.timebase`). One whose wall clock was wrong when it started
(a bad NTP step, a host never synced) sees every row as overdue, or as far
ahead, and would take the work over or "correct" rows that are right. So each
instance measures its time against one clock that every instance sharing the
database reads alike: the database's (`persched._store.members`, one short
read at each heartbeat, in the membership's transaction). Where the two differ by more than
``max_clock_skew_seconds``, the instance moves its time frame onto the
database's time and says so in one WARNING; from then on it claims what is
due by that time, and writes slots on it (docs/multi.md, "What skew does").

A reading is taken between two readings of this instance's own time; the
database's instant lies somewhere in that round trip, so the offset is taken
from its middle and half the round trip is allowed on top of the bound: a
slow round trip never passes for skew.

On PostgreSQL and MariaDB the database's clock is the server's, which no
step of a host's clock moves: the frame follows it at every heartbeat, so
instances started before and after a step of the server's clock keep to one
time. SQLite has no server: every instance on one file reads this machine's
clock, and a step of that clock is a step of every instance's clock, which a
running scheduler keeps out of its frame (docs/reference/behaviour.md#time).
So on SQLite the frame is checked at the first reading only (a clock that is
not the machine's, such as `persched.testing.ShiftedClock`, is then put
right); later readings only show the offset.

Only a clock that claims real time is measured (`persched.clock.tells_real_time`):
a `persched.testing.FakeClock` tells a test's time, which no database shares.

Threads: `check` runs on the caller's thread (the first at `start()` or at the
first `schedule()`, under the scheduler's schema lock; then the heartbeat's).
`offset_seconds` is one attribute, replaced whole; readers take no lock.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeVar

from .._model.instant import US_PER_SECOND, Micros
from ..clock import tells_real_time

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._model.instant import Instant
    from .timebase import Timebase

__all__ = ["ClockCheck"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class ClockCheck:
    """Measures this instance's time against the database's clock and keeps to it (module docstring).

    Args:
        timebase: The scheduler's time frame, moved when it is too far off.
        read_reference: Reads the database's clock (`Store.server_time`).
        bound: The offset beyond which the frame keeps to the database's time; None: never measure.
        follow: Whether the frame follows the reference after the first reading (False on SQLite).
        instance_id: This instance, for the log.
        retimed: Called after the frame moved (the dispatcher looks at its queue again).
    """

    def __init__(
        self,
        timebase: Timebase,
        read_reference: Callable[[], Instant],
        bound: Micros | None,
        *,
        follow: bool,
        instance_id: str,
        retimed: Callable[[], None] | None = None,
    ) -> None:
        self._timebase = timebase
        self._read = read_reference
        self._bound = bound
        self._follow = follow
        self._instance_id = instance_id
        self._retimed = retimed
        self._checked = False  # a first reading was taken
        self._warned = False  # the clock is off beyond the bound, and a WARNING said so
        #: How far this instance's wall clock was from the database's at the latest reading,
        #: in seconds (positive: ahead); None until measured, or when it is not measured.
        self.offset_seconds: float | None = None

    @property
    def measures(self) -> bool:
        """Whether this instance's clock is measured at all (one that claims real time, a bound set)."""
        return self._bound is not None and tells_real_time(self._timebase.clock)

    def check(self) -> None:
        """Read the database's clock once; move the frame onto it if it is too far off (module docstring)."""
        self.timed(lambda reads: (None, self._read() if reads else None))

    def timed(self, round_trip: Callable[[bool], tuple[T, Instant | None]]) -> T:
        """Run `round_trip` (told whether to read the database's clock: `measures`), timed on this
        instance's clocks, and judge the database's instant it returns as `check` does; return its
        result. The membership's heartbeat reads the clock so, in the transaction it makes anyway."""
        if not self.measures:
            return round_trip(False)[0]
        timebase, clock = self._timebase, self._timebase.clock
        mono, wall, frame = clock.monotonic_us(), clock.now_us(), timebase.now()
        result, reference = round_trip(True)
        mono_after, wall_after, frame_after = clock.monotonic_us(), clock.now_us(), timebase.now()
        if reference is not None:
            self._judge(reference, mono_after - mono, (wall + wall_after) // 2, (frame + frame_after) // 2)
        return result

    def _judge(self, reference: Instant, trip: int, wall: int, frame: int) -> None:
        """Judge one reading of the database's clock, taken during `trip` µs around `wall` and `frame`."""
        assert self._bound is not None
        slack = Micros(self._bound + trip // 2)
        clock_off = wall - reference
        frame_off = frame - reference
        self.offset_seconds = clock_off / US_PER_SECOND
        first, self._checked = not self._checked, True
        moved = (first or self._follow) and abs(frame_off) > slack
        if moved:
            self._timebase.shift(Micros(-frame_off))
        beyond = abs(clock_off) > slack
        if moved:
            logger.warning(
                "instance %s: its time was %s %s the database's clock (beyond max_clock_skew_seconds, %g s); it "
                "keeps to the database's time from now on. Sync this host's clock (NTP, chrony)",
                self._instance_id,
                *_offset_words(frame_off),
                self._bound / US_PER_SECOND,
            )
        elif beyond and not self._warned:
            logger.warning(
                "instance %s: this host's clock is %s %s the database's clock (beyond max_clock_skew_seconds, "
                "%g s). Sync it (NTP, chrony)",
                self._instance_id,
                *_offset_words(clock_off),
                self._bound / US_PER_SECOND,
            )
        self._warned = beyond
        if moved and not first and self._retimed is not None:
            self._retimed()


def _offset_words(offset: int) -> tuple[str, str]:
    """An offset in µs as words for the log: ("7200.0 s", "ahead of")."""
    return f"{abs(offset) / US_PER_SECOND:.1f} s", "ahead of" if offset > 0 else "behind"
