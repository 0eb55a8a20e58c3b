"""What the engine reads of the job definitions: the change counter and feed, the heap's refills, the start-up sweep.

Each public method is one transaction. A changed row or a swept row that a
clock ahead wrote is put back on its grid there (`persched._store.ahead`);
the refill reads through the ``(state, next_run_at, job_id, owner_bucket)``
index, the sweep walks the primary key; both only the owned buckets' rows when
given them (`owned`).
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
    """The reads of the definitions that the engine makes."""

    def change_seq(self) -> int:
        """The change counter: it moves whenever any job is scheduled, replaced or descheduled."""
        return self._read(lambda conn: int(conn.execute(select(changes.c.seq)).scalar_one()), "read change counter")

    def changes_since(
        self, seq: int, upto: Instant | None = None, now: Instant | Callable[[], Instant] | None = None
    ) -> tuple[int, list[tuple[Instant, str, int]]]:
        """Return the counter now and ``(due_at, job_id, generation)`` of every waiting job changed after `seq`.

        With `upto`, only those due by then or with a run-now request (the heap loads the
        others later). With `now`, a changed row a clock ahead wrote is put back on its grid
        first (`persched._store.ahead`), so that it does not wait out that clock's error.
        """
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
        """Describe the jobs another store changed in ``(after, upto]`` of the change counter, for the log."""
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
        """``(due_at, job_id, generation, run_now)`` of each waiting row of `_SCANNED` columns, and the rows
        a clock ahead may have written (cheap tests; `persched._store.ahead` decides). Paused rows
        are candidates too, so that a later resume() is not silenced.
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
                # Cheap tests; the correction reads the row again.
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
        """When a job read raw is due: its `slot` delayed by its jitter (None: a pending attempt), or its run-now."""
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
        """The bounded heap's refill: ``(due_at, job_id, generation)`` of up to `limit` waiting jobs.

        Those whose ``(next_run_at, job_id)`` lies after `after` and next_run_at before `before`, in
        that order; and the key of the last row read, or None when the window was read to its end.
        With `buckets`, only the rows of those owner buckets and those whose bucket is NULL (`owned`).
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
        """One batch of the start-up sweep: up to `limit` scheduled rows after `after`, by primary key
        (with `buckets`, of those owner buckets and of none: `owned`).

        Returns ``(due_at, job_id, generation)`` of those with a run-now request, the rows it put
        back on their grid (`persched._store.ahead`), and the last job_id read (None: done).
        `now` may be a clock, read once the rows are read.
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
        """Move the rows a clock ahead wrote back onto their grid."""
        ids = {job_id for job_id, _, _ in candidates}
        return self._write(
            lambda conn: correct_ahead(conn, ids, now, self._bump_change_seq, self.jitter_reach), "correct rows ahead"
        )
