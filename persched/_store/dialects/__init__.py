"""Every difference between the database engines persched runs on, behind one object, `Dialect`.

The statements are written once (SQLAlchemy Core; the dispatch path's in
driver SQL on the driver's cursor: `Sql`, `DriverCursor`); a `Dialect` holds
what cannot be: how a claim locks its rows, which failures are transient, how
a write begins, the raw form of a timestamp, the migration lock, and how other
instances learn of a change. `dialect_for` imports only the engine in use.
"""

from __future__ import annotations

import functools
import importlib
from collections import namedtuple
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, NamedTuple, Protocol

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from sqlalchemy import ColumnElement, Connection, Engine, Insert, Row, Select, Table
    from sqlalchemy.engine.interfaces import DBAPIConnection

    from ..._model.instant import Instant

__all__ = [
    "LOCK_WAIT",
    "READONLY",
    "ChangeListener",
    "Dialect",
    "DriverCursor",
    "DriverRows",
    "LockWaitExpired",
    "NamedRow",
    "Sql",
    "dialect_for",
    "marks",
    "value_rows",
]


#: Execution option: ``conn.execution_options(persched_readonly=True)`` makes
#: the next transaction on a SQLite connection a deferred ``BEGIN``.
READONLY: Final = "persched_readonly"

#: Execution option: ``persched_lock_wait=seconds`` makes a SQLite connection's next ``BEGIN IMMEDIATE``
#: wait this long for the write lock (a migration's), then raise `LockWaitExpired`.
LOCK_WAIT: Final = "persched_lock_wait"


class LockWaitExpired(Exception):
    """Another connection held the migration's lock (`Dialect.migration_lock`) past the wait asked for."""


class Sql(NamedTuple):
    """A piece of driver SQL, with ``?`` placeholders (`Dialect.driver_sql`), and its parameters in order."""

    text: str
    params: tuple[Any, ...] = ()

    @staticmethod
    def join(parts: Iterable[Sql], separator: str) -> Sql:
        parts = list(parts)
        return Sql(separator.join(part.text for part in parts), tuple(p for part in parts for p in part.params))


def marks(count: int) -> str:
    """`count` placeholders, comma-separated."""
    return ", ".join("?" * count)


def value_rows(count: int, width: int) -> str:
    """`count` rows of `width` placeholders each, comma-separated: ``(?, ?), (?, ?)``."""
    return ", ".join([f"({marks(width)})"] * count)


class DriverCursor:
    """The driver's own cursor in a SQLAlchemy `Connection`'s transaction: the dispatch path's.

    Rows come back as the driver's tuples. As with SQLAlchemy, the engine's cursor
    listeners run for every statement (fault-injection tests and tracers hook there),
    and a driver error is raised as a `DBAPIError`, a connection that is gone
    invalidated. ``handle_error`` listeners are not called: persched registers none.
    """

    __slots__ = ("_after", "_before", "_conn", "_cursor", "_dialect", "_driver_error")

    def __init__(self, conn: Connection, dialect: Dialect) -> None:
        raw = conn.connection.dbapi_connection
        assert raw is not None  # a connection in a transaction is never detached
        self._conn = conn
        self._dialect = dialect
        self._cursor = raw.cursor()
        self._driver_error: type[Exception] = conn.dialect.loaded_dbapi.Error
        self._before = conn.dispatch.before_cursor_execute
        self._after = conn.dispatch.after_cursor_execute

    @property
    def rowcount(self) -> int:
        """Rows the last statement changed (matched, on MySQL: FOUND_ROWS)."""
        return int(self._cursor.rowcount)

    @property
    def lastrowid(self) -> int:
        """The id the last INSERT gave its row (0 or None when it inserted none)."""
        return int(self._cursor.lastrowid or 0)

    @property
    def insert_returning(self) -> bool:
        """Whether the server takes ``INSERT … RETURNING`` (MariaDB 10.5+ does)."""
        return bool(self._conn.dialect.insert_returning)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> DriverCursor:
        """Run one statement; its rows are then `fetchall()`'s."""
        self._run(self._dialect.driver_sql(sql), params, many=False)
        return self

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> DriverCursor:
        """Run one statement once per parameter row (the driver's executemany; `rowcount`: the sum)."""
        self._run(self._dialect.driver_sql(sql), rows, many=True)
        return self

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._cursor.fetchall())

    def rows(self) -> DriverRows:
        """The rows of the last statement, named by its columns, and its `rowcount`; the cursor is closed."""
        description = self._cursor.description
        try:
            if not description:  # a statement without a result
                return DriverRows([], self.rowcount)
            row = _row_type(tuple(column[0] for column in description))
            return DriverRows([row._make(found) for found in self._cursor.fetchall()], self.rowcount)
        finally:
            self._cursor.close()

    def _run(self, sql: str, params: Any, *, many: bool) -> None:  # noqa: ANN401 - driver values
        conn = self._conn
        context = _StatementContext()
        try:
            for before in self._before:  # as SQLAlchemy calls them (retval listeners may rewrite)
                sql, params = before(conn, self._cursor, sql, params, context, many)
            if many:
                self._cursor.executemany(sql, params)
            elif params:
                self._cursor.execute(sql, params)
            else:  # as SQLAlchemy sends a statement without parameters: a literal % stays one
                self._cursor.execute(sql)
            for after in self._after:
                after(conn, self._cursor, sql, params, context, many)
        except self._driver_error as exc:
            raise self._wrapped(exc, sql, params, many=many) from exc

    def _wrapped(self, exc: Any, sql: str, params: Any, *, many: bool) -> StatementError:  # noqa: ANN401 - driver's
        """`exc` as SQLAlchemy raises a driver error; a connection that is gone is invalidated."""
        conn = self._conn
        gone = conn.invalidated or conn.dialect.is_disconnect(exc, conn.connection, self._cursor)
        error: StatementError = DBAPIError.instance(
            sql,
            params,
            exc,
            self._driver_error,
            hide_parameters=conn.engine.hide_parameters,
            connection_invalidated=gone,
            dialect=conn.dialect,
            ismulti=many,
        )
        if gone and not conn.invalidated:
            conn.invalidate(exc)  # never handed out again; the transaction must roll back
        return error


class _StatementContext:
    """The ``context`` cursor listeners get for a `DriverCursor` statement: one object per statement.

    Tracers keep state on it (OpenTelemetry sets ``context._otel_span``), so it cannot be None.
    """


class NamedRow(tuple):  # type: ignore[type-arg]  # the driver's values, of any type
    """A row of `DriverRows`: the driver's values, by position, attribute and ``_mapping``, as a `Row`."""

    __slots__ = ()
    _names: ClassVar[tuple[str, ...]] = ()

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...  # noqa: ANN401 - a column's value

        @classmethod
        def _make(cls, values: Iterable[Any]) -> NamedRow: ...  # the named tuple's

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(zip(self._names, self, strict=True))


class DriverRows:
    """The result of `Dialect.execute`: the rows of one statement and its `rowcount`."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[NamedRow], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def __iter__(self) -> Iterator[NamedRow]:
        return iter(self._rows)

    def fetchall(self) -> list[NamedRow]:
        return list(self._rows)


@functools.lru_cache(maxsize=256)
def _row_type(names: tuple[str, ...]) -> type[NamedRow]:
    """The `NamedRow` type of a statement whose columns are `names`, made once per list of names."""
    fields = namedtuple("DriverRow", names, rename=True)  # type: ignore[misc]
    return type("DriverRow", (fields, NamedRow), {"__slots__": (), "_names": names})


# engine name (SQLAlchemy's dialect.name) -> module of this package
_MODULES: dict[str, str] = {"sqlite": "sqlite", "postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}


class Dialect:
    """What one engine does differently; every method has the engine-neutral meaning in its docstring."""

    name: ClassVar[str]
    #: This process's writers queue for the single write lock in the store (SQLite), not the busy handler.
    serialise_local_writers: ClassVar[bool] = False
    #: The engine is a library in this process (SQLite), whose mutexes a fork must not copy held (`fork_gate`).
    in_process: ClassVar[bool] = False
    #: How an instance learns cheaply that another committed: "notify" (`change_listener`),
    #: "data_version" (`data_version`), or None: only the counter's poll.
    change_signal: ClassVar[Literal["notify", "data_version"] | None] = None
    #: A query of the database's clock, which every instance sharing it compares its own with (`raw_instant` reads it).
    clock_sql: ClassVar[str] = "SELECT CURRENT_TIMESTAMP"
    #: The most parameters one statement may bind; statements over a set bind it in chunks under this.
    max_parameters: ClassVar[int] = 65_535  # PostgreSQL's protocol (psycopg) and MySQL's prepared statements
    #: A parameter may be an array (PostgreSQL): a batch's statement keeps one text at any size.
    binds_arrays: ClassVar[bool] = False

    def is_transient(self, exc: DBAPIError) -> bool:
        """True if retrying the whole transaction may succeed (busy, dropped connection, deadlock)."""
        raise NotImplementedError

    def refuses_row(self, exc: DBAPIError) -> bool:
        """True if the database refused a value or a row (range, constraint, trigger): it would fail again.

        Its other rows may not fail. Not a full disk or a read-only or missing table: no row's fault.
        """
        return isinstance(exc, (DataError, IntegrityError))

    def lock_first(self, conn: Connection, query: Select[Any], limit: int) -> list[Row[Any]]:
        """The first `limit` rows of `query` no other transaction holds, locked until this one ends (SKIP LOCKED)."""
        return list(conn.execute(query.limit(limit).with_for_update(skip_locked=True)))

    def unindexed(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """`column` as a term the planner cannot look up by an index (so it uses another one)."""
        return column

    def unindexed_sql(self, column: str) -> str:
        """`unindexed` in driver SQL (the claim's; PostgreSQL has it here only)."""
        return column

    def row_values(self, count: int, width: int) -> str:
        """`count` row values of `width` placeholders each, as the right side of ``(a, b) IN``."""
        return f"({value_rows(count, width)})"

    def any_of(self, column: str, values: Sequence[Any]) -> Sql:
        """``column IN (values)`` in driver SQL (an array where `binds_arrays`: one text for any count)."""
        return Sql(f"{column} IN ({marks(len(values))})", tuple(values))

    def cursor(self, conn: Connection) -> DriverCursor:
        """The driver's cursor in `conn`'s transaction, for the dispatch path's statements."""
        return DriverCursor(conn, self)

    def insert_new(
        self, cur: DriverCursor, table: Table, names: Sequence[str], rows: list[tuple[Any, ...]], returning: str
    ) -> list[tuple[Any, ...]]:
        """Insert `rows` of the columns `names` in one statement, skipping a slot the unique index holds;
        the `returning` columns of the rows inserted."""
        into = f"INSERT INTO {table.name} ({', '.join(names)}) VALUES {value_rows(len(rows), len(names))}"  # noqa: S608 - ours
        sql = f"{into} ON CONFLICT DO NOTHING RETURNING {returning}"
        return cur.execute(sql, tuple(value for row in rows for value in row)).fetchall()

    def insert_rows(self, cur: DriverCursor, table: Table, names: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        """Insert `rows` of the columns `names`, all or none (a duplicate raises `IntegrityError`)."""
        cur.executemany(f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({marks(len(names))})", rows)  # noqa: S608 - ours

    def locking_sql(self, query: str) -> str:
        """The SELECT `query` (driver SQL), locking the rows it reads until the transaction ends."""
        return f"{query} FOR UPDATE"

    def update_sql(
        self, conn: Connection, table: Table, assignments: Sql, predicate: Sql, columns: str
    ) -> list[NamedRow]:
        """``UPDATE table SET assignments WHERE predicate … RETURNING columns``: the rows changed, read raw."""
        sql = f"UPDATE {table.name} SET {assignments.text} WHERE {predicate.text} RETURNING {columns}"  # noqa: S608 - ours
        return list(self.execute(conn, Sql(sql, assignments.params + predicate.params)))

    def update_key_sql(
        self, conn: Connection, table: Table, assignments: Sql, key: object, columns: str
    ) -> NamedRow | None:
        """`update_sql` of the row whose primary key is `key`, which this transaction holds or the UPDATE locks."""
        (name,) = (column.name for column in table.primary_key.columns)
        return next(iter(self.update_sql(conn, table, assignments, Sql(f"{name} = ?", (key,)), columns)), None)

    def lock_claimable(self, cur: DriverCursor, table: Table, predicate: Sql, columns: str) -> list[tuple[Any, ...]]:
        """The claim's locking read: the rows where `predicate` holds that no other transaction holds, locked.

        What it returns is what this claim wins: rows another transaction holds are passed by.
        """
        sql = f"SELECT {columns} FROM {table.name} WHERE {predicate.text} FOR UPDATE SKIP LOCKED"  # noqa: S608 - ours
        return cur.execute(sql, predicate.params).fetchall()

    def update_rows(
        self, cur: DriverCursor, table: Table, names: Sequence[str], key: Sequence[str], rows: list[tuple[Any, ...]]
    ) -> int:
        """Set the columns `names` of each row found by its `key` (``(*names' values, *key's)``); rows changed."""
        sets = ", ".join(f"{name} = ?" for name in names)
        where = " AND ".join(f"{name} = ?" for name in key)
        return self.update_each(cur, f"UPDATE {table.name} SET {sets} WHERE {where}", rows)  # noqa: S608 - ours

    def update_each(self, cur: DriverCursor, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run ``UPDATE … SET … WHERE …`` once for each parameter row, in one call; the rows matched.

        Each row's WHERE names its own table row by key and no SET reads another column it sets,
        so the updates are independent of one another and of their order.
        """
        return cur.executemany(sql, rows).rowcount

    def execute(self, conn: Connection, statement: Sql) -> DriverRows:
        """Run one statement of driver SQL on the driver's cursor, beginning a transaction if none is open."""
        if not conn.in_transaction():
            conn.begin()
        return self.cursor(conn).execute(statement.text, statement.params).rows()

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        """An INSERT into `table` that skips a row a unique index already holds (one run per slot)."""
        raise NotImplementedError

    def driver_sql(self, sql: str) -> str:
        """`sql` written with ``?`` placeholders, in the driver's parameter style (for `exec_driver_sql`)."""
        return sql

    def raw_instant(self, value: object) -> Instant:
        """A timestamp as the driver returns it raw, as an instant (ValueError/TypeError if it is not one)."""
        raise NotImplementedError

    def read_instant_sql(self, column: str) -> str:
        """A timestamp column in a select list read by `persched._store._rows`: what the driver reads fastest."""
        return column

    def select_many(self, cur: DriverCursor, columns: Sequence[str], rest: Sql) -> list[tuple[Any, ...]]:
        """The rows of ``SELECT <columns> <rest>`` as driver tuples: a read of thousands of rows (declare()'s)."""
        return cur.execute(f"SELECT {', '.join(columns)} {rest.text}", rest.params).fetchall()

    def bind_instant(self, at: Instant) -> object:
        """An instant as the driver takes it for a timestamp column: what `UTCDateTime` writes."""
        raise NotImplementedError

    def migration_lock(self, conn: Connection, wait_seconds: float) -> None:
        """Serialise migrations across processes until `conn`'s transaction ends (or `release_migration_lock`).

        Waits at most `wait_seconds` for another migration, else raises `LockWaitExpired`.
        """
        raise NotImplementedError

    def release_migration_lock(self, conn: Connection) -> None:
        """Release what `migration_lock` holds beyond its transaction (MySQL's session lock); called after it ended."""

    def announce_change(self, conn: Connection) -> None:
        """Wake the instances listening for changes when `conn`'s transaction commits (nothing without NOTIFY)."""

    def change_listener(self, raw: DBAPIConnection) -> ChangeListener:
        """Subscribe `raw`, a connection kept for this alone, to `announce_change`."""
        raise NotImplementedError

    def data_version(self, raw: DBAPIConnection) -> int:
        """A number that `raw` sees change whenever another connection commits."""
        raise NotImplementedError


class ChangeListener(Protocol):
    """A connection subscribed to announced changes (`Dialect.change_listener`)."""

    def fileno(self) -> int:
        """The socket that becomes readable when something arrives."""
        ...

    def announced(self) -> bool:
        """Read what arrived without blocking: True if a change of this store was announced.

        Raises:
            Exception: The driver's error when the connection is gone.
        """
        ...


def dialect_for(engine: Engine) -> Dialect:
    """The `Dialect` of `engine`."""
    try:
        module = _MODULES[engine.dialect.name]
    except KeyError:
        raise ValueError(f"persched does not support the {engine.dialect.name} engine") from None
    dialect: Dialect = importlib.import_module(f"{__name__}.{module}").DIALECT
    return dialect
