"""SQLite: one writer at a time, so every write starts with BEGIN IMMEDIATE (`open_sqlite`).

A write holds the write lock from its first statement, so a plain SELECT
decides a claim (`SQLiteDialect.lock_claimable`) and two read-then-write
transactions never deadlock upgrading their locks; reads (`READONLY`) get a
deferred BEGIN. pysqlite's own transaction handling is off and an engine
``begin`` listener owns the BEGIN; PRAGMAs are set per connection. Timestamps
are naive UTC text, which sorts like the instants it names. ``PRAGMA
data_version`` sees other connections' commits from shared memory alone.
Why: docs/explanation/store.md, "SQLite".
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sqlite3
import time
import urllib.parse
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, cast

from sqlalchemy import create_engine, event
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.sql.operators import custom_op

from ... import _realtime
from ..._model.instant import Instant, from_datetime, from_naive_utc
from ...errors import StoreError
from ..urls import mask
from . import LOCK_WAIT, READONLY, Dialect, LockWaitExpired, value_rows

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy import ColumnElement, Connection, Engine, Insert, Row, Select, Table
    from sqlalchemy.engine import URL
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.pool import ConnectionPoolEntry

    from . import DriverCursor, Sql

logger = logging.getLogger(__name__)

_NAIVE_EPOCH: Final = datetime(1970, 1, 1)


# UPDATE … FROM, for `SQLiteDialect.update_rows`.
_UPDATE_FROM_SINCE: Final = (3, 33, 0)

_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6


def _variable_limit() -> int:
    """The SQLite library's limit of parameters per statement (SQLITE_MAX_VARIABLE_NUMBER)."""
    getlimit = getattr(sqlite3.Connection, "getlimit", None)  # Python 3.11+, with the constant
    if getlimit is None:
        return 999  # the smallest default SQLite ever had
    with contextlib.closing(sqlite3.connect(":memory:")) as conn:
        return int(getlimit(conn, sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))  # type: ignore[attr-defined]  # 3.11+


class SQLiteDialect(Dialect):
    name: ClassVar[str] = "sqlite"
    max_parameters: ClassVar[int] = _variable_limit()
    # No server: the SQLite library reads this machine's clock, which every instance on one file shares.
    clock_sql: ClassVar[str] = "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"
    change_signal: ClassVar[Literal["notify", "data_version"] | None] = "data_version"
    serialise_local_writers: ClassVar[bool] = True
    in_process: ClassVar[bool] = True

    def is_transient(self, exc: DBAPIError) -> bool:
        if exc.connection_invalidated:
            return True
        code = getattr(exc.orig, "sqlite_errorcode", None)  # Python 3.11+
        if isinstance(code, int):
            # SQLITE_BUSY or SQLITE_LOCKED, extended codes too; not a message that names "locked" things.
            return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
        text = str(exc.orig).lower()
        return "locked" in text or "busy" in text

    def locking_sql(self, query: str) -> str:
        return query  # BEGIN IMMEDIATE holds the write lock already (SQLite has no FOR UPDATE)

    def lock_claimable(self, cur: DriverCursor, table: Table, predicate: Sql, columns: str) -> list[tuple[Any, ...]]:
        sql = f"SELECT {columns} FROM {table.name} WHERE {predicate.text}"  # noqa: S608 - ours; BEGIN IMMEDIATE locks
        return cur.execute(sql, predicate.params).fetchall()

    def lock_first(self, conn: Connection, query: Select[Any], limit: int) -> list[Row[Any]]:
        return list(conn.execute(query.limit(limit)))  # one writer at a time: BEGIN IMMEDIATE holds the lock

    def unindexed(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        # Unary + keeps a term off an index; else the claim would scan the (state, next_run_at) index.
        return UnaryExpression(column, operator=custom_op("+"), type_=column.type)

    def unindexed_sql(self, column: str) -> str:
        return f"+{column}"

    def row_values(self, count: int, width: int) -> str:
        return f"(VALUES {value_rows(count, width)})"  # SQLite takes a list of rows only so

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return insert(table).on_conflict_do_nothing()

    def update_rows(
        self, cur: DriverCursor, table: Table, names: Sequence[str], key: Sequence[str], rows: list[tuple[Any, ...]]
    ) -> int:
        """`Dialect.update_rows` as ``UPDATE … FROM (VALUES …)`` (SQLite 3.33+): one statement stepped, not one a row.

        The keys are distinct (a claim's won rows).
        """
        if sqlite3.sqlite_version_info < _UPDATE_FROM_SINCE or not rows:
            return super().update_rows(cur, table, names, key, rows)
        width = len(names) + len(key)
        sets = ", ".join(f"{name} = v.column{i}" for i, name in enumerate(names, 1))
        where = " AND ".join(f"{table.name}.{name} = v.column{i}" for i, name in enumerate(key, len(names) + 1))
        written = 0
        per_statement = self.max_parameters // width
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            values = f"(VALUES {value_rows(len(chunk), width)}) AS v"
            sql = f"UPDATE {table.name} SET {sets} FROM {values} WHERE {where}"  # noqa: S608 - ours
            written += cur.execute(sql, tuple(value for row in chunk for value in row)).rowcount
        return written

    def raw_instant(self, value: object) -> Instant:
        if isinstance(value, datetime):
            return from_datetime(value)
        if not isinstance(value, str):
            raise TypeError(f"{value!r} is not a timestamp")
        parsed = datetime.fromisoformat(value)
        if parsed.tzinfo is not None:  # SQL compares these as text: an offset sorts at the wrong instant
            raise ValueError(f"{value!r} has a UTC offset; write naive UTC 'YYYY-MM-DD HH:MM:SS.ffffff'")
        return from_naive_utc(parsed)

    def bind_instant(self, at: Instant) -> object:
        # SQLAlchemy's fixed-width text, microseconds always written, so that text order is time order.
        return (_NAIVE_EPOCH + timedelta(microseconds=at)).isoformat(" ", "microseconds")

    def migration_lock(self, conn: Connection, wait_seconds: float) -> None:
        pass  # its BEGIN IMMEDIATE (`_begin_for_long`) holds the write lock already

    def data_version(self, raw: DBAPIConnection) -> int:
        cursor = raw.cursor()
        try:
            cursor.execute("PRAGMA data_version")
            row = cursor.fetchone()
        finally:
            cursor.close()
        return int(row[0])  # type: ignore[index]  # a PRAGMA with a value always returns its row


DIALECT: Final = SQLiteDialect()


# --- the engine ---------------------------------------------------------------

_FILE_MODE: Final = 0o600  # owner only
BUSY_SLICE_MS: Final = 5  # SQLite's own busy wait per statement (its first tries: 1, 2 ms)
BEGIN_FIRST_DELAY: Final = 0.0005  # seconds between BEGIN IMMEDIATE tries, doubled up to
BEGIN_MAX_DELAY: Final = 0.004  # seconds: well under one 0.1 s slot, and cheap to retry
# The page size of a file persched creates: a run changes a few rows and index entries, each on a
# page of its own, and the WAL takes a whole page for each. Fixed once the file is in WAL mode.
PAGE_SIZE: Final = 1024
# WAL bytes after which a commit checkpoints: a checkpoint writes each page back once, so a longer
# cycle carries more of a hot page's changes in one write back.
CHECKPOINT_BYTES: Final = 64 << 20
# Bytes a WAL file keeps once a checkpoint reset it (else it keeps its largest size ever); above
# CHECKPOINT_BYTES, so a normal cycle never truncates and regrows.
JOURNAL_SIZE_LIMIT: Final = 128 << 20


def sqlite_file(url: URL) -> str | None:
    """The file a SQLite URL opens and may create, or None (in memory, or SQLite creates nothing)."""
    database = url.database or ""
    if str(url.query.get("uri", "")).lower() in ("true", "1"):
        return _uri_file(database, url)
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return database


def _uri_file(database: str, url: URL) -> str | None:
    """The file of a URI filename (``file:jobs.db?mode=rwc``) that SQLite would create, or None.

    It is made here, owner-only, before SQLite opens it.
    """
    if not database.startswith("file:"):
        return None
    rest, _, inline = database[len("file:") :].partition("?")
    rest = rest.partition("#")[0]
    if rest.startswith("//"):  # file://host/path: SQLite accepts only "" or "localhost" as host
        host, slash, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            return None
        rest = slash + path
    params = {key.lower(): value for key, value in urllib.parse.parse_qsl(inline)}
    params.update({key.lower(): str(value) for key, value in url.query.items()})
    path = urllib.parse.unquote(rest)
    if path in ("", ":memory:") or params.get("mode", "rwc").lower() in ("ro", "rw", "memory"):
        return None
    return path


def open_sqlite(url: URL, busy_timeout_seconds: float, sync: str, create: bool, *, read_only: bool = False) -> Engine:
    """A SQLite engine: the file made owner-only if `create`, WAL, `sync`, writes begun with BEGIN IMMEDIATE."""
    path = sqlite_file(url)
    kwargs: dict[str, Any] = {}
    connect_args: dict[str, Any] = {
        "timeout": busy_timeout_seconds,
        # Pooled connections move between threads (one at a time).
        "check_same_thread": False,
    }
    database = url.database or ""
    if path is None and database in ("", ":memory:"):
        # One shared connection, or every checkout would see a new empty DB.
        kwargs["poolclass"] = StaticPool
    elif path is not None:
        _prepare_file(url, path, create)
        # The connection used last is taken first: SQLite empties the page cache of one that missed a commit.
        kwargs["pool_use_lifo"] = True
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    busy_ms = int(busy_timeout_seconds * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        raw = cast("sqlite3.Connection", dbapi_conn)
        raw.isolation_level = None  # we own BEGIN
        cursor = raw.cursor()
        try:
            # busy_timeout first: switching to WAL may wait for a lock. It is short: `_begin_immediate` waits.
            cursor.execute(f"PRAGMA busy_timeout = {min(busy_ms, BUSY_SLICE_MS)}")
            if not read_only:  # switching to WAL writes the file
                cursor.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # a new, empty file only
                _ensure_wal(cursor, busy_timeout_seconds)
                cursor.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
                page_size = int(cursor.execute("PRAGMA page_size").fetchone()[0])
                cursor.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_BYTES // page_size}")
            cursor.execute(f"PRAGMA synchronous = {sync}")
            cursor.execute("PRAGMA foreign_keys = ON")
            # Statement journals in memory: past 64 KiB SQLite spills one to a temp file every cycle.
            cursor.execute("PRAGMA temp_store = MEMORY")
        finally:
            cursor.close()

    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if options.get(READONLY):
            conn.exec_driver_sql("BEGIN")
        elif LOCK_WAIT in options:
            _begin_for_long(conn, busy_timeout_seconds, float(options[LOCK_WAIT]))
        else:
            _begin_immediate(conn, busy_timeout_seconds)

    event.listen(engine, "begin", _on_read_only_begin if read_only else _on_begin)
    return engine


def _ensure_wal(cursor: sqlite3.Cursor, busy_timeout_seconds: float) -> None:
    """Put the file in WAL mode, unless it is already, retrying a locked switch until busy_timeout.

    While another process recovers the WAL, SQLite answers "locked" without calling the busy
    handler: gunicorn workers starting on one file meet that.
    """
    deadline = _realtime.monotonic() + busy_timeout_seconds
    delay = 0.01
    while True:
        try:
            if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or _realtime.monotonic() >= deadline:
                raise
        time.sleep(delay)  # a short backoff while another process recovers the WAL; no lock held
        delay = min(delay * 2, 0.2)


def _on_read_only_begin(conn: Connection) -> None:
    conn.exec_driver_sql("BEGIN")  # nothing here writes: never ask for the write lock


def _begin_immediate(conn: Connection, busy_timeout_seconds: float) -> None:
    """``BEGIN IMMEDIATE``, waiting for the write lock with short, jittered sleeps.

    SQLite's busy handler sleeps up to 100 ms between tries, through the moments the lock
    is free, so processes sharing a file lost slots. Here a waiter retries every
    `BEGIN_MAX_DELAY` at most. In WAL mode only BEGIN IMMEDIATE waits for the lock.
    """
    delay = BEGIN_FIRST_DELAY
    deadline: float | None = None
    while True:
        try:
            # On the driver's cursor: SQLAlchemy's result would cost more than the statement.
            DIALECT.cursor(conn).execute("BEGIN IMMEDIATE")
            return
        except OperationalError as exc:
            if not _is_busy(exc):
                raise
            now = _realtime.monotonic()
            deadline = now + busy_timeout_seconds if deadline is None else deadline
            if now >= deadline:
                raise
        # No lock held; jitter keeps waiters from retrying in step.
        time.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, BEGIN_MAX_DELAY)


def _begin_for_long(conn: Connection, busy_timeout_seconds: float, wait_seconds: float) -> None:
    """``BEGIN IMMEDIATE`` that waits up to `wait_seconds` for the write lock (a migration's, `LOCK_WAIT`).

    Past the busy timeout the wait is logged once; past `wait_seconds`, `LockWaitExpired`.
    """
    first = min(busy_timeout_seconds, wait_seconds)
    try:
        _begin_immediate(conn, first)
        return
    except OperationalError as exc:
        if not _is_busy(exc):
            raise
        if wait_seconds <= first:
            raise LockWaitExpired from exc
    logger.info(
        "%s: the write lock is held past the busy timeout (%g s), by another process migrating the schema "
        "or writing; waiting up to %g s in all",
        mask(conn.engine.url),
        busy_timeout_seconds,
        wait_seconds,
    )
    try:
        _begin_immediate(conn, wait_seconds - first)
    except OperationalError as exc:
        if not _is_busy(exc):
            raise
        raise LockWaitExpired from exc


def _is_busy(exc: OperationalError) -> bool:
    orig = exc.orig
    code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == 5  # SQLITE_BUSY and its extended codes
    return "database is locked" in str(orig)


def _prepare_file(url: URL, path: str, create: bool) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise StoreError(mask(url), f"the directory {directory!r} does not exist")
    if os.path.isdir(path):
        # SQLite would only say "unable to open database file".
        raise StoreError(mask(url), f"{path!r} is a directory, not a database file; name a file in it")
    if os.path.exists(path):
        return
    if not create:
        raise StoreError(
            mask(url),
            "the database file does not exist (run `persched migrate` to create it)",
        )
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, _FILE_MODE)
    except FileExistsError:
        return  # created by a concurrent opener; its mode is its creator's
    except OSError as exc:
        raise StoreError(mask(url), f"cannot create the database file: {exc.strerror}") from exc
    os.close(fd)
    logger.info("created database file %s (mode 0600)", mask(url))
