"""What the engine reads of the job definitions: the change counter and feed, the heap's refills, the start-up sweep.

Each public method is one transaction (`_tx`):

- `change_seq`, `changes_since`, `changes_made_elsewhere`: the change counter
  (`persched_changes`) and the jobs changed after a value of it, which the
  heartbeat picks up and logs when another store made them; a changed row
  written by a clock ahead is put back on its grid there
  (`persched._store.ahead`).
- `load_due`: the bounded heap's refill (`persched._engine.horizon`), through
  the ``(state, next_run_at, job_id, owner_bucket)`` index, of the owned buckets.
- `sweep`: the start-up sweep in primary-key order: pending run-now requests,
  and rows written while a wall clock was ahead, moved back onto their grid
  (docs/reference/behaviour.md, "Clock corrections across a restart").
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import or_, select

from .._model import triggers as _triggers
from .._model.instant import Instant, to_datetime
from ._rows import raw_columns
from ._tx import read_time
from .ahead import correct_ahead, log_correction, written_ahead
from .mappers import (
    CLOCK_STEP_FLOOR,
    RAW_JOBS,
    SCHEDULED,
    change_words,
    column_micros,
    due_of,
    next_fire,
    stored,
)
from .part import Part
from .records import ChangeNote, Correction
from .schema import changes, jobs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from sqlalchemy import ColumnElement, Connection

__all__ = ["DueStore"]

logger = logging.getLogger(__name__)


def _whole_generation(value: object) -> int:
    """A generation read raw (TypeError if a hand edit made it something else)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"generation {value!r} is not a whole number")
    return value


# The columns `_inspect` reads, in that order (the sweep selects them with SQLAlchemy, raw).
_SCANNED: Final = [
    jobs.c.next_run_at,
    jobs.c.job_id,
    jobs.c.generation,
    jobs.c.jitter_seconds,
    jobs.c.run_now_at,
    jobs.c.paused,
    jobs.c.interval_seconds,
    jobs.c.cron,
    jobs.c.timezone,
    jobs.c.updated_at,
    jobs.c.first_run_at,
    jobs.c.retry_attempt,
]
_Inspected = tuple[Instant, str, int, bool]  # (due_at, job_id, generation, run-now pending)
# The columns a refill reads (load_due).
_DUE_COLUMNS: Final = [
    jobs.c.next_run_at,
    jobs.c.job_id,
    jobs.c.generation,
    jobs.c.jitter_seconds,
    jobs.c.run_now_at,
    jobs.c.retry_attempt,
]


def owned(buckets: frozenset[int] | None) -> list[ColumnElement[bool]]:
    """The terms that keep the rows of `buckets` (None: every row), and every row whose bucket is
    NULL (inserted by hand-written SQL): each instance reads those, and only the owner of the job's
    bucket (`persched._model.buckets.bucket_of`) queues it."""
    if buckets is None:
        return []
    return [or_(jobs.c.owner_bucket.in_(sorted(buckets)), jobs.c.owner_bucket.is_(None))]


class DueStore(Part):
    """The reads of the definitions that the engine makes (module docstring); `JobsStore` builds on it."""

    def change_seq(self) -> int:
        """The change counter: it moves whenever any job is scheduled, replaced or descheduled."""
        return self._read(lambda conn: int(conn.execute(select(changes.c.seq)).scalar_one()), "read change counter")

    def changes_since(
        self, seq: int, upto: Instant | None = None, now: Instant | Callable[[], Instant] | None = None
    ) -> tuple[int, list[tuple[Instant, str, int]]]:
        """Return the counter now and ``(due_at, job_id, generation)`` of every
        scheduled (not paused) job changed after `seq`; with `upto`, only of those
        whose next_run_at is at most `upto` or that have a pending run-now request
        (the bounded heap loads the others when its horizon gets there).

        With `now`, a changed row written by a clock ahead of it by more than the
        floor (its ``updated_at``) that lies further ahead than its schedule allows
        is put back on its grid first (`persched._store.ahead`), paused or not, and
        returned where it is now: a job that an instance whose clock was ahead
        scheduled or resumed does not wait out that clock's error. A clock for `now`
        is read after the rows (`correct_ahead`)."""
        changed_here = [jobs.c.change_seq > seq, jobs.c.state == SCHEDULED, self._mine]
        where = [*changed_here, jobs.c.paused.is_(False)]
        if upto is not None:
            where.append(or_(jobs.c.next_run_at <= to_datetime(upto), jobs.c.run_now_at.is_not(None)))

        def body(conn: Connection) -> tuple[int, list[tuple[Instant, str, int]], set[str]]:
            now_seq = int(conn.execute(select(changes.c.seq)).scalar_one())
            rows = stored(conn.execute(select(*RAW_JOBS).where(*where)))
            due = [(due_of(row, self.jitter_reach), row.job_id, row.generation) for row in rows]
            ahead: set[str] = set()
            if now is not None:  # the candidates: `correct_ahead` reads the rows and the time again
                written_ahead_of_now = jobs.c.updated_at > to_datetime(Instant(read_time(now) + CLOCK_STEP_FLOOR))
                query = select(jobs.c.job_id).where(*changed_here, written_ahead_of_now)
                ahead = {str(job_id) for (job_id,) in conn.execute(query)}
            return now_seq, [(at, job_id, generation) for at, job_id, generation in due if at is not None], ahead

        now_seq, changed, ahead = self._read(body, "read changes")
        if not ahead:
            return now_seq, changed
        assert now is not None
        corrections = self._write(
            lambda conn: correct_ahead(conn, ahead, now, self._bump_change_seq, self.jitter_reach), "correct rows ahead"
        )
        for c in corrections:
            log_correction(c)
        moved = {c.job_id: c for c in corrections}
        changed = [entry for entry in changed if entry[1] not in moved]
        changed += [(c.due, c.job_id, c.generation) for c in corrections if c.due is not None]
        return now_seq, changed

    def changes_made_elsewhere(self, after: int, upto: int) -> list[ChangeNote]:
        """Describe the jobs changed in ``(after, upto]`` of the change counter
        by another store (another process, the command line), for the log."""
        own = self._take_own_changes(upto)

        def body(conn: Connection) -> list[ChangeNote]:
            query = select(*RAW_JOBS).where(jobs.c.change_seq > after, jobs.c.change_seq <= upto)
            rows = stored(conn.execute(query.order_by(jobs.c.change_seq)))
            return [
                ChangeNote(row.job_id, row.generation, change_words(row)) for row in rows if row.change_seq not in own
            ]

        return self._read(body, "read changes")

    def _inspect(
        self, rows: Iterable[Sequence[Any]], now: Instant
    ) -> tuple[list[_Inspected], list[tuple[str, int, Instant]]]:
        """Check rows of `_SCANNED` columns: ``(due_at, job_id, generation, run_now)`` of each
        scheduled, not paused one, and the rows that lie ahead of the clock.

        A row whose next slot lies further ahead of `now` than its schedule allows,
        by more than `CLOCK_STEP_FLOOR`, was written while a wall clock was ahead
        (then corrected: docs/reference/behaviour.md, "Clock corrections across a restart") if its grid
        has moved past its first slot, or, still at its first slot, if it was last
        written at an instant ahead of `now` by more than the floor too: a first
        slot placed far ahead on purpose (start_in, start_at) is not a clock error,
        and skew between live instances (seconds) is left alone, so that no
        instant runs twice. `_correct_ahead` moves it back to its next slot from
        `now` (cron: the next fire after now), in its generation, keeping its
        definition, pause and history. Its grid slots up to where it was may have
        run already (early, on the clock that was ahead): their runs are kept, so
        when their time comes the claim finds them and passes them by, and no
        (job_id, scheduled_for) runs twice. Paused rows are corrected too, so that
        a later resume() is not silenced.
        """
        entries = []
        ahead = []
        fires: dict[tuple[str, str], Instant | None] = {}  # a cron's next fire after now, per expression

        def beyond_schedule(due: Instant, interval: float | None, cron: str | None, zone: str) -> bool:
            if interval is not None:  # more than one interval away
                return due - now > column_micros(interval) + CLOCK_STEP_FLOOR
            if cron is None:
                return False
            if (cron, zone) not in fires:
                fires[cron, zone] = next_fire(cron, zone, now)
            fire = fires[cron, zone]  # past the expression's next fire after now
            return fire is not None and due > fire + CLOCK_STEP_FLOOR

        for at, job_id, generation, jitter, run_now_at, paused, interval, cron, zone, updated, first, retry in rows:
            try:
                generation = _whole_generation(generation)
                slot = self.dialect.raw_instant(at)
                # Cheap tests (the correction re-reads the row): further ahead than the schedule
                # allows, and written by a clock ahead of this one (docstring).
                first_at = None if first is None else self.dialect.raw_instant(first)
                written = written_ahead(slot, first_at, self.dialect.raw_instant(updated), now)
                if written and beyond_schedule(slot, interval, cron, zone):
                    ahead.append((job_id, generation, slot))
                if paused:
                    continue
                due = self._due_at(job_id, generation, slot, None if retry is not None else jitter, run_now_at)
            except Exception as exc:  # noqa: BLE001 - one unreadable row never stops start()
                # Not queued; jobs() and `persched jobs` show why (Job.unreadable).
                logger.error("job %s is not scheduled: its stored row cannot be read: %s", job_id, exc)
                continue
            entries.append((due, job_id, generation, run_now_at is not None))
        return entries, ahead

    def _due_at(self, job_id: str, generation: int, slot: Instant, jitter: float | None, run_now_at: object) -> Instant:
        """When a job read raw is due: its `slot`, later by its jitter (which only delays; None for a
        pending attempt, due exactly then), or its pending run-now."""
        due = slot
        if jitter:
            micros = column_micros(jitter)
            self.jitter_reach.widen(micros)
            due = Instant(slot + _triggers.jitter_offset(job_id, generation, slot, micros))
        return due if run_now_at is None else min(due, self.dialect.raw_instant(run_now_at))

    def load_due(
        self,
        after: tuple[Instant, str] | None,
        before: Instant,
        limit: int,
        buckets: frozenset[int] | None = None,
    ) -> tuple[list[tuple[Instant, str, int]], tuple[Instant, str] | None]:
        """The bounded heap's refill (`persched._engine.horizon`): ``(due_at, job_id, generation)`` of the
        scheduled, not paused jobs whose ``(next_run_at, job_id)`` lies after `after` (None: from
        the start) and whose next_run_at lies before `before`, at most `limit` of them in that
        order, through the ``(state, next_run_at, ...)`` index; and the key of the last row read when
        `limit` rows were read (None: the window was read to its end).

        With `buckets`, only the rows of those owner buckets and those whose bucket is NULL (`owned`).
        `due_at` adds the job's jitter (which only delays) or takes a pending run-now.
        """
        # SQLite: +namespace keeps the planner on (state, next_run_at), off any index that leads
        # with namespace, which would read and sort every scheduled row of it (test_horizon's plan test).
        where = [
            jobs.c.state == SCHEDULED,
            jobs.c.paused.is_(False),
            self.dialect.unindexed(jobs.c.namespace) == self.namespace,
            jobs.c.next_run_at < to_datetime(before),
            *owned(buckets),
        ]
        if after is not None:
            at = to_datetime(after[0])
            where += [jobs.c.next_run_at >= at, or_(jobs.c.next_run_at > at, jobs.c.job_id > after[1])]
        query = select(*raw_columns(_DUE_COLUMNS)).where(*where).order_by(jobs.c.next_run_at, jobs.c.job_id)

        def body(conn: Connection) -> tuple[list[tuple[Instant, str, int]], tuple[Instant, str] | None]:
            rows = conn.execute(query.limit(limit)).all()
            entries = []
            last: tuple[Instant, str] | None = None
            for at, job_id, generation, jitter, run_now_at, retry in rows:
                try:
                    slot = self.dialect.raw_instant(at)
                    last = (slot, job_id)
                    generation = _whole_generation(generation)
                    due = self._due_at(job_id, generation, slot, None if retry is not None else jitter, run_now_at)
                except Exception as exc:  # noqa: BLE001 - one unreadable row is skipped; start() logged it (sweep)
                    logger.debug("job %s is not queued: its stored row cannot be read: %s", job_id, exc)
                    continue
                entries.append((due, job_id, generation))
            return entries, (last if len(rows) == limit else None)

        return self._read(body, "load due jobs")

    def sweep(
        self,
        after: str | None,
        limit: int,
        now: Instant | Callable[[], Instant],
        buckets: frozenset[int] | None = None,
    ) -> tuple[list[tuple[Instant, str, int]], list[Correction], str | None]:
        """One batch of the start-up sweep (`persched._engine.horizon`): the scheduled rows of this
        namespace with a job_id after `after`, at most `limit`, in primary-key order (with `buckets`,
        those of these owner buckets and of none: `owned`). A clock for
        `now` is read at each step: a correction reads it once it read the rows it corrects
        (`persched._store.ahead.correct_ahead`), not a time taken before this thread was held.

        Returns ``(due_at, job_id, generation)`` of those with a pending run-now request, the
        rows it corrected because they lay ahead of the clock (see _inspect), and the last
        job_id read (None: the sweep is done).
        """
        # SQLite: +state and +namespace keep the planner on the primary key (a keyset walk);
        # either index would make each batch read and sort every scheduled row.
        where = [
            self.dialect.unindexed(jobs.c.state) == SCHEDULED,
            self.dialect.unindexed(jobs.c.namespace) == self.namespace,
            *owned(buckets),
        ]
        if after is not None:
            where.append(jobs.c.job_id > after)
        query = select(*raw_columns(_SCANNED)).where(*where).order_by(jobs.c.job_id).limit(limit)

        def body(
            conn: Connection,
        ) -> tuple[list[tuple[Instant, str, int, bool]], list[tuple[str, int, Instant]], str | None]:
            rows = conn.execute(query).all()
            entries, ahead = self._inspect(rows, read_time(now))
            return entries, ahead, (str(rows[-1][1]) if len(rows) == limit else None)

        entries, ahead, last = self._read(body, "sweep jobs")
        run_now = [(due, job_id, generation) for due, job_id, generation, pending in entries if pending]
        if not ahead:
            return run_now, [], last
        corrections = self._correct_ahead(ahead, now)
        moved = {c.job_id for c in corrections}
        run_now = [e for e in run_now if e[1] not in moved]
        return run_now, corrections, last

    def _correct_ahead(
        self, candidates: Sequence[tuple[str, int, Instant]], now: Instant | Callable[[], Instant]
    ) -> list[Correction]:
        """Move rows that lie further ahead than their schedule allows back onto their grid (see _inspect)."""
        ids = {job_id for job_id, _, _ in candidates}
        return self._write(
            lambda conn: correct_ahead(conn, ids, now, self._bump_change_seq, self.jitter_reach), "correct rows ahead"
        )
