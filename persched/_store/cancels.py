"""Cancel requests: `cancel()` in any process asks the instance that runs the job to stop its run.

`CancelsStore.request_cancel` locks the job's row and, only while it runs,
sets ``cancel_requested_at`` and moves the change counter; the owner's next
pick-up reads `CancelsStore.cancel_requests`. The run's completion or recovery
clears the column, so a request never outlives its run, and one that lost
the race with the completion changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select, update

from .._model.instant import Instant, to_datetime
from .mappers import DESCHEDULED, RUNNING
from .part import Part
from .schema import jobs

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = ["CancelsStore"]


class CancelsStore(Part):
    """The cancel requests of this store's namespace."""

    def request_cancel(self, job_id: str, now: Instant) -> bool | None:
        """Ask the run of `job_id` in flight to stop; True if one was, False if the job is not running,
        None if the namespace holds no such job (or it is descheduled)."""

        def body(conn: Connection) -> bool | None:
            query = select(jobs.c.state).where(jobs.c.job_id == job_id, jobs.c.state != DESCHEDULED, self._mine)
            state = conn.execute(query.with_for_update()).scalar()
            if state is None:
                return None
            if state != RUNNING:
                return False
            conn.execute(
                update(jobs)
                .where(jobs.c.job_id == job_id, jobs.c.state == RUNNING, self._mine)
                .values(cancel_requested_at=to_datetime(now), change_seq=self._bump_change_seq(conn))
            )
            return True

        return self._write(body, "cancel")

    def cancel_requests(self, instance_id: str) -> list[str]:
        """The ids of the jobs `instance_id` runs whose run was asked to stop by `cancel()`."""

        def body(conn: Connection) -> list[str]:
            query = select(jobs.c.job_id).where(
                self._mine,
                jobs.c.state == RUNNING,
                jobs.c.owner == instance_id,
                jobs.c.cancel_requested_at.is_not(None),
            )
            return [str(job_id) for job_id in conn.execute(query).scalars()]

        return self._read(body, "read cancel requests")
