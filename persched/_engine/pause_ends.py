"""Timed pauses coming to their end: ``pause(job_id, until=...)`` resumes the job at `until`, once.

The heartbeat thread (`persched._engine.heartbeat`) keeps the earliest end
of its namespace's timed pauses (`next_end`, one read of
``ix_persched_jobs_paused_until`` at every heartbeat round, after a pick-up
that found changes, and when this process pauses a job with an end) and
wakes at it on the scheduler's clock, so under a `FakeClock` the resume
happens at the `advance()` that reaches `until`, to the microsecond.

`resume_ended` resumes each job whose pause has ended as ``resume()`` would
at the instant `until` itself (not at the wake, which may come later): the
grid goes on from `until`, and the slots that passed while paused do not
run. The store's update is conditional on the row still being paused with
that very end, so when several instances wake for it, one resumes the job and
the others change nothing; a ``resume()`` or a new pause in between wins
likewise. The end lives in the row, so it survives restarts: a scheduler
that starts after `until` resumes the job at its first round.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import _loggers
from .._model.instant import Instant, to_datetime

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._store import Store
    from .timebase import Timebase

__all__ = ["PauseEnds"]

logger = logging.getLogger(_loggers.LIBRARY)


class PauseEnds:
    """The namespace's timed pauses, resumed at their end (module docstring).

    Args:
        store: The store (its namespace's pauses).
        timebase: The scheduler's time frame.
        queue: Called with each resumed job's due instant, id and generation (the dispatcher's offer).
        resumed: Called with each job this instance resumed (the ``job_resumed`` event).
    """

    def __init__(
        self,
        store: Store,
        timebase: Timebase,
        queue: Callable[[Instant, str, int], None],
        resumed: Callable[[str, int], None],
    ) -> None:
        self._store = store
        self._timebase = timebase
        self._queue = queue
        self._resumed = resumed

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
