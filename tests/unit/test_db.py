"""persched._store.db: URL parsing, SQLite file handling, PRAGMAs, BEGIN IMMEDIATE."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import threading
from contextlib import closing
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError

from persched._store import db as _db
from persched._store import migrate as _migrate
from persched._store.dialects import mysql as _mysql
from persched._store.dialects import sqlite as _sqlite
from persched.errors import InvalidJobError, StoreError
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sqlalchemy.engine import Engine


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run the test with the temp dir as the working directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    """Engines appended here are disposed at teardown."""
    made: list[Engine] = []
    yield made
    for eng in made:
        eng.dispose()


# -- to_url / mask -----------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "database"),
    [
        ("jobs.db", "jobs.db"),
        ("/x/y.db", "/x/y.db"),
        ("dir/with space.db", "dir/with space.db"),
    ],
)
def test_plain_path_is_a_sqlite_file_url(given: str, database: str) -> None:
    url = _db.to_url(given)
    assert url.drivername == "sqlite"
    assert url.database == database


def test_sqlalchemy_urls_pass_through() -> None:
    assert _db.to_url("sqlite:///jobs.db").database == "jobs.db"
    assert _db.to_url("sqlite://").database is None
    url = _db.to_url("postgresql+psycopg://u:pw@h:5432/db")
    assert (url.drivername, url.host, url.port, url.database) == (
        "postgresql+psycopg",
        "h",
        5432,
        "db",
    )


@pytest.mark.parametrize("given", ["postgresql://u@h/db", "postgres://u@h/db"])
def test_postgresql_maps_to_psycopg3(given: str) -> None:
    assert _db.to_url(given).drivername == "postgresql+psycopg"


@pytest.mark.parametrize(
    "given", ["mysql://u@h/db", "mysql+pymysql://u@h/db", "mariadb://u@h/db", "mariadb+pymysql://u@h/db"]
)
def test_mysql_and_mariadb_map_to_pymysql(given: str) -> None:
    # One dialect name for both servers (persched._store.db): the MySQL dialect tells MariaDB apart itself.
    url = _db.to_url(given)
    assert url.drivername == "mysql+pymysql"
    assert (url.host, url.database) == ("h", "db")
    assert _db.mask(_db.to_url("mariadb://u:s3cret@h/db")) == "mysql+pymysql://u:***@h/db"


@pytest.mark.parametrize(
    "given",
    [
        "",
        "   ",
        "foo://x",
        "mysql+mysqldb://u:pw@h/db",
        "mariadb+mariadbconnector://u:pw@h/db",
        "postgresql+psycopg2://u@h/db",
        "sqlite+foo:///x.db",
    ],
)
def test_bad_url_raises_store_error(given: str) -> None:
    with pytest.raises(StoreError) as info:
        _db.to_url(given)
    assert "pw" not in str(info.value)


def test_mask_hides_password() -> None:
    assert _db.mask(_db.to_url("postgresql://u:s3cret@h/db")) == "postgresql+psycopg://u:***@h/db"
    assert "s3cret" not in _db.mask("postgresql://u:s3cret@h/db")
    assert _db.mask("jobs.db") == "jobs.db"


# -- SQLite files --------------------------------------------------------------


def test_new_file_is_owner_only(in_tmp: Path, engines: list[Engine]) -> None:
    engines.append(_db.make_engine("new.db"))
    assert stat.S_IMODE(os.stat(in_tmp / "new.db").st_mode) == 0o600
    _migrate.upgrade(engines[0])
    # SQLite gives the -wal/-shm files the database file's mode.
    for side in in_tmp.glob("new.db-*"):
        assert stat.S_IMODE(side.stat().st_mode) & 0o077 == 0, side


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///file:new.db?uri=true",
        "sqlite:///file:new.db?mode=rwc&uri=true",
        "sqlite:///file:new.db?cache=shared&uri=true",
        "sqlite:///file:new.db?mode=rwc&uri=true&cache=private",
    ],
)
def test_new_file_named_by_uri_is_owner_only(in_tmp: Path, engines: list[Engine], url: str) -> None:
    """Owner-only also for a URI filename (was created 0644 by SQLite itself)."""
    engines.append(_db.make_engine(url))
    assert stat.S_IMODE(os.stat(in_tmp / "new.db").st_mode) == 0o600
    _migrate.upgrade(engines[0])
    for side in in_tmp.glob("new.db-*"):
        assert stat.S_IMODE(side.stat().st_mode) & 0o077 == 0, side


def test_new_file_named_by_absolute_uri_is_owner_only(in_tmp: Path, engines: list[Engine]) -> None:
    path = in_tmp / "with space.db"
    engines.append(_db.make_engine(f"sqlite:///file://{str(path).replace(' ', '%20')}?uri=true"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_uri_that_never_creates_is_not_created(in_tmp: Path, mode: str) -> None:
    with pytest.raises(StoreError, match="cannot open"):
        _db.make_engine(f"sqlite:///file:absent.db?mode={mode}&uri=true")
    assert not (in_tmp / "absent.db").exists()


def test_existing_file_mode_is_left_alone(in_tmp: Path, engines: list[Engine]) -> None:
    (in_tmp / "old.db").touch(mode=0o644)
    os.chmod(in_tmp / "old.db", 0o644)
    engines.append(_db.make_engine("old.db"))
    assert stat.S_IMODE(os.stat(in_tmp / "old.db").st_mode) == 0o644


def test_garbage_file_raises_and_is_untouched(in_tmp: Path) -> None:
    garbage = in_tmp / "garbage.db"
    content = b"this is not a SQLite database\n" * 200
    garbage.write_bytes(content)
    with pytest.raises(StoreError) as info:
        _db.make_engine("garbage.db")
    assert "sqlite:///garbage.db" in str(info.value)
    assert "not a SQLite database" in str(info.value)
    assert garbage.read_bytes() == content
    assert sorted(p.name for p in in_tmp.iterdir()) == ["garbage.db"]


def test_missing_directory_raises(in_tmp: Path) -> None:
    with pytest.raises(StoreError, match="does not exist") as info:
        _db.make_engine("no/such/dir/jobs.db")
    assert "no/such/dir/jobs.db" in info.value.url
    assert not (in_tmp / "no").exists()


def test_missing_file_without_create_raises(in_tmp: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        _db.make_engine("absent.db", create=False)
    assert not (in_tmp / "absent.db").exists()


def test_read_only_uri_raises_store_error_at_upgrade(in_tmp: Path, engines: list[Engine]) -> None:
    _db.make_engine("ro.db").dispose()
    eng = _db.make_engine("sqlite:///file:ro.db?mode=ro&uri=true")
    engines.append(eng)
    with pytest.raises(StoreError, match="read-only"):
        _migrate.upgrade(eng)


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_file_raises_store_error(in_tmp: Path) -> None:
    _db.make_engine("ro.db").dispose()
    os.chmod(in_tmp / "ro.db", 0o400)
    with pytest.raises(StoreError):
        _open_and_upgrade("ro.db")


def _open_and_upgrade(path: str) -> None:
    # make_engine may already refuse a read-only file; else upgrade must.
    eng = _db.make_engine(path)
    try:
        _migrate.upgrade(eng)
    finally:
        eng.dispose()


def test_pragmas_read_back(in_tmp: Path, engines: list[Engine]) -> None:
    eng = _db.make_engine("p.db", busy_timeout_seconds=2.5)
    engines.append(eng)
    with eng.connect() as conn:
        values = {
            name: conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys", "temp_store")
        }
    assert values == {
        "journal_mode": "wal",
        "synchronous": 2,
        # SQLite's own handler waits briefly; BEGIN IMMEDIATE waits the 2.5 s (see the next test).
        "busy_timeout": _sqlite.BUSY_SLICE_MS,
        "foreign_keys": 1,
        "temp_store": 2,  # MEMORY: a dispatch cycle's statement journals spill to no temp file
    }


def test_a_new_file_has_small_pages_and_checkpoints_by_bytes(in_tmp: Path, engines: list[Engine]) -> None:
    eng = _db.make_engine("n.db")
    engines.append(eng)
    _migrate.upgrade(eng)
    with eng.connect() as conn:
        page_size = conn.exec_driver_sql("PRAGMA page_size").scalar()
        checkpoint = conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()
    assert page_size == _sqlite.PAGE_SIZE  # not SQLite's default, 4096
    assert checkpoint == _sqlite.CHECKPOINT_BYTES // _sqlite.PAGE_SIZE


def test_an_existing_file_keeps_its_page_size(in_tmp: Path, engines: list[Engine]) -> None:
    """A file made with SQLite's default pages (persched before, or anything else) opens as it is."""
    with closing(sqlite3.connect(in_tmp / "old.db", isolation_level=None)) as made:
        made.execute("PRAGMA journal_mode = WAL")
        made.execute("CREATE TABLE t (x INTEGER)")
        made.execute("INSERT INTO t VALUES (7)")
        assert made.execute("PRAGMA page_size").fetchone()[0] == 4096
    eng = _db.make_engine("old.db")
    engines.append(eng)
    with eng.begin() as conn:
        conn.exec_driver_sql("INSERT INTO t VALUES (8)")
    with eng.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA page_size").scalar() == 4096
        assert conn.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == _sqlite.CHECKPOINT_BYTES // 4096
        assert conn.exec_driver_sql("SELECT x FROM t ORDER BY x").scalars().all() == [7, 8]


def test_the_connection_used_last_is_taken_first(in_tmp: Path, engines: list[Engine]) -> None:
    """Its page cache is warm (a connection that missed another's commit starts with an empty one)."""
    eng = _db.make_engine("l.db")
    engines.append(eng)
    with eng.connect() as first, eng.connect() as second:
        first_raw, second_raw = first.connection.dbapi_connection, second.connection.dbapi_connection
    assert first_raw is not second_raw
    # `first` went back last (the with-statement closes `second` first): it is taken again and again.
    for _ in range(3):
        with eng.connect() as conn:
            assert conn.connection.dbapi_connection is first_raw


def test_begin_immediate_waits_for_the_write_lock_and_takes_it_once_free(in_tmp: Path, engines: list[Engine]) -> None:
    """The write lock is retried in short steps up to busy_timeout_seconds."""
    eng = _db.make_engine("w.db", busy_timeout_seconds=TIMEOUT)
    engines.append(eng)
    with eng.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    tries = 0
    retried = threading.Event()

    def count(conn: object, cursor: object, statement: str, *rest: object) -> None:
        nonlocal tries
        if statement == "BEGIN IMMEDIATE":
            tries += 1
            if tries >= 3:
                retried.set()

    event.listen(eng, "before_cursor_execute", count)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with eng.begin() as conn:
                conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(exc)

    with closing(sqlite3.connect(in_tmp / "w.db", isolation_level=None, timeout=TIMEOUT)) as other:
        other.execute("BEGIN IMMEDIATE")
        writer = threading.Thread(target=write)
        writer.start()
        assert retried.wait(TIMEOUT), "the writer did not retry BEGIN IMMEDIATE"
        other.execute("COMMIT")
        writer.join(TIMEOUT)
    assert not writer.is_alive()
    assert errors == []
    with eng.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM t").scalar() == 1


def test_synchronous_option(in_tmp: Path, engines: list[Engine]) -> None:
    eng = _db.make_engine("s.db", synchronous="normal")
    engines.append(eng)
    with eng.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    with pytest.raises(InvalidJobError, match="synchronous"):
        _db.make_engine("s.db", synchronous="sometimes")
    with pytest.raises(InvalidJobError, match="busy_timeout_seconds"):
        _db.make_engine("s.db", busy_timeout_seconds=-1)


def test_in_memory_database_is_shared(engines: list[Engine]) -> None:
    eng = _db.make_engine("sqlite://")
    engines.append(eng)
    with eng.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    with eng.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM t")).scalar() == 0


# -- BEGIN IMMEDIATE -----------------------------------------------------------


def test_write_transactions_take_the_write_lock_at_begin(in_tmp: Path, engines: list[Engine]) -> None:
    first = _db.make_engine("w.db", busy_timeout_seconds=0.05)
    second = _db.make_engine("w.db", busy_timeout_seconds=0.05)
    engines += [first, second]
    with first.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    with first.begin() as conn:
        # BEGIN IMMEDIATE took the write lock before any statement ran ...
        conn.execute(text("SELECT count(*) FROM t")).scalar()
        # ... so a second writer can't even begin (a deferred BEGIN would have
        # succeeded here and deadlocked later, upgrading its read lock).
        with pytest.raises(OperationalError, match="locked"), second.begin():
            pass
        with (
            pytest.raises(StoreError, match="locked"),
            _db.store_errors(second),
            second.begin(),
        ):
            pass
        # A reader (deferred BEGIN) is not held back by the writer in WAL mode.
        with second.connect() as reader:
            reader.execution_options(**{_db.READONLY: True})
            with reader.begin():
                assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 0


def test_readonly_transaction_does_not_block_a_writer(in_tmp: Path, engines: list[Engine]) -> None:
    first = _db.make_engine("r.db", busy_timeout_seconds=0.05)
    second = _db.make_engine("r.db", busy_timeout_seconds=0.05)
    engines += [first, second]
    with first.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    with first.connect() as reader:
        reader.execution_options(**{_db.READONLY: True})
        with reader.begin():
            assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 0
            with second.begin() as writer:
                writer.execute(text("INSERT INTO t VALUES (1)"))
            # Snapshot isolation: the reader still sees its snapshot.
            assert reader.execute(text("SELECT count(*) FROM t")).scalar() == 0


# -- PostgreSQL boundary -------------------------------------------------------


def test_postgres_password_masked_in_store_error() -> None:
    # Port 1 on localhost refuses at once; no server needed.
    with pytest.raises(StoreError) as info:
        _db.make_engine("postgresql://alice:s3cret-pw@127.0.0.1:1/db")
    message = str(info.value)
    assert "s3cret-pw" not in message
    assert "alice:***@127.0.0.1:1/db" in message
    assert "s3cret-pw" not in info.value.url


def test_missing_psycopg_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "psycopg" or m.startswith("psycopg.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # makes `import psycopg` fail
    with pytest.raises(StoreError, match=r"pip install persched\[postgres\]"):
        _db.make_engine("postgresql://u:pw@127.0.0.1:1/db")


@pytest.mark.mariadb
def test_mariadb_sessions_are_read_committed_strict_utc_utf8mb4(mariadb_url: str) -> None:
    # persched._store.dialects.mysql: the isolation level the store is written for, no silent truncation, UTC.
    engine = _db.make_engine(mariadb_url)
    try:
        with engine.connect() as conn:
            # MariaDB < 11.1 names it tx_isolation, MySQL 8 transaction_isolation.
            level = "tx_isolation" if getattr(engine.dialect, "is_mariadb", False) else "transaction_isolation"
            isolation, mode, zone, charset, wait = conn.exec_driver_sql(
                f"SELECT @@{level}, @@sql_mode, @@time_zone, @@character_set_connection, @@innodb_lock_wait_timeout"
            ).one()
            conn.rollback()
    finally:
        engine.dispose()
    assert isolation == "READ-COMMITTED"
    assert "STRICT_ALL_TABLES" in mode.split(",")
    assert "ANSI_QUOTES" not in mode.split(",")
    assert (zone, charset, wait) == ("+00:00", "utf8mb4", _mysql.MYSQL_LOCK_WAIT)


@pytest.mark.mariadb
def test_an_unreachable_mariadb_is_a_store_error_with_the_password_masked() -> None:
    with pytest.raises(StoreError) as info:
        _db.make_engine("mysql://u:s3cret@127.0.0.1:1/db?connect_timeout=2")
    assert "s3cret" not in str(info.value)
    assert "127.0.0.1:1" in str(info.value)
