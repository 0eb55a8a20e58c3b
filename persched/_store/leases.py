"""Leases and recovery: a run in flight is held by its instance's lease, renewed by its heartbeat.

`LeasesStore.recover_run` marks a run lost, conditional on the lease value
the caller observed (a renewal in between wins) and on the job still being
that run's (a deschedule in between wins); the job moves on to its next slot,
or is paused by its failures (`persched._store.failures`). A stranded row
(``running`` with no open run, or no known state: only a hand edit leaves
one) is freed conditional on being exactly as the caller saw it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from sqlalchemy import and_, exists, literal_column, select, union_all, update

from .._model import triggers as _triggers
from .._model.instant import Instant, from_datetime, to_datetime
from ._rows import raw_columns, read_row
from ._tx import REFUSED, read_time, refusal_of
from .dialects import Sql
from .failures import FailingJob, log_gave_up, log_paused, pause_failing, streak_after
from .mappers import (
    CLOCK_STEP_FLOOR,
    DESCHEDULED,
    FINISHED,
    JOB_COLUMNS,
    PARK,
    QUARANTINE,
    RAW_JOBS,
    RUNNING,
    SCHEDULED,
    counted,
    instant_or_none,
    notice_record,
    plan_or_quarantine,
    readable_plan,
    refused_record,
    regrid,
    retry_of,
)
from .part import Part
from .records import OpenRun, Recovery, Stranded
from .schema import jobs, runs

if TYPE_CHECKING:
    from collections.abc import Callable, Collection
    from datetime import datetime

    from sqlalchemy import Connection

    from .._model.policy import Retry

logger = logging.getLogger(__name__)


class _Lost(NamedTuple):
    """The run `LeasesStore._mark_lost` marked lost."""

    scheduled_for: datetime
    attempt: object  # as stored: the caller takes a hand-edited one as 1
    run_now: bool


# Every state but those a row may rest in with no run open (descheduled < finished < scheduled), as
# ranges of the (state, next_run_at) index: `state NOT IN (...)` walked every job on SQLite.
_NOT_AT_REST: Final = (
    jobs.c.state < DESCHEDULED,
    and_(jobs.c.state > DESCHEDULED, jobs.c.state < FINISHED),
    and_(jobs.c.state > FINISHED, jobs.c.state < SCHEDULED),  # `running` among them
    jobs.c.state > SCHEDULED,
)
_STRANDED_COLUMNS: Final = tuple(
    jobs.c[name] for name in ("job_id", "generation", "state", "owner", "lease_until", "running_for")
)
# No run of the job is open (any generation: a replaced job's old run may still be finishing).
_NO_OPEN_RUN: Final = ~exists().where(runs.c.job_id == jobs.c.job_id, runs.c.outcome.is_(None))


class LeasesStore(Part):
    """Leases of runs in flight and recovery of expired ones."""

    def renew_leases(self, instance_id: str, lease_until: Instant, run_ids: Collection[int]) -> None:
        """Push the lease of `instance_id`'s open runs `run_ids` (and their jobs) to `lease_until`.

        Only runs a worker really holds: any other run of this instance must lapse and be recovered.
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
            lost = self._mark_lost(conn, run, recovered_at)
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
            # Never the lost slot again, also on a clock behind the claimer's.
            slot, pending = from_datetime(lost.scheduled_for), retry_of(row)
            attempt = lost.attempt if isinstance(lost.attempt, int) and lost.attempt >= 1 else 1  # a hand edit: 1
            if pending is not None and lost.run_now:  # a run-now run leaves the pending attempt as it was
                retried: tuple[Instant, Retry] | None = (from_datetime(row.next_run_at), pending)
            else:  # with retry_lost, the next attempt of its slot (docs/reference/behaviour.md, "Retries")
                retried = plan.retry_after(slot, attempt, "lost", lost.run_now, recovered_at)
            next_at = retried[0] if retried else plan.after_loss(from_datetime(row.next_run_at), slot, recovered_at)
            retry = retried[1] if retried else None
            run_now_at = instant_or_none(row.run_now_at)
            over = retry is None and plan.is_over(next_at, run_now_at)
            values: dict[str, Any] = {}
            # A dead claimer whose clock was ahead left the grid ahead: corrected as at start-up, and
            # announced, so that the other instances queue it too.
            corrected = None if over or retry is not None else readable_plan(row, with_start=True)
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
                # The read took no lock (PostgreSQL): a deschedule or replacement since must win.
                update(jobs)
                .where(mine)
                .values(
                    state=FINISHED if over else SCHEDULED,
                    owner=None,
                    lease_until=None,
                    running_for=None,
                    cancel_requested_at=None,
                    next_run_at=to_datetime(next_at),
                    retry_attempt=None if retry is None else retry.attempt,
                    retry_for=None if retry is None else to_datetime(retry.slot),
                    run_count=literal_column(counted("run_count", "1")),
                    # counted on the row as it stands
                    failure_streak=literal_column(streak_after("lost", attempt)),
                    last_outcome="lost",
                    updated_at=to_datetime(recovered_at),
                    **values,
                )
            )
            # The slot's last attempt was lost, with retries it had no time (or, without retry_lost, no leave) for.
            retried_slot = attempt > 1 or plan.retry_policy.retried("lost", run_now=False)
            if freed.rowcount == 1 and retry is None and not lost.run_now and retried_slot:
                self._on_commit(lambda: log_gave_up(row.job_id, row.generation, slot, attempt, "lost"))
            if freed.rowcount == 1 and retry is None and plan.pause_after_failures:
                failing = FailingJob(row.job_id, row.generation, plan.pause_after_failures, recovered_at)
                paused = pause_failing(self.dialect.cursor(conn), self.dialect, [failing])
                if paused:
                    self._on_commit(lambda: log_paused(paused, self.failures_paused))
                    return Recovery(lost=True)
            if freed.rowcount != 1 or over or row.paused:
                return Recovery(lost=True)
            return Recovery(lost=True, due=plan.due_at(next_at, run_now_at, self.jitter_reach, retry=retry is not None))

        try:
            return self._write(body, "recover run")
        except REFUSED as exc:
            if self._in_write():  # part of an enclosing write, which writes its parts apart
                self._raise_refusal("recover run", exc)
            return self._park_lost(run, now, refusal_of(exc))

    def _park_lost(self, run: OpenRun, now: Instant | Callable[[], Instant], detail: str) -> Recovery:
        """`recover_run` of a run whose job row the database refused to move on: the run is marked
        lost all the same and its job paused, with an "error" record saying why (`mappers.PARK`),
        so that the recovery of every other run goes on."""

        def body(conn: Connection) -> tuple[Recovery, bool]:
            recovered_at = read_time(now)
            lost = self._mark_lost(conn, run, recovered_at)
            if lost is None:
                return Recovery(lost=False), False
            slot = from_datetime(lost.scheduled_for)
            parked = conn.execute(
                PARK,
                {
                    "b_job_id": run.job_id,
                    "b_generation": run.generation,
                    "b_owner": run.instance_id,
                    "b_running_for": lost.scheduled_for,
                },
            )
            if parked.rowcount == 1:
                record = refused_record(
                    run.job_id, run.generation, slot, "its lost run", detail, recovered_at, run.instance_id
                )
                conn.execute(self._insert_runs, [record])
            return Recovery(lost=True), parked.rowcount == 1

        recovery, parked = self._write_park(body)
        if parked:
            logger.error(
                "job %s generation %d paused: the database refused to record its lost run: %s",
                run.job_id,
                run.generation,
                detail,
            )
        return recovery

    def _mark_lost(self, conn: Connection, run: OpenRun, recovered_at: Instant) -> _Lost | None:
        """Mark `run` lost if its lease is still the one observed; its slot and attempt, or None."""
        at = self.dialect.bind_instant
        error = f"instance {run.instance_id} stopped renewing its lease"
        lost = Sql("outcome = ?, finished_at = ?, lease_until = NULL, error = ?", ("lost", at(recovered_at), error))
        which = Sql("run_id = ? AND outcome IS NULL AND lease_until IS NULL", (run.run_id,))
        if run.lease_until is not None:
            held = at(from_datetime(run.lease_until))
            which = Sql("run_id = ? AND outcome IS NULL AND lease_until = ?", (run.run_id, held))
        rows = self.dialect.update_sql(conn, runs, lost, which, "scheduled_for, attempt, run_now")
        if not rows:
            return None
        row = rows[0]  # read raw
        return _Lost(to_datetime(self.dialect.raw_instant(row.scheduled_for)), row.attempt, bool(row.run_now))

    def stranded_jobs(self) -> list[Stranded]:
        """The job rows of this namespace that no scheduler would move on."""
        columns = raw_columns(_STRANDED_COLUMNS)
        query = union_all(*(select(*columns).where(self._mine, states, _NO_OPEN_RUN) for states in _NOT_AT_REST))

        def body(conn: Connection) -> list[Stranded]:
            rows = [read_row(_STRANDED_COLUMNS, found._mapping) for found in conn.execute(query)]
            # A row that cannot be read otherwise is reported as such (`Job.unreadable`) and left alone.
            return [
                Stranded(row.job_id, row.generation, row.state, row.owner, row.lease_until, row.running_for)
                for row in rows
                if not row.problems
            ]

        return self._read(body, "find stranded jobs")

    def free_stranded_job(self, seen: Stranded, now: Instant, instance_id: str) -> Instant | None:
        """Free a stranded row if it is still exactly as `seen`, with an "error" record saying why:
        a 'running' one onto its grid (its due time returned, for the caller to queue), any other
        state paused. None when nothing was queued: paused, finished, or changed since it was seen."""
        same = and_(
            jobs.c.job_id == seen.job_id,
            jobs.c.generation == seen.generation,
            jobs.c.state == seen.state,
            jobs.c.owner.is_not_distinct_from(seen.owner),
            jobs.c.lease_until.is_not_distinct_from(seen.lease_until),
            jobs.c.running_for.is_not_distinct_from(seen.running_for),
            _NO_OPEN_RUN,
        )
        freed_at = to_datetime(now)

        def body(conn: Connection) -> tuple[Instant | None, str | None]:
            found = conn.execute(select(*RAW_JOBS).where(same)).first()
            if found is None:
                return None, None  # it moved since it was seen: whoever moved it decides
            row = read_row(JOB_COLUMNS, found._mapping)
            quarantined: list[dict[str, Any]] = []
            records: list[dict[str, Any]] = []
            plan = plan_or_quarantine(row, now, instance_id, quarantined, records) if seen.state == RUNNING else None
            values: dict[str, Any] = {
                "owner": None,
                "lease_until": None,
                "running_for": None,
                "cancel_requested_at": None,
                "updated_at": freed_at,
            }
            due, why = None, None
            if plan is not None:
                slot = from_datetime(row.running_for if row.running_for is not None else row.next_run_at)
                # Never its slot again; an attempt pending (beside a run-now run) stays as it was.
                left = from_datetime(row.next_run_at)
                pending = retry_of(row) is not None
                next_at = left if pending else plan.after_loss(left, slot, now)
                run_now_at = instant_or_none(row.run_now_at)
                over = not pending and plan.is_over(next_at, run_now_at)
                values.update(state=FINISHED if over else SCHEDULED, next_run_at=to_datetime(next_at))
                reach = self.jitter_reach
                due = None if over or row.paused else plan.due_at(next_at, run_now_at, reach, retry=pending)
                why = (
                    f"the job's row said it was running (owner {seen.owner}) but no run of it was open; "
                    "it was put back on its schedule"
                )
            else:
                values.update(state=SCHEDULED, paused=True, run_now_at=None, retry_attempt=None, retry_for=None)
                if not records:  # not said already by plan_or_quarantine (an unreadable schedule)
                    why = (
                        f"the job's stored state {seen.state!r} is not a job state; it was paused: "
                        "resume it, or schedule it again"
                    )
                    slot = from_datetime(row.next_run_at)
            if why is not None:
                records.append(notice_record(row.job_id, row.generation, slot, why, now, instance_id))
            if conn.execute(update(jobs).where(same).values(**values)).rowcount != 1:
                return None, None  # PostgreSQL's read took no lock: a change since wins
            conn.execute(self._insert_runs, records)
            return due, why

        due, why = self._write(body, "free a stranded job")
        if why is not None:
            level = logging.WARNING if seen.state == RUNNING else logging.ERROR
            logger.log(level, "job %s generation %d: %s", seen.job_id, seen.generation, why)
        return due
