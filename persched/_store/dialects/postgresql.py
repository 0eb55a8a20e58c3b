"""PostgreSQL: row locks, so instances never queue behind each other's claims.

A claim takes its rows with ``FOR UPDATE SKIP LOCKED``; a row changed by a
commit since the read began is checked against the predicate again. Reads
that decide a write lock with ``FOR UPDATE``. Timestamps are ``timestamptz``.
A write that moves the change counter sends ``pg_notify`` in its transaction,
so the listeners hear of it at its commit, and only if it commits; the
payload is the schema, since several stores may share one database.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, cast

import psycopg
from psycopg.pq import ConnStatus
from sqlalchemy import create_engine, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.exc import OperationalError

from ..._model.instant import Instant, from_datetime, to_datetime
from . import Dialect, LockWaitExpired, Sql
from .idle_ping import ping_after_idle

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy import Connection, Engine, Insert, Table
    from sqlalchemy.engine import URL
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.exc import DBAPIError

    from . import DriverCursor

# pg_advisory_xact_lock key of migrations: b"persched" as a 64-bit integer (its top bit is 0).
_MIGRATION_LOCK_KEY: Final = int.from_bytes(b"persched", "big")
CHANGES_CHANNEL: Final = "persched_changes"  # LISTEN / NOTIFY channel of the change counter
_PG_CONNECT_TIMEOUT: Final = 10  # seconds, unless the URL says otherwise
_PG: Final = PGDialect_psycopg()  # type: ignore[no-untyped-call]  # compiles a column's type (`_array_type`)
_ANNOUNCE: Final = Sql("SELECT pg_notify(?, current_schema())", (CHANGES_CHANNEL,))
# `insert_rows`: rows a statement; their arguments stay far under the 1 GiB a message takes.
_ROWS_PER_INSERT: Final = 1_000


# SQLSTATEs after which the whole transaction may succeed when tried again.
_TRANSIENT_SQLSTATES: Final = frozenset(
    {
        "40001",  # serialization_failure
        "40P01",  # deadlock_detected
        "55P03",  # lock_not_available: lock_timeout, or NOWAIT
        "53300",  # too_many_connections
        "57P01",  # admin_shutdown
        "57P02",  # crash_shutdown
        "57P03",  # cannot_connect_now: the server is starting
    }
)


class PostgreSQLDialect(Dialect):
    name: ClassVar[str] = "postgresql"
    clock_sql: ClassVar[str] = "SELECT clock_timestamp()"  # the time now, not the transaction's start
    change_signal: ClassVar[Literal["notify", "data_version"] | None] = "notify"
    binds_arrays: ClassVar[bool] = True

    def refuses_row(self, exc: DBAPIError) -> bool:
        sqlstate = getattr(exc.orig, "sqlstate", None)  # P0: raised by a PL/pgSQL trigger, as InternalError
        return super().refuses_row(exc) or (isinstance(sqlstate, str) and sqlstate.startswith("P0"))

    def is_transient(self, exc: DBAPIError) -> bool:
        if exc.connection_invalidated:  # the connection was lost (psycopg: closed or broken)
            return True
        sqlstate = getattr(exc.orig, "sqlstate", None)
        if sqlstate is None:
            # No SQLSTATE: no connection (no statement yet), or the driver refused a statement
            # (too many parameters), which fails again each time.
            return isinstance(exc, OperationalError) and exc.statement is None
        return isinstance(sqlstate, str) and (sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES)

    def unindexed_sql(self, column: str) -> str:
        # The claim's: before ANALYZE the planner took the (state, next_run_at) index for it and
        # walked every scheduled row. Not `unindexed`: an expression hides the column's statistics,
        # which the sweep and the refill need.
        return f"({column} || '')"

    def any_of(self, column: str, values: Sequence[Any]) -> Sql:
        return Sql(f"{column} = ANY(?)", (list(values),))

    def insert_new(
        self, cur: DriverCursor, table: Table, names: Sequence[str], rows: list[tuple[Any, ...]], returning: str
    ) -> list[tuple[Any, ...]]:
        # One array per column (`binds_arrays`): one statement text however many rows, planned once.
        arrays = ", ".join(f"?::{_array_type(table, name)}" for name in names)
        into = f"INSERT INTO {table.name} ({', '.join(names)}) SELECT * FROM unnest({arrays})"  # noqa: S608 - ours
        columns = [list(values) for values in zip(*rows, strict=True)]
        return cur.execute(f"{into} ON CONFLICT DO NOTHING RETURNING {returning}", columns).fetchall()

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        return insert(table).on_conflict_do_nothing()

    def insert_rows(self, cur: DriverCursor, table: Table, names: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        # One array per column, as insert_new: psycopg parses a statement with a marker a row anew each time.
        arrays = ", ".join(f"?::{_array_type(table, name)}" for name in names)
        into = f"INSERT INTO {table.name} ({', '.join(names)}) SELECT * FROM unnest({arrays})"  # noqa: S608 - ours
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            cur.execute(into, [list(values) for values in zip(*rows[start : start + _ROWS_PER_INSERT], strict=True)])

    def driver_sql(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def raw_instant(self, value: object) -> Instant:
        if not isinstance(value, datetime):
            raise TypeError(f"{value!r} is not a timestamp")
        return from_datetime(value)

    def bind_instant(self, at: Instant) -> object:
        return to_datetime(at)  # timestamptz

    def migration_lock(self, conn: Connection, wait_seconds: float) -> None:
        # lock_timeout bounds the wait for the advisory lock, then is set back for the migration's statements.
        was = conn.execute(text("SELECT current_setting('lock_timeout')")).scalar_one()
        conn.execute(
            text("SELECT set_config('lock_timeout', :ms, true)"), {"ms": f"{max(1, round(wait_seconds * 1000))}ms"}
        )
        try:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK_KEY})
        except OperationalError as exc:
            if getattr(exc.orig, "sqlstate", None) == "55P03":  # lock_not_available: lock_timeout passed
                raise LockWaitExpired from exc
            raise
        conn.execute(text("SELECT set_config('lock_timeout', :was, true)"), {"was": was})

    def announce_change(self, conn: Connection) -> None:
        self.execute(conn, _ANNOUNCE)  # driver SQL: once per write transaction of schedule() and the like

    def change_listener(self, raw: DBAPIConnection) -> _Listener:
        pg = cast("psycopg.Connection[Any]", raw)
        pg.rollback()  # a pooled connection may be in a transaction
        pg.autocommit = True  # LISTEN takes effect at once, and nothing else is ever sent here
        schema = pg.execute("SELECT current_schema()").fetchone()
        pg.execute(f"LISTEN {CHANGES_CHANNEL}")
        return _Listener(pg, None if schema is None else schema[0])


class _Listener:
    """A psycopg connection after LISTEN: its socket, and the notifications that arrived on it."""

    def __init__(self, conn: psycopg.Connection[Any], schema: str | None) -> None:
        self._conn = conn
        self._schema = (schema or "").encode()

    def fileno(self) -> int:
        return self._conn.fileno()

    def announced(self) -> bool:
        pgconn = self._conn.pgconn
        pgconn.consume_input()  # raises when the server closed the connection (pg_terminate_backend, restart)
        if pgconn.status != ConnStatus.OK:
            raise psycopg.OperationalError("the listening connection was closed")
        found = False
        while (note := pgconn.notifies()) is not None:
            found = found or note.extra == self._schema  # another schema's store: not ours
        return found


@functools.lru_cache(maxsize=64)
def _array_type(table: Table, name: str) -> str:
    """The SQL type of an array of the column `name` of `table` (``TIMESTAMP WITH TIME ZONE[]``)."""
    return f"{table.c[name].type.compile(dialect=_PG)}[]"


DIALECT: Final = PostgreSQLDialect()


def open_postgresql(url: URL) -> Engine:
    """A PostgreSQL engine: psycopg 3, pinging a connection only after it sat idle."""
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = _PG_CONNECT_TIMEOUT
    return ping_after_idle(create_engine(url, connect_args=connect_args))  # not pool_pre_ping: see idle_ping
