"""One claim transaction's decisions over the rows its locking read won, and what a lost entry found.

`ClaimBatch` reads each won row (by column position; defensively only when a
value is not what persched writes), decides it, gives each claim its run id
and answers each entry; `Writes` executes what the decisions queued at once.
`misses` tells a lost entry where its row stands and when to look again. No
I/O but the statements handed in; no locks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .._model.instant import Instant, Micros, from_datetime, to_datetime
from .._model.models import stored_interval
from .._model.policy import ClaimPlan
from ._rows import read_row
from .ahead import corrected_slot
from .dialects import Sql, marks
from .failures import FailingJob
from .mappers import (
    DISPATCH_COLUMNS,
    FINISHED,
    QUARANTINE,
    RUNNING,
    SCHEDULED,
    SHAPE_COLUMNS,
    STANDING_COLUMNS,
    column_micros,
    instant_or_none,
    missed_record,
    nullable_micros,
    pending_retry,
    plan_of,
    plan_or_quarantine,
    readable_plan,
    retry_of,
    shape_of,
    stored,
)
from .records import Carried, Claim, ClaimEntry, ClaimMiss
from .schema import jobs

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from sqlalchemy import Connection, Insert

    from .._model.policy import JobPlan, PlanShape, Retry
    from .._model.triggers import JitterReach
    from ._rows import StoredRow
    from .dialects import Dialect, DriverCursor

logger = logging.getLogger(__name__)

# The dispatch path's select lists, in driver SQL (docs/explanation/store.md, "The driver cursor").
DISPATCH_SELECT: Final = ", ".join(column.name for column in DISPATCH_COLUMNS)
# The claim's locking read: those, then the job's run count (for retention; read apart, so that a
# hand-edited count never makes a row unreadable).
CLAIM_SELECT: Final = f"{DISPATCH_SELECT}, run_count"
STANDING_SELECT: Final = ", ".join(column.name for column in STANDING_COLUMNS)

# The claim's one write back (`Dialect.update_rows`): every won row, by its key; the locking read holds them.
_CLAIM_SETS: Final = (
    "state",
    "owner",
    "lease_until",
    "running_for",
    "next_run_at",
    "run_now_at",
    "retry_attempt",
    "retry_for",
    "updated_at",
)
_CLAIM_KEY: Final = ("job_id", "generation")

# How soon an entry looks again after SKIP LOCKED passed its due row by: a claim commits well within it.
PASSED_BY_RETRY: Final = Micros(50_000)

# The claim's RETURNING columns, by position in the driver's rows.
_NAMES: Final = tuple(column.name for column in DISPATCH_COLUMNS)
_AT: Final = {name: index for index, name in enumerate(_NAMES)}
# A row's plan: the shape it shares with other jobs (kept by its raw values), and its own id, generation, anchor.
_SHAPE_AT: Final = tuple(_AT[name] for name in SHAPE_COLUMNS)
_JOB_ID, _GENERATION, _FIRST_RUN_AT, _INTERVAL = (
    _AT[name] for name in ("job_id", "generation", "first_run_at", "interval_seconds")
)
_RAW_SHAPES: dict[tuple[Any, ...], PlanShape] = {}  # shapes by the raw values they were read from
_RAW_SHAPES_KEPT: Final = 4_096  # then it starts again (as `mappers.shape_of`'s own cache)


def _plan_of_raw(raw: tuple[Any, ...], dialect: Dialect) -> JobPlan | None:
    """The plan of a row as the driver returned it, or None if its values are not what persched writes.

    Shapes are cached by raw values; the row's own values are checked each time (no plan per job).
    """
    job_id, generation, interval = raw[_JOB_ID], raw[_GENERATION], raw[_INTERVAL]
    if not isinstance(job_id, str) or type(generation) is not int or type(interval) not in (float, type(None)):
        return None
    try:
        key = (dialect.name, interval is None, *map(raw.__getitem__, _SHAPE_AT))
        shape = _RAW_SHAPES.get(key)
    except TypeError:  # an unhashable value (a hand-written BLOB)
        return None
    try:
        if shape is None:
            row = read_row(DISPATCH_COLUMNS, dict(zip(_NAMES, raw, strict=True)))
            if row.problems:
                return None
            shape = shape_of(row)
            if len(_RAW_SHAPES) >= _RAW_SHAPES_KEPT:
                _RAW_SHAPES.clear()
            _RAW_SHAPES[key] = shape
        return shape.plan(job_id, generation, dialect.raw_instant(raw[_FIRST_RUN_AT]), stored_interval(interval))
    except (ValueError, TypeError, OverflowError):  # InvalidJobError is a ValueError
        return None


class ClaimedRow(NamedTuple):
    """A row the claim's locking read won, as it stands, and its plan."""

    job_id: str
    generation: int
    target: str
    args: str
    kwargs: str
    next_at: Instant
    run_now_at: Instant | None
    max_runtime: Micros | None
    plan: JobPlan
    retry: Retry | None  # a pending attempt, due at next_at
    runs: int | None = None  # the job's run count (`CLAIM_SELECT`), None if not a whole number


def _claimed_row(raw: tuple[Any, ...], dialect: Dialect) -> ClaimedRow | None:
    """A won row from the driver's values; None if any is not what persched writes."""
    plan = _plan_of_raw(raw, dialect)
    if plan is None:
        return None
    target, args, kwargs = raw[_AT["target"]], raw[_AT["args"]], raw[_AT["kwargs"]]
    run_now_at, retry_for = raw[_AT["run_now_at"]], raw[_AT["retry_for"]]
    max_runtime = raw[_AT["max_runtime_seconds"]]  # read with the plan's columns: a number or None
    if not (isinstance(target, str) and isinstance(args, str) and isinstance(kwargs, str)):
        return None
    try:
        return ClaimedRow(
            plan.job_id,
            plan.generation,
            target,
            args,
            kwargs,
            dialect.raw_instant(raw[_AT["next_run_at"]]),
            None if run_now_at is None else dialect.raw_instant(run_now_at),
            None if max_runtime is None else column_micros(max_runtime),
            plan,
            pending_retry(raw[_AT["retry_attempt"]], None if retry_for is None else dialect.raw_instant(retry_for)),
        )
    except (ValueError, TypeError, OverflowError):
        return None


def _retry_at(row: StoredRow, bound: Instant, now: Instant, reach: JitterReach) -> Instant | None:
    """When an entry that lost its claim on `row` at `now` should look again (see `ClaimMiss`)."""
    if row.problems:  # settled by `misses` while it waits; while it runs, its run's completion moves it on
        return None
    plan = None if row.paused or row.state not in (SCHEDULED, RUNNING) else readable_plan(row)
    if plan is None:
        return None
    next_at, run_now_at = from_datetime(row.next_run_at), instant_or_none(row.run_now_at)
    if row.state == SCHEDULED and (next_at > bound or run_now_at is not None):
        # moved on (by another instance, or a skip)
        return plan.due_at(next_at, run_now_at, reach, retry=row.retry_attempt is not None)
    if row.state == RUNNING:
        # Look again at its next slot, in case the owner dies. A next slot already due is the owner's
        # to run when its run ends: one slot later, or every loser would retry in a loop until then.
        return plan.due_at(next_at if next_at > bound else plan.slot_after(max(next_at, bound)), None, reach)
    # Still waiting and due: SKIP LOCKED passed it by. The lock may be a write that changes nothing
    # (an unchanged schedule()): look again in a moment, or that slot would be lost.
    return Instant(max(now, bound) + PASSED_BY_RETRY)


def _taken(row: StoredRow, bound: Instant) -> bool:
    """Whether another claim has the slot of an entry that lost on `row` (`ClaimMiss.taken`).

    The row runs, or waits past the entry's slot, readable, not paused, with no run-now request.
    """
    if row.problems:
        return False
    if row.state == RUNNING:
        return True
    waiting = row.state == SCHEDULED and not row.paused and row.run_now_at is None
    return waiting and from_datetime(row.next_run_at) > bound


def standing(conn: Connection, dialect: Dialect, job_ids: Collection[str]) -> dict[str, StoredRow]:
    """Where each of these jobs stands now (`STANDING_COLUMNS`), by job id; a job gone is absent."""
    if not job_ids:
        return {}
    ids = tuple(job_ids)
    query = f"SELECT {STANDING_SELECT} FROM persched_jobs WHERE job_id IN ({marks(len(ids))})"  # noqa: S608
    return {row.job_id: row for row in stored(dialect.execute(conn, Sql(query, ids)), STANDING_COLUMNS)}


def misses(
    conn: Connection,
    dialect: Dialect,
    bounds: dict[tuple[str, int], Instant],
    now: Instant,
    reach: JitterReach,
    settle: Callable[[StoredRow], bool],
) -> tuple[dict[tuple[str, int], ClaimMiss], set[str]]:
    """What each lost entry found and when to look again; and the jobs a clock ahead moved too far.

    A waiting row that cannot be read goes to `settle`, since a later entry may never come;
    unless `settle` returns True, its entries look again in a moment.
    """
    found = standing(conn, dialect, {job_id for job_id, _ in bounds})
    settled = {row.job_id: settle(row) for row in found.values() if unreadable_waiting(row)}

    def retry_at(row: StoredRow, bound: Instant) -> Instant | None:
        if row.job_id not in settled:
            return _retry_at(row, bound, now, reach)
        return None if settled[row.job_id] else Instant(max(now, bound) + PASSED_BY_RETRY)

    lost = {
        key: ClaimMiss(row.state, row.generation, row.owner, retry_at(row, bound), _taken(row, bound))
        for key, bound in bounds.items()
        if (row := found.get(key[0])) is not None
    }
    ahead = {job_id for job_id, row in found.items() if corrected_slot(row, now, None) is not None}
    return lost, ahead


def unreadable_waiting(row: StoredRow) -> bool:
    """Whether `row` waits, not paused, unreadable: a claim that reads it pauses it."""
    if row.state != SCHEDULED or row.paused:
        return False
    if row.problems:
        return True
    try:
        plan_of(row)
    except (ValueError, TypeError, OverflowError):  # as `plan_or_quarantine` catches them
        return True
    return False


class _Write(NamedTuple):
    """Where the claim's write back puts one won row."""

    state: str
    owner: str | None
    lease_until: Instant | None
    running_for: Instant | None
    next_run_at: Instant
    run_now_at: Instant | None
    retry: Retry | None
    job_id: str
    generation: int


@dataclass
class Writes:
    """The statements a claim or completion batch queues as it decides, executed at once."""

    at: Instant | None = None  # when the claim was made: the won rows' updated_at
    reach: JitterReach | None = None  # a claim's batch: the store's, counts the due times `wait` hands out
    won: list[_Write] = field(default_factory=list)  # the claim's write back
    quarantined: list[dict[str, Any]] = field(default_factory=list)  # QUARANTINE
    missed: list[dict[str, Any]] = field(default_factory=list)  # history rows: "missed" and "error" records
    failing: list[FailingJob] = field(default_factory=list)  # slots that gave up: pause_after_failures

    def apply(self, conn: Connection, cur: DriverCursor, dialect: Dialect, insert_runs: Insert) -> None:
        if self.won:
            assert self.at is not None  # a claim's batch: `ClaimBatch` sets it
            at, updated = dialect.bind_instant, dialect.bind_instant(self.at)
            params = [
                (
                    w.state,
                    w.owner,
                    None if w.lease_until is None else at(w.lease_until),
                    None if w.running_for is None else at(w.running_for),
                    at(w.next_run_at),
                    None if w.run_now_at is None else at(w.run_now_at),
                    None if w.retry is None else w.retry.attempt,
                    None if w.retry is None else at(w.retry.slot),
                    updated,
                    w.job_id,
                    w.generation,
                )
                for w in self.won
            ]
            written = dialect.update_rows(cur, jobs, _CLAIM_SETS, _CLAIM_KEY, params)
            if written != len(params):  # the locking read holds them: never, unless a lock did not hold
                raise RuntimeError(f"the claim locked {len(params)} rows but wrote {written}: rolled back")
        for statement, rows in ((QUARANTINE, self.quarantined), (insert_runs, self.missed)):  # rare: Core
            if rows:
                conn.execute(statement, rows)

    def start(
        self,
        row: ClaimedRow,
        slot: Instant,
        next_at: Instant,
        run_now_at: Instant | None,
        retry: Retry | None,
        owner: str,
        lease_until: Instant,
    ) -> None:
        """Queue a won row's start of `slot`; `retry`: the pending attempt a run-now run leaves in place."""
        self.won.append(
            _Write(RUNNING, owner, lease_until, slot, next_at, run_now_at, retry, row.job_id, row.generation)
        )

    def wait(
        self, plan: JobPlan, job_id: str, generation: int, next_at: Instant, run_now_at: Instant | None
    ) -> ClaimMiss:
        """Queue a won row that runs nothing now waiting at `next_at` (or finished); its entry's result."""
        assert self.reach is not None  # a claim's batch: `ClaimBatch` sets it
        over = plan.is_over(next_at, run_now_at)
        state = FINISHED if over else SCHEDULED
        self.won.append(_Write(state, None, None, None, next_at, run_now_at, None, job_id, generation))
        return ClaimMiss(state, generation, None, None if over else plan.due_at(next_at, run_now_at, self.reach))


class Won(NamedTuple):
    """A won row that runs a slot, its decision, and its `claim` once its history row is inserted."""

    row: ClaimedRow
    decision: ClaimPlan
    attempt: int = 1
    claim: Claim | None = None


class ClaimBatch:
    """One claim transaction's decisions: per won row (`decide`), then per history insert (`record_starts`)."""

    def __init__(
        self,
        expected: dict[tuple[str, int], tuple[Instant, Instant]],
        claimed_at: Instant,
        instance_id: str,
        lease_until: Instant,
        reach: JitterReach,
    ) -> None:
        self.expected = expected
        self.claimed_at = claimed_at
        self.instance_id = instance_id
        self.lease_until = lease_until
        self.writes = Writes(claimed_at, reach)
        self.claims: dict[tuple[str, int], Won] = {}
        self.skipped: dict[tuple[str, int], ClaimMiss] = {}

    def read(self, selected: tuple[Any, ...], dialect: Dialect) -> ClaimedRow | None:
        """A won row as returned by the driver (`CLAIM_SELECT`); None if it cannot be read (it is paused, alone)."""
        raw, count = selected[:-1], selected[-1]
        runs = count if type(count) is int else None  # a hand-edited count: not known
        row = _claimed_row(raw, dialect)
        if row is not None:
            return row._replace(runs=runs)
        stored_row = read_row(DISPATCH_COLUMNS, dict(zip(_NAMES, raw, strict=True)))
        w = self.writes
        plan = plan_or_quarantine(stored_row, self.claimed_at, self.instance_id, w.quarantined, w.missed)
        if plan is None:
            self.skipped[(stored_row.job_id, stored_row.generation)] = ClaimMiss(
                SCHEDULED, stored_row.generation, None, None
            )
            return None
        return ClaimedRow(
            stored_row.job_id,
            stored_row.generation,
            stored_row.target,
            stored_row.args,
            stored_row.kwargs,
            from_datetime(stored_row.next_run_at),
            instant_or_none(stored_row.run_now_at),
            nullable_micros(stored_row.max_runtime_seconds),
            plan,
            retry_of(stored_row),
            runs,
        )

    def decide(self, row: ClaimedRow) -> None:
        """Decide by its policies whether a won row runs a slot or goes back to waiting."""
        key = (row.job_id, row.generation)
        bound, taken_at = self.expected[key]
        if row.retry is not None and row.next_at <= bound:
            self._decide_retry(row, row.retry)
            return
        decision = row.plan.claim(row.next_at, row.run_now_at, bound, self.claimed_at, taken_at)
        if decision.missed is not None:
            self.writes.missed.append(missed_record(*key, decision.missed, self.claimed_at, self.instance_id))
        if decision.run_for is None:
            # The policy drops the late slots (misfire "skip"): nothing runs now.
            self.skipped[key] = self.writes.wait(row.plan, *key, decision.next_run_at, row.run_now_at)
            return
        self.claims[key] = Won(row, decision)

    def _decide_retry(self, row: ClaimedRow, retry: Retry) -> None:
        """Run a due pending attempt while its slot is current; else give the slot up for the next one."""
        key, plan = (row.job_id, row.generation), row.plan
        deadline = plan.retry_deadline(retry, row.next_at)
        # (an attempt past the job's retries: a hand edit, or retries lowered in place by one: none)
        if self.claimed_at < deadline and retry.attempt <= plan.retry_policy.retries + 1:
            # On a grid the row moves on to that next slot, as any claim of `retry.slot` moves it;
            # fixed delay: it stays, and the attempt's end places the next run.
            next_at = deadline if plan.trigger is not None else row.next_at
            self.claims[key] = Won(row, ClaimPlan(retry.slot, False, next_at, None), retry.attempt)
            return
        logger.warning(
            "job %s generation %d: gave up on the slot %s after %d attempts: attempt %d, due at %s, came "
            "after the slot's time had passed",
            *key,
            to_datetime(retry.slot).isoformat(),
            retry.attempt - 1,
            retry.attempt,
            to_datetime(row.next_at).isoformat(),
        )
        self.skipped[key] = self.writes.wait(plan, *key, deadline, row.run_now_at)
        if plan.pause_after_failures:  # the slot ended in failure: every attempt of it failed
            self.writes.failing.append(FailingJob(*key, plan.pause_after_failures, self.claimed_at))

    def won(self) -> list[Won]:
        return list(self.claims.values())

    def conflicts(self, run_ids: dict[str, int]) -> list[tuple[str, int]]:
        """The claims whose slot has a run recorded already (`record_starts` got no run id for them)."""
        return [key for key in self.claims if key[0] not in run_ids]

    def record_starts(self, run_ids: dict[str, int], last_slots: dict[str, Instant]) -> None:
        """Give each claim its run id, or settle alone a job whose slot has a run recorded already.

        Such a job moves past the latest slot its generation ran (`last_slots`), so the slots a
        clock that was ahead ran early are passed by at once, and none runs twice.
        """
        w = self.writes
        for key, won in list(self.claims.items()):
            row, decision = won.row, won.decision
            plan, slot = row.plan, decision.run_for
            assert slot is not None  # decide() keeps only the rows that run a slot
            run_id = run_ids.get(row.job_id)
            if run_id is None:
                # This slot ran already (docs/reference/behaviour.md, "Clock corrections across a
                # restart"): move past the last slot that ran (fixed delay: one interval on).
                past = max(decision.next_run_at, plan.slot_after(max(slot, last_slots.get(row.job_id, slot))))
                logger.warning(
                    "job %s generation %d: the slot %s has run already (early, on a clock that was ahead, or "
                    "written by a clock behind the one that ran it); moving on to %s",
                    *key,
                    to_datetime(slot).isoformat(),
                    to_datetime(past).isoformat(),
                )
                del self.claims[key]
                self.skipped[key] = w.wait(plan, *key, past, row.run_now_at)
                continue
            run_now_at = None if decision.run_now else row.run_now_at  # a run-now run takes its request
            kept = row.retry if decision.run_now else None  # a pending attempt waits out a run-now run
            w.start(row, slot, decision.next_run_at, run_now_at, kept, self.instance_id, self.lease_until)
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
                Carried(plan, decision.next_run_at, run_now_at, kept),
                won.attempt,
                row.runs,
            )
            self.claims[key] = won._replace(claim=claim)

    def undecided(self) -> dict[tuple[str, int], Instant]:
        """The entries' rows the claim did not win (another instance, a change), with their bounds."""
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
