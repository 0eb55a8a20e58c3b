"""MySQL 8 and MariaDB 10.6+: row locks like PostgreSQL, but no ``UPDATE … RETURNING``.

The engine (`open_mysql`): PyMySQL, always as ``mysql+pymysql`` so that both
servers are one dialect, ``"mysql"``; every session at READ COMMITTED (each
statement sees the latest commit, and no gap locks), strict, UTC, utf8mb4.

The claim's locking read (`MySQLDialect.lock_claimable`) is a plain read that
names the rows matching on the latest commit, then ``FOR UPDATE SKIP LOCKED``
of only those: InnoDB locks a row before it tests the predicate, so locking
a stale entry's row would make the claim that can win it pass it by. The
locks are held to the commit. Why, and how the missing ``RETURNING`` is made
up for: docs/explanation/store.md, "MySQL and MariaDB".
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Final

from sqlalchemy import create_engine
from sqlalchemy.dialects.mysql import insert
from sqlalchemy.exc import DBAPIError

from ..._model.instant import Instant, from_datetime, to_datetime
from ...errors import StoreError
from ..urls import mask
from . import Dialect, DriverCursor, LockWaitExpired, NamedRow, Sql, marks, value_rows
from .idle_ping import ping_after_idle

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from sqlalchemy import ColumnElement, Connection, Engine, Insert, Table
    from sqlalchemy.engine import URL

# Error numbers after which the whole transaction may succeed when tried again.
TRANSIENT_ERRORS: Final = frozenset(
    {
        1205,  # ER_LOCK_WAIT_TIMEOUT (innodb_lock_wait_timeout, MYSQL_LOCK_WAIT)
        1213,  # ER_LOCK_DEADLOCK: InnoDB chose this transaction as the victim and rolled it back
        1040,  # ER_CON_COUNT_ERROR: too many connections
        1053,  # ER_SERVER_SHUTDOWN: the server is shutting down
        1927,  # ER_CONNECTION_KILLED (MariaDB)
        4031,  # ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+: idle session closed by the server)
        2002,  # CR_CONNECTION_ERROR: can't connect through the socket
        2003,  # CR_CONN_HOST_ERROR: can't connect to the server
        2006,  # CR_SERVER_GONE_ERROR: MySQL server has gone away
        2013,  # CR_SERVER_LOST: lost connection during a query
        2055,  # CR_SERVER_LOST_EXTENDED
    }
)

_MYSQL_CONNECT_TIMEOUT: Final = 10  # seconds, unless the URL says otherwise
# Seconds a socket read or write may block (half-open TCP), above any statement and MYSQL_LOCK_WAIT.
_MYSQL_IO_TIMEOUT: Final = 60
MYSQL_LOCK_WAIT: Final = 10  # seconds: innodb_lock_wait_timeout of persched's sessions (server default 50)
# Strict (an over-long value is an error), no zero dates, and no mode that changes how SQL parses.
_MYSQL_SQL_MODE: Final = (
    "STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
)

# GET_LOCK names are server-wide: the database is part of the name (64 characters at most).
_MIGRATION_LOCK: Final = "CONCAT('persched:', MD5(DATABASE()))"


def _same(value: object, other: object) -> bool:
    """Whether two driver values are written alike (0 == False == 0.0 in Python, not in SQL text)."""
    return type(value) is type(other) and value == other


# The bytes a statement of `MySQLDialect.update_each` takes at most (about), as PyMySQL bounds an
# INSERT's executemany: past max_allowed_packet the server drops the connection, retried for ever.
_STATEMENT_BYTES: Final = 1_000_000
_VALUE_BYTES: Final = 32  # a value that is no text, as PyMySQL writes it (an instant: 28), and its comma
_TEXT_BYTES: Final = 4  # a character of text at most, escaped or not (utf8mb4)


def _chunks(rows: Sequence[Sequence[Any]], varying: Sequence[int], most: int) -> Iterator[Sequence[Sequence[Any]]]:
    """`rows` in runs of at most `most` rows and about `_STATEMENT_BYTES` (a row alone may take more)."""
    start, size = 0, 0
    fixed = _VALUE_BYTES * (len(varying) + 1)  # its values and its " UNION ALL SELECT "
    for end, row in enumerate(rows):
        cost = fixed
        for value in map(row.__getitem__, varying):
            if type(value) is str:
                cost += _TEXT_BYTES * len(value)
        if end > start and (end - start == most or size + cost > _STATEMENT_BYTES):
            yield rows[start:end]
            start, size = end, 0
        size += cost
    yield rows[start:]


def _key(table: Table) -> ColumnElement[Any]:
    (key,) = table.primary_key.columns  # persched's tables have one-column primary keys
    return key


class MySQLDialect(Dialect):
    name: ClassVar[str] = "mysql"
    # Naive UTC to the microsecond, whatever the session's time zone.
    clock_sql: ClassVar[str] = "SELECT UTC_TIMESTAMP(6)"

    def refuses_row(self, exc: DBAPIError) -> bool:
        args: tuple[object, ...] = getattr(exc.orig, "args", ())
        # PyMySQL calls these two OperationalError: a value out of range in an expression (BIGINT
        # arithmetic), and an error SIGNALled by a trigger without an SQLSTATE of its own.
        return super().refuses_row(exc) or (len(args) > 0 and args[0] in (1690, 1644))

    def is_transient(self, exc: DBAPIError) -> bool:
        if exc.connection_invalidated:  # SQLAlchemy saw a disconnect (PyMySQL's InterfaceError(0, "") too)
            return True
        args = getattr(exc.orig, "args", ())
        code = args[0] if args else None
        return isinstance(code, int) and code in TRANSIENT_ERRORS

    def update_sql(
        self, conn: Connection, table: Table, assignments: Sql, predicate: Sql, columns: str
    ) -> list[NamedRow]:
        # Lock the rows the UPDATE would change, change exactly those, read them back.
        key = _key(table).name
        locking = f"SELECT {key} FROM {table.name} WHERE {predicate.text} FOR UPDATE"  # noqa: S608 - ours
        keys = tuple(row[0] for row in self.execute(conn, Sql(locking, predicate.params)))
        return self._update_held(conn, table, assignments, predicate, keys, columns)

    def update_key_sql(
        self, conn: Connection, table: Table, assignments: Sql, key: object, columns: str
    ) -> NamedRow | None:
        # The row is held already, or the UPDATE locks it (by its key): no locking read first.
        name = _key(table).name
        change = f"UPDATE {table.name} SET {assignments.text} WHERE {name} = ?"  # noqa: S608 - ours
        self.execute(conn, Sql(change, (*assignments.params, key)))
        read = f"SELECT {columns} FROM {table.name} WHERE {name} = ?"  # noqa: S608 - ours
        return next(iter(self.execute(conn, Sql(read, (key,)))), None)

    def insert_new(
        self, cur: DriverCursor, table: Table, names: Sequence[str], rows: list[tuple[Any, ...]], returning: str
    ) -> list[tuple[Any, ...]]:
        # A row counts as inserted only if it reads back with the values written: servers differ on
        # what they report for a skipped slot (MariaDB's RETURNING gives the existing row).
        key = _key(table).name
        written = set(rows)
        check = ", ".join(f"{name} AS _written_{name}" for name in names)
        width = len(names)

        def ours(found: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            return [row[:-width] for row in found if tuple(row[-width:]) in written]

        upsert = f"INSERT INTO {table.name} ({', '.join(names)}) VALUES {{}} ON DUPLICATE KEY UPDATE {key} = {key}"  # noqa: S608
        if cur.insert_returning:  # MariaDB >= 10.5: one multi-row INSERT ... RETURNING
            flat = tuple(value for row in rows for value in row)
            values = value_rows(len(rows), width)
            return ours(cur.execute(f"{upsert.format(values)} RETURNING {returning}, {check}", flat).fetchall())
        # MySQL 8: one INSERT per row, its id from lastrowid (0 when skipped), then one read.
        one = upsert.format(f"({marks(width)})")
        ids = tuple(new_id for row in rows if (new_id := cur.execute(one, row).lastrowid))
        if not ids:
            return []
        read = f"SELECT {returning}, {check} FROM {table.name} WHERE {key} IN ({marks(len(ids))})"  # noqa: S608
        return ours(cur.execute(read, ids).fetchall())

    def lock_claimable(self, cur: DriverCursor, table: Table, predicate: Sql, columns: str) -> list[tuple[Any, ...]]:
        key = _key(table).name
        # Lock only the rows that match on the latest commit (module docstring).
        reading = f"SELECT {key} FROM {table.name} WHERE {predicate.text}"  # noqa: S608 - ours
        claimable = tuple(row[0] for row in cur.execute(reading, predicate.params).fetchall())
        if not claimable:
            return []
        candidates = Sql.join((predicate, Sql(f"{key} IN ({marks(len(claimable))})", claimable)), " AND ")
        locking = f"SELECT {columns} FROM {table.name} WHERE {candidates.text} FOR UPDATE SKIP LOCKED"  # noqa: S608
        return cur.execute(locking, candidates.params).fetchall()

    def update_each(self, cur: DriverCursor, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        # One statement for every row, where PyMySQL's executemany sends one (a round trip) a row.
        # The rows' values are a derived table ``v``, read first (STRAIGHT_JOIN: else the planner may
        # start from an index of the WHERE's constants) and joined by the WHERE's primary key. A ``?``
        # whose value every row shares stays one bound value (PyMySQL quotes each value in Python).
        # The count is of the rows matched (FOUND_ROWS).
        head, _, rest = sql.partition(" SET ")
        first, *pieces = rest.split("?")
        varying = [i for i in range(len(pieces)) if any(not _same(row[i], rows[0][i]) for row in rows)]
        if not varying:  # one row (or the same row twice): nothing to join
            return super().update_each(cur, sql, rows)
        each = set(varying)
        text = first + "".join(f"{f'v.p{i}' if i in each else '?'}{piece}" for i, piece in enumerate(pieces))
        shared = tuple(value for i, value in enumerate(rows[0]) if i not in each)
        columns = ", ".join(f"? AS p{i}" for i in varying)
        table = head.removeprefix("UPDATE ")
        written = 0
        for chunk in _chunks(rows, varying, (self.max_parameters - len(shared)) // len(varying)):
            given = f"SELECT {columns}" + f" UNION ALL SELECT {marks(len(varying))}" * (len(chunk) - 1)
            joined = f"UPDATE ({given}) v STRAIGHT_JOIN {table} SET {text}"  # noqa: S608 - ours
            values = tuple(row[i] for row in chunk for i in varying)
            written += cur.execute(joined, (*values, *shared)).rowcount
        return written

    def _update_held(
        self, conn: Connection, table: Table, assignments: Sql, predicate: Sql, held: tuple[Any, ...], columns: str
    ) -> list[NamedRow]:
        """Change the rows of the keys `held` (locked by this transaction) where `predicate` holds; read them back."""
        if not held:
            return []
        key = _key(table).name
        mine = Sql(f"{key} IN ({marks(len(held))})", held)
        where = Sql.join((predicate, mine), " AND ")
        change = f"UPDATE {table.name} SET {assignments.text} WHERE {where.text}"  # noqa: S608 - ours
        self.execute(conn, Sql(change, assignments.params + where.params))
        return list(self.execute(conn, Sql(f"SELECT {columns} FROM {table.name} WHERE {mine.text}", mine.params)))  # noqa: S608

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        key = _key(table)
        return insert(table).on_duplicate_key_update({key.name: key})  # no-op on a duplicate slot

    def driver_sql(self, sql: str) -> str:
        return sql.replace("?", "%s")  # PyMySQL's "format" parameter style

    def raw_instant(self, value: object) -> Instant:
        if not isinstance(value, datetime):  # PyMySQL returns an invalid DATETIME as its text
            raise TypeError(f"{value!r} is not a timestamp")
        return from_datetime(value)  # DATETIME(6): naive UTC

    def bind_instant(self, at: Instant) -> object:
        return to_datetime(at).replace(tzinfo=None)  # DATETIME(6): naive UTC

    def read_instant_sql(self, column: str) -> str:
        # Its text: PyMySQL parses each DATETIME in Python; persched's reader parses each distinct text once.
        return f"CAST({column} AS CHAR)"

    def select_many(self, cur: DriverCursor, columns: Sequence[str], rest: Sql) -> list[tuple[Any, ...]]:
        # PyMySQL parses every value in Python; one JSON array a row is parsed by json's C decoder. It
        # holds the text protocol's values, but a whole DOUBLE comes as an int (`_rows` reads it as float).
        packed = cur.execute(f"SELECT JSON_ARRAY({', '.join(columns)}) {rest.text}", rest.params).fetchall()
        if any(row is None for (row,) in packed):  # a row longer than max_allowed_packet as JSON: read as it is
            return super().select_many(cur, columns, rest)
        loads = json.loads
        return [tuple(loads(row)) for (row,) in packed]

    def migration_lock(self, conn: Connection, wait_seconds: float) -> None:
        got = conn.exec_driver_sql(f"SELECT GET_LOCK({_MIGRATION_LOCK}, %s)", (wait_seconds,)).scalar()
        if got == 0:  # timed out
            raise LockWaitExpired
        if got != 1:  # NULL: an error (the session was killed)
            raise StoreError(mask(conn.engine.url), "no migration lock (GET_LOCK returned NULL)")

    def release_migration_lock(self, conn: Connection) -> None:
        # A dead session's locks are gone with it: nothing to release then.
        with contextlib.suppress(DBAPIError):
            conn.exec_driver_sql(f"SELECT RELEASE_LOCK({_MIGRATION_LOCK})")
            conn.commit()


DIALECT: Final = MySQLDialect()


def open_mysql(url: URL) -> Engine:
    """A MySQL or MariaDB engine (module docstring), pinging a connection only after it sat idle."""
    connect_args: dict[str, Any] = {
        # Runs on every new connection, before the dialect's own first queries.
        "init_command": (
            f"SET SESSION sql_mode = '{_MYSQL_SQL_MODE}', time_zone = '+00:00',"
            f" innodb_lock_wait_timeout = {MYSQL_LOCK_WAIT}"
        ),
    }
    timeouts = {"connect_timeout": _MYSQL_CONNECT_TIMEOUT, "read_timeout": _MYSQL_IO_TIMEOUT}
    timeouts["write_timeout"] = _MYSQL_IO_TIMEOUT
    connect_args.update({key: seconds for key, seconds in timeouts.items() if key not in url.query})
    if "charset" not in url.query:
        connect_args["charset"] = "utf8mb4"  # 4-byte UTF-8: every str a job_id may hold (not in the URL shown)
    try:
        engine = create_engine(
            url,
            # Below the server's wait_timeout (8 h by default), which closes idle connections.
            pool_recycle=3600,
            isolation_level="READ COMMITTED",
            connect_args=connect_args,
        )
    except ImportError as exc:
        raise StoreError(
            mask(url),
            "the MySQL/MariaDB driver is not installed: pip install persched[mysql]",
        ) from exc
    return ping_after_idle(engine)  # not pool_pre_ping: see idle_ping
