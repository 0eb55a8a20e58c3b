"""MySQL / MariaDB statements (prototype, to move into _store/dialects/mysql.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import select
from sqlalchemy.dialects import mysql

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Insert, Row, Select, Table, Update
    from sqlalchemy.engine import Connection
    from sqlalchemy.exc import DBAPIError

# Server error numbers that mean "try the transaction again": the server rolled it back
# (deadlock), a lock wait timed out, or the connection failed or was cut.
TRANSIENT_ERRORS: Final = frozenset(
    {
        1205,  # ER_LOCK_WAIT_TIMEOUT
        1213,  # ER_LOCK_DEADLOCK (InnoDB rolled the transaction back)
        1040,  # ER_CON_COUNT_ERROR: too many connections
        1053,  # ER_SERVER_SHUTDOWN
        1927,  # MariaDB ER_CONNECTION_KILLED
        4031,  # MySQL 8.0.24+ ER_CLIENT_INTERACTION_TIMEOUT
        2002,  # CR_CONNECTION_ERROR (socket)
        2003,  # CR_CONN_HOST_ERROR: can't connect
        2006,  # CR_SERVER_GONE_ERROR
        2013,  # CR_SERVER_LOST
        2055,  # CR_SERVER_LOST_EXTENDED
    }
)


def is_transient(exc: DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    args = getattr(exc.orig, "args", ())
    code = args[0] if args else None
    return isinstance(code, int) and code in TRANSIENT_ERRORS


def lock_rows(query: Select[Any]) -> Select[Any]:
    return query.with_for_update()


def _key(table: Table) -> ColumnElement[Any]:
    (pk,) = table.primary_key.columns
    return pk


def update_returning(conn: Connection, stmt: Update, *columns: ColumnElement[Any]) -> list[Row[Any]]:
    """UPDATE ... RETURNING without RETURNING: lock the rows the UPDATE would change, update
    those, read them back, all in the caller's transaction (the same rows, locked until COMMIT)."""
    table: Table = stmt.table  # type: ignore[assignment]  # an UPDATE of one table
    key = _key(table)
    where = stmt.whereclause
    find = select(key) if where is None else select(key).where(where)
    keys = list(conn.execute(find.with_for_update()).scalars())
    if not keys:
        return []
    conn.execute(stmt.where(key.in_(keys)))
    return list(conn.execute(select(*columns).where(key.in_(keys))).all())


def claim(
    conn: Connection, table: Table, predicate: ColumnElement[bool], values: dict[str, Any], columns: list[Any]
) -> list[Row[Any]]:
    """The claim: lock the due rows nobody else holds, update exactly those, read them back."""
    key = _key(table)
    free = list(conn.execute(select(key).where(predicate).with_for_update(skip_locked=True)).scalars())
    if not free:
        return []
    conn.execute(table.update().where(predicate, key.in_(free)).values(**values))
    return list(conn.execute(select(*columns).where(key.in_(free))).all())


def insert_ignoring_conflicts(table: Table) -> Insert:
    # A no-op update of the key: a duplicate slot is skipped, while data errors (too long,
    # out of range) still fail, unlike INSERT IGNORE, which turns them into warnings.
    insert = mysql.insert(table)
    key = _key(table)
    return insert.on_duplicate_key_update({key.name: key})


def insert_rows_returning_ids(
    conn: Connection, table: Table, rows: list[dict[str, Any]], slot: tuple[str, ...]
) -> list[int | None]:
    """Insert each row unless its slot exists; the new run_id of each, or None (skipped)."""
    insert = insert_ignoring_conflicts(table)
    ids: list[int | None] = []
    for row in rows:
        result = conn.execute(insert, row)
        new_id = result.lastrowid
        ids.append(int(new_id) if new_id else None)  # 0: the duplicate was skipped
    return ids
