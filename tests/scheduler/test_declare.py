"""Declarative schedules (issue 16): ``declare(specs, prune=...)`` reconciles an application's job set.

Through the public API on SQLite and PostgreSQL, with a FakeClock at an odd instant.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Final

import pytest

from persched import AsyncJobScheduler, JobScheduler, JobSpec, JobState
from persched._declare import SCHEDULE_OPTIONS
from persched.errors import InvalidJobError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Iterator

START: Final = 1_700_000_000.123457
TARGET: Final = "tests.support.jobs:record"


pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def app(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    sched = JobScheduler(db_url, clock=clock, namespace="app")
    sched.start()
    yield sched
    jobs.release_all()
    sched.shutdown(wait=True, timeout=TIMEOUT)


def spec(job_id: str, interval: float = 60.0) -> JobSpec:
    return JobSpec(job_id, TARGET, interval, args=(job_id,))


def by_id(sched: JobScheduler) -> dict[str, tuple[int, float | None, JobState]]:
    return {j.job_id: (j.generation, j.interval_seconds, j.state) for j in sched.jobs()}


def test_declare_creates_replaces_keeps_and_prunes(app: JobScheduler, clock: FakeClock) -> None:
    created = app.declare([spec("a"), spec("b"), spec("c")])
    assert [j.job_id for j in created] == ["a", "b", "c"]
    assert all(j.declared and j.namespace == "app" for j in created)
    clock.advance(30)  # a re-declaration later (a restart) must not push the grid back
    again = app.declare([spec("a"), spec("b", 120.0)], prune=True)
    a, b = again
    assert (a.generation, a.next_run_at) == (created[0].generation, created[0].next_run_at)  # untouched
    assert b.generation == created[1].generation + 1  # changed: replaced
    assert by_id(app) == {"a": (1, 60.0, JobState.SCHEDULED), "b": (2, 120.0, JobState.SCHEDULED)}  # c pruned
    clock.advance(30)
    assert app.wait_idle(TIMEOUT)
    assert len(jobs.calls("a")) == 1  # on its first grid slot
    assert jobs.calls("c") == []


def test_prune_leaves_jobs_made_by_schedule_and_other_namespaces_alone(
    db_url: str, app: JobScheduler, clock: FakeClock
) -> None:
    app.schedule("by-hand", TARGET, 60.0, args=("by-hand",))
    other = JobScheduler(db_url, clock=clock, namespace="other")
    try:
        other.declare([spec("theirs")])
        app.declare([spec("mine")])
        app.declare([], prune=True)  # the application declares nothing any more
        assert set(by_id(app)) == {"by-hand"}
        assert set(by_id(other)) == {"theirs"}
    finally:
        other.shutdown()


def test_an_identical_job_made_by_schedule_becomes_declared_without_a_new_generation(app: JobScheduler) -> None:
    made = app.schedule("x", TARGET, 60.0, args=("x",))
    assert not made.declared
    (declared,) = app.declare([spec("x")])
    assert (declared.generation, declared.next_run_at, declared.declared) == (made.generation, made.next_run_at, True)
    app.declare([], prune=True)
    assert app.get_job("x") is None


def test_one_bad_spec_writes_nothing(app: JobScheduler) -> None:
    with pytest.raises(InvalidJobError) as info:
        app.declare([spec("good"), JobSpec("bad", TARGET, -1.0)])
    assert info.value.argument == "specs['bad'].interval_seconds"
    assert app.jobs() == []
    with pytest.raises(InvalidJobError, match="declared twice") as twice:
        app.declare([spec("same"), spec("same", 5.0)])
    assert twice.value.argument == "specs"
    assert app.jobs() == []
    with pytest.raises(InvalidJobError, match="JobSpec"):
        app.declare(["not a spec"])  # type: ignore[list-item]  # the point
    with pytest.raises(InvalidJobError) as bad_prune:
        app.declare([], prune="yes")  # type: ignore[arg-type]  # the point
    assert bad_prune.value.argument == "prune"


def test_a_job_spec_refuses_an_unknown_option() -> None:
    with pytest.raises(InvalidJobError) as info:
        JobSpec("x", TARGET, 60.0, intervall=5)
    assert info.value.argument == "intervall"


def test_job_spec_options_are_schedules_keyword_arguments() -> None:
    params = inspect.signature(JobScheduler.schedule).parameters.values()
    assert {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY} == SCHEDULE_OPTIONS


def test_declare_through_the_async_front_end(db_url: str, clock: FakeClock) -> None:
    import asyncio

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=clock, namespace="app") as sched:
            await sched.declare(spec(job_id) for job_id in ("p", "q"))
            await sched.declare([spec("p")], prune=True)
            assert [j.job_id for j in await sched.jobs()] == ["p"]

    asyncio.run(asyncio.wait_for(scenario(), 3 * TIMEOUT))
