"""Restart, and the errors of opening a store: a new scheduler on the same database
resumes every job on its grid, keeps unchanged re-declarations, never
reuses a generation, keeps rows it cannot use, and refuses stores it cannot
use (StoreError) or a schema from the future (SchemaVersionError).

The restart tests run on every engine (``every_engine``). The stores that
cannot be used are SQLite files (garbage, a missing directory, read-only, a
lock held by plain ``sqlite3``) and stay on SQLite; so do the schema-version
tests, which rewrite the migration version of their database (on PostgreSQL
that is the session's shared schema: tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler
from persched.errors import PerschedError, SchemaVersionError, StoreError
from tests.support import jobs
from tests.support.helpers import TIMEOUT, at, db_sql, sql, sqlite_path, wait_finished, wait_until

if TYPE_CHECKING:
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine


def test_jobs_resume_on_their_grid(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    first = make_scheduler(start=True)
    first.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.advance(10.0)
    wait_finished(first, "a", 1)
    first.shutdown(wait=True, timeout=TIMEOUT)
    fake_clock.advance(5.0)
    # The application does not schedule anything again.
    second = make_scheduler(start=True)
    job = second.get_job("a")
    assert job is not None
    assert job.next_run_at == at(20)
    fake_clock.advance(5.0)
    runs = wait_finished(second, "a", 2)
    assert [r.scheduled_for for r in runs] == [at(20), at(10)]


def test_long_downtime_is_one_coalesced_run(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    """No catch-up storm after a restart."""
    first = make_scheduler(start=True)
    first.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.advance(10.0)
    wait_finished(first, "a", 1)
    first.shutdown(wait=True, timeout=TIMEOUT)
    fake_clock.advance(1003.0)  # down for 100 slots
    second = make_scheduler(start=True)
    runs = wait_finished(second, "a", 2)
    assert [r.scheduled_for for r in runs] == [at(1010), at(10)]
    wait_until(lambda: second.get_job("a").next_run_at == at(1020))  # type: ignore[union-attr]  # exists
    fake_clock.advance(7.0)
    runs = wait_finished(second, "a", 3)
    assert [r.scheduled_for for r in runs] == [at(1020), at(1010), at(10)]
    assert len(jobs.calls("a")) == 3


def test_identical_redeclaration_across_restart_keeps_next_run(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    """A job due during downtime still runs after re-declaration."""
    first = make_scheduler(start=True)
    original = first.schedule("a", jobs.record, 10.0, args=("a",), kwargs={"to": "ops"})
    first.shutdown(wait=True, timeout=TIMEOUT)
    fake_clock.advance(25.0)
    second = make_scheduler()
    again = second.schedule("a", jobs.record, 10.0, args=("a",), kwargs={"to": "ops"})
    assert again.generation == original.generation
    assert again.next_run_at == at(10)
    second.start()
    runs = wait_finished(second, "a", 1)
    assert [(r.generation, r.scheduled_for) for r in runs] == [(original.generation, at(20))]


def test_changed_redeclaration_across_restart_replaces(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    first = make_scheduler(start=True)
    original = first.schedule("a", jobs.record, 10.0, args=("a",))
    first.shutdown(wait=True, timeout=TIMEOUT)
    fake_clock.advance(25.0)
    second = make_scheduler()
    again = second.schedule("a", jobs.record, 30.0, args=("a",))
    assert again.generation > original.generation
    assert again.next_run_at == at(55)


def test_no_generation_reuse_across_restart(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    first = make_scheduler(start=True)
    g1 = first.schedule("a", jobs.record, 10.0, args=("a",)).generation
    assert first.deschedule("a") is True
    first.shutdown(wait=True, timeout=TIMEOUT)
    second = make_scheduler(start=True)
    assert second.get_job("a") is None
    assert second.jobs() == []
    g2 = second.schedule("a", jobs.record, 10.0, args=("a",)).generation
    assert g2 > g1
    second.shutdown(wait=True, timeout=TIMEOUT)
    third = make_scheduler()
    assert third.deschedule("a") is True
    g3 = third.schedule("a", jobs.record, 10.0, args=("a",)).generation
    assert g3 > g2


def test_descheduled_job_stays_descheduled_after_restart(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    first = make_scheduler(start=True)
    first.schedule("a", jobs.record, 10.0, args=("a",))
    first.schedule("b", jobs.record, 10.0, args=("b",))
    assert first.deschedule("a") is True
    first.shutdown(wait=True, timeout=TIMEOUT)
    second = make_scheduler(start=True)
    fake_clock.advance(10.0)
    wait_finished(second, "b", 1)
    assert jobs.calls("a") == []
    assert second.runs("a") == []


def test_unresolvable_target_after_restart_is_kept_and_marked(
    make_scheduler: SchedulerFactory,
    fake_clock: FakeClock,
    db_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A row that cannot be used is marked and logged, never deleted."""
    caplog.set_level(logging.WARNING, logger="persched")
    first = make_scheduler(start=True)
    first.schedule("good", jobs.record, 10.0, args=("good",))
    first.schedule("bad", jobs.record, 10.0, args=("bad",))
    first.shutdown(wait=True, timeout=TIMEOUT)
    db_sql(db_url, "UPDATE persched_jobs SET target = 'no_such_mod_9c2e:f' WHERE job_id = 'bad'")
    second = make_scheduler(start=True)
    fake_clock.advance(10.0)
    wait_finished(second, "good", 1)
    fake_clock.advance(10.0)
    wait_finished(second, "good", 2)
    assert jobs.calls("bad") == []
    # Not deleted.
    assert db_sql(db_url, "SELECT target FROM persched_jobs WHERE job_id = 'bad'") == [("no_such_mod_9c2e:f",)]
    # Not silent: recorded as an error run, or at least logged by persched.
    bad_runs = [r for r in second.runs("bad") if r.outcome is not None]
    logged = any(
        r.name.startswith("persched") and ("bad" in r.getMessage() or "no_such_mod_9c2e" in r.getMessage())
        for r in caplog.records
    )
    assert any(r.outcome == "error" and r.error for r in bad_runs) or logged, (bad_runs, caplog.text)
    if bad_runs:
        assert all(r.outcome == "error" for r in bad_runs)
        assert any("no_such_mod_9c2e" in (r.error or "") for r in bad_runs)


# --- SQLite only: a plain file path, files that cannot be used, the migration version ---


def test_plain_file_path_url(tmp_path: Path, fake_clock: FakeClock) -> None:
    """A plain file path works as the URL."""
    path = tmp_path / "plain.db"
    with JobScheduler(str(path), clock=fake_clock) as sched:
        sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert path.exists()
    with JobScheduler(f"sqlite:///{path}", clock=fake_clock) as sched:
        assert [j.job_id for j in sched.jobs()] == ["a"]


# --- stores that cannot be used ---------------------------------------------------


def _open(url: str, clock: FakeClock) -> None:
    """Open a scheduler on `url`, start it and write; always shut it down."""
    sched = JobScheduler(url, clock=clock)
    try:
        sched.start()
        sched.schedule("a", jobs.record, 10.0, args=("a",))
    finally:
        with contextlib.suppress(PerschedError):
            sched.shutdown(wait=True, timeout=TIMEOUT)


def test_garbage_file_is_a_store_error(tmp_path: Path, fake_clock: FakeClock) -> None:
    path = tmp_path / "garbage.db"
    content = b"this is not a database, " * 200
    path.write_bytes(content)
    url = f"sqlite:///{path}"
    with pytest.raises(StoreError) as excinfo:
        _open(url, fake_clock)
    assert str(path) in str(excinfo.value)
    assert path.read_bytes() == content


def test_missing_directory_is_a_store_error(tmp_path: Path, fake_clock: FakeClock) -> None:
    path = tmp_path / "no" / "such" / "dir" / "jobs.db"
    with pytest.raises(StoreError) as excinfo:
        _open(f"sqlite:///{path}", fake_clock)
    assert "jobs.db" in str(excinfo.value)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_file_is_a_store_error(
    make_scheduler: SchedulerFactory, sqlite_url: str, fake_clock: FakeClock
) -> None:
    first = make_scheduler(start=True)
    first.schedule("keep", jobs.record, 10.0, args=("keep",))
    first.shutdown(wait=True, timeout=TIMEOUT)
    path = Path(sqlite_path(sqlite_url))
    content = path.read_bytes()
    path.chmod(0o400)
    try:
        with pytest.raises(StoreError) as excinfo:
            _open(sqlite_url, fake_clock)
        assert str(path) in str(excinfo.value)
        assert path.read_bytes() == content
    finally:
        path.chmod(0o600)


def test_locked_database_is_a_store_error_after_busy_timeout(make_scheduler: SchedulerFactory, sqlite_url: str) -> None:
    """Locked past the busy timeout -> StoreError naming the URL, not a hang."""
    sched = make_scheduler(busy_timeout_seconds=0.2)
    sched.schedule("keep", jobs.record, 10.0, args=("keep",))
    with closing(sqlite3.connect(sqlite_path(sqlite_url), timeout=TIMEOUT)) as locker:
        locker.execute("BEGIN EXCLUSIVE")
        try:
            began = time.monotonic()
            with pytest.raises(StoreError) as excinfo:
                sched.schedule("new", jobs.record, 10.0, args=("new",))
            assert time.monotonic() - began < TIMEOUT
            assert sqlite_path(sqlite_url) in str(excinfo.value)
        finally:
            locker.rollback()
    # Nothing was written, and the store is usable again once the lock is gone.
    assert sched.get_job("new") is None
    sched.schedule("new", jobs.record, 10.0, args=("new",))
    assert sorted(j.job_id for j in sched.jobs()) == ["keep", "new"]


def test_schema_from_the_future_is_refused(
    make_scheduler: SchedulerFactory, sqlite_url: str, fake_clock: FakeClock
) -> None:
    """Refuse a schema from the future; touch nothing."""
    first = make_scheduler(start=True)
    first.schedule("keep", jobs.record, 10.0, args=("keep",))
    first.shutdown(wait=True, timeout=TIMEOUT)
    sql(sqlite_url, "UPDATE persched_alembic_version SET version_num = 'f00dfacefeed'")
    jobs_before = sql(sqlite_url, "SELECT * FROM persched_jobs")
    second = make_scheduler()
    with pytest.raises(SchemaVersionError) as excinfo:
        second.start()
    assert isinstance(excinfo.value, PerschedError)
    assert "f00dfacefeed" in str(excinfo.value)
    assert sql(sqlite_url, "SELECT * FROM persched_jobs") == jobs_before
    assert sql(sqlite_url, "SELECT version_num FROM persched_alembic_version") == [("f00dfacefeed",)]


def test_extra_unknown_revision_row_is_refused(make_scheduler: SchedulerFactory, sqlite_url: str) -> None:
    """A bogus revision inserted next to the real one is also not silently accepted."""
    first = make_scheduler(start=True)
    first.shutdown(wait=True, timeout=TIMEOUT)
    sql(sqlite_url, "INSERT INTO persched_alembic_version (version_num) VALUES ('f00dfacefeed')")
    second = make_scheduler()
    # Either reading is a clean persched error; a raw Alembic error is not.
    with pytest.raises((SchemaVersionError, StoreError)):
        second.start()
