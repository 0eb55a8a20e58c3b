"""Claims: the start of runs, and the dispatch cycle (completions, then claims) in one transaction.

- `claim_runs`: the start of runs, in three steps in one transaction: one
  locking read decides which rows the batch wins, each entry by its own
  predicate::

      SELECT <the row> FROM persched_jobs
       WHERE job_id IN (:ids) AND state='scheduled' AND NOT paused
         AND (job_id, generation) IN (:entries)
         AND (next_run_at <= CASE job_id WHEN :id THEN :expected_at ... END
              OR run_now_at <= <the same bound>)
      [FOR UPDATE SKIP LOCKED]

  then each won row's policies decide, in Python, from the row as it stands
  (`persched._model.policy.JobPlan.claim`, `claim_batch.ClaimBatch.decide`),
  which slot runs and where the row goes next; then one write back puts
  every won row there by its key (`claim_batch.Writes.apply`), and the
  history rows are inserted in one statement.
  A run starts at the commit of that transaction: the locking read holds
  its rows until then (SQLite: the write lock of BEGIN IMMEDIATE;
  PostgreSQL and MariaDB: row locks, and rows another instance is claiming
  are passed by, not waited for: `Dialect.lock_claimable`). The predicate on
  `generation` makes a stale heap entry harmless; the one on `next_run_at`
  keeps an entry from running a slot early after another instance moved
  the row on (for a job with entries of two generations in the batch,
  ``CASE generation …`` picks the row's own entry's bound); the one on
  `paused` makes pause() linearize like deschedule().
- A lost entry learns where its row stands (`claim_batch.misses`); a row
  that another instance moved further ahead than its schedule allows (its
  clock was ahead) is put back on its grid in the same transaction
  (`persched._store.ahead`), and a slot that clock ran early is passed by
  when the claim comes to it (`ClaimBatch.record_starts`).
- `dispatch`: `finish_runs` (`persched._store.completions`) and `claim_runs`
  of one dispatch cycle in one transaction (nested writes join the transaction open on their thread).

The dispatch path runs on the driver's own cursor (`dialects.DriverCursor`):
rows come back as the driver's tuples, read by column position, and only a
row whose values are not what persched writes (a hand edit) is read
defensively (`_rows.read_row`) and settled alone.
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
from .claim_batch import DISPATCH_SELECT, ClaimBatch, misses, unreadable_waiting
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
    """The claim's predicate (module docstring), clause by clause, for entries ``{(job_id, generation): (bound, _)}``.

    Named so that a test can drop one and watch its invariant break.
    """
    if dialect.binds_arrays:
        return _array_clauses(expected, dialect)
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


def _array_clauses(expected: dict[tuple[str, int], tuple[Instant, Instant]], dialect: Dialect) -> dict[str, Sql]:
    """`claim_clauses` with the entries bound as arrays (PostgreSQL): one statement text whatever the
    batch's size, so that the server plans it once per connection (a prepared statement) rather than
    at every claim, and the same predicate, clause by clause, as the lists and CASE chains."""
    at = dialect.bind_instant
    # An entry's key is "<job_id> <generation>" (the last space splits it back: a generation has none).
    # A row's bound is looked up in C (array_position: linear, as the CASE chain is, with no plan to
    # make): its own entry's; for a row of another generation (a test that drops the "generation"
    # clause), the job's last entry's, as the CASE chain's ELSE gives it.
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
    """Claims, and the dispatch cycle: the dispatch path (module docstring)."""

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
        If the database refuses the transaction (`RefusedWrite`: a row it will
        not update), the two are written apart, so that the completions settle
        the refused row alone (`finish_runs`) and the claims go on.
        """
        store = self.store  # the store's own methods: a patch on the store reaches them
        if not completions:
            return [], store.claim_runs(entries, now, instance_id, lease)
        if not entries:
            return store.finish_runs(completions, instance_id), []

        def body(conn: Connection) -> tuple[list[Instant | None], list[Claim | ClaimMiss]]:
            # Both join this transaction (`_transaction`); a failure in either rolls back both.
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

        One locking read decides every row by its own predicate (module
        docstring); the dialect locks and names the winners. Each won row's plan
        (`persched._model.policy.JobPlan.claim`) then decides which slot runs, by the job's
        misfire policy, or that none does (its late slots are dropped and the
        row goes back to waiting). `taken_at` is when the dispatcher took the
        entry up: lateness is measured there. Results are in the order of
        `entries`; an entry repeated in the batch wins at most once.
        `now` may be a clock, read once the transaction holds its write lock,
        so that start times follow the order of commits.

        One job never holds back another: a row whose slot has a run
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
            if self._in_write():  # part of an enclosing write (dispatch), which writes its parts apart
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
        """Pause a waiting job whose row or schedule a lost claim found unreadable, with an "error" record
        saying why (as a won row's read does: `mappers.plan_or_quarantine`); False if its entries
        should look again in a moment.

        The row was read without a lock: it is locked and read again first. One that another
        transaction holds is passed by (as the claim's own locking read passes rows by: an operator's
        fix under way would hold every claim of this instance until its commit), and one that reads
        well or moved on by now is left as it is: False, either way. One whose generation is no number
        never matches the pause (it stays as it is, listed unreadable): True, nothing to look at again."""
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
        """A claim refused alone: pause its job (while it still waits in that generation), with an "error"
        record saying why; claims pass a paused job by, so it is not tried again until resumed."""
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
        """The claim by query: claim up to `limit` of this namespace's waiting rows whose
        next_run_at lies before `before`, oldest first, whichever instance owns them.

        Rows another transaction is claiming are passed by (``FOR UPDATE SKIP
        LOCKED`` on PostgreSQL and MariaDB, `Dialect.lock_first`; SQLite's
        write lock makes every search exclusive), so two instances searching at
        once take disjoint rows. The rows found are claimed by `claim_runs` in
        the same transaction, each with its own predicate (state, generation,
        slot): the linearization point is the same claim. A row
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
        """The claim's one locking read (module docstring): the rows it wins, as they stand."""
        predicate = Sql.join(claim_clauses(expected, self.dialect).values(), " AND ")
        return self.dialect.lock_claimable(cur, jobs, predicate, DISPATCH_SELECT)

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
        """Insert the history rows of won claims; return the run id of each job whose slot had no run yet.

        The insert does nothing for a slot the one-run-per-slot index already
        holds, so such a job is told apart without failing the others.
        """
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
