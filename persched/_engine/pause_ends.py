"""Timed pauses coming to their end: ``pause(job_id, until=...)`` resumes the job at `until`, once.

`PauseEnds`, a heartbeat task, keeps the earliest end of the namespace's timed
pauses and is due at it on the scheduler's clock, so under a `FakeClock` the
resume happens at the `advance()` that reaches `until`. A job is resumed as
``resume()`` would at `until` itself, conditional on the row still being paused
with that end: of several instances one resumes it, and a ``resume()`` or a new
pause in between wins. The end lives in the row, so it survives restarts.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import _loggers
from .._model.instant import Instant, to_datetime
from .periodic import AT_ONCE, NEVER, PeriodicTask

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._model.instant import Micros
    from .._store import Store
    from .timebase import Timebase

__all__ = ["PauseEnds"]

logger = logging.getLogger(_loggers.LIBRARY)


class PauseEnds(PeriodicTask):
    """The namespace's timed pauses, resumed at their end; the earliest end is read again every `period`."""

    def __init__(
        self,
        store: Store,
        timebase: Timebase,
        queue: Callable[[Instant, str, int], None],
        resumed: Callable[[str, int], None],
        *,
        period: Micros,
    ) -> None:
        super().__init__("resuming the timed pauses", period)
        self._store = store
        self._timebase = timebase
        self._queue = queue
        self._resumed = resumed
        self._next_read = AT_ONCE  # monotonic µs: the periodic read of the earliest end
        self._reread = False  # a pause with an end was made: read the earliest end at once
        self._end = NEVER  # monotonic µs: the earliest end known
        self._resuming = False  # the round under way resumes (a failure is retried a period later)

    def reread(self) -> None:
        """Read the earliest end at the next look (a job was paused with one, here or elsewhere)."""
        self._reread = True
        self.due = AT_ONCE

    def run(self, now: int) -> None:
        """Read the earliest end if that is due, then resume the pauses that ended by now."""
        if self._reread or now >= self._next_read:
            self._reread = False
            if now >= self._next_read:
                self._next_read = now + self.period
            self._schedule()
            self._end = self._monotonic(self.next_end())
        if self._timebase.clock.monotonic_us() >= self._end:
            self._resuming = True
            self.round()
            self._resuming = False
        self._schedule()

    def failed(self, now: int) -> None:
        """A failed read keeps the end known; a failed resume is tried again a period on."""
        if self._resuming:
            self._resuming = False
            self._end = max(self._end, self._timebase.clock.monotonic_us() + self.period)
        self._schedule()

    def round(self) -> None:
        """Resume the pauses that ended, and note when the next one ends."""
        self._end = self._monotonic(self.resume_ended())

    def _schedule(self) -> None:
        self.due = min(self._next_read, self._end)

    def _monotonic(self, end: Instant | None) -> int:
        """`end` on the monotonic clock (µs), at once if it has passed; NEVER for None."""
        if end is None:
            return NEVER
        return self._timebase.clock.monotonic_us() + max(0, end - self._timebase.now())

    def next_end(self) -> Instant | None:
        """The earliest end of a timed pause of the namespace, or None."""
        ends = self._store.pause_ends(None)
        return ends[0][1] if ends else None

    def resume_ended(self) -> Instant | None:
        """Resume every job whose pause has ended by now; return the next end (or None)."""
        for job_id, until in self._store.pause_ends(self._timebase.now()):
            done = self._store.resume_job(job_id, until, until=until)
            if done is None:
                continue  # another instance, or a resume() or a new pause, came first
            generation, due = done
            logger.info("job %s generation %d resumed: its pause ended at %s", job_id, generation, to_datetime(until))
            if due is not None:
                self._queue(due, job_id, generation)
            self._resumed(job_id, generation)
        return self.next_end()
