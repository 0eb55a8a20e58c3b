"""``declare()`` of a set of any size: no statement binds more parameters than the engine takes, and
a declaration that changes nothing writes nothing.

On every engine, with the engine's limit of parameters made small so that a
few dozen specs need the chunks that 100,000 need on a real limit
(benchmarks/declare_many.py measures the real sizes).
"""

from __future__ import annotations

import contextlib
import threading
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Final
from unittest import mock

import pytest
from sqlalchemy import event

from persched import JobScheduler, JobSpec, JobState
from persched.testing import FakeClock
from tests.support.helpers import db_sql
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    from persched import Job

START: Final = 1_700_000_123.456789
TARGET: Final = "tests.support.jobs:record"
LIMIT: Final = 64  # parameters one statement may bind, in these tests (a job's row binds about 49)

pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def specs(ids: range, interval: float = 60.0) -> list[JobSpec]:
    return [JobSpec(f"job-{i:03d}", TARGET, interval, args=(i,)) for i in ids]


@contextlib.contextmanager
def statements(sched: JobScheduler) -> Iterator[list[tuple[str, int]]]:
    """Each statement the scheduler's store sends meanwhile from this thread (not the heartbeat's, the
    dispatcher's), with the parameters one execution binds."""
    sent: list[tuple[str, int]] = []
    caller = threading.get_ident()

    def grab(conn: object, cursor: object, sql: str, params: Any, context: object, many: bool) -> None:  # noqa: ANN401
        if threading.get_ident() == caller:
            rows = params if many else [params]
            sent.extend((sql, len(row or ())) for row in rows)

    engine = store_of(sched).engine
    event.listen(engine, "before_cursor_execute", grab)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", grab)


@contextlib.contextmanager
def parameter_limit(sched: JobScheduler, limit: int) -> Iterator[None]:
    with mock.patch.object(type(store_of(sched).dialect), "max_parameters", limit):
        yield


def test_a_declaration_binds_no_more_parameters_than_the_engine_takes(app: JobScheduler) -> None:
    app.declare(specs(range(150)))
    with parameter_limit(app, LIMIT), statements(app) as sent:
        # 45 replaced, 5 unchanged, 60 new, 100 pruned: each set larger than the limit.
        declared = app.declare([*specs(range(100, 145), 90.0), *specs(range(145, 210))], prune=True)
    assert max(count for _, count in sent) <= LIMIT
    assert (len(declared.created), len(declared.replaced), len(declared.unchanged)) == (60, 45, 5)
    assert declared.pruned == tuple(f"job-{i:03d}" for i in range(100))
    assert {j.job_id: (j.generation, j.interval_seconds) for j in app.jobs()} == {
        **{f"job-{i:03d}": (2, 90.0) for i in range(100, 145)},
        **{f"job-{i:03d}": (1, 60.0) for i in range(145, 210)},
    }


def test_an_unchanged_declaration_writes_nothing(db_url: str, app: JobScheduler, clock: FakeClock) -> None:
    first = app.declare(specs(range(150)), prune=True)
    seq = db_sql(db_url, "SELECT seq FROM persched_changes WHERE id = 1")
    clock.advance(17.25)
    with parameter_limit(app, LIMIT), statements(app) as sent:
        again = app.declare(specs(range(150)), prune=True)  # read in chunks of ids: 150 > LIMIT
    assert again.unchanged == tuple(j.job_id for j in first)
    assert not again.changed
    assert [(j.generation, j.next_run_at, j.updated_at) for j in again] == [
        (j.generation, j.next_run_at, j.updated_at) for j in first
    ]
    writes = [sql for sql, _ in sent if sql.lstrip().split()[0].upper() in ("INSERT", "UPDATE", "DELETE")]
    assert writes == []
    assert db_sql(db_url, "SELECT seq FROM persched_changes WHERE id = 1") == seq  # no change announced
    assert all(j.state is JobState.SCHEDULED for j in app.jobs())


@contextlib.contextmanager
def insert_calls(sched: JobScheduler) -> Iterator[list[str]]:
    """Each call with an INSERT the scheduler's store makes meanwhile from this thread (an executemany: one)."""
    calls: list[str] = []
    caller = threading.get_ident()

    def grab(conn: object, cursor: object, sql: str, *rest: object) -> None:
        if threading.get_ident() == caller and sql.lstrip().upper().startswith("INSERT"):
            calls.append(sql)

    engine = store_of(sched).engine
    event.listen(engine, "before_cursor_execute", grab)
    try:
        yield calls
    finally:
        event.remove(engine, "before_cursor_execute", grab)


def test_new_jobs_are_inserted_in_one_call_under_the_limit(app: JobScheduler) -> None:
    with parameter_limit(app, LIMIT), statements(app) as sent, insert_calls(app) as calls:
        declared = app.declare(specs(range(101)))
    assert len(declared.created) == 101
    assert max(count for _, count in sent) <= LIMIT
    # One executemany (SQLite, MariaDB: PyMySQL sends it in multi-row statements) or one INSERT of
    # an array a column (PostgreSQL), not a call a row.
    assert len(calls) == 1
    assert [j.job_id for j in app.jobs()] == [f"job-{i:03d}" for i in range(101)]


def test_more_new_jobs_than_one_statement_holds_are_all_inserted(app: JobScheduler) -> None:
    with insert_calls(app) as calls:
        declared = app.declare(specs(range(1001)))  # PostgreSQL: 1,000 rows a statement
    assert len(declared.created) == 1001
    assert len(calls) <= 2
    assert {j.job_id: j.args for j in app.jobs()} == {f"job-{i:03d}": (i,) for i in range(1001)}


def test_jobs_scheduled_by_hand_and_declared_unchanged_are_marked_declared(
    db_url: str, app: JobScheduler, clock: FakeClock
) -> None:
    for i in range(70):
        app.schedule(f"job-{i:03d}", TARGET, 60.0, args=(i,))
    seq = db_sql(db_url, "SELECT seq FROM persched_changes WHERE id = 1")
    clock.advance(3.5)
    with parameter_limit(app, LIMIT):  # 70 ids: marked in two statements
        declared = app.declare(specs(range(70)))
    assert len(declared.unchanged) == 70
    assert all(job.declared and job.generation == 1 for job in declared)
    assert all(job.declared for job in app.jobs())
    assert db_sql(db_url, "SELECT seq FROM persched_changes WHERE id = 1") == seq  # no definition changed
    pruned = app.declare([], prune=True, allow_empty=True)  # now declared: pruned
    assert len(pruned.pruned) == 70


WINDOW: Final = datetime(2031, 5, 6, 7, 8, 9, 123457, tzinfo=timezone.utc)


def shapes() -> list[JobSpec]:
    """Specs of every kind of schedule and most options, each shape shared by a few of them."""
    return [
        *(JobSpec(f"every-{i}", TARGET, 60.0, args=(i,)) for i in range(3)),
        *(
            JobSpec(
                f"cron-{i}", TARGET, cron="5 4 * * *", timezone="Europe/Paris", kwargs={"n": i}, exclude=["2031-12-25"]
            )
            for i in range(3)
        ),
        *(
            JobSpec(
                f"window-{i}",
                TARGET,
                90.5,
                start_at=WINDOW,
                end_at=WINDOW + timedelta(days=3),
                jitter_seconds=1.5,
                misfire="catch_up",
                max_catch_up=3,
                max_runtime_seconds=12.25,
                on_overrun="stop",
                executor="process",
                stop_grace_seconds=2.0,
                pause_after_failures=4,
                retries=2,
                retry_max_delay_seconds=30.0,
                retry_lost=True,
            )
            for i in range(3)
        ),
        *(JobSpec(f"once-{i}", TARGET, run_at=WINDOW) for i in range(2)),
        JobSpec(
            "delay",
            TARGET,
            45.0,
            recurrence="fixed_delay",
            overlap="skip",
            grace_seconds=0.0,
            args=("é", [1, {"k": None}]),
        ),
        JobSpec("by-hand", TARGET, 60.0),
    ]


def fields(job: Job) -> list[tuple[str, type, object]]:
    """A job's fields with their types (1 == 1.0 == True, but a job read back holds one of them)."""
    return [(name, type(value), value) for name, value in job]


def assert_as_stored(app: JobScheduler, declared: list[Job]) -> None:
    stored = {job.job_id: job for job in app.jobs()}
    assert [fields(job) for job in declared] == [fields(stored[job.job_id]) for job in declared]


def test_a_declaration_returns_each_job_as_it_is_stored(db_url: str, app: JobScheduler, clock: FakeClock) -> None:
    app.schedule("by-hand", TARGET, 60.0)  # declared unchanged below: marked declared
    created = app.declare(shapes())
    assert created.unchanged == ("by-hand",)
    assert_as_stored(app, created)
    app.pause("every-1", note="by an operator")
    app.pause("cron-1", until=WINDOW)
    db_sql(db_url, "UPDATE persched_jobs SET state = 'bogus' WHERE job_id = 'cron-2'")  # a hand edit
    # Each field of its own that a job may hold, unlike every-0's (of its shape), none of them due yet.
    db_sql(
        db_url,
        "UPDATE persched_jobs SET run_count = 7, error_count = 2, failure_streak = 1, last_outcome = 'error', "
        "owner = 'elsewhere', lease_until = created_at, run_now_at = next_run_at, retry_attempt = 2, "
        "retry_for = first_run_at, paused = TRUE, paused_until = next_run_at, pause_note = 'n' "
        "WHERE job_id = 'every-2'",
    )
    clock.advance(17.25)
    # Replaced together, each with columns of its own NULL or not.
    replaced = ("every-1", "window-0", "once-1", "delay")
    changed = [
        JobSpec(s.job_id, s.fn, s.interval_seconds, **{**s.options, "kwargs": {"v": 2}}) if s.job_id in replaced else s
        for s in shapes()
    ]
    again = app.declare(changed)
    assert again.replaced == replaced
    job = {j.job_id: j for j in again}
    assert (job["every-1"].paused, job["every-1"].pause_note) == (True, "by an operator")  # a replacement keeps it
    assert job["cron-1"].paused_until == WINDOW
    assert job["cron-2"].unreadable == "state: 'bogus' is not a job state"
    assert (job["every-2"].run_count, job["every-2"].pending_attempt, job["every-2"].run_now_requested) == (7, 2, True)
    assert_as_stored(app, again)
