"""The coming slots of a job as it will run them, read from its row (`next_runs`, ``persched next``).

They start at ``next_run_at`` and follow its plan
(`persched._model.policy.JobPlan.coming`); a pause with an end starts them
where its resume will. A pause without one, a finished job or an unreadable
row has none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._model.instant import Instant, from_datetime
from .._model.models import JobState
from .mappers import readable_plan

if TYPE_CHECKING:
    from ._rows import StoredRow

__all__ = ["coming_slots"]


def coming_slots(row: StoredRow, count: int) -> list[Instant]:
    """Up to `count` coming slots of the job of `row`."""
    if row.problems or row.state not in (JobState.SCHEDULED.value, JobState.RUNNING.value):
        return []
    if row.paused and row.paused_until is None:
        return []
    plan = readable_plan(row)
    if plan is None:
        return []
    first = from_datetime(row.next_run_at)
    if row.paused:
        first = plan.resumed(from_datetime(row.paused_until), first)
    return plan.coming(first, count)
