"""How far this instance's time is from the database's clock, and keeping to the database's time.

A reading of the database's clock lies within the round trip around it, so the
offset is taken from its middle and half the round trip is allowed on top of
``max_clock_skew_seconds``: a slow round trip never passes for skew. Beyond the
bound the time frame moves onto the database's time, with one WARNING. The frame
follows the server at every reading on PostgreSQL and MariaDB; on SQLite, whose
"server" clock is this machine's, only at the first (docs/explanation/engine.md,
"Time"). Only a clock that tells real time is measured.

`check` runs on the caller's thread at the first use (under the schema lock),
`timed` on the heartbeat's. `offset_seconds` is replaced whole; readers take no lock.
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
    """Measures this instance's time against the database's clock and keeps to it.

    `bound` None: never measure. `follow`: move the frame after the first reading too (not on SQLite).
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
        self._checked = False
        self._warned = False
        #: Seconds this wall clock was ahead of the database's at the latest reading; None: not measured.
        self.offset_seconds: float | None = None

    @property
    def measures(self) -> bool:
        """Whether this instance's clock is measured: it claims real time, and a bound is set."""
        return self._bound is not None and tells_real_time(self._timebase.clock)

    def check(self) -> None:
        """Read the database's clock once; move the frame onto it if it is too far off."""
        self.timed(lambda reads: (None, self._read() if reads else None))

    def timed(self, round_trip: Callable[[bool], tuple[T, Instant | None]]) -> T:
        """Run `round_trip` (told whether to read the database's clock), timed; judge its instant as `check` does."""
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
