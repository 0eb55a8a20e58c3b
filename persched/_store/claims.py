"""Claims and completions: the start and the end of runs, one transaction per dispatch cycle.

- `claim_runs`: the start of runs. One conditional UPDATE decides every
  entry of a batch by its own predicate, and moves each row it wins on::

      UPDATE persched_jobs SET state='running', owner=:me, lease_until=:lease,
                               running_for=<the slot that runs>, next_run_at=<the slot after it>
       WHERE job_id IN (:ids) AND state='scheduled' AND NOT paused
         AND (job_id, generation) IN (:entries)
         AND (next_run_at <= CASE job_id WHEN :id THEN :expected_at ... END
              OR run_now_at <= <the same bound>)
      RETURNING <the row>

  It is the linearization point of a run's start (SPEC §2); how an engine
  locks the rows it decides and names the winners is its `Dialect`'s
  (SQLite: the write lock and RETURNING; PostgreSQL: FOR UPDATE SKIP LOCKED
  and RETURNING). The predicate on `generation` makes a stale heap entry
  harmless; the one on `next_run_at` keeps an entry from running a slot
  early after another instance moved the row on (for a job with entries of
  two generations in the batch, ``CASE generation …`` picks the row's own
  entry's bound); the one on `paused` makes pause() linearize like
  deschedule().
- Where the row goes next is its policies' decision (`_policy.JobPlan.claim`),
  from the row as it stood. The UPDATE makes that decision itself where it
  was known in advance: a job whose last completion this store wrote left a
  *hint* (its plan and the `next_run_at` it wrote), from which the slot and
  the next slot are decided before the UPDATE, and written by it only if
  the row still holds that `next_run_at` and no run-now request
  (``CASE job_id WHEN :id THEN CASE WHEN generation = :gen AND next_run_at
  = :seen AND run_now_at IS NULL THEN :slot ELSE next_run_at END … END``).
  Each won row is then checked against what it returned (`_ClaimBatch.decide`):
  its plan read from its own columns must be the hint's, or the decision is
  made again from the row and a second write (`_CLAIM_MOVE`) puts it right
  in the same transaction. So a hint can cost a write, never a wrong slot.
  The history rows are inserted in one statement.
- `finish_runs`: completions. The job UPDATE is conditional on generation,
  state, owner and the slot in flight (`running_for`), so the completion of
  a replaced, descheduled or recovered run changes nothing (FIELD-REPORTS #5).
  Its next slot was decided by the plan its claim carried (`records.Carried`),
  and the UPDATE is conditional on the row still standing where the claim left
  it; a row that anything else changed meanwhile is read and decided anew.
- `dispatch`: `finish_runs` and `claim_runs` of one dispatch cycle in one
  transaction (nested writes join the transaction open on their thread).

The dispatch path runs on the driver's own cursor (`dialects.DriverCursor`):
rows come back as the driver's tuples, read by column position, and only a
row whose values are not what persched writes (a hand edit) is read
defensively (`_rows.read_row`) and settled alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from sqlalchemy import select, tuple_
from sqlalchemy.exc import IntegrityError

from .._model.instant import Instant, Micros, from_datetime, to_datetime
from .._model.models import CLAIM_POLICY_COLUMNS
from ..errors import StoreError
from ._rows import read_row
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
    column_micros,
    due_of,
    instant_or_none,
    missed_record,
    nullable_micros,
    plan_of,
    plan_or_quarantine,
    readable_plan,
    stored,
)
from .records import MAX_ERROR_TEXT, Carried, Claim, ClaimEntry, ClaimMiss, Completion, Overdue
from .schema import jobs, runs

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from sqlalchemy import Connection, Insert

    from .._model.policy import ClaimPlan, JobPlan
    from ._rows import StoredRow
    from .dialects import Dialect, DriverCursor

logger = logging.getLogger(__name__)

# The dispatch path's statements, in driver SQL (`dialects.Sql`): per run, SQLAlchemy's
# construction, cache key and bind processing of these cost more than the database's work.
_DISPATCH_SELECT: Final = ", ".join(column.name for column in DISPATCH_COLUMNS)
_STANDING_SELECT: Final = ", ".join(column.name for column in STANDING_COLUMNS)

# A won row that the UPDATE did not leave where its decision puts it (no hint, or a hint the row
# did not match), and one that runs nothing now (misfire "skip", a slot that ran already).
_CLAIM_MOVE: Final = "UPDATE persched_jobs SET next_run_at = ?, running_for = ?, run_now_at = ? WHERE job_id = ?"
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
# the record says when it did (`Claim.started_at`, as the run ran; persched._interfaces.async_front).
_FINISH_RUN: Final = (
    "UPDATE persched_runs SET started_at = ?, finished_at = ?, outcome = ?, error = ?, lease_until = NULL"
    " WHERE run_id = ? AND outcome IS NULL"
)
_FINISH_JOB: Final = (
    "UPDATE persched_jobs SET state = ?, owner = NULL, lease_until = NULL, running_for = NULL, next_run_at = ?,"
    " run_count = run_count + 1, error_count = error_count + ?, last_outcome = ?, updated_at = ?"
    " WHERE job_id = ? AND generation = ? AND state = 'running' AND owner = ? AND running_for = ?"
)
# The completion decided by its claim's plan (`Carried`): also only while the row stands where the
# claim left it, not paused and with no run-now request (else it is read and decided again).
_FINISH_CARRIED: Final = _FINISH_JOB + " AND next_run_at = ? AND run_now_at IS NULL AND paused = ?"

# The claim's RETURNING columns, by position in the driver's rows.
_NAMES: Final = tuple(column.name for column in DISPATCH_COLUMNS)
_AT: Final = {name: index for index, name in enumerate(_NAMES)}
# What a row's plan is made of (`mappers.plan_of`): the key of `_RAW_PLANS`.
_PLAN_COLUMNS: Final = tuple(_AT[name] for name in ("job_id", "generation", "first_run_at", *CLAIM_POLICY_COLUMNS))
_RAW_PLANS: dict[tuple[Any, ...], JobPlan] = {}  # plans by the raw values they were read from (see _plan_of_raw)
_RAW_PLANS_KEPT: Final = 65_536  # then it starts again (as the plans' own caches in `mappers`)
_HINTS_KEPT: Final = 65_536  # completions' hints kept for the next claim (see ClaimsStore._hints)


def _plan_of_raw(raw: tuple[Any, ...], engine: str) -> JobPlan | None:
    """The plan of a row as the driver returned it, or None if its values cannot be read (the caller
    then reads the row defensively). Plans are kept by the raw values they were read from: those
    values, read once by `read_row` and checked, give the same plan again without being read."""
    try:
        key = (engine, *map(raw.__getitem__, _PLAN_COLUMNS))
        plan = _RAW_PLANS.get(key)
    except TypeError:  # an unhashable value (a hand-written BLOB)
        return None
    if plan is None:
        row = read_row(DISPATCH_COLUMNS, dict(zip(_NAMES, raw, strict=True)))
        if row.problems:
            return None
        try:
            plan = plan_of(row)
        except (ValueError, TypeError, OverflowError):  # InvalidJobError is a ValueError
            return None
        if len(_RAW_PLANS) >= _RAW_PLANS_KEPT:
            _RAW_PLANS.clear()
        _RAW_PLANS[key] = plan
    return plan


class _ClaimedRow(NamedTuple):
    """A row the claim's UPDATE won, as it holds now (after the UPDATE), and its plan."""

    job_id: str
    generation: int
    target: str
    args: str
    kwargs: str
    next_at: Instant
    running_for: Instant | None
    run_now_at: Instant | None
    max_runtime: Micros | None
    plan: JobPlan


def _claimed_row(raw: tuple[Any, ...], dialect: Dialect) -> _ClaimedRow | None:
    """A won row from the driver's values; None if any is not what persched writes (read it defensively)."""
    plan = _plan_of_raw(raw, dialect.name)
    if plan is None:
        return None
    target, args, kwargs = raw[_AT["target"]], raw[_AT["args"]], raw[_AT["kwargs"]]
    running_for, run_now_at = raw[_AT["running_for"]], raw[_AT["run_now_at"]]
    max_runtime = raw[_AT["max_runtime_seconds"]]  # read with the plan's columns: a number or None
    if not (isinstance(target, str) and isinstance(args, str) and isinstance(kwargs, str)):
        return None
    try:
        return _ClaimedRow(
            plan.job_id,
            plan.generation,
            target,
            args,
            kwargs,
            dialect.raw_instant(raw[_AT["next_run_at"]]),
            None if running_for is None else dialect.raw_instant(running_for),
            None if run_now_at is None else dialect.raw_instant(run_now_at),
            None if max_runtime is None else column_micros(max_runtime),
            plan,
        )
    except (ValueError, TypeError, OverflowError):
        return None


# Where a guess is written: the row still stands where its hint says (parameters: generation, seen).
_HINT_HOLDS: Final = "generation = ? AND next_run_at = ? AND run_now_at IS NULL"


class _Guess(NamedTuple):
    """A claim decided before its UPDATE from a completion's hint: the plan, the row's next_run_at
    the hint says (`seen`), and the decision the UPDATE writes if the row still holds it."""

    plan: JobPlan
    seen: Instant
    decision: ClaimPlan


def _guessed(guesses: dict[tuple[str, int], _Guess], at: Callable[[Instant], object], name: str) -> Sql:
    """The claim UPDATE's value of running_for (`name` "run_for") or next_run_at: the guessed decision
    where the row still holds what its hint said, else next_run_at (for running_for: the slot due,
    which the usual claim runs; `_ClaimBatch.record_starts` moves a row whose decision differs).

    Both read next_run_at as it was before the UPDATE: an UPDATE's expressions see the old row
    (MySQL assigns left to right, so running_for must come first, and next_run_at reads itself).
    """
    if not guesses:
        return Sql("next_run_at")
    when = f"WHEN ? THEN CASE WHEN {_HINT_HOLDS} THEN ? ELSE next_run_at END"
    params = tuple(
        p
        for (job_id, generation), guess in guesses.items()
        for p in (job_id, generation, at(guess.seen), at(getattr(guess.decision, name)))
    )
    return Sql(f"CASE job_id {' '.join([when] * len(guesses))} ELSE next_run_at END", params)


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
    reverts: list[tuple[str, Instant, str]] = field(default_factory=list)  # _CLAIM_REVERT
    quarantined: list[dict[str, Any]] = field(default_factory=list)  # QUARANTINE
    missed: list[dict[str, Any]] = field(default_factory=list)  # history rows: "missed" and "error" records

    def apply(self, conn: Connection, cur: DriverCursor, dialect: Dialect, insert_runs: Insert) -> None:
        at = dialect.bind_instant
        for sql, params in (
            (_CLAIM_MOVE, [(at(n), at(r), None if a is None else at(a), j) for n, r, a, j in self.moves]),
            (_CLAIM_REVERT, [(state, at(n), j) for state, n, j in self.reverts]),
        ):
            if params:
                cur.executemany(sql, params)
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
    """A won row that runs a slot: the row (as the UPDATE left it) and its decision, and the row's
    run_now_at and next_run_at before the claim; the `claim` once its history row is inserted."""

    row: _ClaimedRow
    decision: ClaimPlan
    run_now_at: Instant | None
    next_at: Instant
    claim: Claim | None = None


class _ClaimBatch:
    """One claim transaction's decisions: first per won row (`decide`), then per history insert
    (`record_starts`); `writes` holds what they queued, `results` answers each entry."""

    def __init__(
        self,
        expected: dict[tuple[str, int], tuple[Instant, Instant]],
        claimed_at: Instant,
        instance_id: str,
        guesses: dict[tuple[str, int], _Guess],
    ) -> None:
        self.expected = expected
        self.claimed_at = claimed_at
        self.instance_id = instance_id
        self.guesses = guesses
        self.writes = _Writes()
        self.claims: dict[tuple[str, int], _Won] = {}
        self.skipped: dict[tuple[str, int], ClaimMiss] = {}

    def read(self, raw: tuple[Any, ...], dialect: Dialect) -> _ClaimedRow | None:
        """A won row as returned by the driver; None (settled: paused, its history says why) if it
        cannot be read (SPEC §2: one job never holds back another)."""
        row = _claimed_row(raw, dialect)
        if row is not None:
            return row
        stored_row = read_row(DISPATCH_COLUMNS, dict(zip(_NAMES, raw, strict=True)))
        w = self.writes
        plan = plan_or_quarantine(stored_row, self.claimed_at, self.instance_id, w.quarantined, w.missed)
        if plan is None:
            self.skipped[(stored_row.job_id, stored_row.generation)] = ClaimMiss(
                SCHEDULED, stored_row.generation, None, None
            )
            return None
        return _ClaimedRow(
            stored_row.job_id,
            stored_row.generation,
            stored_row.target,
            stored_row.args,
            stored_row.kwargs,
            from_datetime(stored_row.next_run_at),
            instant_or_none(stored_row.running_for),
            instant_or_none(stored_row.run_now_at),
            nullable_micros(stored_row.max_runtime_seconds),
            plan,
        )

    def decide(self, row: _ClaimedRow) -> None:
        """What a won row does now, by its policies: run a slot, or go back to waiting."""
        key = (row.job_id, row.generation)
        w = self.writes
        plan = row.plan
        bound, taken_at = self.expected[key]
        guess = self.guesses.get(key)
        decision: ClaimPlan | None = None
        if guess is not None and (row.running_for, row.next_at) == (guess.decision.run_for, guess.decision.next_run_at):
            # The UPDATE wrote the guess: the row held `seen` and no run-now request before it.
            next_at, run_now_at = guess.seen, None
            if plan is guess.plan or plan == guess.plan:
                decision = guess.decision
        else:
            next_at, run_now_at = row.next_at, row.run_now_at  # the UPDATE left both as they were
        if decision is None:
            decision = plan.claim(next_at, run_now_at, bound, self.claimed_at, taken_at)
        if decision.missed is not None:
            w.missed.append(missed_record(*key, decision.missed, self.claimed_at, self.instance_id))
        if decision.run_for is None:
            # The policy drops the late slots (misfire "skip"): nothing runs now.
            self.skipped[key] = w.revert(plan, *key, decision.next_run_at, run_now_at)
            return
        self.claims[key] = _Won(row, decision, run_now_at, next_at)

    def won(self) -> list[_Won]:
        return list(self.claims.values())

    def record_starts(self, run_ids: dict[str, int]) -> None:
        """Give each claim its run id, or settle alone a job whose slot has a run recorded already."""
        w = self.writes
        for key, won in list(self.claims.items()):
            row, decision = won.row, won.decision
            plan, slot = row.plan, decision.run_for
            assert slot is not None  # decide() keeps only the rows that run a slot
            run_id = run_ids.get(row.job_id)
            if run_id is None:
                # SPEC §2 "Clock corrections": this slot ran already; move on past it, alone
                # (a fixed-delay claim leaves next_run_at on it: one interval on, then).
                past = max(decision.next_run_at, plan.slot_after(slot))
                logger.warning(
                    "job %s generation %d: the slot %s has run already (written by a clock behind the one "
                    "that ran it?); moving on to %s",
                    *key,
                    to_datetime(slot).isoformat(),
                    to_datetime(past).isoformat(),
                )
                del self.claims[key]
                self.skipped[key] = w.revert(plan, *key, past, won.run_now_at)
                continue
            run_now_at = None if decision.run_now else won.run_now_at  # a run-now run takes its request
            if (slot, decision.next_run_at, run_now_at) != (row.running_for, row.next_at, row.run_now_at):
                w.moves.append((decision.next_run_at, slot, run_now_at, row.job_id))  # the UPDATE did not
            claim = Claim(
                row.job_id,
                row.generation,
                row.target,
                row.args,
                row.kwargs,
                slot,
                self.claimed_at,
                run_id,
                decision.run_now,
                row.max_runtime,
                Carried(plan, decision.next_run_at, run_now_at),
            )
            self.claims[key] = won._replace(claim=claim)

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
                claim = self.claims[key].claim
                assert claim is not None  # record_starts gave every claim left its run id
                results.append(claim)
            elif key in self.claims:  # a repeated entry wins once; the repeat sees our own run
                results.append(ClaimMiss(RUNNING, generation, self.instance_id))
            elif key in self.skipped:
                results.append(self.skipped.pop(key))
            else:
                results.append(misses.get(key, ClaimMiss(None)))
        return results


class ClaimsStore(Transactions):
    """Claims and completions: the dispatch path (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - `Transactions`' arguments
        super().__init__(*args, **kwargs)
        # (job_id, generation) -> (plan, next_run_at) that a completion wrote: the next claim's guess
        # (module docstring). Only a guess, checked by the UPDATE and against the row: a stale one
        # costs a second write. Bounded: past `_HINTS_KEPT` a job is claimed without one.
        self._hints: dict[tuple[str, int], tuple[JobPlan, Instant]] = {}

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
            cur = self.dialect.cursor(conn)
            batch = _ClaimBatch(expected, claimed_at, instance_id, self._guesses(expected, claimed_at))
            for raw in self._claim(cur, expected, batch.guesses, instance_id, lease_until, claimed_at):
                row = batch.read(raw, self.dialect)
                if row is not None:
                    batch.decide(row)
            batch.record_starts(self._record_starts(cur, batch.won(), claimed_at, lease_until, instance_id))
            batch.writes.apply(conn, cur, self.dialect, self._insert_runs)
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
    ) -> Overdue:
        """The claim by query: claim up to `limit` of this namespace's waiting rows whose
        next_run_at lies before `before`, oldest first, whichever instance owns them.

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

    def _guesses(
        self, expected: dict[tuple[str, int], tuple[Instant, Instant]], claimed_at: Instant
    ) -> dict[tuple[str, int], _Guess]:
        """The decisions the UPDATE can write itself: those of the entries whose job left a hint
        (module docstring) and whose policy runs the slot with nothing dropped."""
        guesses: dict[tuple[str, int], _Guess] = {}
        for key, (bound, taken_at) in expected.items():
            hint = self._hints.pop(key, None)
            if hint is None or hint[1] > bound:
                continue
            plan, seen = hint
            decision = plan.claim(seen, None, bound, claimed_at, taken_at)
            if decision.run_for is not None and decision.missed is None and not decision.run_now:
                guesses[key] = _Guess(plan, seen, decision)
        return guesses

    def _claim(
        self,
        cur: DriverCursor,
        expected: dict[tuple[str, int], tuple[Instant, Instant]],
        guesses: dict[tuple[str, int], _Guess],
        instance_id: str,
        lease_until: Instant,
        claimed_at: Instant,
    ) -> list[tuple[Any, ...]]:
        """The one conditional UPDATE that decides every entry (module docstring); the won rows."""
        at = self.dialect.bind_instant
        predicate = Sql.join(claim_clauses(expected, self.dialect).values(), " AND ")
        running_for, next_run_at = _guessed(guesses, at, "run_for"), _guessed(guesses, at, "next_run_at")
        assignments = Sql(
            "state = 'running', owner = ?, lease_until = ?, updated_at = ?,"
            f" running_for = {running_for.text}, next_run_at = {next_run_at.text}",  # in this order: see _guessed
            (instance_id, at(lease_until), at(claimed_at), *running_for.params, *next_run_at.params),
        )
        return self.dialect.claim(cur, jobs, assignments, predicate, _DISPATCH_SELECT)

    def _record_starts(
        self, cur: DriverCursor, won: Sequence[_Won], started_at: Instant, lease_until: Instant, instance_id: str
    ) -> dict[str, int]:
        """Insert the history rows of won claims; return the run id of each job whose slot had no run yet.

        The insert does nothing for a slot the one-run-per-slot index already
        holds, so such a job is told apart without failing the others.
        """
        if not won:
            return {}
        at = self.dialect.bind_instant
        started, lease = at(started_at), at(lease_until)
        rows = [
            (w.row.job_id, w.row.generation, at(w.decision.run_for), started, instance_id, lease, w.decision.run_now)
            for w in won
            if w.decision.run_for is not None
        ]
        return dict(self.dialect.insert_new(cur, runs, _START_COLUMNS, rows, "job_id, run_id"))

    def finish_runs(self, completions: Sequence[Completion], instance_id: str) -> list[Instant | None]:
        """Record outcomes in one transaction; for each, when its job is due next.

        None when the job is not to be queued: descheduled, replaced or its
        run recovered meanwhile (the completion then changes no job row,
        FIELD-REPORTS #5; its run record is still completed unless recovery
        already marked it lost), or paused, or finished.

        A completion whose claim carried its decision (`Carried`) is written
        as decided there, conditional on the row standing where the claim
        left it; the others, and those whose row moved meanwhile, are read
        and decided again (`_finish_read`).
        """
        if not completions:
            return []
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
        # one, and its _FINISH_CARRIED parameters.
        carried: list[tuple[int, Instant, bool, JobPlan]] = []
        moves: list[tuple[Any, ...]] = []
        for i, c in enumerate(completions):
            kept = c.claim.carried
            if kept is None or kept.run_now_at is not None:
                continue
            next_at, dropped = kept.plan.after_run(kept.next_run_at, c.finished_at)
            if dropped is not None:  # overlap "skip" dropped slots: a record to write, decided again below
                continue
            over = kept.plan.is_over(next_at, None)
            carried.append((i, next_at, over, kept.plan))
            left = at(kept.next_run_at)
            moves.append(
                (
                    FINISHED if over else SCHEDULED,
                    left if next_at == kept.next_run_at else at(next_at),
                    1 if c.outcome == "error" else 0,
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

        as_carried: list[bool] = [False]  # whether the last attempt wrote the carried ones as decided

        def body(conn: Connection) -> list[Instant | None]:
            cur = self.dialect.cursor(conn)
            cur.executemany(_FINISH_RUN, params)
            due: list[Instant | None] = [None] * len(completions)
            rest: Sequence[int] = range(len(completions))
            # One executemany: one call into the driver however many rows (each call gives the
            # GIL away, then waits for it behind the workers). If every row matched, each stood
            # where its claim left it and goes on to its carried slot; else every completion is
            # read (`_finish_read`), and one that this UPDATE moved reads as queued at that slot.
            as_carried[0] = bool(moves) and cur.executemany(_FINISH_CARRIED, moves).rowcount == len(moves)
            if as_carried[0]:
                for i, next_at, over, plan in carried:
                    due[i] = None if over else plan.due_at(next_at, None)
                done = {i for i, _, _, _ in carried}
                rest = [i for i in rest if i not in done]
            if rest:
                read = self._finish_read(conn, cur, [completions[i] for i in rest], instance_id)
                for i, due_at in zip(rest, read, strict=True):
                    due[i] = due_at
            return due

        due = self._write(body, "finish runs")
        if as_carried[0]:
            for i, next_at, _, plan in carried:
                if due[i] is not None and len(self._hints) < _HINTS_KEPT:
                    claim = completions[i].claim
                    self._hints[(claim.job_id, claim.generation)] = (plan, next_at)
        return due

    def _finish_read(
        self, conn: Connection, cur: DriverCursor, completions: Sequence[Completion], instance_id: str
    ) -> list[Instant | None]:
        """`finish_runs` of completions whose row must be read: under the write lock (SQLite) and
        written with the same predicate again, so a row recovered, descheduled or replaced
        meanwhile is never moved. Their run records are written already."""
        at = self.dialect.bind_instant
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
            cur.executemany(_FINISH_JOB, moves)
        w.apply(conn, cur, self.dialect, self._insert_runs)
        self._after_commit(w.missed)
        return due
