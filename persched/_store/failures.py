"""Repeated failures: a job's count of failed slots in a row, and the pause that `pause_after_failures` brings.

The count (``failure_streak``) is written by the UPDATE that records a
completion or a recovery (`STREAK`, `STREAK_LOST`): the database adds one to
the value the row holds when that UPDATE runs, or sets 0 after a success. A
resume or a replacement that committed first (it sets 0, or a new row) is
therefore never undone by a completion that was on its way; a "missed"
record is no run and leaves the count alone.

In the same transaction, `pause_failing` pauses each job whose count reached
its option and that is not paused already (an operator's pause keeps its
note): one conditional UPDATE per such job, so the rows it changed are the
jobs this transaction paused. The WARNING and the ``job_paused`` event come
once, from the instance whose commit paused the job, after that commit
(`FailuresPaused`). docs/reference/behaviour.md#repeated-failures says what
users see.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Final, NamedTuple

from .. import _loggers
from .._model.pauses import FAILED_OUTCOMES, failures_note
from .mappers import SCHEDULED, counted
from .observer import notify

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._model.instant import Instant
    from .dialects import Dialect, DriverCursor

__all__ = ["STREAK", "STREAK_LOST", "FailingJob", "failed", "log_paused", "pause_failing"]

logger = logging.getLogger(_loggers.LIBRARY)

#: The count's new value in a completion's UPDATE; its parameter is 1 for a failed outcome, else 0.
STREAK: Final = f"CASE WHEN ? = 1 THEN {counted('failure_streak', '1')} ELSE 0 END"
#: The count's new value in a recovery's UPDATE (a lost run is a failure).
STREAK_LOST: Final = counted("failure_streak", "1")

# Pause a job of this generation whose count reached its option, unless it is paused already. Its state is
# 'scheduled': the completion or recovery in this transaction put it there (a finished job has no slot left).
_PAUSE: Final = (
    "UPDATE persched_jobs SET paused = ?, pause_note = ?, paused_until = NULL, run_now_at = NULL, updated_at = ?"
    " WHERE job_id = ? AND generation = ? AND state = ? AND paused = ?"
    " AND pause_after_failures IS NOT NULL AND failure_streak >= pause_after_failures"
)


class FailingJob(NamedTuple):
    """A job whose run failed in this transaction (at `at`), with its `pause_after_failures` option."""

    job_id: str
    generation: int
    pause_after_failures: int
    at: Instant


def failed(outcome: str) -> int:
    """`STREAK`'s parameter for a run of `outcome`: 1 if it failed."""
    return 1 if outcome in FAILED_OUTCOMES else 0


def pause_failing(cur: DriverCursor, dialect: Dialect, failing: Sequence[FailingJob]) -> list[FailingJob]:
    """Pause the jobs of `failing` whose count reached their option (module docstring); return those paused.

    A job named twice is paused once (the second UPDATE finds it paused)."""
    paused = []
    for job in failing:
        note = failures_note(job.pause_after_failures)
        params = (True, note, dialect.bind_instant(job.at), job.job_id, job.generation, SCHEDULED, False)
        if cur.execute(_PAUSE, params).rowcount == 1:
            paused.append(job)
    return paused


def log_paused(paused: Sequence[FailingJob], tell: Callable[[str, int], object]) -> None:
    """After the commit that paused them: one WARNING per job, and `tell(job_id, generation)` (the event)."""
    for job in paused:
        logger.warning(
            "job %s generation %d %s; resume it once the cause is fixed",
            job.job_id,
            job.generation,
            failures_note(job.pause_after_failures),
        )
        notify(functools.partial(tell, job.job_id, job.generation), "a job paused by its failures")
