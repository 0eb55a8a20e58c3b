"""Claims: the start of runs, and the dispatch cycle (completions, then claims) in one transaction.

`claim_runs` is one transaction: one locking read wins rows, each entry by
its own predicate (`claim_clauses`: generation, slot, paused); each won row's
policies decide in Python (`claim_batch.ClaimBatch`); one write back puts the
rows where they decided, and the history rows are inserted in one statement.
A run starts at that commit: the locking read holds its rows until then
(SQLite's write lock; elsewhere row locks, SKIP LOCKED). The one-run-per-slot
index settles alone a slot that ran already. The reasoning:
docs/explanation/store.md, "The claim".
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import select, tuple_, update

from .._model.instant import Instant, Micros, from_datetime, to_datetime
from ._rows import raw_columns
from ._tx import REFUSED, read_time, refusal_of
from .ahead import correct_ahead, log_correction
from .claim_batch import CLAIM_SELECT, ClaimBatch, misses, unreadable_waiting
from .dialects import Sql, marks
from .failures import log_paused, pause_failing
from .mappers import (
    DISPATCH_COLUMNS,
    QUARANTINE,
    RAW_DISPATCH,
    SCHEDULED,
    STANDING_COLUMNS,
    plan_or_quarantine,
    readable_plan,
    refused_record,
    retry_of,
    stored,
)
from .part import Part
from .records import Claim, ClaimEntry, ClaimMiss, Completion, Correction, Overdue
from .schema import jobs, runs

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from sqlalchemy import Connection

    from ._rows import StoredRow
    from .claim_batch import Won
    from .dialects import Dialect, DriverCursor

logger = logging.getLogger(__name__)

# The columns of a run's record as its claim inserts it.
_START_COLUMNS: Final = (
    "job_id",
    "generation",
    "scheduled_for",
    "started_at",
    "instance_id",
    "lease_until",
    "run_now",
    "attempt",
)
# Where a job stands (`mappers.STANDING_COLUMNS`), selected raw: a lost claim's settling reads its row again.
_RAW_STANDING: Final = raw_columns(STANDING_COLUMNS)


def _bound_of(entries: list[tuple[int, Instant]], dialect: Dialect) -> Sql:
    """The slot bound of one job's row, for its batch's entries ``[(generation, bound)]``."""
    *others, (_, last) = entries
    if not others:
        return Sql("?", (dialect.bind_instant(last),))
    whens = " ".join("WHEN ? THEN ?" for _ in others)
    params = tuple(p for generation, at in others for p in (generation, dialect.bind_instant(at)))
    return Sql(f"CASE generation {whens} ELSE ? END", (*params, dialect.bind_instant(last)))


def claim_clauses(expected: dict[tuple[str, int], tuple[Instant, Instant]], dialect: Dialect) -> dict[str, Sql]:
    """The claim's predicate, clause by clause, for entries ``{(job_id, generation): (bound, _)}``.

    Named so that a test can drop one and watch its invariant break.
    """
    if dialect.binds_arrays:
        return _array_clauses(expected, dialect)
    # Each row's bound is its own entry's slot. With two generations of one job in the batch, the
    # row's generation picks its entry's; which generation may be claimed is the "generation" clause's.
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


def _array_clauses(expected: dict[tuple[str, int], tuple[Instant, Instant]], dialect: Dialect) -> dict[str, Sql]:
    """`claim_clauses` with the entries bound as arrays (PostgreSQL): one statement text at any batch size,
    planned once per connection."""
    at = dialect.bind_instant
    # An entry's key is "<job_id> <generation>". A row's bound is its own entry's; for a row of another
    # generation (a test that drops the "generation" clause), the job's last entry's, as CASE's ELSE gives.
    keys = [f"{job_id} {generation}" for job_id, generation in expected]
    last = {job_id: at(bound) for (job_id, _), (bound, _) in expected.items()}
    bound = (
        "COALESCE((?::timestamptz[])[array_position(?::text[], job_id || ' ' || generation)],"
        " (?::timestamptz[])[array_position(?::text[], job_id)])"
    )
    bounds = [at(bound) for bound, _ in expected.values()]
    return {
        "ids": dialect.any_of("job_id", sorted(last)),
        "state": Sql(dialect.unindexed_sql("state") + " = 'scheduled'"),
        "paused": Sql("paused = ?", (False,)),
        "generation": Sql("job_id || ' ' || generation = ANY(?::text[])", (keys,)),
        # LEAST passes a NULL by on PostgreSQL: the earlier of the slot and a run-now request.
        "slot": Sql(f"LEAST(next_run_at, run_now_at) <= {bound}", (bounds, keys, list(last.values()), list(last))),
    }


class ClaimsStore(Part):
    """Claims, and the dispatch cycle."""

    def dispatch(
        self,
        completions: Sequence[Completion],
        entries: Sequence[ClaimEntry],
        now: Instant | Callable[[], Instant],
        instance_id: str,
        lease: Micros,
    ) -> tuple[list[Instant | None], list[Claim | ClaimMiss]]:
        """`finish_runs` then `claim_runs` in one transaction: one commit per dispatch cycle.

        If the database refuses a row (`RefusedWrite`), the two are written apart,
        so that each settles the refused row alone and the rest go on.
        """
        store = self.store  # a patch on the store's methods reaches these calls
        if not completions:
            return [], store.claim_runs(entries, now, instance_id, lease)
        if not entries:
            return store.finish_runs(completions, instance_id), []

        def body(conn: Connection) -> tuple[list[Instant | None], list[Claim | ClaimMiss]]:
            # Both join this transaction: a failure in either rolls back both.
            return store.finish_runs(completions, instance_id), store.claim_runs(entries, now, instance_id, lease)

        try:
            return self._write(body, "dispatch")
        except REFUSED:
            if self._in_write():
                raise
        return store.finish_runs(completions, instance_id), store.claim_runs(entries, now, instance_id, lease)

    def claim_runs(
        self,
        entries: Sequence[ClaimEntry],
        now: Instant | Callable[[], Instant],
        instance_id: str,
        lease: Micros,
    ) -> list[Claim | ClaimMiss]:
        """Try to start the runs of ``(job_id, generation, expected_at, taken_at)`` entries, in one transaction.

        Results are in the order of `entries`; a repeated entry wins at most once.
        `taken_at` is when the dispatcher took the entry up (lateness is measured
        there); `now` may be a clock, read once the write lock is held, so that
        start times follow the order of commits.
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
            batch = ClaimBatch(expected, claimed_at, instance_id, lease_until, self.jitter_reach)
            for raw in self._lock(cur, expected):
                row = batch.read(raw, self.dialect)
                if row is not None:
                    batch.decide(row)
            run_ids = self._record_starts(cur, batch.won(), claimed_at, lease_until, instance_id)
            batch.record_starts(run_ids, self._last_slots(cur, batch.conflicts(run_ids)))
            batch.writes.apply(conn, cur, self.dialect, self._insert_runs)
            self._after_commit(batch.writes.missed)
            if batch.writes.failing:  # slots that gave up their pending attempt (`ClaimBatch.decide`)
                paused = pause_failing(cur, self.dialect, batch.writes.failing)
                self._on_commit(lambda: log_paused(paused, self.failures_paused))
            lost = batch.undecided()
            found: dict[tuple[str, int], ClaimMiss] = {}
            ahead: set[str] = set()
            if lost:
                settle = partial(self._settle_unreadable, conn, at=claimed_at, instance_id=instance_id)
                found, ahead = misses(conn, self.dialect, lost, claimed_at, self.jitter_reach, settle)
            corrected[:] = correct_ahead(conn, ahead, now, self._bump_change_seq, self.jitter_reach) if ahead else []
            for c in corrected:  # another instance's clock was ahead: look again at the slot put right
                found[c.job_id, c.generation] = ClaimMiss(SCHEDULED, c.generation, None, c.due, True)
            return batch.results(entries, found)

        corrected: list[Correction] = []
        try:
            results = self._write(body, "claim")
        except REFUSED as exc:
            if self._in_write():  # inside dispatch, which writes its parts apart
                self._raise_refusal("claim", exc)
            if len(entries) == 1:
                return [self._park_claim(entries[0], now, instance_id, refusal_of(exc))]
        else:
            for c in corrected:
                log_correction(c)
            return results
        # The database refused one of the rows: each entry alone, so that only that one is settled apart.
        return [self.store.claim_runs([entry], now, instance_id, lease)[0] for entry in entries]

    def _settle_unreadable(self, conn: Connection, row: StoredRow, *, at: Instant, instance_id: str) -> bool:
        """Pause a waiting job whose row a lost claim found unreadable, with an "error" record saying why.

        The row is locked and read again first; one another transaction holds, or that reads
        well by now, is left as it is. False: its entries should look again in a moment.
        """
        query = select(*_RAW_STANDING).where(jobs.c.job_id == row.job_id)
        locked = stored(self.dialect.lock_first(conn, query, 1), STANDING_COLUMNS)
        if not locked or not unreadable_waiting(locked[0]):
            return False
        (held,) = locked
        if conn.execute(QUARANTINE, {"b_job_id": held.job_id, "b_generation": held.generation}).rowcount == 1:
            records: list[dict[str, Any]] = []
            plan_or_quarantine(held, at, instance_id, [], records)  # logs and words the record
            conn.execute(self._insert_runs, records)
        return True

    def _park_claim(
        self, entry: ClaimEntry, now: Instant | Callable[[], Instant], instance_id: str, detail: str
    ) -> ClaimMiss:
        """Pause the job of a claim refused alone, with an "error" record saying why, until resumed."""
        job_id, generation, expected_at, _ = entry

        def body(conn: Connection) -> bool:
            at = read_time(now)
            parked = conn.execute(
                update(jobs)
                .where(
                    jobs.c.job_id == job_id,
                    jobs.c.generation == generation,
                    jobs.c.state == SCHEDULED,
                    jobs.c.paused.is_(False),
                )
                .values(paused=True, run_now_at=None, updated_at=to_datetime(at))
            )
            if parked.rowcount == 1:
                record = refused_record(job_id, generation, expected_at, "its claim", detail, at, instance_id)
                conn.execute(self._insert_runs, [record])
            return parked.rowcount == 1

        if self._write_park(body):
            logger.error("job %s generation %d paused: the database refused its claim: %s", job_id, generation, detail)
        return ClaimMiss(state=SCHEDULED, generation=generation)

    def claim_overdue(
        self,
        limit: int,
        before: Instant,
        now: Instant | Callable[[], Instant],
        instance_id: str,
        lease: Micros,
        passed_by: Collection[tuple[str, int]] = (),
    ) -> Overdue:
        """Claim up to `limit` waiting rows of this namespace due before `before`, oldest first, any owner's.

        Rows another transaction holds are passed by (`Dialect.lock_first`); those found
        go through `claim_runs` in the same transaction. A row whose jitter has not run
        out is handed back for the heap; an unreadable one is named, so that the caller
        passes it by next time (`passed_by`).
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
        # In index order: on PostgreSQL, with statistics from before the rows moved on, a bare LIMIT 1
        # was planned as a sequential scan that read the whole table whenever nothing was overdue.
        probe = select(jobs.c.job_id).where(*where).order_by(jobs.c.next_run_at).limit(1)
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
                due = plan.due_at(
                    from_datetime(row.next_run_at), None, self.jitter_reach, retry=retry_of(row) is not None
                )
                if due <= claimed_at:
                    found.entries.append((row.job_id, row.generation, due, claimed_at))
                else:
                    found.later.append((due, row.job_id, row.generation))
            found.results.extend(self.store.claim_runs(found.entries, claimed_at, instance_id, lease))
            return found

        return self._write(body, "claim overdue")

    def _lock(
        self, cur: DriverCursor, expected: dict[tuple[str, int], tuple[Instant, Instant]]
    ) -> list[tuple[Any, ...]]:
        """The claim's one locking read: the rows it wins, as they stand."""
        predicate = Sql.join(claim_clauses(expected, self.dialect).values(), " AND ")
        return self.dialect.lock_claimable(cur, jobs, predicate, CLAIM_SELECT)

    def _last_slots(self, cur: DriverCursor, keys: Sequence[tuple[str, int]]) -> dict[str, Instant]:
        """The latest slot each ``(job_id, generation)`` ran on its grid (rare: only claims whose slot ran)."""
        last: dict[str, Instant] = {}
        for job_id, generation in keys:
            query = "SELECT MAX(scheduled_for) FROM persched_runs WHERE job_id = ? AND generation = ? AND NOT run_now"
            [(at,)] = cur.execute(query, (job_id, generation)).fetchall()
            if at is not None:
                last[job_id] = self.dialect.raw_instant(at)
        return last

    def _record_starts(
        self, cur: DriverCursor, won: Sequence[Won], started_at: Instant, lease_until: Instant, instance_id: str
    ) -> dict[str, int]:
        """Insert the history rows of won claims; the run id of each job whose slot had no run yet."""
        if not won:
            return {}
        at = self.dialect.bind_instant
        started, lease = at(started_at), at(lease_until)
        rows = [
            (
                w.row.job_id,
                w.row.generation,
                at(w.decision.run_for),
                started,
                instance_id,
                lease,
                w.decision.run_now,
                w.attempt,
            )
            for w in won
            if w.decision.run_for is not None
        ]
        return dict(self.dialect.insert_new(cur, runs, _START_COLUMNS, rows, "job_id, run_id"))
