"""Transactions: retries, joined writes, the SQLite writer queue and group commit.

The only module of the store with threads in mind; the parts hand one
transaction body each to `Transactions._write`, `_read` or `_write_grouped`.
Every thread of a scheduler shares one store; each transaction runs on its
caller's thread, on a pooled connection of its own, never shared.

Locks, in this order (never the reverse):

- ``_sqlite_writer``: this process's queue for SQLite's one writer, taken
  before a connection is checked out and released after it is returned;
- ``_group_cond``: the group commit's queue and leader flag. Held for no I/O:
  the leader takes it only to take the queue and to hand results back.

``_own_lock`` guards only ``_own_changes`` and is held for no I/O. No lock is
held while user code or a caller's callback runs.

Linearization: each method at its commit. A joined write (``_joined``, per
thread) commits with the write it joined; a grouped call returns only after
the commit that holds its body. Observers hear of a transaction only after it
commits, so a retried body never counts twice.

Why: docs/explanation/store.md, "Transactions and threads".
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

from sqlalchemy import exists
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from .._model.models import DEFAULT_NAMESPACE
from .._model.triggers import JitterReach
from ..errors import StoreError
from .dialects import Sql, dialect_for
from .fork_gate import FORK_GATE
from .observer import Observer, notify
from .schema import changes, jobs, runs

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from sqlalchemy import ColumnElement, Connection, Engine, Exists

    from .._model.instant import Instant

logger = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_ATTEMPTS: Final = 6
RETRY_FIRST_DELAY: Final = 0.02  # seconds, doubled per attempt
RETRY_MAX_DELAY: Final = 1.0  # seconds
LOW_SPACE_EXIT_BYTES: Final = 64 << 20  # free bytes that end low-space mode (see Store._reclaim_wal)
_CHANGES_KEY: Final = "persched_change_seqs"  # Connection.info: [the change-counter value of this transaction]
_OWN_CHANGES_KEPT: Final = 10_000  # own change values remembered for the heartbeat's log
_GROUP_TAKES: Final = 4  # takes of the write queue by one group commit (`_commit_group`)
_BUMP: Final = Sql("seq = seq + 1")  # the change counter's row, id 1 (`_bump_change_seq`)


class RefusedWrite(StoreError):
    """The database refused a value or a row of a write (`Dialect.refuses_row`): it would fail again.

    A write of many rows then writes them apart, so that one row costs only its own job.
    `detail` is the database's own message.
    """

    def __init__(self, url: str, reason: str, detail: str) -> None:
        super().__init__(url, reason)
        self.detail = detail


#: What a write of many rows catches to write them apart (`_transaction` leaves IntegrityError unwrapped).
REFUSED: Final = (RefusedWrite, IntegrityError)


def refusal_of(exc: RefusedWrite | IntegrityError) -> str:
    """The database's message for a refused write."""
    return exc.detail if isinstance(exc, RefusedWrite) else str(exc.orig)


def read_time(now: Instant | Callable[[], Instant]) -> Instant:
    return now() if callable(now) else now


def _free_bytes(path: str) -> int | None:
    """Bytes free for us on the volume of `path` (None: unknown)."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)) if path else ".")
    except (OSError, AttributeError):  # no statvfs on Windows
        return None
    return st.f_bavail * st.f_frsize


def _nothing(job_id: str, generation: int) -> None:
    """The default `Transactions.failures_paused`."""


def _is_sqlite_full(exc: DBAPIError) -> bool:
    # SQLITE_FULL (13): the disk, or max_page_count, is full.
    return getattr(exc.orig, "sqlite_errorcode", None) == 13 or "database or disk is full" in str(exc.orig)


class _Pending:
    """One caller's body waiting for a group commit (`Transactions._write_grouped`)."""

    __slots__ = ("body", "done", "error", "result")

    def __init__(self, body: Callable[[Connection], Any]) -> None:
        self.body = body
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class Transactions:
    """The transaction machinery of a `Store` over one namespace; `url` is masked, for messages."""

    def __init__(
        self, engine: Engine, url: str, *, retry_attempts: int = RETRY_ATTEMPTS, namespace: str = DEFAULT_NAMESPACE
    ) -> None:
        self.engine = engine
        self.url = url
        # Every read of jobs is limited to this namespace; writes by job_id check it.
        self.namespace = namespace
        self._mine = jobs.c.namespace == namespace
        self._retry_attempts = retry_attempts
        self.dialect = dialect_for(engine)
        # A slot the one-run-per-slot index holds already is skipped, not an error for the transaction.
        self._insert_runs = self.dialect.insert_ignoring_conflicts(runs)
        self._group_cond = threading.Condition()
        self._group_queue: list[_Pending] = []
        self._group_leader = False
        # The write transaction open on this thread, which nested writes join (see dispatch).
        self._joined = threading.local()
        self._sqlite_writer = threading.Lock() if self.dialect.serialise_local_writers else None
        # No fork while this process is inside SQLite (persched._store.fork_gate).
        self._fork_share = FORK_GATE.share if self.dialect.in_process else contextlib.nullcontext
        self._low_space = False  # after SQLITE_FULL: checkpoint after every write (see _reclaim_wal)
        # Change-counter values this store committed: the pick-up reads nothing for them (`only_own_changes`).
        self._own_changes: set[int] = set()
        self._own_lock = threading.Lock()
        self.observer = Observer()
        # Told (job_id, generation) of each job its failures paused, after the commit that paused it.
        self.failures_paused: Callable[[str, int], object] = _nothing
        # The largest jitter of the due times this store handed out (the bounded heap reads it).
        self.jitter_reach = JitterReach()

    def _in_namespace(self, job_id: ColumnElement[str]) -> Exists:
        """`job_id` (a persched_runs column) is one of this namespace's jobs (any state).

        Correlated, so each run's job is looked up by primary key; an ``IN (SELECT ...)``
        made SQLite walk every job of the namespace for each query.
        """
        return exists().where(jobs.c.job_id == job_id, self._mine)

    def _writer(self, readonly: bool) -> contextlib.AbstractContextManager[object]:
        if readonly or self._sqlite_writer is None:
            return contextlib.nullcontext()
        return self._sqlite_writer

    def _transaction(self, body: Callable[[Connection], T], *, readonly: bool, what: str) -> T:
        enclosing: Connection | None = getattr(self._joined, "conn", None)
        if enclosing is not None and not readonly:
            return body(enclosing)  # part of the enclosing write: see `dispatch`
        delay = RETRY_FIRST_DELAY
        reclaimed = False  # SQLITE_FULL: the WAL was checkpointed once
        for attempt in range(1, self._retry_attempts + 1):
            committed: list[Callable[[], None]] = []
            try:
                with self._writer(readonly), self._fork_share(), self.engine.connect() as conn:
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
                    self._reclaim_wal(what)
                return result
            except IntegrityError:
                raise  # callers decide; never retried blindly
            except DBAPIError as exc:
                sqlite_write = not readonly and self._sqlite_writer is not None
                if sqlite_write and not reclaimed and attempt < self._retry_attempts and _is_sqlite_full(exc):
                    reclaimed = True
                    if self._reclaim_wal(what):
                        continue  # the WAL's space is free again: try once more at once
                if not self.dialect.is_transient(exc) or attempt == self._retry_attempts:
                    notify(lambda: self.observer.store_error(what), "store error")
                    if not readonly and self.dialect.refuses_row(exc):  # its other rows may not be refused
                        raise RefusedWrite(self.url, f"{what} failed: {exc.orig}", str(exc.orig)) from exc
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
        """Checkpoint the WAL and truncate it; True if that freed space.

        After SQLITE_FULL the store stays in low-space mode, checkpointing after
        every write, until `LOW_SPACE_EXIT_BYTES` are free (docs/explanation/store.md,
        "A full disk on SQLite").
        """
        try:
            with self._writer(False), self._fork_share(), self.engine.connect() as conn:
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
            if len(self._own_changes) > _OWN_CHANGES_KEPT:  # no heartbeat reads them: forget the oldest
                self._own_changes = set(sorted(self._own_changes)[-_OWN_CHANGES_KEPT // 2 :])

    def only_own_changes(self, after: int, upto: int) -> bool:
        """Whether every change-counter value in ``(after, upto]`` is one this store committed; if so, forget them.

        The pick-up then reads nothing: each call that made one announced its change itself.
        """
        values = range(after + 1, upto + 1)
        with self._own_lock:
            if not values or len(values) > len(self._own_changes) or any(s not in self._own_changes for s in values):
                return False
            self._own_changes.difference_update(values)
        return True

    def _take_own_changes(self, upto: int) -> set[int]:
        """The change-counter values up to `upto` that this store committed, forgotten here."""
        with self._own_lock:
            own = {seq for seq in self._own_changes if seq <= upto}
            self._own_changes -= own
        return own

    def _after_commit(self, missed: Sequence[dict[str, Any]]) -> None:
        """Tell the observer of the "missed" records of this thread's open write, once it commits."""
        for record in missed:
            if record["outcome"] == "missed":
                job_id, slots = record["job_id"], record["missed_count"]
                self._joined.committed.append(
                    lambda job_id=job_id, slots=slots: notify(
                        lambda: self.observer.slots_missed(job_id, slots), "missed slots"
                    )
                )

    def _on_commit(self, call: Callable[[], None]) -> None:
        """Run `call` once the write open on this thread commits (never for an attempt rolled back)."""
        self._joined.committed.append(call)

    def _in_write(self) -> bool:
        """Whether a write transaction is open on this thread (a nested write joins it: see dispatch)."""
        return getattr(self._joined, "conn", None) is not None

    def _raise_refusal(self, what: str, exc: RefusedWrite | IntegrityError) -> NoReturn:
        """Raise `exc` as a `RefusedWrite`."""
        if isinstance(exc, IntegrityError):
            raise RefusedWrite(self.url, f"{what} failed: {exc.orig}", str(exc.orig)) from exc
        raise exc

    def _write_park(self, body: Callable[[Connection], T]) -> T:
        """`_write` of the fallback that parks one refused row; its own refusal raises `RefusedWrite`."""
        try:
            return self._write(body, "park a job")
        except IntegrityError as exc:
            self._raise_refusal("park a job", exc)

    def _write(self, body: Callable[[Connection], T], what: str) -> T:
        return self._transaction(body, readonly=False, what=what)

    def _read(self, body: Callable[[Connection], T], what: str) -> T:
        return self._transaction(body, readonly=True, what=what)

    def _write_grouped(self, body: Callable[[Connection], T], what: str) -> T:
        """Run `body` in a write transaction shared with the callers that arrive meanwhile (group commit).

        The first caller leads: it commits the bodies queued, in arrival order, in one
        transaction. Each caller returns after the commit that holds its body. If any
        body fails, each runs alone, so only the failing one fails.
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
        def together(conn: Connection) -> list[Any]:
            # Bodies queued while this transaction began, or while the ones before them ran, join it,
            # for `_GROUP_TAKES` takes at most: callers that keep coming must not hold SQLite's one
            # writer open for as long as they come.
            results: list[Any] = []
            for _ in range(_GROUP_TAKES):
                with self._group_cond:
                    group.extend(self._group_queue)
                    self._group_queue = []
                if len(results) == len(group):
                    break
                results.extend(pending.body(conn) for pending in group[len(results) :])
            return results

        try:
            results = self._write(together, what)
        except Exception as exc:  # noqa: BLE001 - whatever one body raised, the others must not fail with it
            if len(group) == 1:
                group[0].error, group[0].done = exc, True
                return
            # One body failed, or the store did: each alone below, so only that one fails.
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

    def _bump_change_seq(self, conn: Connection) -> int:
        """The change counter's value of this transaction, incremented by its first write that asks.

        Its row lock orders writers by commit; every change of one transaction shares one value.
        """
        mine: list[int] | None = conn.info.get(_CHANGES_KEY)
        if mine:
            return mine[0]
        row = self.dialect.update_key_sql(conn, changes, _BUMP, 1, "seq")  # driver SQL: see claims.py
        if row is None:
            raise StoreError(self.url, "the change counter's row (persched_changes.id = 1) is missing")
        seq = int(row.seq)
        self.dialect.announce_change(conn)  # once per transaction: the listeners then read the counter
        conn.info[_CHANGES_KEY] = [seq]  # noted as our own once committed
        return seq
