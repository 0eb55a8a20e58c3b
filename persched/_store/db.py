"""Database URLs and engines: URL/path parsing, SQLite PRAGMAs, BEGIN IMMEDIATE.

Everything that turns a user's ``--db`` value into a working SQLAlchemy
``Engine`` lives here, and so does the boundary that turns driver errors into
`StoreError` with the password masked.

SQLite notes. PRAGMAs are per connection, so they are set in a ``connect``
listener. pysqlite's own transaction handling is switched off
(``isolation_level = None``) and an engine ``begin`` listener owns the BEGIN:
``BEGIN IMMEDIATE`` takes the write lock up front, so two transactions that
both read and then write never deadlock upgrading their locks (Prefect; Huey's
``begin exclusive``). A connection with execution option
``persched_readonly=True`` gets a plain (deferred) ``BEGIN`` instead, so that
readers never queue behind writers.

MySQL and MariaDB notes (`_mysql_engine`). ``mysql://`` and ``mariadb://``
go through PyMySQL (the ``mysql`` extra), always as ``mysql+pymysql`` so that
the code sees one dialect name, ``"mysql"``, for both servers. Every session
runs at READ COMMITTED, like PostgreSQL's default and for the same reason: the
store is written for "each statement sees the latest commit", and REPEATABLE
READ's snapshot (taken at a transaction's first read) would show a dispatch
cycle rows as they were before other instances' commits, while its gap locks
on the due-rows index range would make ``schedule()`` inserts wait behind a
claim and deadlock with it. Locking reads and UPDATEs read the latest
committed row at either level. The session is strict (``sql_mode``: a value
that does not fit is an error, never silently truncated), on UTC, utf8mb4,
and waits at most `MYSQL_LOCK_WAIT` seconds for a row lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import sqlite3
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Final, cast

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from persched import _realtime
from persched._store.options import EngineOptions
from persched._store.schema import attach_index_predicates
from persched.errors import InvalidJobError, StoreError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sqlalchemy.engine import Connection, Engine
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry

__all__ = [
    "MYSQL_LOCK_WAIT",
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

#: Execution option: ``conn.execution_options(persched_readonly=True)`` makes
#: the next transaction on a SQLite connection a deferred ``BEGIN``.
READONLY: Final = "persched_readonly"

_FILE_MODE: Final = 0o600  # owner only
BUSY_SLICE_MS: Final = 5  # SQLite's own busy wait per statement (its first tries: 1, 2 ms)
BEGIN_FIRST_DELAY: Final = 0.0005  # seconds between BEGIN IMMEDIATE tries, doubled up to
BEGIN_MAX_DELAY: Final = 0.004  # seconds: well under one 0.1 s slot, and cheap to retry
# Bytes a WAL file keeps once a checkpoint reset it. SQLite otherwise keeps
# the WAL at the largest size it ever grew to (a long reader can hold a
# checkpoint back for gigabytes); above the ~4 MiB of a normal
# auto-checkpoint cycle, so that cycle never truncates and regrows.
JOURNAL_SIZE_LIMIT: Final = 8 << 20
_PG_CONNECT_TIMEOUT: Final = 10  # seconds, unless the URL says otherwise
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
_MYSQL_BACKENDS: Final = ("mysql", "mariadb")
_PASSWORD_RE: Final = re.compile(r"(://[^/:@]*:)[^@/]*(@)")


def to_url(url_or_path: str) -> URL:
    """Parse a SQLAlchemy URL or a plain SQLite file path.

    ``"jobs.db"`` and ``"/x/y.db"`` become SQLite file URLs; ``postgresql://``
    and ``postgres://`` are mapped to the psycopg 3 driver.

    Args:
        url_or_path: A URL such as ``sqlite:///jobs.db`` or
            ``postgresql+psycopg://user@host/db``, or a file path.

    Returns:
        The parsed URL.

    Raises:
        InvalidJobError: `url_or_path` is not a str.
        StoreError: The URL cannot be parsed or names an unsupported database.
    """
    given: object = url_or_path  # callers may pass anything: refuse it cleanly
    if not isinstance(given, str):
        raise InvalidJobError("url", f"must be a str (a database URL or a file path), got {type(given).__name__}")
    if "\x00" in url_or_path:  # no file name or host can hold one
        raise StoreError(_mask_text(url_or_path.replace("\x00", "\\x00")), "the database URL or path contains NUL")
    if not url_or_path.strip():
        raise StoreError(repr(url_or_path), "empty database URL or path")
    if "://" not in url_or_path:
        # A plain path; "C:\\x.db" has a colon but no "://".
        return URL.create("sqlite", database=url_or_path)
    try:
        url = make_url(url_or_path)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(_mask_text(url_or_path), f"not a valid database URL: {exc}") from exc
    backend = url.get_backend_name()
    driver = url.drivername.partition("+")[2]
    if backend in ("postgresql", "postgres"):  # "postgres": Heroku-style alias
        if driver not in ("", "psycopg"):
            raise StoreError(
                mask(url),
                f"unsupported PostgreSQL driver {driver!r}; use postgresql+psycopg://",
            )
        # PostgreSQL goes through psycopg 3 (the `postgres` extra).
        url = url.set(drivername="postgresql+psycopg")
    elif backend in _MYSQL_BACKENDS:
        if driver not in ("", "pymysql"):
            raise StoreError(mask(url), f"unsupported MySQL/MariaDB driver {driver!r}; use mysql+pymysql://")
        # One dialect name for both servers: the MySQL dialect finds out itself
        # that the server is MariaDB (dialect.is_mariadb).
        url = url.set(drivername="mysql+pymysql")
    elif backend == "sqlite":
        if driver not in ("", "pysqlite"):
            raise StoreError(mask(url), f"unsupported SQLite driver {driver!r}; use sqlite:///PATH")
    else:
        raise StoreError(
            mask(url),
            f"unsupported database {backend!r}; persched supports sqlite:///PATH, postgresql+psycopg://USER@HOST/DB"
            " and mysql+pymysql://USER@HOST/DB (MySQL or MariaDB)",
        )
    try:
        url.get_dialect()
    except NoSuchModuleError as exc:
        raise StoreError(mask(url), f"unknown database driver: {exc}") from exc
    return url


def mask(url: URL | str) -> str:
    """Render a URL for messages and logs, with its password hidden.

    Args:
        url: A parsed URL, or a string (a plain path is returned as is).

    Returns:
        The URL as text, password replaced by ``***``.
    """
    if isinstance(url, URL):
        return url.render_as_string(hide_password=True)
    if "://" not in url:
        return url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return _mask_text(url)


def _mask_text(text_url: str) -> str:
    # For strings that make_url refuses: hide anything between "user:" and "@".
    return _PASSWORD_RE.sub(r"\1***\2", text_url)


def is_sqlite(engine: Engine | Connection) -> bool:
    """Return True if `engine` talks to SQLite."""
    return engine.dialect.name == "sqlite"


def shares_one_connection(engine: Engine) -> bool:
    """Return True if every checkout of `engine` is the same connection (in-memory SQLite)."""
    return isinstance(engine.pool, StaticPool)


def is_mysql(engine: Engine | Connection) -> bool:
    """Return True if `engine` talks to MySQL or MariaDB."""
    return engine.dialect.name in _MYSQL_BACKENDS


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
    # Belt and braces: never echo a password even if a driver did.
    if url.password:
        message = message.replace(str(url.password), "***")
    return message


@contextlib.contextmanager
def store_errors(url: URL | Engine | Connection) -> Iterator[None]:
    """Turn database errors raised inside the block into `StoreError`.

    Args:
        url: The URL (or an engine/connection whose URL is used) to name in the
            error, password masked.

    Raises:
        StoreError: A `SQLAlchemyError` (or a raw DBAPI error) was raised in the
            block; the original is chained as ``__cause__``.
    """
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
    """Create an engine for a persched store and check that it can be used.

    For a SQLite file, a missing file is created readable and writable by its
    owner only, and every connection gets WAL, ``synchronous``, a
    busy timeout and ``foreign_keys=ON``. Write transactions begin with
    ``BEGIN IMMEDIATE``; pass execution option ``persched_readonly=True`` for a
    deferred ``BEGIN``. ``sqlite://`` (in memory) uses a single shared
    connection. PostgreSQL URLs use psycopg 3 with ``pool_pre_ping``;
    MySQL/MariaDB URLs PyMySQL with ``pool_pre_ping`` at READ COMMITTED (see
    the module docstring).

    Args:
        url_or_path: A SQLAlchemy URL or a plain SQLite file path.
        busy_timeout_seconds: How long SQLite waits for a lock before failing.
        synchronous: SQLite ``PRAGMA synchronous``: OFF, NORMAL, FULL or EXTRA.
            FULL (the default) makes a committed claim survive power loss.
        create: Create a missing SQLite file; if False a missing file is an
            error (for read-only commands).

    Returns:
        A ready engine; the caller disposes it.

    Raises:
        InvalidJobError: `busy_timeout_seconds` or `synchronous` is invalid.
        StoreError: The database cannot be opened or is not a database.
    """
    return open_engine(url_or_path, EngineOptions.checked(busy_timeout_seconds, synchronous), create=create)


def open_engine(url_or_path: str, options: EngineOptions, *, create: bool = True) -> Engine:
    """`make_engine` with options checked already (a `JobScheduler`'s config): nothing is checked twice."""
    busy_timeout_seconds, sync = options.busy_timeout_seconds, options.synchronous
    url = to_url(url_or_path)
    if url.get_backend_name() == "sqlite":
        engine = _sqlite_engine(url, busy_timeout_seconds, sync, create)
    elif url.get_backend_name() in _MYSQL_BACKENDS:
        engine = _mysql_engine(url)
    else:
        engine = _postgres_engine(url)
    # The partial indexes' WHERE for this engine's DDL (Alembic, create_all), now that its
    # dialect is imported anyway; declared lazily so that no other dialect is.
    attach_index_predicates(engine.dialect.name)
    try:
        with store_errors(url), engine.connect() as conn:
            # Cheap check that reads the header: a garbage file, an unreadable
            # file or a bad host fails here, not at the first job.
            if is_sqlite(conn):
                conn.exec_driver_sql("PRAGMA schema_version").scalar()
            else:
                conn.execute(text("SELECT 1")).scalar()
    except BaseException:
        engine.dispose()
        raise
    return engine


def _sqlite_file(url: URL) -> str | None:
    """The file a SQLite URL opens and may create, or None (in memory, or SQLite creates nothing)."""
    database = url.database or ""
    if str(url.query.get("uri", "")).lower() in ("true", "1"):
        return _uri_file(database, url)
    if database in ("", ":memory:") or database.startswith("file:"):
        return None
    return database


def _uri_file(database: str, url: URL) -> str | None:
    """The file of a URI filename (``file:jobs.db?mode=rwc``) that SQLite would create, or None.

    A file persched creates is owner-only, also when it is named by
    URI; so the file is made here, 0600, before SQLite opens it. ``mode=ro``
    and ``mode=rw`` never create, ``mode=memory`` is no file.
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


def make_read_only_engine(url_or_path: str, *, busy_timeout_seconds: float = 5.0) -> tuple[Engine, str | None]:
    """Open an existing database for reading, also where it cannot be written (for read-only commands).

    A SQLite file in a read-only directory cannot get the ``-wal`` and
    ``-shm`` files that WAL mode needs, so the normal open fails. Then the
    file is opened ``mode=ro``; if that fails too (no ``-shm`` can be made),
    ``immutable=1``: no locks and no WAL, which is right only because nobody
    can write there either.

    Returns:
        The engine (the caller disposes it) and, if it had to fall back, one
        line saying how the database was opened (None otherwise).

    Raises:
        StoreError: The database cannot be opened even read-only; the error
            of the normal open.
    """
    options = EngineOptions.checked(busy_timeout_seconds, "FULL")
    try:
        return open_engine(url_or_path, options, create=False), None
    except StoreError as exc:
        url = to_url(url_or_path)
        path = _sqlite_file(url) if url.get_backend_name() == "sqlite" else None
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
        engine = _sqlite_engine(uri, options.busy_timeout_seconds, options.synchronous, create=False, read_only=True)
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


def _sqlite_engine(
    url: URL, busy_timeout_seconds: float, sync: str, create: bool, *, read_only: bool = False
) -> Engine:
    path = _sqlite_file(url)
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
    engine = create_engine(url, connect_args=connect_args, **kwargs)
    busy_ms = int(busy_timeout_seconds * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        raw = cast("sqlite3.Connection", dbapi_conn)
        raw.isolation_level = None  # we own BEGIN (see module docstring)
        cursor = raw.cursor()
        try:
            # busy_timeout first: switching to WAL may wait for a lock.
            # SQLite's own busy handler waits only briefly; `_begin_immediate`
            # waits for the write lock (see there), up to busy_timeout_seconds.
            cursor.execute(f"PRAGMA busy_timeout = {min(busy_ms, BUSY_SLICE_MS)}")
            if not read_only:  # switching to WAL writes the file
                _ensure_wal(cursor, busy_timeout_seconds)
                cursor.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
            cursor.execute(f"PRAGMA synchronous = {sync}")
            cursor.execute("PRAGMA foreign_keys = ON")
        finally:
            cursor.close()

    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READONLY):
            conn.exec_driver_sql("BEGIN")
        else:
            _begin_immediate(conn, busy_timeout_seconds)

    event.listen(engine, "begin", _on_read_only_begin if read_only else _on_begin)
    return engine


def _ensure_wal(cursor: sqlite3.Cursor, busy_timeout_seconds: float) -> None:
    """Put the file in WAL mode, unless it is already.

    Switching needs an exclusive lock, and while another process opens the
    WAL (recovery) SQLite answers "database is locked" without calling the
    busy handler; several processes starting on one file at once (gunicorn
    workers) meet exactly that. So: skip the switch when the file already is
    in WAL mode, and retry a locked switch until busy_timeout has passed.
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

    Sharing one file must not cost slots: SQLite's busy handler sleeps 1, 2,
    5, ... then 100 ms between tries, so a process that waited a little
    sleeps through the moments the lock is free while the holder's next
    transaction takes it again: three processes on one file ran 60% of the
    slots one process runs, and one of them most of those. Here a waiting
    process retries every `BEGIN_MAX_DELAY` at most, so each gets the lock
    soon after it is released. Only BEGIN IMMEDIATE waits for the lock in
    WAL mode (readers never do, and the lock is held until COMMIT).
    """
    delay = BEGIN_FIRST_DELAY
    deadline: float | None = None
    while True:
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            return
        except OperationalError as exc:
            if not _is_busy(exc):
                raise
            now = _realtime.monotonic()
            deadline = now + busy_timeout_seconds if deadline is None else deadline
            if now >= deadline:
                raise
        # Backoff between lock attempts; no lock held. Jitter keeps waiters from retrying in step.
        time.sleep(delay * random.uniform(0.5, 1.5))
        delay = min(delay * 2, BEGIN_MAX_DELAY)


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


def _postgres_engine(url: URL) -> Engine:
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.query:
        connect_args["connect_timeout"] = _PG_CONNECT_TIMEOUT
    try:
        return create_engine(url, pool_pre_ping=True, connect_args=connect_args)
    except ImportError as exc:
        raise StoreError(
            mask(url),
            "the PostgreSQL driver is not installed: pip install persched[postgres]",
        ) from exc


def _mysql_engine(url: URL) -> Engine:
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
        return create_engine(
            url,
            pool_pre_ping=True,
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
