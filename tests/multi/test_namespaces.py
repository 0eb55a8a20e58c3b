"""Namespaces: applications sharing one database each see, run and change only their own jobs.

Two schedulers in one process stand for two applications (a gunicorn app and
a FastAPI app on one PostgreSQL database, as in the field report); both run
on one FakeClock, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler, JobState
from persched.errors import InvalidJobError, JobNotFoundError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Iterator

START: Final = 1_700_000_000.123457
TARGET: Final = "tests.support.jobs:record"


@pytest.fixture
def apps(db_url: str) -> Iterator[tuple[JobScheduler, JobScheduler, JobScheduler, FakeClock]]:
    """Schedulers of namespaces "web" and "worker" and of the default one, on one database and clock."""
    clock = FakeClock(START)
    made = [
        JobScheduler(db_url, clock=clock, namespace="web", instance_id="web-1"),
        JobScheduler(db_url, clock=clock, namespace="worker", instance_id="worker-1"),
        JobScheduler(db_url, clock=clock, instance_id="plain-1"),
    ]
    for sched in made:
        sched.start()
    yield made[0], made[1], made[2], clock
    jobs.release_all()
    for sched in made:
        sched.shutdown(wait=True, timeout=TIMEOUT)


def settle(*scheds: JobScheduler) -> None:
    for sched in scheds:
        assert sched.wait_idle(TIMEOUT)


def test_each_application_lists_and_runs_only_its_own_jobs(
    apps: tuple[JobScheduler, JobScheduler, JobScheduler, FakeClock],
) -> None:
    web, worker, plain, clock = apps
    web.schedule("web-report", TARGET, 10.0, args=("web-report",))
    worker.schedule("worker-sync", TARGET, 10.0, args=("worker-sync",))
    plain.schedule("legacy", TARGET, 10.0, args=("legacy",))
    for _ in range(3):
        clock.advance(10)
        settle(web, worker, plain)
    assert [j.job_id for j in web.jobs()] == ["web-report"]
    assert [j.job_id for j in worker.jobs()] == ["worker-sync"]
    assert [j.job_id for j in plain.jobs()] == ["legacy"]
    assert web.get_job("web-report") is not None
    assert web.get_job("worker-sync") is None
    for sched, job_id in ((web, "web-report"), (worker, "worker-sync"), (plain, "legacy")):
        runs = sched.runs(job_id)
        assert len(runs) == 3
        assert {r.instance_id for r in runs} == {sched.instance_id}  # never run by the other applications
        assert {r.job_id for r in sched.runs()} == {job_id}  # history: its own jobs only
        job = sched.get_job(job_id)
        assert job is not None
        assert job.namespace == sched.namespace
    assert plain.namespace == "default"


def test_an_application_cannot_change_another_applications_job(
    apps: tuple[JobScheduler, JobScheduler, JobScheduler, FakeClock],
) -> None:
    web, worker, _, clock = apps
    before = worker.schedule("worker-sync", TARGET, 10.0, args=("worker-sync",))
    assert web.deschedule("worker-sync") is False  # idempotent removal: never an error
    for verb in (web.pause, web.resume, web.run_now):
        with pytest.raises(JobNotFoundError, match="in namespace 'web': it is a job of namespace 'worker'") as found:
            verb("worker-sync")
        assert (found.value.job_id, found.value.namespace, found.value.owner) == ("worker-sync", "web", "worker")
    with pytest.raises(InvalidJobError, match="namespace 'worker'") as info:
        web.schedule("worker-sync", TARGET, 5.0, args=("taken",))
    assert info.value.argument == "job_id"
    after = worker.get_job("worker-sync")
    assert after is not None
    assert (after.generation, after.interval_seconds, after.state) == (before.generation, 10.0, JobState.SCHEDULED)
    clock.advance(10)
    settle(web, worker)
    assert len(worker.runs("worker-sync")) == 1


def test_a_descheduled_id_may_move_to_another_namespace_without_reusing_a_generation(
    apps: tuple[JobScheduler, JobScheduler, JobScheduler, FakeClock],
) -> None:
    web, worker, _, clock = apps
    first = worker.schedule("moved", TARGET, 10.0, args=("moved",))
    assert worker.deschedule("moved")
    moved = web.schedule("moved", TARGET, 10.0, args=("moved",))
    assert (moved.namespace, moved.generation) == ("web", first.generation + 1)  # no ABA
    assert worker.get_job("moved") is None
    clock.advance(10)
    settle(web, worker)
    assert {r.instance_id for r in web.runs("moved")} == {"web-1"}


@pytest.mark.parametrize("bad", ["", "   ", "x" * 101, "tab\there", 7])
def test_a_bad_namespace_is_refused(bad: object, tmp_path: object) -> None:
    with pytest.raises(InvalidJobError) as info:
        JobScheduler(f"sqlite:///{tmp_path}/x.db", namespace=bad)  # type: ignore[arg-type]  # the point
    assert info.value.argument == "namespace"
