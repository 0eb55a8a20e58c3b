"""Database engines: which engine a URL opens, and the boundary of driver errors.

`make_engine` opens a user's ``--db`` value with its engine's dialect module,
imported only for that engine; `store_errors` turns driver errors into
`StoreError` with the password masked.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import urllib.parse
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import StaticPool

from persched._store.dialects import READONLY
from persched._store.options import EngineOptions
from persched._store.schema import attach_index_predicates
from persched._store.urls import MYSQL_BACKENDS, mask, to_url
from persched.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "READONLY",
    "is_mysql",
    "is_sqlite",
    "make_engine",
    "make_read_only_engine",
    "mask",
    "open_engine",
    "shares_one_connection",
    "store_errors",
    "to_url",
]

logger = logging.getLogger(__name__)


def is_sqlite(engine: Engine | Connection) -> bool:
    """Return True if `engine` talks to SQLite."""
    return engine.dialect.name == "sqlite"


def shares_one_connection(engine: Engine) -> bool:
    """Return True if every checkout of `engine` is the same connection (in-memory SQLite)."""
    return isinstance(engine.pool, StaticPool)


def is_mysql(engine: Engine | Connection) -> bool:
    """Return True if `engine` talks to MySQL or MariaDB."""
    return engine.dialect.name in MYSQL_BACKENDS


def _reason(exc: BaseException, url: URL) -> str:
    orig = getattr(exc, "orig", None) or exc
    message = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    lowered = message.lower()
    if "database is locked" in lowered or "database table is locked" in lowered:
        message = f"the database is locked past the busy timeout ({message})"
    elif "readonly database" in lowered or "read-only" in lowered:
        message = f"the database is read-only ({message})"
    elif "not a database" in lowered:
        message = f"the file is not a SQLite database ({message})"
    elif "unable to open database file" in lowered:
        message = f"cannot open the database file ({message})"
    # Never echo a password, even if a driver did.
    if url.password:
        message = message.replace(str(url.password), "***")
    return message


@contextlib.contextmanager
def store_errors(url: URL | Engine | Connection) -> Iterator[None]:
    """Turn database errors raised inside the block into `StoreError` naming `url`, password masked."""
    try:
        yield
    except SQLAlchemyError as exc:
        parsed = url if isinstance(url, URL) else url.engine.url
        raise StoreError(mask(parsed), _reason(exc, parsed)) from exc
    except Exception as exc:
        # Errors from connect listeners can arrive unwrapped as DBAPI errors.
        if not _is_dbapi_error(exc):
            raise
        parsed = url if isinstance(url, URL) else url.engine.url
        raise StoreError(mask(parsed), _reason(exc, parsed)) from exc


def _is_dbapi_error(exc: BaseException) -> bool:
    if isinstance(exc, sqlite3.Error):
        return True
    try:
        import psycopg
    except ImportError:
        pass
    else:
        if isinstance(exc, psycopg.Error):
            return True
    try:
        import pymysql
    except ImportError:
        return False
    return isinstance(exc, pymysql.Error)


def make_engine(
    url_or_path: str,
    *,
    busy_timeout_seconds: float = 5.0,
    synchronous: str = "FULL",
    create: bool = True,
) -> Engine:
    """Create an engine for a persched store, check that it can be used, and return it (the caller disposes it).

    A missing SQLite file is created owner-only (unless not `create`: read-only commands); every
    connection gets WAL, `synchronous` (FULL: a committed claim survives power loss), a busy timeout
    and ``foreign_keys=ON``, and writes begin with ``BEGIN IMMEDIATE``. ``sqlite://`` (in memory)
    shares one connection. PostgreSQL uses psycopg 3, MySQL and MariaDB PyMySQL at READ COMMITTED.

    Raises:
        InvalidJobError: `busy_timeout_seconds` or `synchronous` is invalid.
        StoreError: The database cannot be opened or is not a database.
    """
    return open_engine(url_or_path, EngineOptions.checked(busy_timeout_seconds, synchronous), create=create)


def open_engine(url_or_path: str, options: EngineOptions, *, create: bool = True) -> Engine:
    """`make_engine` with options checked already (a `JobScheduler`'s config)."""
    busy_timeout_seconds, sync = options.busy_timeout_seconds, options.synchronous
    url = to_url(url_or_path)
    if url.get_backend_name() == "sqlite":
        from .dialects.sqlite import open_sqlite

        engine = open_sqlite(url, busy_timeout_seconds, sync, create)
    elif url.get_backend_name() in MYSQL_BACKENDS:
        from .dialects.mysql import open_mysql

        engine = open_mysql(url)
    else:
        try:
            from .dialects.postgresql import open_postgresql

            engine = open_postgresql(url)
        except ImportError as exc:  # psycopg
            missing = "the PostgreSQL driver is not installed: pip install persched[postgres]"
            raise StoreError(mask(url), missing) from exc
    # The partial indexes' WHERE for this engine's DDL, now that its dialect is imported anyway.
    attach_index_predicates(engine.dialect.name)
    try:
        with store_errors(url), engine.connect() as conn:
            # Read the header: a garbage file or a bad host fails here, not at the first job.
            if is_sqlite(conn):
                # A deferred BEGIN: the write lock may be another process's for a while (its migration).
                conn.execution_options(**{READONLY: True})
                conn.exec_driver_sql("PRAGMA schema_version").scalar()
            else:
                conn.execute(text("SELECT 1")).scalar()
    except BaseException:
        engine.dispose()
        raise
    return engine


def make_read_only_engine(url_or_path: str, *, busy_timeout_seconds: float = 5.0) -> tuple[Engine, str | None]:
    """Open an existing database for reading, also where it cannot be written (for read-only commands).

    A SQLite file in a read-only directory cannot get its ``-wal`` and ``-shm``
    files, so it is opened ``mode=ro``, else ``immutable=1``: no locks and no
    WAL, right only because nobody can write there either.

    Returns the engine (the caller disposes it) and, if it fell back, a line saying how it opened.

    Raises:
        StoreError: The database cannot be opened even read-only (the normal open's error).
    """
    from .dialects.sqlite import open_sqlite, sqlite_file

    options = EngineOptions.checked(busy_timeout_seconds, "FULL")
    try:
        return open_engine(url_or_path, options, create=False), None
    except StoreError as exc:
        url = to_url(url_or_path)
        path = sqlite_file(url) if url.get_backend_name() == "sqlite" else None
        unwritable = "cannot open the database file" in str(exc) or "read-only" in str(exc)  # see _reason
        if path is None or not os.path.isfile(path) or not unwritable:
            raise
        first = exc
    where = os.path.abspath(path)
    for query, note in (
        ({"mode": "ro"}, "opened read-only"),
        ({"immutable": "1"}, "opened read-only and immutable (without locks; changes in a -wal file are not seen)"),
    ):
        uri = URL.create("sqlite", database=f"file:{urllib.parse.quote(where)}", query={**query, "uri": "true"})
        engine = open_sqlite(uri, options.busy_timeout_seconds, options.synchronous, create=False, read_only=True)
        try:
            with store_errors(uri), engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA schema_version").scalar()
        except StoreError:
            engine.dispose()
            continue
        directory = os.path.dirname(where)
        why = "its directory is read-only" if not os.access(directory, os.W_OK) else "it cannot be written"
        return engine, f"{mask(url)}: {why}; {note}"
    raise first
