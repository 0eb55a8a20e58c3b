"""Leases and recovery: a run in flight is held by its instance's lease, renewed by its heartbeat.

- `renew_leases`: only the runs the caller really has in flight.
- `recover_run`: a run whose lease was not renewed becomes 'lost' and its
  job goes back to 'scheduled' on the next slot; conditional on the lease
  value the caller observed, so a renewal in between wins, and on the job
  still being that run's, so a deschedule in between wins (SPEC-multi).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, select, update

from .._model import triggers as _triggers
from .._model.instant import Instant, from_datetime, to_datetime
from ._rows import read_row
from ._tx import Transactions, read_time
from .mappers import (
    CLOCK_STEP_FLOOR,
    FINISHED,
    JOB_COLUMNS,
    QUARANTINE,
    RAW_JOBS,
    RUNNING,
    SCHEDULED,
    instant_or_none,
    plan_or_quarantine,
    readable_plan,
    regrid,
)
from .records import OpenRun, Recovery
from .schema import jobs, runs

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

    from sqlalchemy import Connection

logger = logging.getLogger(__name__)


class LeasesStore(Transactions):
    """Leases of runs in flight and recovery of expired ones (module docstring)."""

    def renew_leases(self, instance_id: str, lease_until: Instant, run_ids: Collection[int]) -> None:
        """Push the lease of `instance_id`'s open runs `run_ids` (and their jobs) to `lease_until`.

        Only the runs the caller really has in flight: a run of this instance
        that no worker holds (a claim whose commit reply was lost, or a run
        left by an earlier process with the same instance_id) must lapse and
        be recovered.
        """
        until = to_datetime(lease_until)
        ids = list(run_ids)

        def body(conn: Connection) -> None:
            conn.execute(
                update(runs)
                .where(runs.c.run_id.in_(ids), runs.c.instance_id == instance_id, runs.c.outcome.is_(None))
                .values(lease_until=until)
            )
            in_flight = select(runs.c.job_id).where(runs.c.run_id.in_(ids)).scalar_subquery()
            conn.execute(
                update(jobs)
                .where(jobs.c.owner == instance_id, jobs.c.state == RUNNING, jobs.c.job_id.in_(in_flight))
                .values(lease_until=until)
            )

        self._write(body, "renew leases")

    def open_runs(self) -> list[OpenRun]:
        """Return every run that has no outcome yet."""

        def body(conn: Connection) -> list[OpenRun]:
            rows = conn.execute(
                select(
                    runs.c.run_id,
                    runs.c.job_id,
                    runs.c.generation,
                    runs.c.instance_id,
                    runs.c.lease_until,
                ).where(runs.c.outcome.is_(None), self._in_namespace(runs.c.job_id))
            )
            return [OpenRun(*row) for row in rows]

        return self._read(body, "open runs")

    def recover_run(self, run: OpenRun, now: Instant | Callable[[], Instant]) -> Recovery:
        """Mark `run` lost if its lease is still the one observed; free its job.

        The job's due time is for the caller to queue when it went back to
        'scheduled'; None when it had been descheduled, replaced, paused or
        finished.
        """

        def body(conn: Connection) -> Recovery:
            recovered_at = read_time(now)  # under the write lock: see claim_runs
            lease_match = (
                runs.c.lease_until.is_(None) if run.lease_until is None else runs.c.lease_until == run.lease_until
            )
            lost = self.dialect.update_returning_one(
                conn,
                update(runs)
                .where(runs.c.run_id == run.run_id, runs.c.outcome.is_(None), lease_match)
                .values(
                    outcome="lost",
                    finished_at=to_datetime(recovered_at),
                    lease_until=None,
                    error=f"instance {run.instance_id} stopped renewing its lease",
                ),
                runs.c.scheduled_for,
            )
            if lost is None:
                return Recovery(lost=False)  # renewed, finished or recovered meanwhile
            mine = and_(
                jobs.c.job_id == run.job_id,
                jobs.c.generation == run.generation,
                jobs.c.state == RUNNING,
                jobs.c.owner == run.instance_id,
                jobs.c.running_for == lost.scheduled_for,
            )
            found = conn.execute(select(*RAW_JOBS).where(mine)).first()
            if found is None:
                return Recovery(lost=True)  # the job was descheduled or replaced: nothing to free
            row = read_row(JOB_COLUMNS, found._mapping)
            quarantined: list[dict[str, Any]] = []
            records: list[dict[str, Any]] = []
            plan = plan_or_quarantine(row, recovered_at, run.instance_id, quarantined, records)
            if plan is None:
                conn.execute(QUARANTINE, quarantined)
                conn.execute(self._insert_runs, records)
                return Recovery(lost=True)
            # SPEC §2: the lost slot is not run again; the job carries on. Never the lost slot
            # again, also on a clock behind the claimer's (and for a run
            # claimed before schema 0003, which kept its slot in next_run_at).
            next_at = plan.after_loss(from_datetime(row.next_run_at), from_datetime(lost.scheduled_for), recovered_at)
            run_now_at = instant_or_none(row.run_now_at)
            over = plan.is_over(next_at, run_now_at)
            values: dict[str, Any] = {}
            # A run claimed by a process whose clock was ahead (and that died) left the grid ahead:
            # corrected as at start-up (see DueStore._inspect), in its generation; the change is
            # announced, so that the other instances queue it too.
            corrected = None if over else readable_plan(row, with_start=True)
            corrected_at = None if corrected is None else corrected.corrected(next_at, recovered_at)
            if corrected_at is not None and next_at - corrected_at > CLOCK_STEP_FLOOR:
                logger.warning(
                    "job %s: the lost run's next slot (%s) lay %s further ahead than its schedule allows, written "
                    "while a wall clock was ahead; it runs again at %s",
                    row.job_id,
                    to_datetime(next_at).isoformat(),
                    _triggers.describe_duration(next_at - corrected_at),
                    to_datetime(corrected_at).isoformat(),
                )
                values = regrid(row, plan, corrected_at, self._bump_change_seq(conn))
                next_at = corrected_at
            freed = conn.execute(
                # The read above took no lock (PostgreSQL): a deschedule or
                # replacement committed since must win, so ask again.
                update(jobs)
                .where(mine)
                .values(
                    state=FINISHED if over else SCHEDULED,
                    owner=None,
                    lease_until=None,
                    running_for=None,
                    next_run_at=to_datetime(next_at),
                    run_count=jobs.c.run_count + 1,
                    last_outcome="lost",
                    updated_at=to_datetime(recovered_at),
                    **values,
                )
            )
            if freed.rowcount != 1 or over or row.paused:
                return Recovery(lost=True)
            return Recovery(lost=True, due=plan.due_at(next_at, run_now_at))

        return self._write(body, "recover run")
