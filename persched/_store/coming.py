"""The coming slots of a job as it will run them, read from its row (`next_runs`, ``persched next``).

They start at the row's ``next_run_at`` (the next slot still to run) and
follow its plan (`persched._model.policy.JobPlan.coming`: the trigger, with
its time zone and daylight-saving rules, and the window). A pause with an
end starts them where its resume will (`JobPlan.resumed` at ``paused_until``,
as `persched._engine.pause_ends` does); a pause without one, a finished job
or a row that cannot be read has none.
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
    """Up to `count` coming slots of the job of `row` (module docstring)."""
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
