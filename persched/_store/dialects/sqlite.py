"""SQLite: one writer at a time, so every write starts with BEGIN IMMEDIATE (`persched._store.db`).

A write transaction holds the database's write lock from its first
statement, so a plain conditional ``UPDATE … RETURNING`` decides a claim: no
other writer can change a row between the predicate and the write, and
select-then-update races cannot happen. Timestamps are
stored as naive UTC text, which sorts like the instants it names.

``PRAGMA data_version`` tells a connection that another one committed, in
this process or another: in WAL mode it compares the WAL index header in
shared memory, no file is read, so other instances' changes can be looked
for every few milliseconds (persched._engine.heartbeat).
"""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal

from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.sql.operators import custom_op

from ..._model.instant import Instant, from_datetime, from_naive_utc
from . import Dialect, value_rows

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Connection, Insert, Row, Select, Table
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.exc import DBAPIError

_NAIVE_EPOCH: Final = datetime(1970, 1, 1)


_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6


def _variable_limit() -> int:
    """The SQLite library's limit of parameters per statement (SQLITE_MAX_VARIABLE_NUMBER: 32,766
    since SQLite 3.32, 999 before; a build may set another)."""
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
            # SQLITE_BUSY (past busy_timeout) or SQLITE_LOCKED, with their extended codes; not a
            # message that merely names something "locked" (a table, a column).
            return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
        text = str(exc.orig).lower()
        return "locked" in text or "busy" in text

    def lock_rows(self, query: Select[Any]) -> Select[Any]:
        return query  # BEGIN IMMEDIATE holds the write lock already (SQLite ignores FOR UPDATE)

    def locking_sql(self, query: str) -> str:
        return query  # as lock_rows

    def lock_first(self, conn: Connection, query: Select[Any], limit: int) -> list[Row[Any]]:
        return list(conn.execute(query.limit(limit)))  # one writer at a time: BEGIN IMMEDIATE holds the lock

    def unindexed(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        # SQLite's unary + keeps a term from using an index; without it the claim picks the
        # (state, next_run_at) index over the primary key and scans every scheduled row.
        return UnaryExpression(column, operator=custom_op("+"), type_=column.type)

    def unindexed_sql(self, column: str) -> str:
        return f"+{column}"

    def row_values(self, count: int, width: int) -> str:
        return f"(VALUES {value_rows(count, width)})"  # SQLite takes a list of rows only so

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return insert(table).on_conflict_do_nothing()

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

    def migration_lock(self, conn: Connection) -> None:
        pass  # the migration's transaction began with BEGIN IMMEDIATE: it holds the write lock

    def data_version(self, raw: DBAPIConnection) -> int:
        cursor = raw.cursor()
        try:
            cursor.execute("PRAGMA data_version")
            row = cursor.fetchone()
        finally:
            cursor.close()
        return int(row[0])  # type: ignore[index]  # a PRAGMA with a value always returns its row


DIALECT: Final = SQLiteDialect()
