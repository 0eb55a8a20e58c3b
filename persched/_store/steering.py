"""Steering jobs: pause, resume and run-now.

Each call is one transaction through the group commit (but for pausing and
resuming every job), and moves the change counter. A pause linearizes at its
commit: no run starts after it, since the claim's predicate reads ``paused``.
A resume places the job on its grid from now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import select, update

from .._model.instant import Instant, from_datetime, to_datetime
from ._rows import StoredRow, read_row, read_rows
from .dialects import Sql
from .mappers import (
    DESCHEDULED,
    FINISHED,
    JOB_COLUMNS,
    RAW_JOBS,
    RUNNING,
    SCHEDULED,
    generation_of,
    plan_of,
    readable_or_refuse,
)
from .part import Part
from .records import RunNowAnswer, RunNowVerdict
from .schema import jobs

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = ["SteeringStore"]

# The jobs pause() may pause: scheduled or running (a run in flight finishes), not paused yet;
# (SCHEDULED, RUNNING, False, namespace).
_PAUSABLE: Final = "state IN (?, ?) AND paused = ? AND namespace = ?"
# What a pause writes: a paused job starts no run, so a pending run-now is dropped, and so is a
# pending attempt (the row goes back to the slot it retried, which a resume passes by). MySQL
# assigns left to right: next_run_at reads retry_for before it is cleared.
# (True, paused_until, pause_note, updated_at, change_seq).
_PAUSE: Final = (
    "paused = ?, paused_until = ?, pause_note = ?, run_now_at = NULL,"
    " next_run_at = COALESCE(retry_for, next_run_at), retry_attempt = NULL, retry_for = NULL,"
    " updated_at = ?, change_seq = ?"
)


class SteeringStore(Part):
    """Pause, resume and run-now."""

    def pause_job(
        self, job_id: str, now: Instant, *, until: Instant | None = None, note: str | None = None
    ) -> int | None:
        """Pause the job: no run of it starts after this commits. Return its generation, or None if none to pause.

        `until`: the pause ends by itself then; `note`: why, for people. The caller checks both.
        """

        def body(conn: Connection) -> int | None:
            which = Sql(f"job_id = ? AND {_PAUSABLE}", (job_id, *self._pausable()))
            rows = self.dialect.update_sql(conn, jobs, self._paused(conn, now, until, note), which, "generation")
            return generation_of(rows[0].generation) if rows else None

        return self._write_grouped(body, "pause")

    def pause_all_jobs(self, now: Instant, *, until: Instant | None = None, note: str | None = None) -> int:
        """Pause every scheduled or running job of the namespace that is not paused, in one
        transaction; return how many were paused."""

        def body(conn: Connection) -> int:
            assignments = self._paused(conn, now, until, note)
            sql = f"UPDATE persched_jobs SET {assignments.text} WHERE {_PAUSABLE}"  # noqa: S608 - ours
            return int(self.dialect.execute(conn, Sql(sql, assignments.params + self._pausable())).rowcount)

        return self._write(body, "pause all")

    def _pausable(self) -> tuple[Any, ...]:
        """The parameters of `_PAUSABLE`."""
        return (SCHEDULED, RUNNING, False, self.namespace)

    def _paused(self, conn: Connection, now: Instant, until: Instant | None, note: str | None) -> Sql:
        """What a pause writes; the counter is bumped here, first, as its value is written into the row."""
        at = self.dialect.bind_instant
        return Sql(_PAUSE, (True, None if until is None else at(until), note, at(now), self._bump_change_seq(conn)))

    def resume_job(
        self, job_id: str, now: Instant, *, until: Instant | None = None
    ) -> tuple[int, Instant | None] | None:
        """Resume a paused job on its grid from `now`; its generation and due time (None: running or over).

        With `until`, only a timed pause that ends then (whichever instance asks first wins).
        None if the job is not paused (so).
        """

        def body(conn: Connection) -> tuple[int, Instant | None] | None:
            query = select(*RAW_JOBS).where(
                jobs.c.job_id == job_id, jobs.c.paused.is_(True), jobs.c.state != DESCHEDULED, self._mine
            )
            if until is not None:
                query = query.where(jobs.c.paused_until == to_datetime(until))
            found = conn.execute(query.with_for_update()).first()
            if found is None:
                return None
            return self._resume_row(conn, readable_or_refuse(read_row(JOB_COLUMNS, found._mapping)), now)

        return self._write_grouped(body, "resume")

    def resume_all_jobs(self, now: Instant) -> list[tuple[str, int, Instant | None]]:
        """Resume every paused job of the namespace, in one transaction; return each one's id,
        generation and when it is due (rows that cannot be read are left paused)."""

        def body(conn: Connection) -> list[tuple[str, int, Instant | None]]:
            query = select(*RAW_JOBS).where(jobs.c.paused.is_(True), jobs.c.state != DESCHEDULED, self._mine)
            rows = read_rows(JOB_COLUMNS, conn.execute(query.order_by(jobs.c.job_id).with_for_update()))
            return [(str(row.job_id), *self._resume_row(conn, row, now)) for row in rows if not row.problems]

        return self._write(body, "resume all")

    def _resume_row(self, conn: Connection, row: StoredRow, now: Instant) -> tuple[int, Instant | None]:
        plan = plan_of(row)
        next_at = plan.resumed(now, from_datetime(row.next_run_at))
        state = row.state
        if state == SCHEDULED and plan.is_over(next_at):  # pause() cleared any run-now
            state = FINISHED
        conn.execute(
            update(jobs)
            .where(jobs.c.job_id == row.job_id, jobs.c.generation == row.generation)
            .values(
                paused=False,
                paused_until=None,
                pause_note=None,
                failure_streak=0,  # a resumed job gets pause_after_failures failures again before it pauses
                state=state,
                next_run_at=to_datetime(next_at),
                updated_at=to_datetime(now),
                change_seq=self._bump_change_seq(conn),
            )
        )
        return row.generation, plan.due_at(next_at, None, self.jitter_reach) if state == SCHEDULED else None

    def pause_ends(self, upto: Instant | None) -> list[tuple[str, Instant]]:
        """The timed pauses of the namespace that end by `upto` (None: the earliest one), soonest first."""

        def body(conn: Connection) -> list[tuple[str, Instant]]:
            query = select(jobs.c.job_id, jobs.c.paused_until).where(
                jobs.c.paused.is_(True),
                jobs.c.paused_until.is_not(None),
                jobs.c.state != DESCHEDULED,
                self._mine,
            )
            if upto is not None:
                query = query.where(jobs.c.paused_until <= to_datetime(upto))
            query = query.order_by(jobs.c.paused_until, jobs.c.job_id).limit(None if upto is not None else 1)
            return [(str(job_id), from_datetime(at)) for job_id, at in conn.execute(query)]

        return self._read(body, "timed pauses")

    def request_run_now(self, job_id: str, now: Instant) -> RunNowAnswer:
        """Ask for one extra run of the job as soon as possible (off the grid); `RunNowVerdict` says what came of it."""

        def body(conn: Connection) -> RunNowAnswer:
            query = select(*RAW_JOBS).where(jobs.c.job_id == job_id, jobs.c.state != DESCHEDULED, self._mine)
            found = conn.execute(query.with_for_update()).first()
            if found is None:
                return RunNowAnswer(RunNowVerdict.UNKNOWN, None)
            row = readable_or_refuse(read_row(JOB_COLUMNS, found._mapping))
            verdict = (
                RunNowVerdict.PAUSED
                if row.paused
                else RunNowVerdict.FINISHED
                if row.state == FINISHED
                else RunNowVerdict.PENDING
                if row.run_now_at is not None
                else RunNowVerdict.DROPPED
                if row.state == RUNNING and row.overlap == "skip"
                else RunNowVerdict.REQUESTED
            )
            if verdict is RunNowVerdict.REQUESTED:
                conn.execute(
                    update(jobs)
                    .where(jobs.c.job_id == job_id, jobs.c.generation == row.generation)
                    .values(
                        run_now_at=to_datetime(now), updated_at=to_datetime(now), change_seq=self._bump_change_seq(conn)
                    )
                )
            return RunNowAnswer(verdict, row.generation)

        return self._write_grouped(body, "run now")
