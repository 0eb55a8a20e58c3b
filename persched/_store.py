"""Every SQL statement persched runs, one transaction per method.

Callers pass `now` (an `Instant` in their own time frame) in, or, where the
order of commits matters (claims, recovery), a clock that is read once the
transaction holds its write lock. Instants travel as whole microseconds
inside persched (`_instant`) and as aware UTC datetimes in the database, which
keep microseconds too: the round trip is exact, never rounded.

Linearization points (SPEC §2) are the commits of these methods:

- `upsert_job`: schedule() — insert, replace (generation + 1) or no change.
- `deschedule_job`: deschedule() — ``state := 'descheduled'``; the row stays
  so that the generation counter is never reused (no ABA). Both go through
  a group commit (`_write_grouped`): calls that arrive together share one
  transaction, and each returns only after it committed.
- `claim_runs`: the start of runs. One conditional UPDATE decides every
  entry of a batch by its own predicate::

      UPDATE persched_jobs SET state='running', owner=:me, lease_until=:lease,
                               running_for=next_run_at
       WHERE job_id IN (:ids) AND state='scheduled' AND NOT paused
         AND (job_id, generation) IN (:entries)
         AND (next_run_at <= CASE job_id WHEN :id THEN :expected_at ... END
              OR run_now_at <= <the same bound>)
      RETURNING ...

  then each won row's policies (`_policy`) decide its slot and next slot,
  and the runs' history rows are inserted in the same transaction. The
  predicate on `generation` makes a stale heap entry harmless; the one on
  `next_run_at` keeps an entry from running a slot early after another
  instance moved the row on; the one on `paused` makes pause() linearize
  like deschedule(). On SQLite every write transaction starts with
  ``BEGIN IMMEDIATE`` (see `_db`), so select-then-update races cannot happen
  (FIELD-REPORTS #4); RETURNING is what decides, never a prior SELECT. On
  PostgreSQL the rows are picked with ``FOR UPDATE SKIP LOCKED``.
- `finish_runs`: completions. The job UPDATE is conditional on generation,
  state, owner and the slot in flight (`running_for`), so the completion of a replaced, descheduled or
  recovered run changes nothing (FIELD-REPORTS #5).
- `dispatch`: `finish_runs` and `claim_runs` of one dispatch cycle in one
  transaction (nested writes join the transaction open on their thread).
- `pause_job` / `resume_job` / `request_run_now`: one row each, grouped like
  schedule and deschedule.
- `recover_run`: a run whose lease was not renewed becomes 'lost' and its job
  goes back to 'scheduled' on the next slot; conditional on the lease value
  the caller observed, so a renewal in between wins, and on the job still
  being that run's, so a deschedule in between wins.

Transient failures (SQLite busy past its timeout, a dropped or refused
PostgreSQL connection) are retried with capped backoff; anything else, or a
transient failure that outlasts the retries, becomes `StoreError`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    Insert,
    Integer,
    Row,
    Update,
    and_,
    bindparam,
    case,
    func,
    literal,
    or_,
    select,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, SQLAlchemyError

from . import _mysql_proto as _my
from . import _triggers
from ._instant import Instant, Micros, from_datetime, from_naive_utc, to_datetime
from ._models import DEFAULT_NAMESPACE, Job, JobDefinition, JobState, Policies, Run, validate_policies
from ._observe import Observer, notify
from ._policy import ClaimPlan, JobPlan, Missed, place_grid
from ._rows import StoredRow, raw_columns, read_row, readable
from ._schema import UTCDateTime, changes, jobs, runs
from .errors import InvalidJobError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Iterator, Sequence

    from sqlalchemy import Column, Select

__all__ = ["Claim", "ClaimMiss", "Completion", "Correction", "OpenRun", "Store"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

CLOCK_STEP_FLOOR: Final = Micros(60_000_000)  # corrections smaller than this are skew, left alone (see load_scheduled)
RETRY_ATTEMPTS: Final = 6
RETRY_FIRST_DELAY: Final = 0.02  # seconds, doubled per attempt
RETRY_MAX_DELAY: Final = 1.0  # seconds
MAX_ERROR_TEXT: Final = 8_000  # characters of error text kept per run
LOW_SPACE_EXIT_BYTES: Final = 64 << 20  # free bytes that end low-space mode (see Store._reclaim_wal)

_SCHEDULED: Final = JobState.SCHEDULED.value
# start() reads every job of its namespace with raw driver values (see load_scheduled), in the driver's parameter style.
_LOAD_SCHEDULED: Final = (
    "SELECT next_run_at, job_id, generation, jitter_seconds, run_now_at, paused, interval_seconds,"
    " cron, timezone, updated_at, first_run_at FROM persched_jobs WHERE state = 'scheduled' AND namespace = ?"
)
_LOAD_SCHEDULED_PG: Final = _LOAD_SCHEDULED.replace("?", "%s")
_RUNNING: Final = JobState.RUNNING.value
_FINISHED: Final = JobState.FINISHED.value
_DESCHEDULED: Final = JobState.DESCHEDULED.value
_CHANGES_KEY: Final = "persched_change_seqs"  # Connection.info: change-counter values of this transaction
_OWN_CHANGES_KEPT: Final = 10_000  # own change values remembered for the heartbeat's log


def _read_time(now: Instant | Callable[[], Instant]) -> Instant:
    return now() if callable(now) else now


def _raw_instant(value: str | datetime) -> Instant:
    """A driver's raw timestamp -> instant, exactly as `from_datetime` (SQLite: naive UTC text).

    Raises:
        ValueError: Not such a value (a hand-edited row; `_rows` says which column and why).
    """
    if isinstance(value, datetime):
        return from_datetime(value)
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is not None:  # SQL compares these as text: an offset sorts at the wrong instant
        raise ValueError(f"{value!r} has a UTC offset; write naive UTC 'YYYY-MM-DD HH:MM:SS.ffffff'")
    return from_naive_utc(parsed)


def _column_micros(value: float) -> Micros:
    """A seconds column (float) -> microseconds. Exact for what persched wrote (``us / 1e6``):
    that float is within half an ulp of the true quotient, far under half a microsecond."""
    return Micros(round(value * 1_000_000))


def _raw_micros(value: float | None) -> Micros | None:
    """`_column_micros` of a nullable column."""
    return None if value is None else _column_micros(value)


@dataclass(frozen=True)
class Claim:
    """A won claim: everything a worker needs to run and complete it."""

    job_id: str
    generation: int
    target: str
    args_json: str
    kwargs_json: str
    scheduled_for: Instant
    started_at: Instant
    run_id: int
    run_now: bool = False
    max_runtime: Micros | None = None

    def run(self) -> Run:
        """The `Run` record as it stands while running."""
        return Run(
            job_id=self.job_id,
            generation=self.generation,
            scheduled_for=to_datetime(self.scheduled_for),
            started_at=to_datetime(self.started_at),
            run_id=self.run_id,
            run_now=self.run_now,
        )


class ChangeNote(NamedTuple):
    """A job changed by another process, as the heartbeat logs it."""

    job_id: str
    generation: int
    words: str


@dataclass(frozen=True)
class Completion:
    """A finished run waiting to be written: what `finish_runs` records."""

    claim: Claim
    outcome: str
    error: str | None
    finished_at: Instant


@dataclass(frozen=True)
class ClaimMiss:
    """A lost claim, with the row as it stands now (state None: no such job).

    `due_at` is when the job should be tried again (None: not by this
    entry: it is descheduled, replaced, paused, finished, or running here).
    """

    state: str | None
    generation: int | None = None
    owner: str | None = None
    due_at: Instant | None = None


@dataclass(frozen=True)
class Correction:
    """A row whose next slot lay further ahead than its schedule allows (written while a wall
    clock was ahead), moved back by `load_scheduled` into a new generation (SPEC §2)."""

    job_id: str
    generation: int  # the new one
    was: Instant  # the next slot the row had
    now: Instant  # the next slot it has now
    due: Instant | None  # when the heap should try it (None: paused)


@dataclass(frozen=True)
class OpenRun:
    """A run with no outcome yet, as lease recovery sees it."""

    run_id: int
    job_id: str
    generation: int
    instance_id: str
    lease_until: datetime | None


def _is_transient(exc: DBAPIError, postgres: bool) -> bool:
    if exc.connection_invalidated:
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if postgres:
        # No SQLSTATE: the connection could not be made or was cut (server
        # restarting, network). Else: connection lost, serialization failure,
        # deadlock, admin shutdown.
        if sqlstate is None:
            return isinstance(exc, OperationalError)
        return isinstance(sqlstate, str) and (sqlstate.startswith("08") or sqlstate in ("40001", "40P01", "57P01"))
    text = str(exc.orig).lower()
    return "locked" in text or "busy" in text  # SQLite: busy past busy_timeout (FIELD-REPORTS #7)


# (job_id, generation, expected_at, taken_at): a heap entry the dispatcher took up at `taken_at`.
ClaimEntry = tuple[str, int, Instant, Instant]


def _free_bytes(path: str) -> int | None:
    """Bytes free for us on the volume of `path` (None: unknown)."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)) if path else ".")
    except (OSError, AttributeError):  # no statvfs on Windows
        return None
    return st.f_bavail * st.f_frsize


def _is_sqlite_full(exc: DBAPIError) -> bool:
    # SQLITE_FULL (13): the disk, or max_page_count, is full.
    return getattr(exc.orig, "sqlite_errorcode", None) == 13 or "database or disk is full" in str(exc.orig)


class _Pending:
    """One caller's write waiting to be committed with others (see `Store._write_grouped`)."""

    __slots__ = ("body", "done", "error", "result")

    def __init__(self, body: Callable[[Connection], Any]) -> None:
        self.body = body
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class Store:
    """The persched tables behind one engine.

    Args:
        engine: From `persched._db.make_engine`; SQLite engines start write
            transactions with BEGIN IMMEDIATE and read ones (execution option
            ``persched_readonly``) with a deferred BEGIN.
        url: The masked URL, for error messages.
        retry_attempts: How often a transient failure is tried in all.
    """

    def __init__(
        self, engine: Engine, url: str, *, retry_attempts: int = RETRY_ATTEMPTS, namespace: str = DEFAULT_NAMESPACE
    ) -> None:
        self.engine = engine
        self.url = url
        # Issue 16: every read of jobs is limited to this namespace; writes by job_id check it.
        self.namespace = namespace
        self._mine = jobs.c.namespace == namespace
        self._retry_attempts = retry_attempts
        self._postgres = engine.dialect.name == "postgresql"
        self._mysql = engine.dialect.name in ("mysql", "mariadb")
        # History rows: a slot the one-run-per-slot index holds already is skipped, not an
        # error for the whole transaction (see claim_runs).
        self._insert_runs = (
            _my.insert_ignoring_conflicts(runs)
            if self._mysql
            else (postgresql.insert if self._postgres else sqlite.insert)(runs).on_conflict_do_nothing()
        )
        # Group commit of schedule/deschedule: see _write_grouped.
        self._group_cond = threading.Condition()
        self._group_queue: list[_Pending] = []
        self._group_leader = False
        # The write transaction open on this thread, which nested writes join (see dispatch).
        self._joined = threading.local()
        # SQLite has one writer at a time. Threads of this process queue for it
        # here, promptly, instead of in SQLite's busy handler, which sleeps up
        # to 100 ms between tries and let a stream of schedule() calls starve
        # the dispatcher's claims. Other processes still meet busy_timeout.
        self._sqlite_writer = threading.Lock() if engine.dialect.name == "sqlite" else None
        self._low_space = False  # after SQLITE_FULL: checkpoint after every write (see _reclaim_wal)
        # Change-counter values this store committed, so that the heartbeat's
        # log names only the changes made elsewhere (see changes_made_elsewhere).
        self._own_changes: set[int] = set()
        self._own_lock = threading.Lock()
        # Told of retries, errors and missed slots (`_observe`); the default does nothing.
        self.observer = Observer()

    def _job_ids(self) -> Select[tuple[str]]:
        """The ids of this namespace's jobs (any state), for the queries on persched_runs."""
        return select(jobs.c.job_id).where(self._mine)

    def _writer(self, readonly: bool) -> contextlib.AbstractContextManager[object]:
        if readonly or self._sqlite_writer is None:
            return contextlib.nullcontext()
        return self._sqlite_writer

    # -- transactions -------------------------------------------------------

    def _transaction(self, body: Callable[[Connection], T], *, readonly: bool, what: str) -> T:
        enclosing: Connection | None = getattr(self._joined, "conn", None)
        if enclosing is not None and not readonly:
            return body(enclosing)  # part of the enclosing write: see `dispatch`
        delay = RETRY_FIRST_DELAY
        reclaimed = False  # SQLite "disk full": the WAL was checkpointed and truncated once
        for attempt in range(1, self._retry_attempts + 1):
            committed: list[Callable[[], None]] = []
            try:
                with self._writer(readonly), self.engine.connect() as conn:
                    if readonly:
                        conn.execution_options(persched_readonly=True)
                    with conn.begin():
                        if readonly:
                            return body(conn)
                        self._joined.conn, self._joined.committed = conn, committed
                        conn.info.pop(_CHANGES_KEY, None)  # info outlives a checkout: start empty
                        try:
                            result = body(conn)
                        finally:
                            self._joined.conn = None
                    self._note_own_changes(conn.info.pop(_CHANGES_KEY, ()))  # committed
                for observe in committed:  # only now: a retried body must not count twice
                    observe()
                if self._low_space:
                    self._reclaim_wal(what)  # see _reclaim_wal: keep the WAL from eating the volume again
                return result
            except IntegrityError:
                raise  # callers decide; never retried blindly
            except DBAPIError as exc:
                sqlite_write = not readonly and self._sqlite_writer is not None
                if sqlite_write and not reclaimed and attempt < self._retry_attempts and _is_sqlite_full(exc):
                    reclaimed = True
                    if self._reclaim_wal(what):
                        continue  # the WAL's space is free again: try once more at once
                transient = _my.is_transient(exc) if self._mysql else _is_transient(exc, self._postgres)
                if not transient or attempt == self._retry_attempts:
                    notify(lambda: self.observer.store_error(what), "store error")
                    raise StoreError(self.url, f"{what} failed: {exc.orig}") from exc
                notify(lambda: self.observer.store_retry(what), "store retry")
                logger.warning(
                    "%s failed (attempt %d of %d), retrying: %s",
                    what,
                    attempt,
                    self._retry_attempts,
                    exc.orig,
                )
            except SQLAlchemyError as exc:
                notify(lambda: self.observer.store_error(what), "store error")
                raise StoreError(self.url, f"{what} failed: {exc}") from exc
            # Backoff between attempts of a failed transaction, on no lock.
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_DELAY)
        raise AssertionError("unreachable")  # pragma: no cover

    def _reclaim_wal(self, what: str) -> bool:
        """Checkpoint the WAL into the database and truncate it; True if that freed space.

        Why a full volume did not recover (issue 12): SQLite checkpoints only
        from the commit of a write that left 1000 pages (4 MB) in the WAL,
        and a checkpoint never shrinks the WAL file. Each small transaction
        appends whole pages, so on a volume with less free space than that
        the WAL takes all of it (about 700 KB of WAL for a 4 KB database on a
        1 MiB volume) and is never checkpointed; once a write fails with
        SQLITE_FULL, the database file cannot grow to take the WAL's pages
        either, and space freed later is eaten by the WAL again.

        So after SQLITE_FULL the store is in low-space mode: it tries
        ``wal_checkpoint(TRUNCATE)`` at once, and again after every write
        that commits (the first one after space was freed included), so the
        WAL holds little more than one transaction; it leaves the mode once
        the volume has `LOW_SPACE_EXIT_BYTES` free.
        """
        try:
            with self._writer(False), self.engine.connect() as conn:
                raw = conn.connection.dbapi_connection
                assert raw is not None
                # The raw connection: no BEGIN (a checkpoint cannot run in a transaction).
                path = next((row[2] for row in raw.execute("PRAGMA database_list") if row[1] == "main"), "")
                wal = f"{path}-wal" if path else ""
                before = os.path.getsize(wal) if wal and os.path.exists(wal) else 0
                busy = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                after = os.path.getsize(wal) if wal and os.path.exists(wal) else 0
                free = _free_bytes(path)
        except (SQLAlchemyError, sqlite3.Error, OSError) as exc:
            if not self._low_space:
                logger.warning(
                    "%s: the database or disk is full; checkpointing the WAL failed too, "
                    "tried again after each write that fits: %s",
                    what,
                    exc,
                )
            self._low_space = True
            return False
        if not self._low_space:
            logger.warning(
                "%s: the database or disk is full; checkpointed the WAL and truncated it from %d to %d bytes%s; "
                "checkpointing after every write until %d bytes are free",
                what,
                before,
                after,
                " (other connections kept it from finishing)" if busy else "",
                LOW_SPACE_EXIT_BYTES,
            )
        self._low_space = free is None or free < LOW_SPACE_EXIT_BYTES
        if not self._low_space:
            logger.warning("%s: %d bytes free again; the WAL is checkpointed as usual", what, free)
        return after < before

    def _note_own_changes(self, seqs: Collection[int]) -> None:
        if not seqs:
            return
        with self._own_lock:
            self._own_changes.update(seqs)
            if len(self._own_changes) > _OWN_CHANGES_KEPT:  # nobody reads them (no heartbeat): forget the oldest
                self._own_changes = set(sorted(self._own_changes)[-_OWN_CHANGES_KEPT // 2 :])

    def _after_commit(self, missed: Sequence[dict[str, Any]]) -> None:
        """Tell the observer about the "missed" records of the write open on this thread, once it commits."""
        for record in missed:
            if record["outcome"] == "missed":
                job_id, slots = record["job_id"], record["missed_count"]
                self._joined.committed.append(
                    lambda job_id=job_id, slots=slots: notify(
                        lambda: self.observer.slots_missed(job_id, slots), "missed slots"
                    )
                )

    def _write(self, body: Callable[[Connection], T], what: str) -> T:
        return self._transaction(body, readonly=False, what=what)

    def _read(self, body: Callable[[Connection], T], what: str) -> T:
        return self._transaction(body, readonly=True, what=what)

    def _write_grouped(self, body: Callable[[Connection], T], what: str) -> T:
        """Run `body` in a write transaction shared with the callers that arrive meanwhile.

        Group commit: the first caller leads and commits every body queued
        while it waited, in arrival order, in one transaction (one fsync);
        each caller returns only after the commit that holds its own write,
        so each still linearizes at that commit. If any body fails, whatever
        it raised, the group is rolled back and each body runs alone, so only
        the failing one fails (SPEC §1: one caller's bad input never fails
        another caller's valid call).
        """
        mine = _Pending(body)
        with self._group_cond:
            self._group_queue.append(mine)
            while self._group_leader and not mine.done:
                self._group_cond.wait()
            if not mine.done:
                self._group_leader = True
                group, self._group_queue = self._group_queue, []
        if not mine.done:
            try:
                self._commit_group(group, what)
            finally:
                with self._group_cond:
                    for pending in group:
                        if not pending.done:  # the leader was interrupted
                            pending.error, pending.done = StoreError(self.url, f"{what} was interrupted"), True
                    self._group_leader = False
                    self._group_cond.notify_all()
        if mine.error is not None:
            raise mine.error
        return mine.result  # type: ignore[no-any-return]  # body returns T

    def _commit_group(self, group: list[_Pending], what: str) -> None:
        if len(group) > 1:
            try:
                results = self._write(lambda conn: [pending.body(conn) for pending in group], what)
            except Exception:  # noqa: BLE001 - whatever one body raised, the others must not fail with it
                # One of them failed (a conflict, a value the driver refused, a
                # bug), or the store did: each alone below, so only that one fails.
                pass
            else:
                for pending, result in zip(group, results, strict=True):
                    pending.result, pending.done = result, True
                return
        for pending in group:
            try:
                pending.result = self._write(pending.body, what)
            except BaseException as exc:  # noqa: BLE001 - handed to its own caller
                pending.error = exc
            pending.done = True

    # -- jobs ---------------------------------------------------------------

    def upsert_job(
        self, definition: JobDefinition, now: Instant, *, declared: bool = False
    ) -> tuple[Job, str, Instant | None]:
        """Insert, replace or keep a job (of this store's namespace).

        Returns the job, 'created', 'replaced' or 'unchanged', and when the
        heap should try it (None: paused or finished). `declared` marks it as
        written by declare(); an unchanged job declared now is marked too.

        Raises:
            InvalidJobError: The id belongs to an active job of another namespace.
        """

        def body(conn: Connection) -> tuple[Job | str, str, Instant | None]:
            query = select(*_RAW_JOBS).where(jobs.c.job_id == definition.job_id)
            if self._postgres or self._mysql:
                query = query.with_for_update()
            found = conn.execute(query).first()
            row = None if found is None else read_row(_JOB_COLUMNS, found._mapping)
            if row is not None and row.state != _DESCHEDULED and row.namespace != self.namespace:
                return row.namespace, "foreign", None  # raised after the (group) commit: see _write_grouped
            if (
                row is not None
                and row.state != _DESCHEDULED
                and not row.problems  # a row edited into something unreadable is replaced: the way out
                and _definition_key(row) == definition.key()
            ):
                if declared and not row.declared:
                    marked = update(jobs).where(jobs.c.job_id == definition.job_id).values(declared=True)
                    row = read_row(_JOB_COLUMNS, _returning(conn, marked, *_RAW_JOBS)[0]._mapping)
                return _job(row), "unchanged", None  # FIELD-REPORTS #1: keep generation and grid
            policies = definition.policies
            # A generation is never reused, also after deschedule (no ABA); the row
            # is held (write lock, or FOR UPDATE), so the next one is known here.
            generation = 1 if row is None else _next_generation(conn, row)
            anchor, first = place_grid(policies, now, definition.start_in)
            plan = JobPlan.of(definition.job_id, generation, anchor, policies)
            columns = policies.columns()
            # A replacement keeps an operator's pause: a re-deploy must not resume a paused job.
            paused = row is not None and row.state != _DESCHEDULED and bool(row.paused)
            values: dict[str, Any] = {
                "target": definition.target,
                "args": definition.args_json,
                "kwargs": definition.kwargs_json,
                **columns,
                "first_run_at": to_datetime(anchor),
                "next_run_at": to_datetime(first),
                "generation": generation,
                "state": _FINISHED if plan.is_over(first) else _SCHEDULED,
                "paused": paused,
                "run_now_at": None,
                "running_for": None,
                "owner": None,
                "lease_until": None,
                "run_count": 0,
                "error_count": 0,
                "last_outcome": None,
                "updated_at": to_datetime(now),
                "change_seq": _bump_change_seq(conn),
                "namespace": self.namespace,
                "declared": declared,
            }
            write: Insert | Update
            if row is None:
                change = "created"
                write = jobs.insert().values(job_id=definition.job_id, created_at=to_datetime(now), **values)
            else:
                change = "replaced" if row.state != _DESCHEDULED else "created"
                if "created_at" in row.problems:  # the replacement is the fix the listing asked for
                    values["created_at"] = to_datetime(now)
                write = update(jobs).where(jobs.c.job_id == definition.job_id).values(**values)
            if isinstance(write, Update):
                stored_row = _returning(conn, write, *_RAW_JOBS)[0]
            elif conn.dialect.name in ("mysql", "mariadb"):
                conn.execute(write)
                stored_row = conn.execute(select(*_RAW_JOBS).where(jobs.c.job_id == definition.job_id)).one()
            else:
                stored_row = conn.execute(write.returning(*_RAW_JOBS)).one()
            stored = read_row(_JOB_COLUMNS, stored_row._mapping)
            due = None if stored.state != _SCHEDULED or paused else plan.due_at(first, None)
            return _job(stored), change, due

        for _ in range(3):
            try:
                job, change, due = self._write_grouped(body, "schedule")
            except IntegrityError:
                # Two first schedules of one id raced (PostgreSQL): the loser
                # now finds the winner's row and decides again.
                continue
            if isinstance(job, str):
                raise InvalidJobError(
                    "job_id",
                    f"{definition.job_id!r} is a job of namespace {job!r} (job ids are unique in a database); "
                    f"choose another id, e.g. {self.namespace + '.' + definition.job_id!r}",
                )
            return job, change, due
        raise StoreError(self.url, f"schedule of {definition.job_id!r} kept conflicting")

    def deschedule_job(self, job_id: str, now: Instant) -> bool:
        """Mark the job descheduled; True if an active job was changed."""
        return self.deschedule_job_generation(job_id, now) is not None

    def prune_declared(self, keep: Collection[str], now: Instant) -> list[tuple[str, int]]:
        """Deschedule this namespace's declared jobs whose id is not in `keep`; return (job_id, generation) of each."""

        def body(conn: Connection) -> list[tuple[str, int]]:
            gone = [jobs.c.state != _DESCHEDULED, jobs.c.declared.is_(True), self._mine]
            if keep:
                gone.append(jobs.c.job_id.not_in(list(keep)))
            if conn.execute(select(jobs.c.job_id).where(*gone).limit(1)).first() is None:
                return []  # nothing to prune: no change to announce
            rows = _returning(
                conn,
                update(jobs)
                .where(*gone)
                .values(
                    state=_DESCHEDULED,
                    owner=None,
                    lease_until=None,
                    updated_at=to_datetime(now),
                    change_seq=_bump_change_seq(conn),
                ),
                jobs.c.job_id,
                jobs.c.generation,
            )
            return [(row.job_id, int(row.generation)) for row in rows]

        return self._write(body, "prune declared jobs")

    def get_job(self, job_id: str) -> Job | None:
        """Return the active job `job_id`, or None."""

        def body(conn: Connection) -> Job | None:
            row = conn.execute(
                select(*_RAW_JOBS).where(jobs.c.job_id == job_id, jobs.c.state != _DESCHEDULED, self._mine)
            ).first()
            return None if row is None else _job(read_row(_JOB_COLUMNS, row._mapping))

        return self._read(body, "get_job")

    def list_jobs(self) -> list[Job]:
        """Return every active job, ordered by next run."""

        def body(conn: Connection) -> list[Job]:
            rows = conn.execute(
                select(*_RAW_JOBS)
                .where(jobs.c.state != _DESCHEDULED, self._mine)
                .order_by(jobs.c.next_run_at, jobs.c.job_id)
            )
            return [_job(read_row(_JOB_COLUMNS, row._mapping)) for row in rows]

        return self._read(body, "jobs")

    def change_seq(self) -> int:
        """The change counter: it moves whenever any job is scheduled, replaced or descheduled."""
        return self._read(lambda conn: int(conn.execute(select(changes.c.seq)).scalar_one()), "read change counter")

    def changes_since(self, seq: int) -> tuple[int, list[tuple[Instant, str, int]]]:
        """Return the counter now and ``(due_at, job_id, generation)`` of every
        scheduled (not paused) job changed after `seq`."""

        def body(conn: Connection) -> tuple[int, list[tuple[Instant, str, int]]]:
            now_seq = int(conn.execute(select(changes.c.seq)).scalar_one())
            rows = _stored(
                conn.execute(
                    select(*_RAW_JOBS).where(
                        jobs.c.change_seq > seq, jobs.c.state == _SCHEDULED, jobs.c.paused.is_(False), self._mine
                    )
                )
            )
            due = [(_due(row), row.job_id, row.generation) for row in rows]
            return now_seq, [(at, job_id, generation) for at, job_id, generation in due if at is not None]

        return self._read(body, "read changes")

    def changes_made_elsewhere(self, after: int, upto: int) -> list[ChangeNote]:
        """Describe the jobs changed in ``(after, upto]`` of the change counter
        by another store (another process, the command line), for the log."""
        with self._own_lock:
            own = {seq for seq in self._own_changes if seq <= upto}
            self._own_changes -= own

        def body(conn: Connection) -> list[ChangeNote]:
            query = select(*_RAW_JOBS).where(jobs.c.change_seq > after, jobs.c.change_seq <= upto)
            rows = _stored(conn.execute(query.order_by(jobs.c.change_seq)))
            return [
                ChangeNote(row.job_id, row.generation, _change_words(row)) for row in rows if row.change_seq not in own
            ]

        return self._read(body, "read changes")

    def load_scheduled(self, now: Instant) -> tuple[list[tuple[Instant, str, int]], list[Correction]]:
        """Return ``(due_at, job_id, generation)`` of every scheduled, not paused job,
        and the rows it corrected.

        A row whose next slot lies further ahead of `now` than its schedule allows,
        by more than `CLOCK_STEP_FLOOR`, was written while a wall clock was ahead
        (then corrected: SPEC §2 "Clock corrections across a restart") if its grid
        has moved past its first slot, or, still at its first slot, if it was last
        written at an instant ahead of `now` by more than the floor too: a first
        slot placed far ahead on purpose (start_in, start_at) is not a clock error,
        and skew between live instances (seconds) is left alone, so that no
        instant runs twice. Its grid slots up to there may have run
        already, so it moves on into a new generation (never a (generation,
        scheduled_for) twice) at its next slot from `now` (cron: the next fire
        after now), keeping its definition, pause and history. Paused rows are
        corrected too, so that a later resume() is not silenced.
        """

        def body(conn: Connection) -> tuple[list[tuple[Instant, str, int]], list[tuple[str, int, Instant]]]:
            # start() reads every job: raw driver values skip SQLAlchemy's
            # per-value result processing (a million rows in seconds, FR #17).
            rows = conn.exec_driver_sql(
                _LOAD_SCHEDULED_PG if self._postgres or self._mysql else _LOAD_SCHEDULED, (self.namespace,)
            )
            entries = []
            ahead = []
            next_fire: dict[tuple[str, str], Instant | None] = {}  # a cron's next fire after now, per expression

            def beyond_schedule(due: Instant, interval: float | None, cron: str | None, zone: str) -> bool:
                if interval is not None:  # more than one interval away
                    return due - now > _column_micros(interval) + CLOCK_STEP_FLOOR
                if cron is None:
                    return False
                if (cron, zone) not in next_fire:
                    next_fire[cron, zone] = _next_fire(cron, zone, now)
                fire = next_fire[cron, zone]  # past the expression's next fire after now
                return fire is not None and due > fire + CLOCK_STEP_FLOOR

            for at, job_id, generation, jitter, run_now_at, paused, interval, cron, zone, updated, first in rows:
                try:
                    if isinstance(generation, bool) or not isinstance(generation, int):
                        raise TypeError(f"generation {generation!r} is not a whole number")
                    due = _raw_instant(at)
                    # Cheap tests (the correction re-reads the row): further ahead than the schedule
                    # allows, and written by a clock ahead of this one (docstring).
                    written_ahead = at != first or _raw_instant(updated) - now > CLOCK_STEP_FLOOR
                    if written_ahead and beyond_schedule(due, interval, cron, zone):
                        ahead.append((job_id, generation, due))
                    if paused:
                        continue
                    if jitter:
                        due = Instant(due + _triggers.jitter_offset(job_id, generation, due, _column_micros(jitter)))
                    if run_now_at is not None:
                        due = min(due, _raw_instant(run_now_at))
                except Exception as exc:  # noqa: BLE001 - SPEC §2: one unreadable row never stops start()
                    # Not queued; jobs() and `persched jobs` show why (Job.unreadable).
                    logger.error("job %s is not scheduled: its stored row cannot be read: %s", job_id, exc)
                    continue
                entries.append((due, job_id, generation))
            return entries, ahead

        entries, ahead = self._read(body, "load jobs")
        if not ahead:
            return entries, []
        corrections = self._correct_ahead(ahead, now)
        moved = {c.job_id for c in corrections}
        entries = [e for e in entries if e[1] not in moved]
        entries += [(c.due, c.job_id, c.generation) for c in corrections if c.due is not None]
        return entries, corrections

    def _correct_ahead(self, candidates: Sequence[tuple[str, int, Instant]], now: Instant) -> list[Correction]:
        """Move rows that lie further ahead than their schedule allows into a new generation (see load_scheduled)."""

        def body(conn: Connection) -> list[Correction]:
            corrections: list[Correction] = []
            held = _rows_of(conn, {job_id for job_id, _, _ in candidates})
            for job_id, generation, was in candidates:
                was_dt = to_datetime(was)
                row = held.get(job_id)
                if row is None or row.generation != generation or row.state != _SCHEDULED or row.next_run_at != was_dt:
                    continue  # changed since it was read: whoever changed it placed it anew
                plan = _readable_plan(row, with_start=True)  # a correction never moves a job before start_at
                corrected = None if plan is None else plan.corrected(was, now)
                if plan is None or corrected is None:
                    continue
                moved = conn.execute(
                    update(jobs)
                    .where(
                        jobs.c.job_id == job_id,
                        jobs.c.generation == generation,
                        jobs.c.state == _SCHEDULED,
                        jobs.c.next_run_at == was_dt,  # PostgreSQL read no lock: anything since wins
                    )
                    .values(
                        next_run_at=to_datetime(corrected),
                        updated_at=to_datetime(now),
                        **_regrid(conn, row, plan, corrected),
                    )
                )
                if moved.rowcount != 1:
                    continue
                # The plan of the new generation: jitter hashes the generation.
                due = None if row.paused else _plan_of_row(row, generation + 1).due_at(corrected, _ts(row.run_now_at))
                corrections.append(Correction(job_id, generation + 1, was, corrected, due))
            return corrections

        return self._write(body, "correct rows ahead of the clock")

    def list_runs(self, job_id: str | None = None, limit: int = 100) -> list[Run]:
        """Return the newest `limit` runs (of `job_id`, or of every job), newest first."""

        def body(conn: Connection) -> list[Run]:
            query = select(*_RAW_RUNS).where(runs.c.job_id.in_(self._job_ids())).order_by(runs.c.run_id.desc())
            query = query.limit(limit)
            if job_id is not None:
                query = query.where(runs.c.job_id == job_id)
            return [_run(read_row(_RUN_COLUMNS, row._mapping)) for row in conn.execute(query)]

        return self._read(body, "runs")

    def runs_in_flight(self) -> list[Run]:
        """Return every run that has no outcome yet (of any instance), oldest first."""

        def body(conn: Connection) -> list[Run]:
            query = select(*_RAW_RUNS).where(runs.c.outcome.is_(None)).order_by(runs.c.run_id)
            return [_run(read_row(_RUN_COLUMNS, row._mapping)) for row in conn.execute(query)]

        return self._read(body, "runs in flight")

    # -- dispatch -------------------------------------------------------------

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
        (module docstring); RETURNING names the winners. Each won row's plan
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
            claimed_at = _read_time(now)
            lease_until = to_datetime(claimed_at + lease)
            won = _stored(
                self._claim_rows(conn, expected, instance_id, lease_until, claimed_at),
                _DISPATCH_COLUMNS,
            )
            # Per won row: its claim, plan and decision, and its run_now_at and next_run_at as read.
            claims: dict[tuple[str, int], tuple[Claim, JobPlan, ClaimPlan, Instant | None, Instant]] = {}
            skipped: dict[tuple[str, int], ClaimMiss] = {}
            reverts: list[dict[str, Any]] = []
            quarantined: list[dict[str, Any]] = []
            missed: list[dict[str, Any]] = []
            for row in won:
                key = (row.job_id, row.generation)
                plan = _plan_or_quarantine(row, claimed_at, instance_id, quarantined, missed)
                if plan is None:
                    # Never block the other claims: the job is paused, its history says why.
                    skipped[key] = ClaimMiss(_SCHEDULED, row.generation, None, None)
                    continue
                run_now_at, next_at = _ts(row.run_now_at), from_datetime(row.next_run_at)
                bound, taken_at = expected[key]
                decision = plan.claim(next_at, run_now_at, bound, claimed_at, taken_at)
                if decision.missed is not None:
                    missed.append(_missed_record(*key, decision.missed, claimed_at, instance_id))
                if decision.run_for is None:
                    # The policy drops the late slots (misfire "skip"): nothing runs now.
                    skipped[key] = _revert(reverts, plan, row.job_id, row.generation, decision.next_run_at, run_now_at)
                    continue
                claim = Claim(
                    row.job_id,
                    row.generation,
                    row.target,
                    row.args,
                    row.kwargs,
                    decision.run_for,
                    claimed_at,
                    0,  # run_id, filled in below
                    decision.run_now,
                    _raw_micros(row.max_runtime_seconds),
                )
                claims[key] = (claim, plan, decision, run_now_at, next_at)
            run_ids = self._record_starts([entry[0] for entry in claims.values()], lease_until, instance_id, conn)
            moves: list[dict[str, Any]] = []
            nexts: list[dict[str, Any]] = []
            for key, (claim, plan, decision, run_now_at, next_at) in list(claims.items()):
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
                    del claims[key]
                    skipped[key] = _revert(reverts, plan, *key, past, run_now_at)
                    continue
                claims[key] = (dataclasses.replace(claim, run_id=run_id), plan, decision, run_now_at, next_at)
                if decision.run_now or decision.run_for != next_at:  # the UPDATE set running_for to next_at
                    moves.append(
                        {
                            "b_job_id": claim.job_id,
                            "b_next": to_datetime(decision.next_run_at),
                            "b_running_for": to_datetime(claim.scheduled_for),
                            "b_run_now_at": None if decision.run_now or run_now_at is None else to_datetime(run_now_at),
                        }
                    )
                elif decision.next_run_at != next_at:  # one parameter per row, not three
                    nexts.append({"b_job_id": claim.job_id, "b_next": to_datetime(decision.next_run_at)})
            for statement, params in (
                (_CLAIM_MOVE, moves),
                (_CLAIM_NEXT, nexts),
                (_CLAIM_REVERT, reverts),
                (_CLAIM_QUARANTINE, quarantined),
                (self._insert_runs, missed),
            ):
                if params:
                    conn.execute(statement, params)
            self._after_commit(missed)
            lost = {key[0]: bound for key, (bound, _) in expected.items() if key not in claims and key not in skipped}
            misses = _misses(conn, lost) if lost else {}
            results: list[Claim | ClaimMiss] = []
            handed: set[tuple[str, int]] = set()
            for job_id, generation, _, _ in entries:
                key = (job_id, generation)
                if key in claims and key not in handed:
                    handed.add(key)
                    results.append(claims[key][0])
                elif key in claims:  # a repeated entry wins once; the repeat sees our own run
                    results.append(ClaimMiss(_RUNNING, generation, instance_id))
                elif key in skipped:
                    results.append(skipped.pop(key))
                else:
                    results.append(misses.get(job_id, ClaimMiss(None)))
            return results

        try:
            return self._write(body, "claim")
        except IntegrityError as exc:
            # The schema refused a write that the claim should never make: claim nothing, retry later.
            raise StoreError(self.url, f"claim failed: {exc.orig}") from exc

    def _claim_rows(
        self,
        conn: Connection,
        expected: dict[tuple[str, int], tuple[Instant, Instant]],
        instance_id: str,
        lease_until: datetime,
        claimed_at: Instant,
    ) -> Any:  # noqa: ANN401 - rows
        if not self._mysql:
            return conn.execute(self._claim_statement(expected, instance_id, lease_until, claimed_at))
        bound = case(
            {job_id: literal(to_datetime(at), UTCDateTime) for (job_id, _), (at, _) in expected.items()},
            value=jobs.c.job_id,
        )
        predicate = and_(
            jobs.c.job_id.in_({job_id for job_id, _ in expected}),
            jobs.c.state == _SCHEDULED,
            jobs.c.paused.is_(False),
            tuple_(jobs.c.job_id, jobs.c.generation).in_(list(expected)),
            or_(jobs.c.next_run_at <= bound, jobs.c.run_now_at <= bound),
        )
        values = {
            "state": _RUNNING,
            "owner": instance_id,
            "lease_until": lease_until,
            "updated_at": to_datetime(claimed_at),
            "running_for": jobs.c.next_run_at,
        }
        return _my.claim(conn, jobs, predicate, values, list(_RAW_DISPATCH))

    def _claim_statement(
        self,
        expected: dict[tuple[str, int], tuple[Instant, Instant]],
        instance_id: str,
        lease_until: datetime,
        claimed_at: Instant,
    ) -> Any:  # noqa: ANN401 - an UPDATE ... RETURNING construct
        """The one conditional UPDATE that decides every entry (module docstring)."""
        # Each row's own bound: its entry's expected slot (CASE keeps it one statement).
        bound = case(
            {job_id: literal(to_datetime(at), UTCDateTime) for (job_id, _), (at, _) in expected.items()},
            value=jobs.c.job_id,
        )
        predicate = and_(
            jobs.c.job_id.in_({job_id for job_id, _ in expected}),  # lets SQLite use the primary key
            jobs.c.state == _SCHEDULED,
            jobs.c.paused.is_(False),  # pause() linearizes against this predicate
            tuple_(jobs.c.job_id, jobs.c.generation).in_(list(expected)),
            or_(jobs.c.next_run_at <= bound, jobs.c.run_now_at <= bound),
        )
        claim = update(jobs).where(predicate)
        if self._postgres:
            # Instances never queue behind each other's row locks (SPEC-multi);
            # the UPDATE re-checks the predicate on the rows it locked.
            free = select(jobs.c.job_id).where(predicate).with_for_update(skip_locked=True)
            claim = claim.where(jobs.c.job_id.in_(free.scalar_subquery()))
        return claim.values(
            state=_RUNNING,
            owner=instance_id,
            lease_until=lease_until,
            updated_at=to_datetime(claimed_at),
            running_for=jobs.c.next_run_at,  # the usual case: the slot due runs (fixed below if not)
        ).returning(*_RAW_DISPATCH)

    def _record_starts(
        self, claims: Sequence[Claim], lease_until: datetime, instance_id: str, conn: Connection
    ) -> dict[str, int]:
        """Insert the history rows of won claims; return the run id of each job whose slot had no run yet.

        The insert does nothing for a slot the one-run-per-slot index already
        holds, so such a job is told apart without failing the others.
        """
        if not claims:
            return {}
        if self._mysql:
            ids = _my.insert_rows_returning_ids(
                conn,
                runs,
                [
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
                (),
            )
            return {c.job_id: i for c, i in zip(claims, ids, strict=True) if i is not None}
        inserted = conn.execute(
            self._insert_runs.returning(runs.c.job_id, runs.c.run_id),
            [
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

    def claim_run(
        self,
        job_id: str,
        generation: int,
        expected_at: Instant,
        now: Instant,
        instance_id: str,
        lease: Micros,
    ) -> Claim | ClaimMiss:
        """`claim_runs` for one entry, taken up at `now`."""
        return self.claim_runs([(job_id, generation, expected_at, now)], now, instance_id, lease)[0]

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
            mine = _stored(
                conn.execute(
                    select(*_RAW_DISPATCH).where(
                        jobs.c.job_id.in_({c.claim.job_id for c in completions}),
                        jobs.c.state == _RUNNING,
                        jobs.c.owner == instance_id,
                    )
                ),
                _DISPATCH_COLUMNS,
            )
            # A row of ours edited by hand while its run was in flight: settled alone below.
            unreadable = {(row.job_id, row.generation): row for row in mine if row.problems}
            owned = {
                (row.job_id, row.generation, from_datetime(row.running_for)): row
                for row in mine
                if not row.problems and row.running_for is not None
            }
            moves: list[dict[str, Any]] = []
            missed: list[dict[str, Any]] = []
            quarantined: list[dict[str, Any]] = []
            due: list[Instant | None] = []
            others = _rows_of(
                conn, {c.claim.job_id for c in completions} - {key[0] for key in owned} - {k[0] for k in unreadable}
            )
            for c in completions:
                row = owned.get((c.claim.job_id, c.claim.generation, c.claim.scheduled_for))
                broken = unreadable.pop((c.claim.job_id, c.claim.generation), None)
                if broken is not None:
                    _plan_or_quarantine(broken, c.finished_at, instance_id, quarantined, missed)
                    due.append(None)
                    continue
                if row is None:
                    # Not ours any more. If the job is scheduled in the same generation,
                    # this is a retry after a commit that did land: queue it again.
                    other = others.get(c.claim.job_id)
                    due.append(_due(other) if other is not None and other.generation == c.claim.generation else None)
                    continue
                plan = _plan_or_quarantine(row, c.finished_at, instance_id, quarantined, missed)
                if plan is None:
                    due.append(None)
                    continue
                next_at, dropped = plan.after_run(from_datetime(row.next_run_at), c.finished_at)
                if dropped is not None:
                    missed.append(_missed_record(row.job_id, row.generation, dropped, c.finished_at, instance_id))
                run_now_at = _ts(row.run_now_at)
                over = plan.is_over(next_at, run_now_at)
                moves.append(
                    {
                        "b_job_id": row.job_id,
                        "b_generation": row.generation,
                        "b_owner": instance_id,
                        "b_slot": row.running_for,
                        "b_state": _FINISHED if over else _SCHEDULED,
                        "b_next": to_datetime(next_at),
                        "b_finished": to_datetime(c.finished_at),
                        "b_outcome": c.outcome,
                        "b_errors": 1 if c.outcome == "error" else 0,
                    }
                )
                due.append(None if over or row.paused else plan.due_at(next_at, run_now_at))
            if moves:
                conn.execute(_FINISH_JOB, moves)
            if quarantined:
                conn.execute(_CLAIM_QUARANTINE, quarantined)
            if missed:
                conn.execute(self._insert_runs, missed)
                self._after_commit(missed)
            return due

        return self._write(body, "finish runs")

    def finish_run(
        self, claim: Claim, instance_id: str, finished_at: Instant, outcome: str, error: str | None
    ) -> Instant | None:
        """`finish_runs` for one completion."""
        return self.finish_runs([Completion(claim, outcome, error, finished_at)], instance_id)[0]

    # -- leases -----------------------------------------------------------------

    def renew_leases(self, instance_id: str, lease_until: Instant, run_ids: Collection[int]) -> None:
        """Push the lease of `instance_id`'s open runs `run_ids` (and their jobs) to `lease_until`.

        Only the runs the caller really has in flight: a run of this instance
        that no worker holds (a claim whose commit reply was lost, or a run
        left by an earlier process with the same instance_id) must lapse and
        be recovered.
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
                .where(jobs.c.owner == instance_id, jobs.c.state == _RUNNING, jobs.c.job_id.in_(in_flight))
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
                ).where(runs.c.outcome.is_(None), runs.c.job_id.in_(self._job_ids()))
            )
            return [OpenRun(*row) for row in rows]

        return self._read(body, "open runs")

    def recover_run(self, run: OpenRun, now: Instant | Callable[[], Instant]) -> Instant | bool | None:
        """Mark `run` lost if its lease is still the one observed; free its job.

        Returns False if nothing changed (the run was renewed, finished or
        recovered meanwhile); else when the job is due again if it went back
        to 'scheduled' (the caller queues it), or None if its job had been
        descheduled, replaced, paused or finished.
        """

        def body(conn: Connection) -> Instant | bool | None:
            recovered_at = _read_time(now)  # under the write lock: see claim_runs
            lease_match = (
                runs.c.lease_until.is_(None) if run.lease_until is None else runs.c.lease_until == run.lease_until
            )
            lost_rows = _returning(
                conn,
                update(runs)
                .where(runs.c.run_id == run.run_id, runs.c.outcome.is_(None), lease_match)
                .values(
                    outcome="lost",
                    finished_at=to_datetime(recovered_at),
                    lease_until=None,
                    error=f"instance {run.instance_id} stopped renewing its lease",
                ),
                runs.c.scheduled_for,
            )
            lost = lost_rows[0] if lost_rows else None
            if lost is None:
                return False  # renewed, finished or recovered meanwhile
            mine = and_(
                jobs.c.job_id == run.job_id,
                jobs.c.generation == run.generation,
                jobs.c.state == _RUNNING,
                jobs.c.owner == run.instance_id,
                jobs.c.running_for == lost.scheduled_for,
            )
            found = conn.execute(select(*_RAW_JOBS).where(mine)).first()
            if found is None:
                return None  # the job was descheduled or replaced: nothing to free
            row = read_row(_JOB_COLUMNS, found._mapping)
            quarantined: list[dict[str, Any]] = []
            records: list[dict[str, Any]] = []
            plan = _plan_or_quarantine(row, recovered_at, run.instance_id, quarantined, records)
            if plan is None:
                conn.execute(_CLAIM_QUARANTINE, quarantined)
                conn.execute(self._insert_runs, records)
                return None
            # SPEC §2: the lost slot is not run again; the job carries on. Never the lost slot
            # again, also on a clock behind the claimer's (and for a run
            # claimed before schema 0003, which kept its slot in next_run_at).
            next_at = plan.after_loss(from_datetime(row.next_run_at), from_datetime(lost.scheduled_for), recovered_at)
            run_now_at = _ts(row.run_now_at)
            over = plan.is_over(next_at, run_now_at)
            values: dict[str, Any] = {}
            # A run claimed by a process whose clock was ahead (and that died) left the grid ahead:
            # corrected as at start-up (see load_scheduled), into a new generation, which the
            # change pick-up then queues (hence no due time returned).
            corrected = None if over else _readable_plan(row, with_start=True)
            corrected_at = None if corrected is None else corrected.corrected(next_at, recovered_at)
            if corrected_at is not None and next_at - corrected_at > CLOCK_STEP_FLOOR:
                logger.warning(
                    "job %s: the lost run's next slot (%s) lay %s further ahead than its schedule allows, written "
                    "while a wall clock was ahead; it runs again at %s, as generation %d",
                    row.job_id,
                    to_datetime(next_at).isoformat(),
                    _triggers.describe_duration(next_at - corrected_at),
                    to_datetime(corrected_at).isoformat(),
                    row.generation + 1,
                )
                values = _regrid(conn, row, plan, corrected_at)
                next_at = corrected_at
            freed = conn.execute(
                # The read above took no lock (PostgreSQL): a deschedule or
                # replacement committed since must win, so ask again.
                update(jobs)
                .where(mine)
                .values(
                    state=_FINISHED if over else _SCHEDULED,
                    owner=None,
                    lease_until=None,
                    running_for=None,
                    next_run_at=to_datetime(next_at),
                    run_count=jobs.c.run_count + 1,
                    last_outcome="lost",
                    updated_at=to_datetime(recovered_at),
                    **values,
                )
            )
            if freed.rowcount != 1 or over or row.paused or values:
                return None
            return plan.due_at(next_at, run_now_at)

        return self._write(body, "recover run")

    # -- maintenance --------------------------------------------------------------

    def deschedule_job_generation(self, job_id: str, now: Instant) -> int | None:
        """Like `deschedule_job`; return the generation descheduled, None if no active job."""

        def body(conn: Connection) -> int | None:
            found = _returning(
                conn,
                update(jobs)
                .where(jobs.c.job_id == job_id, jobs.c.state != _DESCHEDULED, self._mine)
                .values(
                    state=_DESCHEDULED,
                    owner=None,
                    lease_until=None,
                    updated_at=to_datetime(now),
                    change_seq=_bump_change_seq(conn),
                ),
                *raw_columns([jobs.c.generation]),
            )
            row = found[0] if found else None
            return None if row is None else _generation_of(row.generation)

        return self._write_grouped(body, "deschedule")

    def pause_job(self, job_id: str, now: Instant) -> int | None:
        """Pause the job: no run of it starts after this commits. Return its
        generation, or None if there is no scheduled or running job to pause
        (unknown, descheduled, finished, or paused already)."""

        def body(conn: Connection) -> int | None:
            found = _returning(
                conn,
                update(jobs)
                .where(
                    jobs.c.job_id == job_id,
                    jobs.c.state.in_((_SCHEDULED, _RUNNING)),
                    jobs.c.paused.is_(False),
                    self._mine,
                )
                .values(paused=True, run_now_at=None, updated_at=to_datetime(now), change_seq=_bump_change_seq(conn)),
                *raw_columns([jobs.c.generation]),
            )
            row = found[0] if found else None
            return None if row is None else _generation_of(row.generation)

        return self._write_grouped(body, "pause")

    def resume_job(self, job_id: str, now: Instant) -> tuple[int, Instant | None] | None:
        """Resume a paused job on its grid from `now` (slots passed while paused do not run,
        nor, on a clock behind the one that ran it, a slot that ran already).

        Returns its generation and when it is due (None: running, or its
        window ended), or None if the job is not paused.
        """

        def body(conn: Connection) -> tuple[int, Instant | None] | None:
            query = select(*_RAW_JOBS).where(
                jobs.c.job_id == job_id, jobs.c.paused.is_(True), jobs.c.state != _DESCHEDULED, self._mine
            )
            found = conn.execute(query.with_for_update() if self._postgres or self._mysql else query).first()
            if found is None:
                return None
            row = _readable_or_refuse(read_row(_JOB_COLUMNS, found._mapping))
            plan = _plan(row)
            next_at = plan.resumed(now, from_datetime(row.next_run_at))
            state = row.state
            if state == _SCHEDULED and plan.is_over(next_at):  # pause() cleared any run-now
                state = _FINISHED
            conn.execute(
                update(jobs)
                .where(jobs.c.job_id == job_id, jobs.c.generation == row.generation)
                .values(
                    paused=False,
                    state=state,
                    next_run_at=to_datetime(next_at),
                    updated_at=to_datetime(now),
                    change_seq=_bump_change_seq(conn),
                )
            )
            return row.generation, plan.due_at(next_at, None) if state == _SCHEDULED else None

        return self._write_grouped(body, "resume")

    def request_run_now(self, job_id: str, now: Instant) -> tuple[str, int | None]:
        """Ask for one extra run of the job as soon as possible (off the grid).

        Returns ``(verdict, generation)``: "requested", "pending" (asked
        already, not started yet), "dropped" (running, and its overlap policy
        is "skip"), "paused", "finished" or "unknown".
        """

        def body(conn: Connection) -> tuple[str, int | None]:
            query = select(*_RAW_JOBS).where(jobs.c.job_id == job_id, jobs.c.state != _DESCHEDULED, self._mine)
            found = conn.execute(query.with_for_update() if self._postgres or self._mysql else query).first()
            if found is None:
                return "unknown", None
            row = _readable_or_refuse(read_row(_JOB_COLUMNS, found._mapping))
            verdict = (
                "paused"
                if row.paused
                else "finished"
                if row.state == _FINISHED
                else "pending"
                if row.run_now_at is not None
                else "dropped"
                if row.state == _RUNNING and row.overlap == "skip"
                else "requested"
            )
            if verdict == "requested":
                conn.execute(
                    update(jobs)
                    .where(jobs.c.job_id == job_id, jobs.c.generation == row.generation)
                    .values(run_now_at=to_datetime(now), updated_at=to_datetime(now), change_seq=_bump_change_seq(conn))
                )
            return verdict, row.generation

        return self._write_grouped(body, "run now")

    def mark_overran(self, run_id: int) -> bool:
        """Flag a run still in flight as having overrun its max_runtime_seconds."""

        def body(conn: Connection) -> bool:
            done = conn.execute(
                update(runs).where(runs.c.run_id == run_id, runs.c.outcome.is_(None)).values(overran=True)
            )
            return done.rowcount == 1

        return self._write(body, "mark overrun")

    def get_run(self, run_id: int) -> Run | None:
        """Return the run `run_id`, or None (never recorded, or pruned)."""

        def body(conn: Connection) -> Run | None:
            row = conn.execute(select(*_RAW_RUNS).where(runs.c.run_id == run_id)).first()
            return None if row is None else _run(read_row(_RUN_COLUMNS, row._mapping))

        return self._read(body, "get run")

    def job_known(self, job_id: str) -> bool:
        """True if `job_id` has a row (active or descheduled) or any recorded run."""

        def body(conn: Connection) -> bool:
            if conn.execute(select(jobs.c.job_id).where(jobs.c.job_id == job_id, self._mine)).first() is not None:
                return True
            known = select(runs.c.run_id).where(runs.c.job_id == job_id, runs.c.job_id.in_(self._job_ids()))
            return conn.execute(known.limit(1)).first() is not None

        return self._read(body, "job lookup")

    def prune_runs(
        self,
        now: Instant,
        *,
        keep_runs: int | None,
        keep_seconds: Micros | None,
        job_ids: set[str] | frozenset[str] = frozenset(),
        batch: int = 500,
        max_batches: int = 10,
    ) -> int:
        """Delete finished runs beyond the retention; return how many were deleted.

        Runs without an outcome (in flight) are never deleted. Each
        transaction is short (at most `batch` jobs, or `batch` rows by age),
        so a claim waits for at most one of them; at most `max_batches`
        transactions by age run per call (the rest waits for the next call).

        Args:
            now: The current instant.
            keep_runs: Keep the newest this many runs per job (None: no limit).
            keep_seconds: Delete runs that finished more than this long
                (microseconds) before `now` (None: no limit).
            job_ids: The jobs to prune by count (those that recorded runs
                since the last call; see `jobs_over_run_limit`).
            batch: Jobs, or rows by age, per transaction.
            max_batches: Transactions by age per call.
        """
        deleted = 0
        if keep_runs is not None:
            for chunk in iter_chunks(sorted(job_ids), batch):

                def by_count(conn: Connection, chunk: Sequence[str] = chunk) -> int:
                    count = 0
                    for job_id in chunk:
                        newest_dropped = (
                            select(runs.c.run_id)
                            .where(runs.c.job_id == job_id)
                            .order_by(runs.c.run_id.desc())
                            .limit(1)
                            .offset(keep_runs)
                            .scalar_subquery()
                        )
                        result = conn.execute(
                            runs.delete().where(
                                runs.c.job_id == job_id,
                                runs.c.outcome.is_not(None),
                                runs.c.run_id <= newest_dropped,
                            )
                        )
                        count += max(result.rowcount, 0)
                    return count

                deleted += self._write(by_count, "prune runs")
        if keep_seconds is not None:
            cutoff = to_datetime(now - keep_seconds)

            def by_age(conn: Connection) -> int:
                oldest = (
                    select(runs.c.run_id)
                    .where(runs.c.outcome.is_not(None), runs.c.finished_at < cutoff, runs.c.job_id.in_(self._job_ids()))
                    .order_by(runs.c.run_id)
                    .limit(batch)
                )
                return max(conn.execute(runs.delete().where(runs.c.run_id.in_(oldest))).rowcount, 0)

            for _ in range(max_batches):
                count = self._write(by_age, "prune runs")
                deleted += count
                if count < batch:
                    break
        return deleted

    def jobs_over_run_limit(self, keep_runs: int) -> set[str]:
        """Return the ids of the jobs that have more than `keep_runs` runs recorded."""

        def body(conn: Connection) -> set[str]:
            query = (
                select(runs.c.job_id)
                .where(runs.c.job_id.in_(self._job_ids()))
                .group_by(runs.c.job_id)
                .having(func.count() > keep_runs)
            )
            return {job_id for (job_id,) in conn.execute(query)}

        return self._read(body, "find runs to prune")


# What claims and completions read of a job: its plan's columns (see `_plan`)
# and where it stands; not the bookkeeping (each datetime costs a conversion per row).
_DISPATCH_COLUMNS: Final = tuple(
    jobs.c[name]
    for name in (
        "job_id",
        "generation",
        "target",
        "args",
        "kwargs",
        "first_run_at",
        "next_run_at",
        "running_for",
        "run_now_at",
        "paused",
        "interval_seconds",
        "cron",
        "timezone",
        "recurrence",
        "misfire",
        "max_catch_up",
        "grace_seconds",
        "overlap",
        "jitter_seconds",
        "end_at",
        "max_runtime_seconds",
    )
)

# The same, selected raw and read row by row (`_rows`), so one hand-edited row is settled alone.
_RAW_DISPATCH: Final = raw_columns(_DISPATCH_COLUMNS)
_JOB_COLUMNS, _RAW_JOBS = readable(jobs)
_RUN_COLUMNS, _RAW_RUNS = readable(runs)

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
# Pause a job whose stored row cannot be read (see `_plan_or_quarantine`).
_CLAIM_QUARANTINE: Final = (
    update(jobs)
    .where(jobs.c.job_id == bindparam("b_job_id"), jobs.c.generation == bindparam("b_generation"))
    .values(state=_SCHEDULED, paused=True, run_now_at=None, owner=None, lease_until=None, running_for=None)
)
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
        jobs.c.state == _RUNNING,
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


def _stored(result: Iterable[Row[Any]], columns: Sequence[Column[Any]] = _JOB_COLUMNS) -> list[StoredRow]:
    """Rows selected with `raw_columns`, read one by one (`_rows.read_row`)."""
    return [read_row(columns, row._mapping) for row in result]


def _generation_of(value: object) -> int:
    """A generation read raw; 0 for one edited into something else (only logged and reported)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _next_generation(conn: Connection, row: StoredRow) -> int:
    """The generation a replacement of `row` gets: never one used before (no ABA)."""
    if "generation" not in row.problems:
        return int(row.generation) + 1
    # The counter itself was edited away: go on after every generation its runs recorded.
    recorded = conn.execute(select(*raw_columns([runs.c.generation])).where(runs.c.job_id == row.job_id)).scalars()
    generation = 1 + max((_generation_of(g) for g in recorded), default=0)
    logger.warning(
        "job %s: its stored generation cannot be read (%s); the replacement is generation %d",
        row.job_id,
        row.problems["generation"],
        generation,
    )
    return generation


def _plan_or_quarantine(
    row: StoredRow, at: Instant, instance_id: str, quarantined: list[dict[str, Any]], records: list[dict[str, Any]]
) -> JobPlan | None:
    """`_plan(row)`; or None, with the job's pause and an "error" record queued, if its
    stored row or schedule cannot be read (SPEC §2: settled for that job alone)."""
    if row.problems:
        what, reason = "stored row", row.describe()
    else:
        try:
            return _plan(row)
        except (ValueError, TypeError, OverflowError) as exc:  # InvalidJobError is a ValueError
            what, reason = "stored schedule", str(exc)
    logger.error("job %s generation %d paused: its %s cannot be read: %s", row.job_id, row.generation, what, reason)
    quarantined.append({"b_job_id": row.job_id, "b_generation": row.generation})
    records.append(_unreadable_record(row, what, reason, at, instance_id))
    return None


def _readable_or_refuse(row: StoredRow) -> StoredRow:
    """`row`, or InvalidJobError naming what cannot be read (resume, run-now: the caller must fix it)."""
    if row.problems:
        raise InvalidJobError(
            "job_id",
            f"the stored row of {row.job_id!r} cannot be read ({row.describe()}); "
            "schedule it again with a valid definition",
        )
    return row


def _returning(conn: Connection, stmt: Update, *columns: Any) -> list[Any]:  # noqa: ANN401 - prototype
    if conn.dialect.name in ("mysql", "mariadb"):
        return _my.update_returning(conn, stmt, *columns)
    return list(conn.execute(stmt.returning(*columns)).all())


def _bump_change_seq(conn: Connection) -> int:
    """Increment the change counter; its row lock orders concurrent writers by commit."""
    bump = update(changes).where(changes.c.id == 1).values(seq=changes.c.seq + 1)
    seq = int(_returning(conn, bump, changes.c.seq)[0][0])
    conn.info.setdefault(_CHANGES_KEY, []).append(seq)  # the store notes it once committed
    return seq


def _change_words(row: StoredRow) -> str:
    """What a changed row now says, for the log: "descheduled", "paused", "run-now requested", "scheduled"."""
    if row.state == _DESCHEDULED:
        return "descheduled"
    if row.paused:
        return "paused"
    if row.run_now_at is not None:
        return "run-now requested"
    return "finished" if row.state == _FINISHED else "scheduled (new, replaced or resumed)"


def _ts(value: datetime | None) -> Instant | None:
    return None if value is None else from_datetime(value)


def _policies(row: StoredRow, *, with_start: bool = True) -> Policies:
    return Policies(
        interval=_raw_micros(row.interval_seconds),
        cron=row.cron,
        timezone=row.timezone,
        recurrence=row.recurrence,
        misfire=row.misfire,
        max_catch_up=row.max_catch_up,
        grace=_column_micros(row.grace_seconds),
        overlap=row.overlap,
        jitter=_column_micros(row.jitter_seconds),
        start_at=_ts(row.start_at) if with_start else None,
        end_at=_ts(row.end_at),
        max_runtime=_raw_micros(row.max_runtime_seconds),
    )


def _definition_key(row: StoredRow) -> tuple[Any, ...]:
    """The stored counterpart of `JobDefinition.key()`."""
    return (row.target, row.args, row.kwargs, _policies(row))


def _plan(row: StoredRow) -> JobPlan:
    """The policies of a persched_jobs row, as a plan (raises InvalidJobError if they cannot be read)."""
    return _plan_of_row(row, row.generation)


def _plan_of_row(row: StoredRow, generation: int, *, with_start: bool = False) -> JobPlan:
    # start_at placed the grid's anchor once; only a correction reads it again (so claims need not).
    policies = _policies(row, with_start=with_start)
    return _plan_of(row.job_id, generation, from_datetime(row.first_run_at), policies)


@functools.lru_cache(maxsize=65_536)
def _plan_of(job_id: str, generation: int, anchor: Instant, stored: Policies) -> JobPlan:
    # Checked like schedule()'s arguments, once per definition: a row written by
    # something else (a hand-made UPDATE) fails here, not deep inside a decision.
    # (start_at / end_at are instants already: the column type guarantees them.)
    columns = stored.columns()
    end_at = columns.pop("end_at")
    del columns["start_at"]
    if stored.one_shot:  # a one-shot job keeps its instant as its window's end
        columns["run_at"] = end_at
    validate_policies(columns.pop("interval_seconds"), **columns)
    return JobPlan.of(job_id, generation, anchor, stored)


def _regrid(conn: Connection, row: StoredRow, plan: JobPlan, corrected: Instant) -> dict[str, Any]:
    """Columns that move a row written by a clock that was ahead into a new generation at `corrected`
    (see load_scheduled): an interval grid is anchored anew there, its phase kept; the change is announced."""
    return {
        "generation": row.generation + 1,
        "first_run_at": row.first_run_at if plan.interval is None else to_datetime(corrected),
        "change_seq": _bump_change_seq(conn),
    }


def _next_fire(cron: str, zone: str, now: Instant) -> Instant | None:
    """The first fire of a stored cron expression after `now` (None if it cannot be read)."""
    try:
        return _triggers.cron_trigger(cron, zone).next_after(now)
    except InvalidJobError:
        return None  # reported on the job itself when it is claimed or listed


def _revert(
    reverts: list[dict[str, Any]],
    plan: JobPlan,
    job_id: str,
    generation: int,
    next_at: Instant,
    run_now_at: Instant | None,
) -> ClaimMiss:
    """A won row that runs nothing now: queue its return to waiting at `next_at`; the result for its entry."""
    over = plan.is_over(next_at, run_now_at)
    reverts.append({"b_job_id": job_id, "b_next": to_datetime(next_at), "b_state": _FINISHED if over else _SCHEDULED})
    return ClaimMiss(
        _FINISHED if over else _SCHEDULED, generation, None, None if over else plan.due_at(next_at, run_now_at)
    )


def _readable_plan(row: StoredRow, *, with_start: bool = False) -> JobPlan | None:
    """`_plan`, or None (logged) if the stored schedule cannot be read."""
    try:
        return _plan_of_row(row, row.generation, with_start=with_start)
    except InvalidJobError as exc:
        logger.error("job %s generation %d: its stored schedule cannot be read: %s", row.job_id, row.generation, exc)
        return None


def _due(row: StoredRow) -> Instant | None:
    """When a scheduled, not paused job is due (None for any other)."""
    if row.problems:
        logger.error("job %s is not scheduled: its stored row cannot be read: %s", row.job_id, row.describe())
        return None
    plan = None if row.paused or row.state != _SCHEDULED else _readable_plan(row)
    return None if plan is None else plan.due_at(from_datetime(row.next_run_at), _ts(row.run_now_at))


def _retry_at(row: StoredRow, bound: Instant) -> Instant | None:
    """When an entry that lost its claim on `row` should look again (see `ClaimMiss`)."""
    if row.problems:
        # Not by this entry: jobs() and `persched jobs` report the row until it is scheduled again.
        logger.error("job %s is not retried: its stored row cannot be read: %s", row.job_id, row.describe())
        return None
    plan = None if row.paused or row.state not in (_SCHEDULED, _RUNNING) else _readable_plan(row)
    if plan is None:
        return None
    next_at, run_now_at = from_datetime(row.next_run_at), _ts(row.run_now_at)
    if row.state == _SCHEDULED and (next_at > bound or run_now_at is not None):
        return plan.due_at(next_at, run_now_at)  # moved on (by another instance, or a skip)
    if row.state == _RUNNING:
        # Another instance runs it: look again at its next slot, in case that
        # instance dies (its completion is not seen here). A next slot that is
        # already due (the run outlasted it) is the owner's to run when its run
        # ends: look again one slot later, or every loser retries at once, in
        # a loop, until that completion commits (issue 12, item 7).
        return plan.due_at(next_at if next_at > bound else plan.slot_after(max(next_at, bound)), None)
    # Another instance is claiming this very slot (SKIP LOCKED passed it by).
    return plan.due_at(plan.slot_after(next_at), None)


def _rows_of(conn: Connection, job_ids: Collection[str]) -> dict[str, StoredRow]:
    if not job_ids:
        return {}
    return {row.job_id: row for row in _stored(conn.execute(select(*_RAW_JOBS).where(jobs.c.job_id.in_(job_ids))))}


def _misses(conn: Connection, bounds: dict[str, Instant]) -> dict[str, ClaimMiss]:
    return {
        job_id: ClaimMiss(row.state, row.generation, row.owner, _retry_at(row, bounds[job_id]))
        for job_id, row in _rows_of(conn, bounds).items()
    }


def _state(row: StoredRow) -> JobState:
    if row.paused and row.state == _SCHEDULED:
        return JobState.PAUSED
    return JobState(row.state)


def _describe(row: StoredRow) -> str:
    try:
        plan = _plan(row)
    except InvalidJobError as exc:
        return f"unreadable ({exc})"
    if plan.trigger is not None:
        return plan.trigger.describe()
    return f"every {_triggers.describe_duration(plan.interval or 0)} after each run ends"


def _json_value(row: StoredRow, column: str, kind: type, problems: dict[str, str]) -> Any:  # noqa: ANN401 - JSON
    if column in row.problems:
        return kind()
    try:
        value = json.loads(getattr(row, column))
    except (ValueError, RecursionError) as exc:
        problems[column] = f"is not JSON: {exc}"
        return kind()
    if not isinstance(value, kind) or (isinstance(value, dict) and not all(isinstance(k, str) for k in value)):
        problems[column] = f"is not a JSON {'array' if kind is list else 'object'}"
        return kind()
    return value


def _job(row: StoredRow) -> Job:
    """The `Job` of a row; a row that cannot be read is still listed, with `unreadable` saying why (SPEC §2)."""
    problems = dict(row.problems)
    args = _json_value(row, "args", list, problems)
    kwargs = _json_value(row, "kwargs", dict, problems)
    try:
        state = _state(row)
    except ValueError:
        problems["state"] = f"{row.state!r} is not a job state"
        state = JobState.PAUSED  # a state the claims do not know: the job does not run
    schedule = "unreadable" if problems else _describe(row)
    return Job(
        job_id=row.job_id,
        target=row.target,
        args=tuple(args),
        kwargs=kwargs,
        interval_seconds=row.interval_seconds,
        next_run_at=row.next_run_at,
        generation=row.generation,
        state=state,
        created_at=row.created_at,
        updated_at=row.updated_at,
        run_count=row.run_count,
        error_count=row.error_count,
        last_outcome=row.last_outcome,
        owner=row.owner,
        lease_until=row.lease_until,
        cron=row.cron,
        timezone=row.timezone,
        recurrence=row.recurrence,
        misfire=row.misfire,
        max_catch_up=row.max_catch_up,
        grace_seconds=row.grace_seconds,
        overlap=row.overlap,
        jitter_seconds=row.jitter_seconds,
        start_at=row.start_at,
        end_at=row.end_at,
        max_runtime_seconds=row.max_runtime_seconds,
        paused=bool(row.paused),
        run_now_requested=row.run_now_at is not None,
        schedule=schedule,
        unreadable="; ".join(f"{column}: {reason}" for column, reason in problems.items()) or None,
        run_at=row.end_at if row.interval_seconds is None and row.cron is None else None,
        namespace=row.namespace,
        declared=bool(row.declared),
    )


_OUTCOMES: Final = frozenset(("ok", "error", "lost", "missed"))


def _run(row: StoredRow) -> Run:
    """The `Run` of a row; one that cannot be read is still listed, with `unreadable` saying why."""
    problems = dict(row.problems)
    outcome = row.outcome
    if outcome is not None and outcome not in _OUTCOMES:
        problems["outcome"] = f"{outcome!r} is not an outcome"
        outcome = "error"
    return Run(
        job_id=row.job_id,
        generation=row.generation,
        scheduled_for=row.scheduled_for,
        started_at=row.started_at,
        finished_at=row.finished_at,
        outcome=outcome,
        error=row.error,
        instance_id=row.instance_id,
        run_id=row.run_id,
        missed_until=row.missed_until,
        missed_count=row.missed_count,
        overran=bool(row.overran),
        run_now=bool(row.run_now),
        unreadable="; ".join(f"{column}: {reason}" for column, reason in problems.items()) or None,
    )


def _unreadable_record(row: StoredRow, what: str, reason: str, at: Instant, instance_id: str) -> dict[str, Any]:
    """A persched_runs row (outcome "error") saying why a job with an unreadable schedule or row was paused."""
    return {
        "job_id": row.job_id,
        "generation": row.generation,
        "scheduled_for": to_datetime(at) if "next_run_at" in row.problems else row.next_run_at,
        "started_at": to_datetime(at),
        "finished_at": to_datetime(at),
        "outcome": "error",
        "error": (
            f"the job's {what} cannot be read ({reason}); it was paused: "
            "schedule it again with a valid definition, then resume it"
        ),
        "instance_id": instance_id,
        "lease_until": None,
        "run_now": True,  # off the grid (not under the one-run-per-slot index): a resume may repeat it
    }


def _missed_record(job_id: str, generation: int, missed: Missed, at: Instant, instance_id: str) -> dict[str, Any]:
    """A persched_runs row (outcome "missed") standing for the slots `missed` names."""
    return {
        "job_id": job_id,
        "generation": generation,
        "scheduled_for": to_datetime(missed.first),
        "missed_until": to_datetime(missed.last),
        "missed_count": missed.count,
        "started_at": to_datetime(at),
        "finished_at": to_datetime(at),
        "outcome": "missed",
        "instance_id": instance_id,
        "lease_until": None,
        "run_now": False,
    }


def iter_chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    """Yield `items` in slices of at most `size`."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def bound_error_text(text: str, limit: int = MAX_ERROR_TEXT) -> str:
    """Shorten `text` to at most `limit` characters, keeping its head and its tail.

    A traceback's last line names the exception type and message, the part
    an operator needs most, so the middle is cut rather than the end.
    """
    if len(text) <= limit:
        return text
    marker = "\n... [{} characters cut] ...\n"
    room = limit - len(marker.format(len(text)))
    head = room // 3
    tail = room - head
    return text[:head] + marker.format(len(text) - head - tail) + text[len(text) - tail :]
