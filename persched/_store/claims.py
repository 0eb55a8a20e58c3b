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

from sqlalchemy import select, tuple_
from sqlalchemy.exc import IntegrityError

from .._instant import Instant, Micros, from_datetime, to_datetime
from .._schema import jobs, runs
from ..errors import StoreError
from ._tx import Transactions, read_time
from .dialects import Sql, marks
from .mappers import (
    DISPATCH_COLUMNS,
    FINISHED,
    QUARANTINE,
    RAW_DISPATCH,
    RUNNING,
    SCHEDULED,
    STANDING_COLUMNS,
    due_of,
    instant_or_none,
    missed_record,
    nullable_micros,
    plan_or_quarantine,
    readable_plan,
    stored,
)
from .records import MAX_ERROR_TEXT, Claim, ClaimEntry, ClaimMiss, Completion, Overdue

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from sqlalchemy import Connection, Insert, Row

    from .._policy import ClaimPlan, JobPlan
    from ._rows import StoredRow
    from .dialects import Dialect

logger = logging.getLogger(__name__)

# The dispatch path's statements, in driver SQL (`dialects.Sql`): per run, SQLAlchemy's
# construction, cache key and bind processing of these cost more than the database's work.
_DISPATCH_SELECT: Final = ", ".join(column.name for column in DISPATCH_COLUMNS)
_STANDING_SELECT: Final = ", ".join(column.name for column in STANDING_COLUMNS)

# Claim statements (executemany over the claims of a cycle).
_CLAIM_MOVE: Final = "UPDATE persched_jobs SET next_run_at = ?, running_for = ?, run_now_at = ? WHERE job_id = ?"
_CLAIM_NEXT: Final = "UPDATE persched_jobs SET next_run_at = ? WHERE job_id = ?"
_CLAIM_REVERT: Final = (
    "UPDATE persched_jobs SET state = ?, owner = NULL, lease_until = NULL, running_for = NULL, next_run_at = ?"
    " WHERE job_id = ?"
)

# How soon an entry looks again after SKIP LOCKED passed its due row by (`_retry_at`): a claim
# transaction commits well within it; a row locked for longer costs 20 claims a second.
PASSED_BY_RETRY: Final = Micros(50_000)

# The columns of a run's record as its claim inserts it.
_START_COLUMNS: Final = ("job_id", "generation", "scheduled_for", "started_at", "instance_id", "lease_until", "run_now")

# Completion statements (executemany over every completion of a cycle).
# started_at too: an async job's coroutine may start after its claim (its loop was busy), and
# the record says when it did (`Claim.started_at`, as the run ran; persched._async).
_FINISH_RUN: Final = (
    "UPDATE persched_runs SET started_at = ?, finished_at = ?, outcome = ?, error = ?, lease_until = NULL"
    " WHERE run_id = ? AND outcome IS NULL"
)
_FINISH_JOB: Final = (
    "UPDATE persched_jobs SET state = ?, owner = NULL, lease_until = NULL, running_for = NULL, next_run_at = ?,"
    " run_count = run_count + 1, error_count = error_count + ?, last_outcome = ?, updated_at = ?"
    " WHERE job_id = ? AND generation = ? AND state = 'running' AND owner = ? AND running_for = ?"
)


def _retry_at(row: StoredRow, bound: Instant, now: Instant) -> Instant | None:
    """When an entry that lost its claim on `row` at `now` should look again (see `ClaimMiss`)."""
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
    # Still waiting and due: SKIP LOCKED passed it by. The lock may be another instance's
    # claim of this slot, or a write that changes nothing (an unchanged schedule(),
    # declare() at start-up): look again in a moment, or that slot would be lost.
    return Instant(max(now, bound) + PASSED_BY_RETRY)


def _taken(row: StoredRow, bound: Instant) -> bool:
    """Whether another claim has the slot of an entry bounded by `bound` that lost on `row`
    (`ClaimMiss.taken`): the row runs, or waits, readable and not paused, with no run-now
    request, past the entry's slot. (Passed by while due, it may be a lock of anything.)"""
    if row.problems:
        return False
    if row.state == RUNNING:
        return True
    waiting = row.state == SCHEDULED and not row.paused and row.run_now_at is None
    return waiting and from_datetime(row.next_run_at) > bound


def _standing(conn: Connection, dialect: Dialect, job_ids: Collection[str]) -> dict[str, StoredRow]:
    """Where each of these jobs stands now (`STANDING_COLUMNS`), by job id; a job gone is absent."""
    if not job_ids:
        return {}
    ids = tuple(job_ids)
    query = f"SELECT {_STANDING_SELECT} FROM persched_jobs WHERE job_id IN ({marks(len(ids))})"  # noqa: S608
    return {row.job_id: row for row in stored(dialect.execute(conn, Sql(query, ids)), STANDING_COLUMNS)}


def _misses(
    conn: Connection, dialect: Dialect, bounds: dict[tuple[str, int], Instant], now: Instant
) -> dict[tuple[str, int], ClaimMiss]:
    """What each lost entry ``(job_id, generation)`` found: the row as it is now, and when to look again."""
    found = _standing(conn, dialect, {job_id for job_id, _ in bounds})
    return {
        key: ClaimMiss(row.state, row.generation, row.owner, _retry_at(row, bound, now), _taken(row, bound))
        for key, bound in bounds.items()
        if (row := found.get(key[0])) is not None
    }


def _bound_of(entries: list[tuple[int, Instant]], dialect: Dialect) -> Sql:
    """The slot bound of one job's row, for its batch's entries ``[(generation, bound)]``."""
    *others, (_, last) = entries
    if not others:
        return Sql("?", (dialect.bind_instant(last),))
    whens = " ".join("WHEN ? THEN ?" for _ in others)
    params = tuple(p for generation, at in others for p in (generation, dialect.bind_instant(at)))
    return Sql(f"CASE generation {whens} ELSE ? END", (*params, dialect.bind_instant(last)))


def claim_clauses(expected: dict[tuple[str, int], tuple[Instant, Instant]], dialect: Dialect) -> dict[str, Sql]:
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
    bounds = [(job_id, _bound_of(entries, dialect)) for job_id, entries in by_job.items()]
    whens = " ".join(f"WHEN ? THEN {bound.text}" for _, bound in bounds)
    bound = Sql(f"CASE job_id {whens} END", tuple(p for job_id, b in bounds for p in (job_id, *b.params)))
    return {
        "ids": Sql(f"job_id IN ({marks(len(by_job))})", tuple(by_job)),  # lets SQLite use the primary key
        # Not by the (state, next_run_at) index: the primary key finds the batch's rows at any table size.
        "state": Sql(dialect.unindexed_sql("state") + " = 'scheduled'"),
        "paused": Sql("paused = ?", (False,)),  # pause() linearizes against this predicate
        "generation": Sql(
            f"(job_id, generation) IN {dialect.row_values(len(expected), 2)}", tuple(p for key in expected for p in key)
        ),
        "slot": Sql(f"(next_run_at <= {bound.text} OR run_now_at <= {bound.text})", bound.params * 2),
    }


@dataclass
class _Writes:
    """The statements a claim or completion batch queues as it decides, executed at once (executemany)."""

    moves: list[tuple[Instant, Instant, Instant | None, str]] = field(default_factory=list)  # _CLAIM_MOVE
    nexts: list[tuple[Instant, str]] = field(default_factory=list)  # _CLAIM_NEXT
    reverts: list[tuple[str, Instant, str]] = field(default_factory=list)  # _CLAIM_REVERT
    quarantined: list[dict[str, Any]] = field(default_factory=list)  # QUARANTINE
    missed: list[dict[str, Any]] = field(default_factory=list)  # history rows: "missed" and "error" records

    def apply(self, conn: Connection, dialect: Dialect, insert_runs: Insert) -> None:
        at = dialect.bind_instant
        for sql, params in (
            (_CLAIM_MOVE, [(at(n), at(r), None if a is None else at(a), j) for n, r, a, j in self.moves]),
            (_CLAIM_NEXT, [(at(n), j) for n, j in self.nexts]),
            (_CLAIM_REVERT, [(state, at(n), j) for state, n, j in self.reverts]),
        ):
            if params:
                dialect.execute_many(conn, sql, params)
        for statement, rows in ((QUARANTINE, self.quarantined), (insert_runs, self.missed)):  # rare: Core
            if rows:
                conn.execute(statement, rows)

    def revert(
        self, plan: JobPlan, job_id: str, generation: int, next_at: Instant, run_now_at: Instant | None
    ) -> ClaimMiss:
        """A won row that runs nothing now: queue its return to waiting at `next_at`; the result for its entry."""
        over = plan.is_over(next_at, run_now_at)
        self.reverts.append((FINISHED if over else SCHEDULED, next_at, job_id))
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
                run_now_at = None if decision.run_now else won.run_now_at
                w.moves.append((decision.next_run_at, claim.scheduled_for, run_now_at, claim.job_id))
            elif decision.next_run_at != won.next_at:  # one parameter per row, not three
                w.nexts.append((decision.next_run_at, claim.job_id))

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


def _due_soon(rows: Sequence[StoredRow]) -> list[tuple[Instant, str, int]]:
    """`claim_overdue`'s look ahead: the readable rows as heap entries ``(due_at, job_id, generation)``."""
    plans = ((row, None if row.problems else readable_plan(row)) for row in rows)
    return [
        (plan.due_at(from_datetime(row.next_run_at), None), row.job_id, row.generation) for row, plan in plans if plan
    ]


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
            lease_until = Instant(claimed_at + lease)
            batch = _ClaimBatch(expected, claimed_at, instance_id)
            for row in stored(self._claim(conn, expected, instance_id, lease_until, claimed_at), DISPATCH_COLUMNS):
                batch.decide(row)
            batch.record_starts(self._record_starts(batch.won(), lease_until, instance_id, conn))
            batch.writes.apply(conn, self.dialect, self._insert_runs)
            self._after_commit(batch.writes.missed)
            lost = batch.undecided()
            return batch.results(entries, _misses(conn, self.dialect, lost, claimed_at) if lost else {})

        try:
            return self._write(body, "claim")
        except IntegrityError as exc:
            # The schema refused a write that the claim should never make: claim nothing, retry later.
            raise StoreError(self.url, f"claim failed: {exc.orig}") from exc

    def claim_overdue(
        self,
        limit: int,
        before: Instant,
        now: Instant | Callable[[], Instant],
        instance_id: str,
        lease: Micros,
        passed_by: Collection[tuple[str, int]] = (),
        ahead: Instant | None = None,
    ) -> Overdue:
        """The claim by query (issue 19): claim up to `limit` of this namespace's waiting rows whose
        next_run_at lies before `before`, oldest first, whichever instance's heap holds them.
        With `ahead` (the caller owns no job) and nothing overdue: the first `limit` rows due
        before `ahead`, in `later`, neither locked nor claimed, so that the caller races for them.

        Rows another transaction is claiming are passed by (``FOR UPDATE SKIP
        LOCKED`` on PostgreSQL and MariaDB, `Dialect.lock_first`; SQLite's
        write lock makes every search exclusive), so two instances searching at
        once take disjoint rows. The rows found are claimed by `claim_runs` in
        the same transaction, each with its own predicate (state, generation,
        slot): the linearization point is the same conditional UPDATE. A row
        whose jitter has not yet run out is not claimed but handed back for the
        heap; an unreadable row (jobs() reports it) is neither, and is named so
        that the caller passes it by next time (`passed_by`): it must not stay
        the oldest forever. One read with no lock when nothing is overdue.
        """
        waiting = [
            jobs.c.state == SCHEDULED,
            jobs.c.paused.is_(False),
            self.dialect.unindexed(jobs.c.namespace) == self.namespace,  # the (state, next_run_at) index
        ]
        if passed_by:
            # By generation: the fix of an unreadable row (schedule() anew) makes a new one, found again.
            waiting.append(tuple_(jobs.c.job_id, jobs.c.generation).not_in(list(passed_by)))
        where = [*waiting, jobs.c.next_run_at < to_datetime(before)]
        if ahead is not None:
            # One read, as the probe: the first of the next rows says whether any is overdue.
            soon = [*waiting, jobs.c.next_run_at < to_datetime(max(ahead, before))]
            nexts = select(*RAW_DISPATCH).where(*soon).order_by(jobs.c.next_run_at, jobs.c.job_id).limit(limit)
            rows = stored(
                self._read(lambda conn: conn.execute(nexts).all(), "look for jobs due soon"), DISPATCH_COLUMNS
            )
            if not rows or from_datetime(rows[0].next_run_at) >= before:
                return Overdue([], [], _due_soon(rows), [])
        else:
            probe = select(jobs.c.job_id).where(*where).limit(1)
            if self._read(lambda conn: conn.execute(probe).first(), "look for overdue jobs") is None:
                return Overdue([], [], [], [])
        query = select(*RAW_DISPATCH).where(*where).order_by(jobs.c.next_run_at, jobs.c.job_id)

        def body(conn: Connection) -> Overdue:
            claimed_at = read_time(now)
            found = Overdue([], [], [], [])
            for row in stored(self.dialect.lock_first(conn, query, limit), DISPATCH_COLUMNS):
                plan = None if row.problems else readable_plan(row)
                if plan is None:
                    found.unreadable.append((row.job_id, row.generation))
                    continue
                due = plan.due_at(from_datetime(row.next_run_at), None)
                if due <= claimed_at:
                    found.entries.append((row.job_id, row.generation, due, claimed_at))
                else:
                    found.later.append((due, row.job_id, row.generation))
            found.results.extend(self.claim_runs(found.entries, claimed_at, instance_id, lease))
            return found

        return self._write(body, "claim overdue")

    def _claim(
        self,
        conn: Connection,
        expected: dict[tuple[str, int], tuple[Instant, Instant]],
        instance_id: str,
        lease_until: Instant,
        claimed_at: Instant,
    ) -> list[Row[Any]]:
        """The one conditional UPDATE that decides every entry (module docstring); the won rows."""
        at = self.dialect.bind_instant
        predicate = Sql.join(claim_clauses(expected, self.dialect).values(), " AND ")
        assignments = Sql(
            # running_for: the usual case, the slot due runs (fixed in record_starts if not).
            "state = 'running', owner = ?, lease_until = ?, updated_at = ?, running_for = next_run_at",
            (instance_id, at(lease_until), at(claimed_at)),
        )
        return self.dialect.claim(conn, jobs, assignments, predicate, _DISPATCH_SELECT)

    def _record_starts(
        self, claims: Sequence[Claim], lease_until: Instant, instance_id: str, conn: Connection
    ) -> dict[str, int]:
        """Insert the history rows of won claims; return the run id of each job whose slot had no run yet.

        The insert does nothing for a slot the one-run-per-slot index already
        holds, so such a job is told apart without failing the others.
        """
        if not claims:
            return {}
        at = self.dialect.bind_instant
        lease = at(lease_until)
        rows = [
            (c.job_id, c.generation, at(c.scheduled_for), at(c.started_at), instance_id, lease, c.run_now)
            for c in claims
        ]
        inserted = self.dialect.insert_new(conn, runs, _START_COLUMNS, rows, "job_id, run_id")
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
        at = self.dialect.bind_instant
        params = [
            (
                at(c.claim.started_at),
                at(c.finished_at),
                c.outcome,
                None if c.error is None else c.error[:MAX_ERROR_TEXT],
                c.claim.run_id,
            )
            for c in completions
        ]

        def body(conn: Connection) -> list[Instant | None]:
            self.dialect.execute_many(conn, _FINISH_RUN, params)
            # Which completions still own their job row: read under the write
            # lock (SQLite) and written with the same predicate again, so a
            # row recovered, descheduled or replaced meanwhile is never moved.
            job_ids = tuple({c.claim.job_id for c in completions})
            ours = f"SELECT {_DISPATCH_SELECT} FROM persched_jobs WHERE job_id IN ({marks(len(job_ids))})"  # noqa: S608
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
            w = _Writes()  # quarantines and history records
            due: list[Instant | None] = []
            others = _standing(
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
                    (
                        FINISHED if over else SCHEDULED,
                        at(next_at),
                        1 if c.outcome == "error" else 0,
                        c.outcome,
                        at(c.finished_at),
                        row.job_id,
                        row.generation,
                        instance_id,
                        at(c.claim.scheduled_for),  # == the row's running_for (`owned`)
                    )
                )
                due.append(None if over or row.paused else plan.due_at(next_at, run_now_at))
            if moves:
                self.dialect.execute_many(conn, _FINISH_JOB, moves)
            w.apply(conn, self.dialect, self._insert_runs)
            self._after_commit(w.missed)
            return due

        return self._write(body, "finish runs")
