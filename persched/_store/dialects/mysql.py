"""MySQL 8 and MariaDB 10.6+: row locks like PostgreSQL, but no ``UPDATE … RETURNING``.

**The engine** (`open_mysql`). ``mysql://`` and ``mariadb://`` go through
PyMySQL (the ``mysql`` extra), always as ``mysql+pymysql`` so that the code
sees one dialect name, ``"mysql"``, for both servers. Every session runs at
READ COMMITTED, like PostgreSQL's default and for the same reason: the store
is written for "each statement sees the latest commit", and REPEATABLE READ's
snapshot (taken at a transaction's first read) would show a dispatch cycle
rows as they were before other instances' commits, while its gap locks on the
due-rows index range would make ``schedule()`` inserts wait behind a claim
and deadlock with it. Locking reads and UPDATEs read the latest committed row
at either level, and take no gap locks at READ COMMITTED. The session is
strict (``sql_mode``: a value that does not fit is an error, never silently
truncated), on UTC, utf8mb4, and waits at most `MYSQL_LOCK_WAIT` seconds for
a row lock.

**The claim's locking read** (`lock_claimable`) is two statements:

1. ``SELECT job_id FROM persched_jobs WHERE <predicate>``, a plain read,
   names the rows that match on the latest commit. Only those are locked
   next: InnoDB locks each row a locking read looks at *before* it tests the
   predicate, so a claim of a stale entry (another instance's, of a job
   replaced since) would hold for a moment a row it cannot win, and the
   claim that can win it would pass it by as if taken, a slot lost;
2. ``SELECT <columns> … WHERE <predicate> AND job_id IN (<those>) FOR UPDATE
   SKIP LOCKED`` locks and reads the due rows that no other instance holds
   (a locking read sees the latest committed row version); rows another
   instance is claiming are passed by, not waited for.

A run still starts at the COMMIT of that transaction: the row locks taken
in step 2 are held to the commit, so the claim's write back changes exactly
the rows it read, and a deschedule() or another instance's claim either
committed before step 2 (the predicate fails) or waits for this commit.

Every other ``UPDATE … RETURNING`` is three statements: a locking read of
the keys with a plain ``FOR UPDATE``, the UPDATE of exactly those rows, and
a read of them back (`update_sql`), but an UPDATE of one
row by its primary key that the transaction holds already, or that the
UPDATE itself locks (the change counter), which is the UPDATE and a read by
that key (`update_key_sql`); history rows in one multi-row
``INSERT … RETURNING`` on MariaDB (10.5+), one INSERT each on MySQL 8, which
has no ``RETURNING`` at all (`insert_new`). History rows skip a slot the
unique index holds with ``ON DUPLICATE KEY UPDATE run_id = run_id``, a no-op,
rather than ``INSERT IGNORE``, which would also turn data errors into
warnings. The index is over a generated column that is NULL for run-now rows
(MySQL has no partial index: `persched._store.schema`).

An UPDATE once for each row of a batch (`update_each`: the claim's write
back, a dispatch cycle's completions) is one statement, the rows' values a
derived table joined to the table by the key, where PyMySQL's executemany
would send one statement, and wait one round trip, a row.

Migrations are serialised by ``GET_LOCK``: MySQL commits at every DDL
statement, so no lock that ends with a transaction would hold through a
migration; `release_migration_lock` gives it back afterwards.
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

# Server and client error numbers after which the whole transaction may succeed when tried
# again: InnoDB rolled it back (deadlock), a row lock wait timed out, or the connection could
# not be made or was lost.
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
# Seconds a socket read or write may block before PyMySQL gives up (a cut
# connection that the kernel never reports: half-open TCP); well above any
# statement persched sends and above MYSQL_LOCK_WAIT. The URL may override it.
_MYSQL_IO_TIMEOUT: Final = 60
MYSQL_LOCK_WAIT: Final = 10  # seconds: innodb_lock_wait_timeout of persched's sessions (server default 50)
# Strict: an over-long value is an error, not truncated; no zero dates; and none of the
# modes (ANSI_QUOTES, PIPES_AS_CONCAT, ...) a server may set that change how SQL parses.
_MYSQL_SQL_MODE: Final = (
    "STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION"
)

# GET_LOCK names are server-wide: the database is part of the name (64 characters at most).
_MIGRATION_LOCK: Final = "CONCAT('persched:', MD5(DATABASE()))"


def _same(value: object, other: object) -> bool:
    """Whether two driver values are written alike (0 == False == 0.0 in Python, not in SQL text)."""
    return type(value) is type(other) and value == other


# The bytes a statement of `MySQLDialect.update_each` takes at most (about), as PyMySQL bounds its
# executemany of an INSERT (a megabyte): a server closes the connection on a statement past its
# max_allowed_packet (16 MiB by default on MariaDB, often less where set by hand), an error taken as
# transient, so a cycle's outcomes with long errors (a backlog kept through an outage) failed for ever.
_STATEMENT_BYTES: Final = 1_000_000
_VALUE_BYTES: Final = 32  # a value that is no text, as PyMySQL writes it (an instant: 28), and its comma
_TEXT_BYTES: Final = 4  # a character of text at most, escaped or not (utf8mb4)


def _chunks(rows: Sequence[Sequence[Any]], varying: Sequence[int], most: int) -> Iterator[Sequence[Sequence[Any]]]:
    """`rows` in runs of at most `most` rows whose `varying` values take at most about `_STATEMENT_BYTES`
    (a row alone may take more: one statement for it, as an executemany would send)."""
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
        # Lock the rows the UPDATE would change, change exactly those, read them back (module docstring).
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
        # A row counts as inserted only if it reads back with the values written: a slot the
        # unique index held already is skipped (`insert_ignoring_conflicts`), and what a server
        # reports for a skipped row differs (MariaDB's RETURNING gives the existing row).
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
        # Lock only the rows that match on the latest commit (module docstring, step 1).
        reading = f"SELECT {key} FROM {table.name} WHERE {predicate.text}"  # noqa: S608 - ours
        claimable = tuple(row[0] for row in cur.execute(reading, predicate.params).fetchall())
        if not claimable:
            return []
        candidates = Sql.join((predicate, Sql(f"{key} IN ({marks(len(claimable))})", claimable)), " AND ")
        locking = f"SELECT {columns} FROM {table.name} WHERE {candidates.text} FOR UPDATE SKIP LOCKED"  # noqa: S608
        return cur.execute(locking, candidates.params).fetchall()

    def update_each(self, cur: DriverCursor, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        # One statement for every row: PyMySQL's executemany sends an UPDATE once per row (a round
        # trip each; a dispatch cycle writes two rows a run). The rows' values are a derived table,
        # ``v``, read first (STRAIGHT_JOIN: else the planner may start from an index of the WHERE's
        # constant terms) and joined to the table by the WHERE, which finds each row by its primary
        # key: each ``?`` of the SET and the WHERE becomes that row's column of ``v``, or stays a
        # ``?`` bound once if every row has the same value there (a claim's owner and lease, an
        # outcome: PyMySQL quotes each value in Python, the client's main cost). A table row is
        # changed once, as by an executemany of rows that name distinct rows (the base method's
        # contract), and the count is of the rows matched (FOUND_ROWS).
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
        """Change the rows of the keys `held`, which this transaction has locked, where `predicate`
        still holds; read them back (module docstring)."""
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
        # Its text: PyMySQL parses each DATETIME in Python (a third of the time it takes to read 100,000
        # job rows), where persched's reader reads each distinct text once.
        return f"CAST({column} AS CHAR)"

    def select_many(self, cur: DriverCursor, columns: Sequence[str], rest: Sql) -> list[tuple[Any, ...]]:
        # PyMySQL parses every value of every row in Python: 100,000 job rows of 49 columns cost it more
        # than a second. Each row comes as one JSON array instead, which json's C decoder parses. It holds
        # the values the text protocol would have sent (a DOUBLE in its shortest exact form), but for a
        # whole DOUBLE, an int: the rows' readers read a number column's int as its float (`_rows`).
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
    """A MySQL or MariaDB engine: PyMySQL, READ COMMITTED, a strict UTC session (module docstring), a ping
    of a connection idle for a while (`idle_ping`)."""
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
