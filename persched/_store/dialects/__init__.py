"""Every difference between the database engines persched runs on, behind one object.

The store's statements are written once, in SQLAlchemy Core (the dispatch
path's in driver SQL, run on the driver's own cursor: `Sql`, `DriverCursor`,
`driver_sql`, `raw_instant`, `bind_instant`);
a `Dialect` holds what cannot be: how a claim locks the rows it decides, what a
transient failure looks like, whether this process must queue its own
writers, how a write transaction begins, the raw form of a timestamp,
the lock that serialises migrations, and how other instances learn that
something changed (PostgreSQL's NOTIFY, SQLite's data_version). One module per engine; `dialect_for`
imports only the one in use (a SQLite user never loads the PostgreSQL
dialect of SQLAlchemy).
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

#: Execution option: ``conn.execution_options(persched_lock_wait=seconds)`` makes the next
#: transaction on a SQLite connection wait this long for the write lock at its ``BEGIN IMMEDIATE``
#: (rather than the busy timeout), and raise `LockWaitExpired` past it: a migration's.
LOCK_WAIT: Final = "persched_lock_wait"


class LockWaitExpired(Exception):
    """Another connection held the migration's lock (`Dialect.migration_lock`) past the wait asked for."""


class Sql(NamedTuple):
    """A piece of driver SQL, with ``?`` placeholders (`Dialect.driver_sql`), and its parameters in order.

    The dispatch path's statements are written so (`persched._store.claims`):
    per run, SQLAlchemy's statement construction, cache key and bind
    processing cost more than the database's work.
    """

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
    """The driver's own cursor in the transaction of a SQLAlchemy `Connection`: the dispatch path's.

    A dispatch cycle sends a handful of statements for dozens of runs, and per
    run SQLAlchemy's execution context, result object and `Row` cost more
    than the database's work. Here a statement (driver SQL with ``?``
    placeholders, `Dialect.driver_sql`) goes to the DB-API cursor and its
    rows come back as the driver's tuples. Two things stay as SQLAlchemy does
    them, so that the transaction machinery (`_tx`) and the tests see no
    difference: the engine's ``before_cursor_execute`` and
    ``after_cursor_execute`` listeners are called for every statement, with a
    context object of its own (`_StatementContext`; the fault-injection and
    crash-point tests hook there, and tracers), and a driver error is
    raised as SQLAlchemy raises it (a `DBAPIError`, which `_tx` retries or
    reports; a connection that is gone is invalidated). Engine ``handle_error``
    listeners are not called here: persched registers none.
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
        """Rows the last statement changed (matched, on MySQL: persched's engines ask for FOUND_ROWS)."""
        return int(self._cursor.rowcount)

    @property
    def lastrowid(self) -> int:
        """The id the last INSERT gave its row (0 or None when it inserted none)."""
        return int(self._cursor.lastrowid or 0)

    @property
    def insert_returning(self) -> bool:
        """Whether the server takes ``INSERT … RETURNING`` (SQLAlchemy's dialect knows: MariaDB 10.5+)."""
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
        """The rows of the last statement, named by its columns (none for a statement without any),
        and its `rowcount`; the cursor is closed."""
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
        """`exc` as SQLAlchemy raises a driver error (`DBAPIError.instance`, public): a `DBAPIError` whose
        ``connection_invalidated`` says whether the connection is gone, and then invalidated (never used again)."""
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
    """The ``context`` that cursor listeners get for a statement of `DriverCursor`: not SQLAlchemy's
    execution context (there is none), but one object per statement, from ``before_cursor_execute``
    to ``after_cursor_execute``, that a listener may keep its own state on, as tracers do on
    SQLAlchemy's (OpenTelemetry's instrumentation sets ``context._otel_span``: with None it raised
    AttributeError on every statement of an instrumented application's scheduler)."""


class NamedRow(tuple):  # type: ignore[type-arg]  # the driver's values, of any type
    """A row of `DriverRows`: the driver's values, its columns attributes too (``row.generation``)
    and a ``_mapping`` by name, as on SQLAlchemy's `Row`."""

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
    """The result of `Dialect.execute`: the rows of one statement (`NamedRow`) and the rows it
    changed (`rowcount`)."""

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
    """The `NamedRow` type of a statement whose columns are `names` (a name that is no identifier is
    renamed for its attribute), made once per list of names."""
    fields = namedtuple("DriverRow", names, rename=True)  # type: ignore[misc]
    return type("DriverRow", (fields, NamedRow), {"__slots__": (), "_names": names})


# engine name (SQLAlchemy's dialect.name) -> module of this package
_MODULES: dict[str, str] = {"sqlite": "sqlite", "postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}


class Dialect:
    """What one engine does differently; every method has the engine-neutral meaning in its docstring."""

    name: ClassVar[str]
    #: This process's writers queue for the database's single write lock in
    #: the store (SQLite), rather than in the engine's busy handler.
    serialise_local_writers: ClassVar[bool] = False
    #: The database engine is a library inside this process (SQLite), whose
    #: mutexes a fork must not copy while held (persched._store.fork_gate).
    in_process: ClassVar[bool] = False
    #: How an instance learns cheaply that another one committed, so that it
    #: reads the change counter soon (persched._engine.pickup): "notify" (a listening
    #: connection, `change_listener`), "data_version" (a cheap check,
    #: `data_version`), or None: only the counter's poll.
    change_signal: ClassVar[Literal["notify", "data_version"] | None] = None
    #: A query of one row and column: the database's clock, the time every
    #: instance sharing it can compare its own with (`persched._store.members`).
    #: Its value is read by `raw_instant`.
    clock_sql: ClassVar[str] = "SELECT CURRENT_TIMESTAMP"
    #: The most parameters one statement may bind (the engine's or its driver's limit): a
    #: statement over a set of any size binds it in chunks under this (`persched._store.jobs`).
    max_parameters: ClassVar[int] = 65_535  # PostgreSQL's protocol (psycopg) and MySQL's prepared statements
    #: A parameter may be an array (PostgreSQL): the dispatch path's statements over a batch then
    #: keep one text whatever its size, and the server plans each once per connection.
    binds_arrays: ClassVar[bool] = False

    def is_transient(self, exc: DBAPIError) -> bool:
        """True if retrying the whole transaction may succeed (busy, dropped connection, deadlock)."""
        raise NotImplementedError

    def refuses_row(self, exc: DBAPIError) -> bool:
        """True if the database refused a value or a row of the statement (a value out of range, a
        constraint, a trigger): the same write fails again, but its other rows may not
        (`persched._store._tx.RefusedWrite`). Not a full disk, a read-only or missing table: those
        are the store's, and no row's."""
        return isinstance(exc, (DataError, IntegrityError))

    def lock_first(self, conn: Connection, query: Select[Any], limit: int) -> list[Row[Any]]:
        """The first `limit` rows of the ordered `query` that no other transaction holds, locked
        until this one ends (SKIP LOCKED): concurrent callers get disjoint rows, and none waits."""
        return list(conn.execute(query.limit(limit).with_for_update(skip_locked=True)))

    def unindexed(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """`column` as a term that the planner cannot look up by an index (so it uses another one)."""
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
        """Insert `rows` (driver values of the columns `names`, in driver SQL) in one statement,
        skipping a row a unique index holds already (one run per slot); the `returning`
        columns (a select list) of the rows inserted."""
        into = f"INSERT INTO {table.name} ({', '.join(names)}) VALUES {value_rows(len(rows), len(names))}"  # noqa: S608 - ours
        sql = f"{into} ON CONFLICT DO NOTHING RETURNING {returning}"
        return cur.execute(sql, tuple(value for row in rows for value in row)).fetchall()

    def insert_rows(self, cur: DriverCursor, table: Table, names: Sequence[str], rows: list[tuple[Any, ...]]) -> None:
        """Insert `rows` (driver values of the columns `names`), all of them or none (a row that is
        there already raises `IntegrityError`), in as few statements as the engine takes.

        The driver's executemany: one call, in-process on SQLite; PyMySQL sends the rows of an
        INSERT's executemany in multi-row statements of at most a megabyte itself.
        """
        cur.executemany(f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({marks(len(names))})", rows)  # noqa: S608 - ours

    def locking_sql(self, query: str) -> str:
        """The SELECT `query` (driver SQL), locking the rows it reads until the transaction ends (where reads
        do not already). In Core, ``Select.with_for_update()`` does it: SQLAlchemy leaves it out on SQLite."""
        return f"{query} FOR UPDATE"

    def update_sql(
        self, conn: Connection, table: Table, assignments: Sql, predicate: Sql, columns: str
    ) -> list[NamedRow]:
        """``UPDATE table SET assignments WHERE predicate … RETURNING columns``, in driver SQL:
        the `columns` (a select list) of the rows it changed, read raw (timestamps by `raw_instant`)."""
        sql = f"UPDATE {table.name} SET {assignments.text} WHERE {predicate.text} RETURNING {columns}"  # noqa: S608 - ours
        return list(self.execute(conn, Sql(sql, assignments.params + predicate.params)))

    def update_key_sql(
        self, conn: Connection, table: Table, assignments: Sql, key: object, columns: str
    ) -> NamedRow | None:
        """`update_sql` of the one row whose primary key is `key`: that row as written, or None if there is none.

        For a row this transaction holds already (read with `locking_sql`) or
        one the UPDATE itself locks: by its key, no other row is looked at.
        """
        (name,) = (column.name for column in table.primary_key.columns)
        return next(iter(self.update_sql(conn, table, assignments, Sql(f"{name} = ?", (key,)), columns)), None)

    def lock_claimable(self, cur: DriverCursor, table: Table, predicate: Sql, columns: str) -> list[tuple[Any, ...]]:
        """The claim's locking read, on the driver's cursor: the `columns` (a select list) of the rows of
        `table` where `predicate` holds that no other transaction holds, as the driver returns them,
        locked until this transaction ends; rows another transaction holds are passed by, not waited for.

        What it returns is what this claim wins: each row is claimed at most
        once, by whichever claim's locking read takes it first.
        """
        sql = f"SELECT {columns} FROM {table.name} WHERE {predicate.text} FOR UPDATE SKIP LOCKED"  # noqa: S608 - ours
        return cur.execute(sql, predicate.params).fetchall()

    def update_rows(
        self, cur: DriverCursor, table: Table, names: Sequence[str], key: Sequence[str], rows: list[tuple[Any, ...]]
    ) -> int:
        """Set the columns `names` of each row of `table` whose `key` columns hold the row's last values
        (driver values: ``(*values of names, *values of key)``), every row in one call; the rows changed.

        The driver's executemany: one call, a pipeline on psycopg, in-process on SQLite.
        """
        sets = ", ".join(f"{name} = ?" for name in names)
        where = " AND ".join(f"{name} = ?" for name in key)
        return self.update_each(cur, f"UPDATE {table.name} SET {sets} WHERE {where}", rows)  # noqa: S608 - ours

    def update_each(self, cur: DriverCursor, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run ``UPDATE <table> SET … WHERE …`` (driver SQL) once for each parameter row, every row in one
        call; the rows changed (matched), summed.

        Each row's WHERE names its own table row by its key, and no SET
        expression reads a column the statement sets but its own, so that the
        rows' updates are independent of one another and of their order.
        The driver's executemany: one call, a pipeline on psycopg, in-process on SQLite.
        """
        return cur.executemany(sql, rows).rowcount

    def execute(self, conn: Connection, statement: Sql) -> DriverRows:
        """Run one statement of driver SQL (its parameters raw: timestamps by `bind_instant`) on the
        driver's cursor (`DriverCursor`): the calls of schedule() and deschedule() run a few statements
        each, and SQLAlchemy's result for one costs about three times the driver's work. A connection
        not in a transaction begins one first, as SQLAlchemy's own execute would."""
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
        """A timestamp as the driver returns it raw -> instant (ValueError/TypeError if it is not one)."""
        raise NotImplementedError

    def read_instant_sql(self, column: str) -> str:
        """A timestamp column in a select list of rows read by `persched._store._rows` (which reads a
        driver's datetime or its naive UTC text): the column itself, where the driver reads it fast."""
        return column

    def select_many(self, cur: DriverCursor, columns: Sequence[str], rest: Sql) -> list[tuple[Any, ...]]:
        """The rows of ``SELECT <columns> <rest>`` (driver SQL), each a tuple of the values of `columns` as the
        driver returns them: a read of thousands of rows at once (declare()'s)."""
        return cur.execute(f"SELECT {', '.join(columns)} {rest.text}", rest.params).fetchall()

    def bind_instant(self, at: Instant) -> object:
        """An instant as the driver takes it for a timestamp column in driver SQL: what `UTCDateTime` writes."""
        raise NotImplementedError

    def migration_lock(self, conn: Connection, wait_seconds: float) -> None:
        """Serialise migrations across processes until `conn`'s transaction ends
        (or, where DDL ends transactions by itself, until `release_migration_lock`),
        waiting at most `wait_seconds` for another migration to end (else `LockWaitExpired`)."""
        raise NotImplementedError

    def release_migration_lock(self, conn: Connection) -> None:
        """Release what `migration_lock` holds beyond its transaction; called once that transaction ended.

        Nothing for engines whose lock ends with the transaction (SQLite's
        write lock, PostgreSQL's ``pg_advisory_xact_lock``). MySQL commits at
        every DDL statement, so its lock is a session's (``GET_LOCK``), and
        `_migrate.upgrade` releases it here, committed or not.
        """

    def announce_change(self, conn: Connection) -> None:
        """Wake the instances listening for changes (`change_listener`) when `conn`'s transaction commits.

        Nothing where the engine has no notifications: they read the change
        counter on their own (persched._engine.heartbeat).
        """

    def change_listener(self, raw: DBAPIConnection) -> ChangeListener:
        """Subscribe `raw`, a connection kept for this alone, to `announce_change` (`change_signal` "notify")."""
        raise NotImplementedError

    def data_version(self, raw: DBAPIConnection) -> int:
        """A number that `raw` sees change whenever another connection commits (`change_signal` "data_version")."""
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
