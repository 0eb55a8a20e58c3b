"""Every difference between the database engines persched runs on, behind one object.

The store's statements are written once, in SQLAlchemy Core; a `Dialect`
holds what cannot be: how a claim locks the rows it decides, what a
transient failure looks like, whether this process must queue its own
writers, how a write transaction begins, the raw form of a timestamp,
the lock that serialises migrations, and how other instances learn that
something changed (PostgreSQL's NOTIFY, SQLite's data_version). One module per engine; `dialect_for`
imports only the one in use (a SQLite user never loads the PostgreSQL
dialect of SQLAlchemy).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

from sqlalchemy import Row, select

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Connection, Engine, Insert, Select, Table, Update
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.exc import DBAPIError

    from ..._instant import Instant

__all__ = ["ChangeListener", "Dialect", "dialect_for"]

# engine name (SQLAlchemy's dialect.name) -> module of this package
_MODULES: dict[str, str] = {"sqlite": "sqlite", "postgresql": "postgresql", "mysql": "mysql", "mariadb": "mysql"}


class Dialect:
    """What one engine does differently; every method has the engine-neutral meaning in its docstring."""

    name: ClassVar[str]
    #: This process's writers queue for the database's single write lock in
    #: the store (SQLite), rather than in the engine's busy handler.
    serialise_local_writers: ClassVar[bool] = False
    #: How an instance learns cheaply that another one committed, so that it
    #: reads the change counter soon (persched._pickup): "notify" (a listening
    #: connection, `change_listener`), "data_version" (a cheap check,
    #: `data_version`), or None: only the counter's poll.
    change_signal: ClassVar[Literal["notify", "data_version"] | None] = None

    def is_transient(self, exc: DBAPIError) -> bool:
        """True if retrying the whole transaction may succeed (busy, dropped connection, deadlock)."""
        raise NotImplementedError

    def lock_rows(self, query: Select[Any]) -> Select[Any]:
        """`query`, locking the rows it reads until the transaction ends (where reads do not already)."""
        return query.with_for_update()

    def unindexed(self, column: ColumnElement[Any]) -> ColumnElement[Any]:
        """`column` as a term that the planner cannot look up by an index (so it uses another one)."""
        return column

    def update_returning(self, conn: Connection, stmt: Update, *columns: ColumnElement[Any]) -> list[Row[Any]]:
        """Run `stmt` and return `columns` of the rows it changed."""
        return list(conn.execute(stmt.returning(*columns)))

    def update_returning_one(self, conn: Connection, stmt: Update, *columns: ColumnElement[Any]) -> Row[Any] | None:
        """`update_returning` of a statement that changes at most one row: that row, or None."""
        rows = self.update_returning(conn, stmt, *columns)
        return rows[0] if rows else None

    def insert_returning(
        self, conn: Connection, stmt: Insert, *columns: ColumnElement[Any], rows: list[dict[str, Any]] | None = None
    ) -> list[Row[Any]]:
        """Run `stmt` (over `rows`, if given) and return `columns` of the rows it inserted (none for a skipped one)."""
        returning = stmt.returning(*columns)
        return list(conn.execute(returning) if rows is None else conn.execute(returning, rows))

    def claim(
        self,
        conn: Connection,
        table: Table,
        predicate: ColumnElement[bool],
        values: dict[str, Any],
        columns: list[ColumnElement[Any]],
    ) -> list[Row[Any]]:
        """The conditional claim: set `values` on the rows of `table` matching `predicate`, return their `columns`.

        This UPDATE is the linearization point of a run's start (SPEC §2):
        each row is claimed at most once, by whoever's UPDATE matches it first.
        """
        return self.update_returning(conn, table.update().where(predicate).values(**values), *columns)

    def insert_ignoring_conflicts(self, table: Table) -> Insert:
        """An INSERT into `table` that skips a row a unique index already holds (one run per slot)."""
        raise NotImplementedError

    def driver_sql(self, sql: str) -> str:
        """`sql` written with ``?`` placeholders, in the driver's parameter style (for `exec_driver_sql`)."""
        return sql

    def raw_instant(self, value: object) -> Instant:
        """A timestamp as the driver returns it raw -> instant (ValueError/TypeError if it is not one)."""
        raise NotImplementedError

    def migration_lock(self, conn: Connection) -> None:
        """Serialise migrations across processes until `conn`'s transaction ends
        (or, where DDL ends transactions by itself, until `release_migration_lock`)."""
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
        counter on their own (persched._heartbeat).
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


def select_keys(table: Table, predicate: ColumnElement[bool]) -> Select[Any]:
    """The primary keys of the rows of `table` that match `predicate`."""
    return select(*table.primary_key.columns).where(predicate)
