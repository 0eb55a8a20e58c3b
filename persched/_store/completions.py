"""Completions: the end of runs, a dispatch cycle's in one transaction (`CompletionsStore.finish_runs`).

The job's UPDATE is conditional on generation, state, owner and the slot in
flight (``running_for``), so the completion of a replaced, descheduled or
recovered run changes nothing. The next slot was decided by the plan the
claim carried (`records.Carried`), while the row still stands where the claim
left it; a row that anything else changed meanwhile is read and decided anew.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from .._model.instant import Instant, from_datetime, to_datetime
from ._tx import REFUSED, refusal_of
from .claim_batch import DISPATCH_SELECT, Writes, standing
from .dialects import Sql, marks
from .failures import STREAK, FailingJob, failed, log_gave_up, log_paused, pause_failing, streak_step
from .mappers import (
    DISPATCH_COLUMNS,
    FINISHED,
    PARK,
    SCHEDULED,
    counted,
    due_of,
    instant_or_none,
    missed_record,
    plan_or_quarantine,
    refused_record,
    retry_of,
    stored,
)
from .part import Part
from .records import MAX_ERROR_TEXT, Completion

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy import Connection

    from .._model.policy import JobPlan, Retry
    from .dialects import DriverCursor

logger = logging.getLogger(__name__)

# Completion statements, each run for every completion of a cycle in one call (`Dialect.update_each`).
# started_at too: an async job's coroutine may start after its claim (its loop was busy), and
# the record says when it did (`Claim.started_at`, as the run ran; persched._interfaces.async_front).
_FINISH_RUN: Final = (
    "UPDATE persched_runs SET started_at = ?, finished_at = ?, outcome = ?, error = ?, lease_until = NULL"
    " WHERE run_id = ? AND outcome IS NULL"
)
# failure_streak: counted by the database from the row as it stands (`persched._store.failures`).
_FINISH_JOB: Final = (
    "UPDATE persched_jobs SET state = ?, owner = NULL, lease_until = NULL, running_for = NULL,"  # noqa: S608 - constants
    " cancel_requested_at = NULL,"  # a cancel request ends with its run (persched._store.cancels)
    " next_run_at = ?, retry_attempt = ?, retry_for = ?,"  # an attempt of the slot pending, or none
    f" run_count = {counted('run_count', '1')}, error_count = {counted('error_count', '?')},"
    f" failure_streak = {STREAK}, last_outcome = ?, updated_at = ?"
    " WHERE job_id = ? AND generation = ? AND state = 'running' AND owner = ? AND running_for = ?"
)
# The completion decided by its claim's plan (`Carried`): also only while the row stands where the
# claim left it, not paused and with no run-now request (else it is read and decided again).
_FINISH_CARRIED: Final = _FINISH_JOB + " AND next_run_at = ? AND run_now_at IS NULL AND paused = ?"


class CompletionsStore(Part):
    """Completions."""

    def finish_runs(self, completions: Sequence[Completion], instance_id: str) -> list[Instant | None]:
        """Record outcomes in one transaction; for each, when its job is due next (None: not to be queued).

        A job descheduled, replaced or recovered meanwhile is left alone (its run record is still
        completed unless marked lost). If the database refuses the batch, each completion is written
        alone, and one refused alone is parked (`_park`) rather than retried for ever.
        """
        if not completions:
            return []
        try:
            return self._finish_batch(completions, instance_id)
        except REFUSED as exc:
            if self._in_write():  # inside dispatch, which writes its parts apart
                self._raise_refusal("finish runs", exc)
            if len(completions) == 1:
                self._park(completions[0], instance_id, refusal_of(exc))
                return [None]
        return [self._finish_alone(c, instance_id) for c in completions]

    def _finish_alone(self, completion: Completion, instance_id: str) -> Instant | None:
        try:
            return self._finish_batch([completion], instance_id)[0]
        except REFUSED as exc:
            self._park(completion, instance_id, refusal_of(exc))
            return None

    def _park(self, completion: Completion, instance_id: str, detail: str) -> None:
        """Record a refused completion's outcome and pause its job, with an "error" record saying why
        (`mappers.PARK`; a row of another owner or generation by now is left alone)."""
        claim = completion.claim
        at = self.dialect.bind_instant

        def body(conn: Connection) -> bool:
            error = None if completion.error is None else completion.error[:MAX_ERROR_TEXT]
            run = (at(claim.started_at), at(completion.finished_at), completion.outcome, error, claim.run_id)
            self.dialect.cursor(conn).execute(_FINISH_RUN, run)
            parked = conn.execute(
                PARK,
                {
                    "b_job_id": claim.job_id,
                    "b_generation": claim.generation,
                    "b_owner": instance_id,
                    "b_running_for": to_datetime(claim.scheduled_for),
                },
            )
            if parked.rowcount == 1:
                record = refused_record(
                    claim.job_id,
                    claim.generation,
                    claim.scheduled_for,
                    "its run's outcome",
                    detail,
                    completion.finished_at,
                    instance_id,
                )
                conn.execute(self._insert_runs, [record])
            return parked.rowcount == 1

        if self._write_park(body):
            logger.error(
                "job %s generation %d paused: the database refused to record its run's outcome: %s",
                claim.job_id,
                claim.generation,
                detail,
            )

    def _finish_batch(self, completions: Sequence[Completion], instance_id: str) -> list[Instant | None]:
        """`finish_runs` in one transaction, refused whole if one row is."""
        at = self.dialect.bind_instant
        finished = [at(c.finished_at) for c in completions]
        params = [
            (
                at(c.claim.started_at),
                finished[i],
                c.outcome,
                None if c.error is None else c.error[:MAX_ERROR_TEXT],
                c.claim.run_id,
            )
            for i, c in enumerate(completions)
        ]
        # Decided before the transaction (pure): (index, next_run_at, finished?, plan) of each carried
        # one, and its _FINISH_CARRIED parameters; the failed runs of jobs with pause_after_failures
        # whose slot is settled (the others: `_finish_read`).
        carried: list[tuple[int, Instant, bool, JobPlan, bool]] = []
        moves: list[tuple[Any, ...]] = []
        carried_failing: list[FailingJob] = []
        carried_gave_up: dict[int, Completion] = {}  # by run id: logged once committed
        for i, c in enumerate(completions):
            kept = c.claim.carried
            if kept is None or kept.run_now_at is not None:
                continue
            decided = _next_after(kept.plan, c, kept.next_run_at, kept.pending)
            if decided is None:  # overlap "skip" dropped slots: a record to write, decided again below
                continue
            next_at, retry = decided
            over = retry is None and kept.plan.is_over(next_at, None)
            carried.append((i, next_at, over, kept.plan, retry is not None))
            left = at(kept.next_run_at)
            moves.append(
                (
                    FINISHED if over else SCHEDULED,
                    left if next_at == kept.next_run_at else at(next_at),
                    None if retry is None else retry.attempt,
                    None if retry is None else at(retry.slot),
                    1 if c.outcome == "error" else 0,
                    streak_step(c.outcome, c.claim.attempt),
                    c.outcome,
                    finished[i],
                    c.claim.job_id,
                    c.claim.generation,
                    instance_id,
                    at(c.claim.scheduled_for),
                    left,
                    False,
                )
            )
            if retry is None and failed(c.outcome) and kept.plan.pause_after_failures:
                failing = FailingJob(c.claim.job_id, c.claim.generation, kept.plan.pause_after_failures, c.finished_at)
                carried_failing.append(failing)
            if retry is None and gave_up(kept.plan, c):
                carried_gave_up[c.claim.run_id] = c

        def body(conn: Connection) -> list[Instant | None]:
            cur = self.dialect.cursor(conn)
            failing = list(carried_failing)
            given_up = dict(carried_gave_up)
            self.dialect.update_each(cur, _FINISH_RUN, params)
            due: list[Instant | None] = [None] * len(completions)
            rest: Sequence[int] = range(len(completions))
            # One call into the driver for every row (each call gives the GIL away). If every row matched,
            # each goes on to its carried slot; else every completion is read (`_finish_read`).
            if moves and self.dialect.update_each(cur, _FINISH_CARRIED, moves) == len(moves):
                for i, next_at, over, plan, retried in carried:
                    due[i] = None if over else plan.due_at(next_at, None, self.jitter_reach, retry=retried)
                done = {i for i, *_ in carried}
                rest = [i for i in rest if i not in done]
            if rest:
                read = self._finish_read(conn, cur, [completions[i] for i in rest], instance_id, failing, given_up)
                for i, due_at in zip(rest, read, strict=True):
                    due[i] = due_at
            if given_up:
                self._on_commit(lambda: _log_gave_up(given_up))
            if failing:
                paused = pause_failing(cur, self.dialect, failing)
                keys = {(job.job_id, job.generation) for job in paused}
                due = [
                    None if (c.claim.job_id, c.claim.generation) in keys else d
                    for c, d in zip(completions, due, strict=True)
                ]
                self._on_commit(lambda: log_paused(paused, self.failures_paused))
            return due

        return self._write(body, "finish runs")

    def _finish_read(
        self,
        conn: Connection,
        cur: DriverCursor,
        completions: Sequence[Completion],
        instance_id: str,
        failing: list[FailingJob],
        given_up: dict[int, Completion],
    ) -> list[Instant | None]:
        """`finish_runs` of completions whose row must be read: under the write lock (SQLite) and
        written with the same predicate again, so a row recovered, descheduled or replaced
        meanwhile is never moved. Their run records are written already. A failed run of a job
        with pause_after_failures is added to `failing`, one whose slot gave up to `given_up`."""
        at = self.dialect.bind_instant
        job_ids = tuple({c.claim.job_id for c in completions})
        ours = f"SELECT {DISPATCH_SELECT} FROM persched_jobs WHERE job_id IN ({marks(len(job_ids))})"  # noqa: S608
        mine = stored(
            self.dialect.execute(conn, Sql(f"{ours} AND state = 'running' AND owner = ?", (*job_ids, instance_id))),
            DISPATCH_COLUMNS,
        )
        # A row of ours edited by hand while its run was in flight: settled alone below.
        unreadable = {(row.job_id, row.generation): row for row in mine if row.problems}
        owned = {
            (row.job_id, row.generation, from_datetime(row.running_for)): row
            for row in mine
            if not row.problems and row.running_for is not None
        }
        moves: list[tuple[Any, ...]] = []  # _FINISH_JOB
        w = Writes()  # quarantines and history records
        due: list[Instant | None] = []
        others = standing(
            conn,
            self.dialect,
            {c.claim.job_id for c in completions} - {key[0] for key in owned} - {k[0] for k in unreadable},
        )
        for c in completions:
            row = owned.get((c.claim.job_id, c.claim.generation, c.claim.scheduled_for))
            broken = unreadable.pop((c.claim.job_id, c.claim.generation), None)
            if broken is not None:
                plan_or_quarantine(broken, c.finished_at, instance_id, w.quarantined, w.missed)
                due.append(None)
                continue
            if row is None:
                # Not ours any more. If the job is scheduled in the same generation,
                # this is a retry after a commit that did land: queue it again.
                other = others.get(c.claim.job_id)
                due.append(
                    due_of(other, self.jitter_reach)
                    if other is not None and other.generation == c.claim.generation
                    else None
                )
                continue
            plan = plan_or_quarantine(row, c.finished_at, instance_id, w.quarantined, w.missed)
            if plan is None:
                due.append(None)
                continue
            # A paused row has no attempt pending, and gets none (the pause dropped it).
            left = from_datetime(row.next_run_at)
            decided = _next_after(plan, c, left, retry_of(row), paused=bool(row.paused))
            if decided is None:
                next_at, dropped = plan.after_run(left, c.finished_at)
                if dropped is not None:
                    w.missed.append(missed_record(row.job_id, row.generation, dropped, c.finished_at, instance_id))
                retry = None
            else:
                next_at, retry = decided
            run_now_at = instant_or_none(row.run_now_at)
            over = retry is None and plan.is_over(next_at, run_now_at)
            moves.append(
                (
                    FINISHED if over else SCHEDULED,
                    at(next_at),
                    None if retry is None else retry.attempt,
                    None if retry is None else at(retry.slot),
                    1 if c.outcome == "error" else 0,
                    streak_step(c.outcome, c.claim.attempt),
                    c.outcome,
                    at(c.finished_at),
                    row.job_id,
                    row.generation,
                    instance_id,
                    at(c.claim.scheduled_for),  # == the row's running_for (`owned`)
                )
            )
            retrying = retry is not None
            due.append(
                None if over or row.paused else plan.due_at(next_at, run_now_at, self.jitter_reach, retry=retrying)
            )
            if retry is None and not row.paused and gave_up(plan, c):
                given_up[c.claim.run_id] = c
            if retry is None and failed(c.outcome) and plan.pause_after_failures:
                failing.append(FailingJob(row.job_id, row.generation, plan.pause_after_failures, c.finished_at))
        if moves:
            self.dialect.update_each(cur, _FINISH_JOB, moves)
        w.apply(conn, cur, self.dialect, self._insert_runs)
        self._after_commit(w.missed)
        return due


def _next_after(
    plan: JobPlan, completion: Completion, next_run_at: Instant, pending: Retry | None, *, paused: bool = False
) -> tuple[Instant, Retry | None] | None:
    """Where a completed run's row goes: its next slot, or the next attempt of its slot (due then),
    from the row's `next_run_at` and the attempt `pending` on it; None when its overlap policy
    dropped slots (`JobPlan.after_run` names them: the caller records them)."""
    claim = completion.claim
    if pending is not None and claim.run_now:
        return next_run_at, pending  # a run-now run leaves the pending attempt as it was
    retried = (
        None
        if paused
        else plan.retry_after(
            claim.scheduled_for, claim.attempt, completion.outcome, claim.run_now, completion.finished_at
        )
    )
    if retried is not None:
        return retried
    next_at, dropped = plan.after_run(next_run_at, completion.finished_at)
    return None if dropped is not None else (next_at, None)


def gave_up(plan: JobPlan, completion: Completion) -> bool:
    """Whether a completion that made no further attempt settles a slot that its retries could not save:
    a failed attempt past the first, or a first one that would have been retried had its slot had time."""
    claim, outcome = completion.claim, completion.outcome
    return failed(outcome) and (claim.attempt > 1 or plan.retry_policy.retried(outcome, claim.run_now))


def _log_gave_up(gave_up: dict[int, Completion]) -> None:
    for c in gave_up.values():
        log_gave_up(c.claim.job_id, c.claim.generation, c.claim.scheduled_for, c.claim.attempt, c.outcome)
