"""A database made by persched at schema revision 0003 upgrades in place (0004, then namespaces in 0005).

`data/persched-0003.db` was written by persched at revision 0003 (commit
8f540c1, before revisions 0004 and 0005 existed), with a FakeClock at EPOCH: job
"every-minute" (60 s, three runs), "nightly" (cron 0 3 * * * Europe/Paris),
"held" (10 s, paused) and "gone" (30 s, three runs, then descheduled).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import inspect

from persched import JobScheduler, JobSpec, JobState
from persched._store.migrate import HEAD
from persched.testing import FakeClock
from tests.support.helpers import EPOCH, TIMEOUT, at, sql
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Iterator

FIXTURE = Path(__file__).parent / "data" / "persched-0003.db"


@pytest.fixture
def old_db(tmp_path: Path) -> str:
    path = tmp_path / "old.db"
    shutil.copyfile(FIXTURE, path)
    url = f"sqlite:///{path}"
    assert sql(url, "SELECT version_num FROM persched_alembic_version") == [("0003",)]
    return url


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(start=EPOCH + 180.000001)


@pytest.fixture
def opened(old_db: str, clock: FakeClock) -> Iterator[list[JobScheduler]]:
    made: list[JobScheduler] = []
    yield made
    for sched in made:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def test_every_job_lands_in_the_default_namespace_and_carries_on(
    old_db: str, clock: FakeClock, opened: list[JobScheduler]
) -> None:
    sched = JobScheduler(old_db, clock=clock)
    opened.append(sched)
    sched.start()
    assert sql(old_db, "SELECT version_num FROM persched_alembic_version") == [(HEAD,)]
    columns = {c["name"] for c in inspect(store_of(sched).engine).get_columns("persched_jobs")}
    assert {"namespace", "declared"} <= columns
    listed = {job.job_id: job for job in sched.jobs()}
    assert set(listed) == {"every-minute", "nightly", "held"}
    assert {(j.namespace, j.declared) for j in listed.values()} == {("default", False)}
    minute = listed["every-minute"]
    assert (minute.generation, minute.next_run_at, minute.run_count) == (1, at(240), 3)
    assert listed["held"].state == JobState.PAUSED
    assert sched.get_job("gone") is None
    clock.advance(60)
    assert sched.wait_idle(TIMEOUT)
    assert sched.runs("every-minute")[0].scheduled_for == at(240)


def test_old_jobs_are_invisible_to_another_namespace_and_never_pruned_by_a_declaration(
    old_db: str, clock: FakeClock, opened: list[JobScheduler]
) -> None:
    other = JobScheduler(old_db, clock=clock, namespace="billing")
    opened.append(other)
    other.start()
    assert other.jobs() == []
    default = JobScheduler(old_db, clock=clock)
    opened.append(default)
    # Jobs made by schedule() before 0005 are not "declared": a declaration never prunes them.
    default.declare([JobSpec("new", "tests.support.jobs:record", 60.0, args=("new",))], prune=True)
    assert {j.job_id for j in default.jobs()} == {"every-minute", "nightly", "held", "new"}
