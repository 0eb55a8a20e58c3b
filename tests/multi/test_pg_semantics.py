"""SPEC §2 single-process semantics on both engines (tests/scheduler/test_semantics.py style).

A handful of the FakeClock-driven semantics tests, parametrized over SQLite,
PostgreSQL and MariaDB: the grid, coalescing, identical re-declaration,
replacement while the old run is in flight, deschedule (also mid-run) and no
ABA. PostgreSQL uses one schema for this module, MariaDB one database (migrated
once, emptied before each test).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy import text

from persched import JobState, _db, _migrate
from tests.conftest import SchedulerFactory
from tests.multi._cluster import pg_schema_url
from tests.support import jobs
from tests.support.helpers import TIMEOUT, at, finished_runs, wait_finished, wait_until
from tests.support.mariadb import mariadb_database

if TYPE_CHECKING:
    from collections.abc import Iterator
    from datetime import datetime
    from pathlib import Path

    from persched import JobScheduler, Run
    from persched.testing import FakeClock


@pytest.fixture(scope="module")
def pg_semantics_url() -> Iterator[str]:
    """A PostgreSQL schema for this module, migrated to head."""
    with pg_schema_url("sem") as url:
        engine = _db.make_engine(url)
        try:
            _migrate.upgrade(engine)
        finally:
            engine.dispose()
        yield url


@pytest.fixture(scope="module")
def mariadb_semantics_url() -> Iterator[str]:
    """A MariaDB database for this module, migrated to head."""
    with mariadb_database("sem") as url:
        engine = _db.make_engine(url)
        try:
            _migrate.upgrade(engine)
        finally:
            engine.dispose()
        yield url


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def sched_factory(request: pytest.FixtureRequest, tmp_path: Path, fake_clock: FakeClock) -> Iterator[SchedulerFactory]:
    """`make_scheduler` on a fresh SQLite file or on the emptied PostgreSQL schema or MariaDB database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    elif request.param == "mariadb":
        url = request.getfixturevalue("mariadb_semantics_url")
        engine = _db.make_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(text("DELETE FROM persched_runs"))
                conn.execute(text("DELETE FROM persched_jobs"))
        finally:
            engine.dispose()
    else:
        url = request.getfixturevalue("pg_semantics_url")
        engine = _db.make_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(text("TRUNCATE persched_jobs, persched_runs RESTART IDENTITY"))
        finally:
            engine.dispose()
    factory = SchedulerFactory(url, fake_clock)
    yield factory
    factory.close()


def slots(runs: list[Run]) -> list[datetime]:
    return [r.scheduled_for for r in runs]


def wait_next_run(sched: JobScheduler, job_id: str, expected: datetime) -> None:
    """Wait until the job's next_run_at is `expected` (its run has been completed)."""

    def check() -> bool:
        job = sched.get_job(job_id)
        return job is not None and job.next_run_at == expected

    wait_until(check, message=f"{job_id}.next_run_at == {expected}")


def test_runs_on_the_grid(sched_factory: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = sched_factory(start=True)
    assert sched.schedule("a", jobs.record, 10.0, args=("a",)).next_run_at == at(10)
    for k in (1, 2, 3):
        fake_clock.advance(10.0)
        assert slots(wait_finished(sched, "a", k)) == [at(10 * i) for i in range(k, 0, -1)]
        wait_next_run(sched, "a", at(10 * (k + 1)))
    assert [c.scheduled_for for c in jobs.calls("a")] == [at(10), at(20), at(30)]


def test_late_slots_coalesce_into_one_run(sched_factory: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = sched_factory(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.advance(35.0)
    assert slots(wait_finished(sched, "a", 1)) == [at(30)]
    wait_next_run(sched, "a", at(40))
    fake_clock.advance(5.0)
    assert slots(wait_finished(sched, "a", 2)) == [at(40), at(30)]
    assert len(jobs.calls("a")) == 2


def test_overrun_coalesces_into_one_run_right_after(sched_factory: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = sched_factory(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    fake_clock.advance(25.0)  # slots 20 and 30 pass while the run at 10 is in flight
    g.release.set()
    wait_until(lambda: len(jobs.calls("a")) == 2, message="the coalesced run right after")
    assert [c.scheduled_for for c in jobs.calls("a")] == [at(10), at(30)]


def test_identical_redeclaration_changes_nothing(sched_factory: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = sched_factory(start=True)
    first = sched.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.advance(5.0)
    again = sched.schedule("a", jobs.record, 10.0, args=("a",))
    assert (again.generation, again.next_run_at) == (first.generation, first.next_run_at)


def test_replacement_while_old_run_in_flight(sched_factory: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = sched_factory(start=True)
    old = sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    new = sched.schedule("a", jobs.record, 10.0, args=("a", "new"))
    assert new.generation > old.generation
    assert new.next_run_at == at(20)
    g.release.set()
    wait_until(lambda: any(r.generation == old.generation and r.outcome == "ok" for r in sched.runs("a")))
    job = sched.get_job("a")
    assert job is not None
    assert (job.generation, job.next_run_at, job.state) == (new.generation, at(20), JobState.SCHEDULED)
    fake_clock.advance(10.0)
    runs = wait_finished(sched, "a", 2)
    assert [(r.generation, r.scheduled_for) for r in runs] == [(new.generation, at(20)), (old.generation, at(10))]


def test_descheduled_job_never_runs(sched_factory: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = sched_factory(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    fake_clock.advance(10.0)
    wait_finished(sched, "a", 1)
    assert sched.deschedule("a") is True
    sched.schedule("probe", jobs.record, 30.5, args=("probe",))
    fake_clock.advance(30.5)
    wait_finished(sched, "probe", 1)
    assert len(jobs.calls("a")) == 1
    assert slots(sched.runs("a")) == [at(10)]


def test_deschedule_during_run_lets_it_finish_then_stops(
    sched_factory: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = sched_factory(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    assert sched.deschedule("a") is True
    fake_clock.advance(20.0)
    g.release.set()
    wait_until(g.finished.is_set)
    sched.schedule("probe", jobs.record, 0.5, args=("probe",))
    fake_clock.advance(0.5)
    wait_finished(sched, "probe", 1)
    assert len(jobs.calls("a")) == 1
    wait_until(lambda: [r.outcome for r in sched.runs("a")] == ["ok"])
    assert sched.get_job("a") is None  # the completion did not resurrect it


def test_stale_heap_entry_cannot_claim_later_definition(sched_factory: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = sched_factory(start=True)
    g1 = sched.schedule("a", jobs.record, 10.0, args=("a",)).generation
    assert sched.deschedule("a") is True
    g2 = sched.schedule("a", jobs.record, 10.0, args=("a",), start_in=20.0).generation
    assert g2 > g1
    sched.schedule("probe", jobs.record, 10.5, args=("probe",))
    fake_clock.advance(10.5)
    wait_finished(sched, "probe", 1)
    assert jobs.calls("a") == []
    fake_clock.advance(9.5)
    assert [(r.generation, r.scheduled_for) for r in wait_finished(sched, "a", 1)] == [(g2, at(20))]
    assert finished_runs(sched, "a")[0].outcome == "ok"
