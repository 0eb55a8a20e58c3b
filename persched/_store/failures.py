"""Repeated failures: a job's count of failed slots in a row, and the pause that `pause_after_failures` brings.

The count (``failure_streak``) is written by the UPDATE that records a
completion or a recovery (`STREAK`): the database adds one to the value the
row holds then, or sets 0 after a success, so a resume or a replacement that
committed first is never undone. A slot counts once, at its first failed
attempt. In the same transaction `pause_failing` pauses each job whose count
reached its option, by a conditional UPDATE, so the rows it changed are the
jobs this transaction paused; the warning and event come once, after that
commit (docs/reference/behaviour.md#repeated-failures).
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Final, NamedTuple

from .. import _loggers
from .._model.instant import to_datetime
from .._model.pauses import FAILED_OUTCOMES, failures_note
from .mappers import SCHEDULED, counted
from .observer import notify

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._model.instant import Instant
    from .dialects import Dialect, DriverCursor

__all__ = [
    "STREAK",
    "FailingJob",
    "failed",
    "log_gave_up",
    "log_paused",
    "pause_failing",
    "streak_after",
    "streak_step",
]

logger = logging.getLogger(_loggers.LIBRARY)

#: The count's new value in a completion's UPDATE; its parameter is `streak_step`'s.
STREAK: Final = f"CASE ? WHEN 1 THEN {counted('failure_streak', '1')} WHEN 0 THEN 0 ELSE failure_streak END"
# The same, by the step known when the statement is built (`streak_after`).
_STREAK_BY_STEP: Final = {0: "0", 1: counted("failure_streak", "1"), 2: "failure_streak"}

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


def failed(outcome: str) -> bool:
    """Whether a run of `outcome` failed."""
    return outcome in FAILED_OUTCOMES


def streak_step(outcome: str, attempt: int) -> int:
    """`STREAK`'s parameter: 0 a success, 1 a failed first attempt, 2 a failed later one (counted already)."""
    if not failed(outcome):
        return 0
    return 1 if attempt == 1 else 2


def streak_after(outcome: str, attempt: int) -> str:
    """SQL for the count's new value after attempt `attempt` ended with `outcome` (`STREAK`, its step given)."""
    return _STREAK_BY_STEP[streak_step(outcome, attempt)]


def pause_failing(cur: DriverCursor, dialect: Dialect, failing: Sequence[FailingJob]) -> list[FailingJob]:
    """Pause the jobs of `failing` whose count reached their option; return those paused.

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


def log_gave_up(job_id: str, generation: int, slot: Instant, attempts: int, outcome: str) -> None:
    """Say, once per slot, that its last attempt failed with retries it had no time (or no leave) for."""
    logger.warning(
        "job %s generation %d: gave up on the slot %s after %d attempts (the last: %s)",
        job_id,
        generation,
        to_datetime(slot).isoformat(),
        attempts,
        outcome,
    )
