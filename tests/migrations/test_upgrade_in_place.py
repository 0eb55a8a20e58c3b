"""Each revision since 0010 upgrades a database in place, on every engine, keeping its jobs.

A database one revision back keeps its jobs, which get the new columns'
defaults (the behaviour before the revision) and keep their generation, next
slot and counts; the view ``persched_job_states`` still reads the table.
Downgrading drops the columns and keeps the jobs too; a job that lost its
options with the downgrade gets them back by being scheduled again, as a
replacement. The revisions:

- 0011: ``exclude`` (excluded dates).
- 0012: ``pause_after_failures`` and ``failure_streak``.
- 0013: ``on_overrun``, ``executor``, ``stop_grace_seconds`` and ``cancel_requested_at``.
- 0014: the retry options and a pending attempt (runs' attempts: test_upgrade_to_0014.py).

Revision 0010 (timed pauses, and the instance rows a read-only check judges)
has its own test below: a SQLite database at 0009 with an instance row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import text

from persched import JobScheduler
from persched._model.instant import Instant, micros
from persched._store import Store
from persched._store import db as _db
from persched._store import migrate as _migrate
from persched._store.health import live_instances
from persched.testing import FakeClock
from tests.support.helpers import TIMEOUT, db_sql, sql
from tests.support.revisions import migrate_to

if TYPE_CHECKING:
    from pathlib import Path

START = 1_700_000_123.456789
TARGET = "tests.support.jobs:record"


@dataclass(frozen=True)
class Revision:
    """What one revision adds to ``persched_jobs``, and what a job written before it reads."""

    revision: str
    previous: str
    options: dict[str, Any]  # schedule() options the revision added (a job that uses them)
    chosen: dict[str, Any]  # what get_job() says of that job
    columns: tuple[str, ...]  # the revision's columns
    defaults: tuple[Any, ...]  # what they read for a job written before the revision
    fields: dict[str, Any]  # what get_job() says of such a job


REVISIONS = [
    pytest.param(
        Revision(
            "0011",
            "0010",
            {"exclude": ["2023-11-20"]},
            {"exclude": ("2023-11-20",)},
            ("exclude",),
            (None,),
            {"exclude": None},
        ),
        id="0011-excluded-dates",
    ),
    pytest.param(
        Revision(
            "0012",
            "0011",
            {"pause_after_failures": 3},
            {"pause_after_failures": 3, "failure_streak": 0},
            ("pause_after_failures", "failure_streak"),
            (None, 0),
            {"pause_after_failures": None, "failure_streak": 0},
        ),
        id="0012-failures",
    ),
    pytest.param(
        Revision(
            "0013",
            "0012",
            {"max_runtime_seconds": 3.0, "on_overrun": "stop", "executor": "process", "stop_grace_seconds": 0.25},
            {"on_overrun": "stop", "executor": "process", "stop_grace_seconds": 0.25},
            ("on_overrun", "executor", "stop_grace_seconds", "cancel_requested_at"),
            ("warn", "thread", 5.0, None),
            {"on_overrun": "warn", "executor": "thread", "stop_grace_seconds": 5.0},
        ),
        id="0013-stopping",
    ),
    pytest.param(
        Revision(
            "0014",
            "0013",
            {"retries": 2, "retry_delay_seconds": 1.0},
            {"retries": 2, "retry_delay_seconds": 1.0},
            ("retries", "retry_delay_seconds", "retry_backoff", "retry_max_delay_seconds", "retry_for"),
            (0, 10.0, 2.0, None, None),
            {"retries": 0, "retry_delay_seconds": 10.0, "pending_attempt": None},
        ),
        id="0014-retries",
    ),
]


@pytest.mark.parametrize("case", REVISIONS)
def test_a_database_one_revision_back_keeps_its_jobs_and_gains_the_new_columns(
    empty_db_url: str, case: Revision
) -> None:
    url = empty_db_url
    sched = JobScheduler(url, clock=FakeClock(START))
    try:
        before = sched.schedule("kept", TARGET, 10.0, args=("kept",))  # migrates to head
        new = sched.schedule("new", TARGET, 10.0, **case.options)
        assert {name: getattr(new, name) for name in case.chosen} == case.chosen
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)
    migrate_to(url, case.previous, down=True)
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [(case.previous,)]
    assert sorted(db_sql(url, "SELECT job_id FROM persched_jobs")) == [("kept",), ("new",)]
    db_sql(url, "UPDATE persched_jobs SET run_count = 7 WHERE job_id = 'kept'")  # written by the older code

    migrate_to(url, case.revision)
    assert db_sql(url, "SELECT version_num FROM persched_alembic_version") == [(case.revision,)]
    rows = db_sql(url, f"SELECT job_id, {', '.join(case.columns)} FROM persched_jobs ORDER BY job_id")  # noqa: S608
    assert [tuple(row) for row in rows] == [("kept", *case.defaults), ("new", *case.defaults)]
    states = dict(db_sql(url, "SELECT job_id, state FROM persched_job_states"))  # the view still reads the table
    assert states == {"kept": "scheduled", "new": "scheduled"}
    sched = JobScheduler(url, clock=FakeClock(START))
    try:
        kept = sched.get_job("kept")
        assert kept is not None
        assert {name: getattr(kept, name) for name in case.fields} == case.fields
        assert (kept.generation, kept.next_run_at, kept.run_count) == (before.generation, before.next_run_at, 7)
        again = sched.schedule("new", TARGET, 10.0, **case.options)
        assert again.generation == new.generation + 1
        assert {name: getattr(again, name) for name in case.chosen} == case.chosen
    finally:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def test_a_0009_database_keeps_its_rows_and_gains_timed_pauses_and_instance_leases(tmp_path: Path) -> None:
    """A database at 0009 with an instance row (written by a sharing scheduler, the only kind that kept
    one then) keeps the row, marked as sharing and with no ``lease_until`` (not alive to a reader of the
    database until its scheduler, now at 0010, beats again). A job paused before 0010 stays paused,
    without an end or a note."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate_to(url, "0009")
    engine = _db.make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO persched_instances (namespace, instance_id, started_at, renewed_at, beats)"
                    " VALUES ('default', 'old-1', '2023-11-14 22:13:20.250000', '2023-11-14 22:13:20.250000', 7)"
                )
            )
    finally:
        engine.dispose()
    start = 1_700_000_000.25
    sched = JobScheduler(url, clock=FakeClock(start))
    sched.schedule("held", TARGET, 10.0, args=("held",))  # migrates to head
    sched.pause("held")
    assert sql(url, "SELECT version_num FROM persched_alembic_version") == [(_migrate.HEAD,)]
    assert sql(url, "SELECT instance_id, beats, shares, lease_until FROM persched_instances") == [("old-1", 7, 1, None)]
    held = sched.get_job("held")
    assert held is not None
    assert (held.paused, held.paused_until, held.pause_note) == (True, None, None)
    assert sched.next_runs("held") == []
    store = Store(_db.make_engine(url), "test")
    try:
        assert live_instances(store, Instant(micros(start))) == []  # the old row has no lease_until: not alive
    finally:
        store.engine.dispose()
        sched.shutdown(wait=True, timeout=TIMEOUT)
