"""Which failures a store transaction tries again, on each engine (docs/multi.md, "When an instance dies").

A failure that can pass (a lock wait that timed out, "database is locked")
is retried and then succeeds; one that fails the same way each time (more
parameters than the engine takes, a syntax error) fails at once, with the
database's own message, never "attempt 2 of 6".

The lock is held by a connection of the test; the store's retry (its
observer's `store_retry` seam) releases it, so the second attempt passes.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from persched._store import Store
from persched._store import db as _db
from persched._store.dialects import Sql, marks
from persched._store.observer import Observer
from persched.errors import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from sqlalchemy import Connection


class Attempts(Observer):
    """Counts the retries, and runs `on_retry` at the first."""

    def __init__(self, on_retry: Callable[[], None] = lambda: None) -> None:
        self.retries = 0
        self.errors = 0
        self._on_retry = on_retry

    def store_retry(self, operation: str) -> None:
        self.retries += 1
        if self.retries == 1:
            self._on_retry()

    def store_error(self, operation: str) -> None:
        self.errors += 1


def run(store: Store, body: Callable[[Connection], Any], observer: Attempts) -> Any:  # noqa: ANN401 - body's
    store.observer = observer
    return store._write(body, "test write")


def test_more_parameters_than_the_engine_takes_fail_at_once(store: Store) -> None:
    if store.dialect.name == "mysql":
        pytest.skip("PyMySQL binds parameters into the text: no limit of parameters to exceed")
    count = store.dialect.max_parameters + 1
    too_many = Sql(f"SELECT 1 FROM persched_changes WHERE id IN ({marks(count)})", tuple(range(count)))  # noqa: S608
    observer = Attempts()
    with pytest.raises(StoreError, match="test write failed") as raised:
        run(store, lambda conn: store.dialect.execute(conn, too_many).fetchall(), observer)
    assert (observer.retries, observer.errors) == (0, 1)
    assert "parameters" in str(raised.value) or "variables" in str(raised.value)  # the database's own words


def test_a_syntax_error_fails_at_once(store: Store) -> None:
    observer = Attempts()
    with pytest.raises(StoreError, match="test write failed"):
        run(store, lambda conn: store.dialect.execute(conn, Sql("SELEC seq FROM persched_changes")), observer)
    assert (observer.retries, observer.errors) == (0, 1)


@contextlib.contextmanager
def held_lock(store: Store, url: str) -> Iterator[Callable[[], None]]:
    """The change counter's row (SQLite: the whole file) locked by another connection; yields its release."""
    if store.dialect.name == "sqlite":
        blocker = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")

        def release() -> None:
            blocker.execute("ROLLBACK")

        try:
            yield release
        finally:
            blocker.close()
        return
    engine = create_engine(url, poolclass=NullPool)
    conn = engine.connect()
    try:
        conn.begin()
        conn.execute(text("SELECT seq FROM persched_changes WHERE id = 1 FOR UPDATE"))
        yield conn.rollback
    finally:
        conn.close()
        engine.dispose()


# A lock wait that gives up soon: PostgreSQL's lock_timeout, MariaDB's innodb_lock_wait_timeout
# (whole seconds); SQLite's busy timeout is the store engine's (below).
_SHORT_WAIT = {
    "postgresql": "SET LOCAL lock_timeout = '100ms'",
    "mysql": "SET SESSION innodb_lock_wait_timeout = 1",
}


def test_a_lock_wait_that_timed_out_is_retried(engine_name: str, db_url: str, store: Store) -> None:
    engine = _db.make_engine(db_url, busy_timeout_seconds=0.1)  # SQLite: "database is locked" soon
    short = Store(engine, store.url)
    try:

        def body(conn: Connection) -> int:
            if short.dialect.name in _SHORT_WAIT:
                short.dialect.execute(conn, Sql(_SHORT_WAIT[short.dialect.name]))
            found = short.dialect.execute(conn, Sql("UPDATE persched_changes SET seq = seq + 1 WHERE id = 1"))
            return int(found.rowcount)

        with held_lock(short, db_url) as release:
            observer = Attempts(on_retry=release)
            assert run(short, body, observer) == 1
        assert (observer.retries, observer.errors) == (1, 0)
    finally:
        engine.dispose()
