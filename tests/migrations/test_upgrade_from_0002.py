"""A database made by persched at schema revision 0002 upgrades in place at start().

`data/persched-0002.db` was written by persched before revision 0003 existed
(commit de8054f), with a FakeClock at EPOCH: job "every-minute" (60 s, three
runs), job "gone" (descheduled), and job "crashed" (10 s) left with a run in
flight by an instance that died, as an older schema stored it (the slot in
flight in next_run_at).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import inspect

from persched import JobScheduler, JobState
from persched._store.migrate import HEAD
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import EPOCH, at, finished_runs, sql, wait_until
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Iterator

FIXTURE = Path(__file__).parent / "data" / "persched-0002.db"
LEASE = 2.0


@pytest.fixture
def upgraded(tmp_path: Path) -> Iterator[tuple[JobScheduler, FakeClock, str]]:
    path = tmp_path / "old.db"
    shutil.copyfile(FIXTURE, path)
    assert sql(f"sqlite:///{path}", "SELECT version_num FROM persched_alembic_version", ()) == [("0002",)]
    clock = FakeClock(start=EPOCH + 180)
    sched = JobScheduler(str(path), clock=clock, lease_seconds=LEASE, heartbeat_seconds=0.5)
    sched.start()
    yield sched, clock, f"sqlite:///{path}"
    jobs.release_all()
    sched.shutdown(wait=True, timeout=10)


def test_the_schema_is_upgraded_and_every_job_kept(upgraded: tuple[JobScheduler, FakeClock, str]) -> None:
    sched, _, url = upgraded
    assert sql(url, "SELECT version_num FROM persched_alembic_version", ()) == [(HEAD,)]
    listed = {job.job_id: job for job in sched.jobs()}
    assert set(listed) == {"every-minute", "crashed"}
    assert sched.get_job("gone") is None
    minute = listed["every-minute"]
    assert (minute.interval_seconds, minute.generation, minute.state) == (60.0, 1, JobState.SCHEDULED)
    assert (minute.next_run_at, minute.run_count, minute.cron, minute.misfire) == (at(240), 3, None, "coalesce")
    assert (minute.paused, minute.overlap, minute.recurrence) == (False, "forbid", "fixed_rate")
    assert len(sched.runs("every-minute")) == 3
    engine = store_of(sched).engine
    indexes = {ix["name"] for ix in inspect(engine).get_indexes("persched_runs")}
    assert "uq_persched_runs_slot" in indexes


def test_upgraded_jobs_carry_on_on_their_grid(upgraded: tuple[JobScheduler, FakeClock, str]) -> None:
    sched, clock, _ = upgraded
    clock.advance(60.0)
    wait_until(lambda: len(finished_runs(sched, "every-minute")) == 4, message="the upgraded job ran")
    assert finished_runs(sched, "every-minute")[0].scheduled_for == at(240)


def test_a_run_left_in_flight_before_the_upgrade_is_recovered_and_not_rerun(
    upgraded: tuple[JobScheduler, FakeClock, str],
) -> None:
    sched, clock, _ = upgraded
    (open_run,) = [r for r in sched.runs("crashed") if r.outcome is None]
    assert open_run.scheduled_for == at(190)
    # The lease lapses by observation (one beat sees it, the next one a lease later
    # recovers it); the run is recorded lost and the job moves past its slot.
    sched._heartbeat.leases.round()
    clock.advance(LEASE + 0.5)
    sched._heartbeat.leases.round()
    wait_until(lambda: any(r.outcome == "lost" for r in sched.runs("crashed")), message="the dead run recorded lost")
    clock.advance(20.0)
    wait_until(lambda: sched.runs("crashed")[0].outcome == "ok", message="the job carried on")
    newest, lost = sched.runs("crashed", limit=2)
    assert (lost.scheduled_for, lost.outcome) == (at(190), "lost")
    assert newest.scheduled_for == at(200)  # the lost slot is not run again
