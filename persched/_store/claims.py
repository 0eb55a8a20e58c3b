"""Claims and completions: the start and the end of runs, one transaction per dispatch cycle.

- `claim_runs`: the start of runs. One conditional UPDATE decides every
  entry of a batch by its own predicate::

      UPDATE persched_jobs SET state='running', owner=:me, lease_until=:lease,
                               running_for=next_run_at
       WHERE job_id IN (:ids) AND state='scheduled' AND NOT paused
         AND (job_id, generation) IN (:entries)
         AND (next_run_at <= CASE job_id WHEN :id THEN :expected_at ... END
              OR run_now_at <= <the same bound>)

  It is the linearization point of a run's start (SPEC §2); how an engine
  locks the rows it decides and names the winners is its `Dialect`'s
  (SQLite: the write lock and RETURNING; PostgreSQL: FOR UPDATE SKIP LOCKED
  and RETURNING). The predicate on `generation` makes a stale heap entry
  harmless; the one on `next_run_at` keeps an entry from running a slot
  early after another instance moved the row on (for a job with entries of
  two generations in the batch, ``CASE generation …`` picks the row's own
  entry's bound); the one on `paused` makes pause() linearize like
  deschedule(). Then each won row's policies
  (`_policy`) decide its slot and next slot (`_ClaimBatch.decide`), the
  history rows are inserted, and the decisions are written (`_Writes`), all
  in the same transaction.
- `finish_runs`: completions. The job UPDATE is conditional on generation,
  state, owner and the slot in flight (`running_for`), so the completion of
  a replaced, descheduled or recovered run changes nothing (FIELD-REPORTS #5).
- `dispatch`: `finish_runs` and `claim_runs` of one dispatch cycle in one
  transaction (nested writes join the transaction open on their thread).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from sqlalchemy import Insert, Integer, and_, bindparam, case, literal, or_, select, tuple_, update
from sqlalchemy.exc import IntegrityError

from .._instant import Instant, from_datetime, to_datetime
from .._schema import UTCDateTime, jobs, runs
from ..errors import StoreError
from ._tx import Transactions, read_time
from .mappers import (
    DISPATCH_COLUMNS,
    FINISHED,
    QUARANTINE,
    RAW_DISPATCH,
    RUNNING,
    SCHEDULED,
    due_of,
    instant_or_none,
    missed_record,
    nullable_micros,
    plan_or_quarantine,
    readable_plan,
    rows_of,
    stored,
)
from .records import MAX_ERROR_TEXT, Claim, ClaimEntry, ClaimMiss, Completion

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from datetime import datetime

    from sqlalchemy import ColumnElement, Connection, Row

    from .._instant import Micros
    from .._policy import ClaimPlan, JobPlan
    from ._rows import StoredRow
    from .dialects import Dialect

logger = logging.getLogger(__name__)

# Claim statements, built once (executemany over the claims of a cycle).
_CLAIM_MOVE: Final = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("b_job_id"))
    .values(
        next_run_at=bindparam("b_next"),
        running_for=bindparam("b_running_for"),
        run_now_at=bindparam("b_run_now_at"),
    )
)


_CLAIM_NEXT: Final = update(jobs).where(jobs.c.job_id == bindparam("b_job_id")).values(next_run_at=bindparam("b_next"))
_CLAIM_REVERT: Final = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("b_job_id"))
    .values(state=bindparam("b_state"), owner=None, lease_until=None, running_for=None, next_run_at=bindparam("b_next"))
)


# Completion statements, built once (executemany over every completion of a cycle).
_FINISH_RUN: Final = (
    update(runs)
    .where(runs.c.run_id == bindparam("b_run_id"), runs.c.outcome.is_(None))
    .values(
        finished_at=bindparam("b_finished"),
        outcome=bindparam("b_outcome"),
        error=bindparam("b_error"),
        lease_until=None,
    )
)


_FINISH_JOB: Final = (
    update(jobs)
    .where(
        jobs.c.job_id == bindparam("b_job_id"),
        jobs.c.generation == bindparam("b_generation"),
        jobs.c.state == RUNNING,
        jobs.c.owner == bindparam("b_owner"),
        jobs.c.running_for == bindparam("b_slot"),
    )
    .values(
        state=bindparam("b_state"),
        owner=None,
        lease_until=None,
        running_for=None,
        next_run_at=bindparam("b_next"),
        run_count=jobs.c.run_count + 1,
        error_count=jobs.c.error_count + bindparam("b_errors", type_=Integer),
        last_outcome=bindparam("b_outcome"),
        updated_at=bindparam("b_finished"),
    )
)


def _retry_at(row: StoredRow, bound: Instant) -> Instant | None:
    """When an entry that lost its claim on `row` should look again (see `ClaimMiss`)."""
    if row.problems:
        # Not by this entry: jobs() and `persched jobs` report the row until it is scheduled again.
        logger.error("job %s is not retried: its stored row cannot be read: %s", row.job_id, row.describe())
        return None
    plan = None if row.paused or row.state not in (SCHEDULED, RUNNING) else readable_plan(row)
    if plan is None:
        return None
    next_at, run_now_at = from_datetime(row.next_run_at), instant_or_none(row.run_now_at)
    if row.state == SCHEDULED and (next_at > bound or run_now_at is not None):
        return plan.due_at(next_at, run_now_at)  # moved on (by another instance, or a skip)
    if row.state == RUNNING:
        # Another instance runs it: look again at its next slot, in case that
        # instance dies (its completion is not seen here). A next slot that is
        # already due (the run outlasted it) is the owner's to run when its run
        # ends: look again one slot later, or every loser retries at once, in
        # a loop, until that completion commits (issue 12, item 7).
        return plan.due_at(next_at if next_at > bound else plan.slot_after(max(next_at, bound)), None)
    # Another instance is claiming this very slot (SKIP LOCKED passed it by).
    return plan.due_at(plan.slot_after(next_at), None)


def _misses(conn: Connection, bounds: dict[tuple[str, int], Instant]) -> dict[tuple[str, int], ClaimMiss]:
    """What each lost entry ``(job_id, generation)`` found: the row as it is now, and when to look again."""
    found = rows_of(conn, {job_id for job_id, _ in bounds})
    return {
        key: ClaimMiss(row.state, row.generation, row.owner, _retry_at(row, bound))
        for key, bound in bounds.items()
        if (row := found.get(key[0])) is not None
    }


def _bound_of(entries: list[tuple[int, Instant]]) -> ColumnElement[Any]:
    """The slot bound of one job's row, for its batch's entries ``[(generation, bound)]``."""
    *others, (_, last) = entries
    if not others:
        return literal(to_datetime(last), UTCDateTime)
    return case(
        {generation: literal(to_datetime(at), UTCDateTime) for generation, at in others},
        value=jobs.c.generation,
        else_=literal(to_datetime(last), UTCDateTime),
    )


def claim_clauses(
    expected: dict[tuple[str, int], tuple[Instant, Instant]], dialect: Dialect
) -> dict[str, ColumnElement[bool]]:
    """The claim's predicate (module docstring), clause by clause, for entries ``{(job_id, generation): (bound, _)}``.

    Named so that a test can drop one and watch its invariant break.
    """
    # Each row's own bound: its entry's expected slot (CASE keeps it one statement). Two
    # generations of one job may be in one batch (a stale entry beside the live one's): the
    # row's generation picks its entry's bound then. (Which generation may be claimed at all
    # is the "generation" clause's to decide, alone.)
    by_job: dict[str, list[tuple[int, Instant]]] = {}
    for (job_id, generation), (at, _) in expected.items():
        by_job.setdefault(job_id, []).append((generation, at))
    bound = case({job_id: _bound_of(entries) for job_id, entries in by_job.items()}, value=jobs.c.job_id)
    return {
        "ids": jobs.c.job_id.in_({job_id for job_id, _ in expected}),  # lets SQLite use the primary key
        # Not by the (state, next_run_at) index: the primary key finds the batch's rows at any table size.
        "state": dialect.unindexed(jobs.c.state) == SCHEDULED,
        "paused": jobs.c.paused.is_(False),  # pause() linearizes against this predicate
        "generation": tuple_(jobs.c.job_id, jobs.c.generation).in_(list(expected)),
        "slot": or_(jobs.c.next_run_at <= bound, jobs.c.run_now_at <= bound),
    }


@dataclass
class _Writes:
    """The statements a claim or completion batch queues as it decides, executed at once (executemany)."""

    moves: list[dict[str, Any]] = field(default_factory=list)  # _CLAIM_MOVE
    nexts: list[dict[str, Any]] = field(default_factory=list)  # _CLAIM_NEXT
    reverts: list[dict[str, Any]] = field(default_factory=list)  # _CLAIM_REVERT
    quarantined: list[dict[str, Any]] = field(default_factory=list)  # QUARANTINE
    missed: list[dict[str, Any]] = field(default_factory=list)  # history rows: "missed" and "error" records

    def apply(self, conn: Connection, insert_runs: Insert) -> None:
        for statement, params in (
            (_CLAIM_MOVE, self.moves),
            (_CLAIM_NEXT, self.nexts),
            (_CLAIM_REVERT, self.reverts),
            (QUARANTINE, self.quarantined),
            (insert_runs, self.missed),
        ):
            if params:
                conn.execute(statement, params)

    def revert(
        self, plan: JobPlan, job_id: str, generation: int, next_at: Instant, run_now_at: Instant | None
    ) -> ClaimMiss:
        """A won row that runs nothing now: queue its return to waiting at `next_at`; the result for its entry."""
        over = plan.is_over(next_at, run_now_at)
        self.reverts.append(
            {"b_job_id": job_id, "b_next": to_datetime(next_at), "b_state": FINISHED if over else SCHEDULED}
        )
        return ClaimMiss(
            FINISHED if over else SCHEDULED, generation, None, None if over else plan.due_at(next_at, run_now_at)
        )


class _Won(NamedTuple):
    """A won row that runs a slot: its claim, plan and decision, and its run_now_at and next_run_at as read."""

    claim: Claim
    plan: JobPlan
    decision: ClaimPlan
    run_now_at: Instant | None
    next_at: Instant


class _ClaimBatch:
    """One claim transaction's decisions: first per won row (`decide`), then per history insert
    (`record_starts`); `writes` holds what they queued, `results` answers each entry."""

    def __init__(
        self, expected: dict[tuple[str, int], tuple[Instant, Instant]], claimed_at: Instant, instance_id: str
    ) -> None:
        self.expected = expected
        self.claimed_at = claimed_at
        self.instance_id = instance_id
        self.writes = _Writes()
        self.claims: dict[tuple[str, int], _Won] = {}
        self.skipped: dict[tuple[str, int], ClaimMiss] = {}

    def decide(self, row: StoredRow) -> None:
        """What a won row does now, by its policies: run a slot, or go back to waiting."""
        key = (row.job_id, row.generation)
        w = self.writes
        plan = plan_or_quarantine(row, self.claimed_at, self.instance_id, w.quarantined, w.missed)
        if plan is None:
            # Never block the other claims: the job is paused, its history says why.
            self.skipped[key] = ClaimMiss(SCHEDULED, row.generation, None, None)
            return
        run_now_at, next_at = instant_or_none(row.run_now_at), from_datetime(row.next_run_at)
        bound, taken_at = self.expected[key]
        decision = plan.claim(next_at, run_now_at, bound, self.claimed_at, taken_at)
        if decision.missed is not None:
            w.missed.append(missed_record(*key, decision.missed, self.claimed_at, self.instance_id))
        if decision.run_for is None:
            # The policy drops the late slots (misfire "skip"): nothing runs now.
            self.skipped[key] = w.revert(plan, *key, decision.next_run_at, run_now_at)
            return
        claim = Claim(
            row.job_id,
            row.generation,
            row.target,
            row.args,
            row.kwargs,
            decision.run_for,
            self.claimed_at,
            0,  # run_id: see record_starts
            decision.run_now,
            nullable_micros(row.max_runtime_seconds),
        )
        self.claims[key] = _Won(claim, plan, decision, run_now_at, next_at)

    def won(self) -> list[Claim]:
        return [won.claim for won in self.claims.values()]

    def record_starts(self, run_ids: dict[str, int]) -> None:
        """Give each claim its run id, or settle alone a job whose slot has a run recorded already."""
        w = self.writes
        for key, won in list(self.claims.items()):
            claim, plan, decision = won.claim, won.plan, won.decision
            run_id = run_ids.get(claim.job_id)
            if run_id is None:
                # SPEC §2 "Clock corrections": this slot ran already; move on past it, alone
                # (a fixed-delay claim leaves next_run_at on it: one interval on, then).
                past = max(decision.next_run_at, plan.slot_after(claim.scheduled_for))
                logger.warning(
                    "job %s generation %d: the slot %s has run already (written by a clock behind the one "
                    "that ran it?); moving on to %s",
                    *key,
                    to_datetime(claim.scheduled_for).isoformat(),
                    to_datetime(past).isoformat(),
                )
                del self.claims[key]
                self.skipped[key] = w.revert(plan, *key, past, won.run_now_at)
                continue
            self.claims[key] = won._replace(claim=dataclasses.replace(claim, run_id=run_id))
            if decision.run_now or decision.run_for != won.next_at:  # the UPDATE set running_for to next_at
                w.moves.append(
                    {
                        "b_job_id": claim.job_id,
                        "b_next": to_datetime(decision.next_run_at),
                        "b_running_for": to_datetime(claim.scheduled_for),
                        "b_run_now_at": (
                            None if decision.run_now or won.run_now_at is None else to_datetime(won.run_now_at)
                        ),
                    }
                )
            elif decision.next_run_at != won.next_at:  # one parameter per row, not three
                w.nexts.append({"b_job_id": claim.job_id, "b_next": to_datetime(decision.next_run_at)})

    def undecided(self) -> dict[tuple[str, int], Instant]:
        """The entries' rows the UPDATE did not win (another instance, a change), with their bounds."""
        return {
            key: bound
            for key, (bound, _) in self.expected.items()
            if key not in self.claims and key not in self.skipped
        }

    def results(
        self, entries: Sequence[ClaimEntry], misses: dict[tuple[str, int], ClaimMiss]
    ) -> list[Claim | ClaimMiss]:
        results: list[Claim | ClaimMiss] = []
        handed: set[tuple[str, int]] = set()
        for job_id, generation, _, _ in entries:
            key = (job_id, generation)
            if key in self.claims and key not in handed:
                handed.add(key)
                results.append(self.claims[key].claim)
            elif key in self.claims:  # a repeated entry wins once; the repeat sees our own run
                results.append(ClaimMiss(RUNNING, generation, self.instance_id))
            elif key in self.skipped:
                results.append(self.skipped.pop(key))
            else:
                results.append(misses.get(key, ClaimMiss(None)))
        return results


class ClaimsStore(Transactions):
    """Claims and completions: the dispatch path (module docstring)."""

    def dispatch(
        self,
        completions: Sequence[Completion],
        entries: Sequence[ClaimEntry],
        now: Instant | Callable[[], Instant],
        instance_id: str,
        lease: Micros,
    ) -> tuple[list[Instant | None], list[Claim | ClaimMiss]]:
        """`finish_runs` then `claim_runs` in one transaction: one commit (one fsync) per dispatch cycle.

        A crash loses both or neither; the completions are written before the
        claims, so a job that finished can be claimed again in the same cycle.
        """
        if not completions:
            return [], self.claim_runs(entries, now, instance_id, lease)
        if not entries:
            return self.finish_runs(completions, instance_id), []

        def body(conn: Connection) -> tuple[list[Instant | None], list[Claim | ClaimMiss]]:
            # Both join this transaction (`_transaction`); a failure in either rolls back both.
            return self.finish_runs(completions, instance_id), self.claim_runs(entries, now, instance_id, lease)

        return self._write(body, "dispatch")

    def claim_runs(
        self,
        entries: Sequence[ClaimEntry],
        now: Instant | Callable[[], Instant],
        instance_id: str,
        lease: Micros,
    ) -> list[Claim | ClaimMiss]:
        """Try to start the runs of ``(job_id, generation, expected_at, taken_at)`` entries, in one transaction.

        One conditional UPDATE decides every row by its own predicate
        (module docstring); the dialect names the winners. Each won row's plan
        (`_policy.JobPlan.claim`) then decides which slot runs, by the job's
        misfire policy, or that none does (its late slots are dropped and the
        row goes back to waiting). `taken_at` is when the dispatcher took the
        entry up: lateness is measured there. Results are in the order of
        `entries`; an entry repeated in the batch wins at most once.
        `now` may be a clock, read once the transaction holds its write lock,
        so that start times follow the order of commits.

        One job never holds back another (SPEC §2): a row whose slot has a run
        recorded already (a clock behind the one that ran it, a hand-edited
        row) is settled alone: its history insert does nothing, and the row
        moves on past that slot while the rest of the batch is claimed.
        """
        if not entries:
            return []
        expected: dict[tuple[str, int], tuple[Instant, Instant]] = {}
        for job_id, generation, expected_at, taken_at in entries:
            key = (job_id, generation)
            bound, taken = expected.get(key, (expected_at, taken_at))
            expected[key] = (max(expected_at, bound), min(taken_at, taken))

        def body(conn: Connection) -> list[Claim | ClaimMiss]:
            claimed_at = read_time(now)
            lease_until = to_datetime(claimed_at + lease)
            batch = _ClaimBatch(expected, claimed_at, instance_id)
            for row in stored(self._claim(conn, expected, instance_id, lease_until, claimed_at), DISPATCH_COLUMNS):
                batch.decide(row)
            batch.record_starts(self._record_starts(batch.won(), lease_until, instance_id, conn))
            batch.writes.apply(conn, self._insert_runs)
            self._after_commit(batch.writes.missed)
            lost = batch.undecided()
            return batch.results(entries, _misses(conn, lost) if lost else {})

        try:
            return self._write(body, "claim")
        except IntegrityError as exc:
            # The schema refused a write that the claim should never make: claim nothing, retry later.
            raise StoreError(self.url, f"claim failed: {exc.orig}") from exc

    def _claim(
        self,
        conn: Connection,
        expected: dict[tuple[str, int], tuple[Instant, Instant]],
        instance_id: str,
        lease_until: datetime,
        claimed_at: Instant,
    ) -> list[Row[Any]]:
        """The one conditional UPDATE that decides every entry (module docstring); the won rows."""
        predicate = and_(*claim_clauses(expected, self.dialect).values())
        values = {
            "state": RUNNING,
            "owner": instance_id,
            "lease_until": lease_until,
            "updated_at": to_datetime(claimed_at),
            "running_for": jobs.c.next_run_at,  # the usual case: the slot due runs (fixed below if not)
        }
        return self.dialect.claim(conn, jobs, predicate, values, RAW_DISPATCH)

    def _record_starts(
        self, claims: Sequence[Claim], lease_until: datetime, instance_id: str, conn: Connection
    ) -> dict[str, int]:
        """Insert the history rows of won claims; return the run id of each job whose slot had no run yet.

        The insert does nothing for a slot the one-run-per-slot index already
        holds, so such a job is told apart without failing the others.
        """
        if not claims:
            return {}
        inserted = self.dialect.insert_returning(
            conn,
            self._insert_runs,
            runs.c.job_id,
            runs.c.run_id,
            rows=[
                {
                    "job_id": c.job_id,
                    "generation": c.generation,
                    "scheduled_for": to_datetime(c.scheduled_for),
                    "started_at": to_datetime(c.started_at),
                    "instance_id": instance_id,
                    "lease_until": lease_until,
                    "run_now": c.run_now,
                }
                for c in claims
            ],
        )
        return {row.job_id: row.run_id for row in inserted}

    def finish_runs(self, completions: Sequence[Completion], instance_id: str) -> list[Instant | None]:
        """Record outcomes in one transaction; for each, when its job is due next.

        None when the job is not to be queued: descheduled, replaced or its
        run recovered meanwhile (the completion then changes no job row,
        FIELD-REPORTS #5; its run record is still completed unless recovery
        already marked it lost), or paused, or finished.
        """
        if not completions:
            return []
        params = [
            {
                "b_run_id": c.claim.run_id,
                "b_finished": to_datetime(c.finished_at),
                "b_outcome": c.outcome,
                "b_error": None if c.error is None else c.error[:MAX_ERROR_TEXT],
            }
            for c in completions
        ]

        def body(conn: Connection) -> list[Instant | None]:
            conn.execute(_FINISH_RUN, params)
            # Which completions still own their job row: read under the write
            # lock (SQLite) and written with the same predicate again, so a
            # row recovered, descheduled or replaced meanwhile is never moved.
            mine = stored(
                conn.execute(
                    select(*RAW_DISPATCH).where(
                        jobs.c.job_id.in_({c.claim.job_id for c in completions}),
                        jobs.c.state == RUNNING,
                        jobs.c.owner == instance_id,
                    )
                ),
                DISPATCH_COLUMNS,
            )
            # A row of ours edited by hand while its run was in flight: settled alone below.
            unreadable = {(row.job_id, row.generation): row for row in mine if row.problems}
            owned = {
                (row.job_id, row.generation, from_datetime(row.running_for)): row
                for row in mine
                if not row.problems and row.running_for is not None
            }
            moves: list[dict[str, Any]] = []  # _FINISH_JOB
            w = _Writes()  # quarantines and history records
            due: list[Instant | None] = []
            others = rows_of(
                conn, {c.claim.job_id for c in completions} - {key[0] for key in owned} - {k[0] for k in unreadable}
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
                    due.append(due_of(other) if other is not None and other.generation == c.claim.generation else None)
                    continue
                plan = plan_or_quarantine(row, c.finished_at, instance_id, w.quarantined, w.missed)
                if plan is None:
                    due.append(None)
                    continue
                next_at, dropped = plan.after_run(from_datetime(row.next_run_at), c.finished_at)
                if dropped is not None:
                    w.missed.append(missed_record(row.job_id, row.generation, dropped, c.finished_at, instance_id))
                run_now_at = instant_or_none(row.run_now_at)
                over = plan.is_over(next_at, run_now_at)
                moves.append(
                    {
                        "b_job_id": row.job_id,
                        "b_generation": row.generation,
                        "b_owner": instance_id,
                        "b_slot": row.running_for,
                        "b_state": FINISHED if over else SCHEDULED,
                        "b_next": to_datetime(next_at),
                        "b_finished": to_datetime(c.finished_at),
                        "b_outcome": c.outcome,
                        "b_errors": 1 if c.outcome == "error" else 0,
                    }
                )
                due.append(None if over or row.paused else plan.due_at(next_at, run_now_at))
            if moves:
                conn.execute(_FINISH_JOB, moves)
            w.apply(conn, self._insert_runs)
            self._after_commit(w.missed)
            return due

        return self._write(body, "finish runs")
