"""A process that starts while another one migrates waits for that migration, up to migration_timeout_seconds.

The test itself migrates an empty database and holds that migration at its first CREATE TABLE
(the migration's lock held: SQLite's write lock, PostgreSQL's advisory lock, MySQL's GET_LOCK),
starts a scheduler in a child process (tests/support/migration_child.py) with a busy timeout of
0.2 s, and releases the migration only once it sees the child waiting: on SQLite the child's
log line that the lock was held past its busy timeout, on the servers the child's session
waiting for the lock. The child then finds the schema at head and starts without migrating.
A lock held past the child's migration_timeout_seconds is a `StoreError` that says so.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import event, make_url

from persched._store import db as _db
from persched._store import migrate as _migrate
from tests.multi._cluster import REPO, child_env
from tests.support.helpers import START_TIMEOUT, TIMEOUT, db_sql, wait_started

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sqlalchemy.engine import Engine

BUSY_TIMEOUT: Final = 0.2  # seconds: the child's statements; its wait for the migration is longer
WAITING_LINE: Final = "held past the busy timeout"  # the child's INFO line on SQLite (open_sqlite)


class HeldMigration:
    """`upgrade` of `engine` on a thread, stopped at its first CREATE TABLE until `release()`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.holding = threading.Event()
        self._release = threading.Event()
        self.errors: list[BaseException] = []
        event.listen(engine, "before_cursor_execute", self._hold)
        self._thread = threading.Thread(target=self._upgrade)
        self._thread.start()
        assert self.holding.wait(TIMEOUT), f"the migration did not start: {self.errors}"

    def _hold(self, *args: Any) -> None:  # noqa: ANN401 - SQLAlchemy's listener arguments
        statement: str = args[2]
        if statement.lstrip().upper().startswith("CREATE TABLE") and not self.holding.is_set():
            self.holding.set()
            self._release.wait(START_TIMEOUT)

    def _upgrade(self) -> None:
        try:
            _migrate.upgrade(self.engine)
        except BaseException as exc:  # noqa: BLE001 - reported by `release`
            self.errors.append(exc)
            self.holding.set()

    def release(self) -> None:
        """Let the migration go on; wait for it to end, and check that it migrated."""
        self._release.set()
        self._thread.join(START_TIMEOUT)
        assert not self._thread.is_alive()
        assert self.errors == []
        assert _migrate.current_revision(self.engine) == _migrate.HEAD


class Child:
    """A `migration_child` process; its stdout and stderr in files (read while it runs)."""

    def __init__(self, url: str, tmp_path: Path, migration_timeout: float) -> None:
        self.out = tmp_path / "child.out"
        self.err = tmp_path / "child.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.migration_child",
                    url,
                    str(BUSY_TIMEOUT),
                    str(migration_timeout),
                ],
                cwd=REPO,
                env=child_env(),
                stdout=out,
                stderr=err,
            )

    def output(self) -> str:
        return f"stdout:\n{self.out.read_text()}\nstderr:\n{self.err.read_text()}"

    def finish(self) -> tuple[int, str, str]:
        """Wait for the child to exit: its status, stdout and stderr."""
        try:
            status = self.proc.wait(START_TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(TIMEOUT)
        return status, self.out.read_text(), self.err.read_text()


def waiting_for_the_lock(url: str, child: Child) -> Callable[[], bool]:
    """Whether `child` waits for the migration's lock now (a probe, read from outside the child)."""
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return lambda: WAITING_LINE in child.err.read_text()
    if backend == "postgresql":
        # The held migration has its advisory lock; a session that waits for it has one not granted.
        probe = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    else:
        probe = "SELECT count(*) FROM information_schema.processlist WHERE info LIKE 'SELECT GET_LOCK(%'"
    return lambda: db_sql(url, probe)[0][0] > 0


def test_a_process_starting_during_a_migration_waits_for_it(empty_db_url: str, tmp_path: Path) -> None:
    engine = _db.make_engine(empty_db_url)
    try:
        migration = HeldMigration(engine)
        child = Child(empty_db_url, tmp_path, migration_timeout=START_TIMEOUT)
        try:
            try:
                wait_started(
                    child.proc,
                    waiting_for_the_lock(empty_db_url, child),
                    "the child waits for the migration's lock",
                    child.output,
                )
            finally:
                migration.release()
        finally:
            status, out, err = child.finish()
    finally:
        engine.dispose()
    assert status == 0, child.output()
    assert out.splitlines() == ["made", f"started {_migrate.HEAD}"], child.output()
    # It found the schema at head: no migration of its own.
    assert "Running upgrade" not in err, err
    assert "migrated" not in err, err


def test_a_migration_lock_held_past_migration_timeout_is_a_clear_error(empty_db_url: str, tmp_path: Path) -> None:
    engine = _db.make_engine(empty_db_url)
    try:
        migration = HeldMigration(engine)
        try:
            child = Child(empty_db_url, tmp_path, migration_timeout=0.5)
            status, out, _ = child.finish()  # the lock is held until the child gave up
        finally:
            migration.release()
    finally:
        engine.dispose()
    assert status == 3, child.output()
    assert "migration_timeout_seconds (0.5 s)" in out, child.output()
    assert "run `persched migrate` once before starting the processes" in out, child.output()
