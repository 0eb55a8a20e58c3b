"""The lifecycle: start, shutdown(wait=True/False), the context manager,
use after shutdown, shutdown from inside a job, and what a clean shutdown
leaves in the store (no row stuck in RUNNING). On every engine (``every_engine``)."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.pool import QueuePool

from persched import JobScheduler, JobState
from persched.errors import PerschedError, SchedulerStateError
from tests.support import jobs
from tests.support.helpers import TIMEOUT, at, db_sql, finished_runs, wait_finished, wait_until
from tests.support.seams import store_of

if TYPE_CHECKING:
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine


def assert_no_running_rows(url: str) -> None:
    """A clean shutdown leaves no job in RUNNING and no run without an outcome."""
    states = [s for (s,) in db_sql(url, "SELECT state FROM persched_jobs")]
    assert all(str(s).lower() != "running" for s in states), states
    open_runs = db_sql(url, "SELECT job_id, generation FROM persched_runs WHERE outcome IS NULL")
    assert open_runs == []


def test_start_twice_refused(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler(start=True)
    with pytest.raises(SchedulerStateError):
        sched.start()
    assert issubclass(SchedulerStateError, RuntimeError)
    assert issubclass(SchedulerStateError, PerschedError)


def test_use_after_shutdown_refused(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    sched.shutdown(wait=True, timeout=TIMEOUT)
    with pytest.raises(SchedulerStateError):
        sched.start()
    with pytest.raises(SchedulerStateError):
        sched.schedule("b", jobs.record, 10.0, args=("b",))
    with pytest.raises(SchedulerStateError):
        sched.deschedule("a")


def test_shutdown_is_idempotent(make_scheduler: SchedulerFactory) -> None:
    """shutdown() is idempotent (a second call is not an error)."""
    sched = make_scheduler(start=True)
    sched.shutdown(wait=True, timeout=TIMEOUT)
    sched.shutdown(wait=True, timeout=TIMEOUT)


def test_threads_are_named_daemons(make_scheduler: SchedulerFactory) -> None:
    make_scheduler(start=True, workers=2)
    mine = [t for t in threading.enumerate() if t.name.startswith("persched-")]
    assert mine
    assert all(t.daemon for t in mine)


def test_context_manager(db_url: str, fake_clock: FakeClock) -> None:
    with JobScheduler(db_url, clock=fake_clock) as sched:
        assert isinstance(sched, JobScheduler)
        sched.schedule("a", jobs.record, 10.0, args=("a",), start_in=0)
        wait_until(lambda: len(finished_runs(sched, "a")) == 1)
        # Started on enter: start() again is refused.
        with pytest.raises(SchedulerStateError):
            sched.start()
    with pytest.raises(SchedulerStateError):
        sched.start()
    assert not [t for t in threading.enumerate() if t.name.startswith("persched-") and t.is_alive()]
    assert_no_running_rows(db_url)


def test_context_manager_shuts_down_on_exception(db_url: str, fake_clock: FakeClock) -> None:
    class Boom(Exception):
        pass

    holder: list[JobScheduler] = []

    def body() -> None:
        with JobScheduler(db_url, clock=fake_clock) as sched:
            holder.append(sched)
            sched.schedule("a", jobs.record, 10.0, args=("a",))
            raise Boom

    with pytest.raises(Boom):
        body()
    (sched,) = holder
    with pytest.raises(SchedulerStateError):
        sched.start()


def test_shutdown_wait_lets_in_flight_run_finish(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, db_url: str
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    sched.schedule("b", jobs.record, 10.0, args=("b",), start_in=20.0)
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    returned = threading.Event()

    def shutdown() -> None:
        sched.shutdown(wait=True)
        returned.set()

    t = threading.Thread(target=shutdown, name="test-shutdown", daemon=True)
    t.start()
    assert not returned.wait(0.1), "shutdown(wait=True) returned while a run was in flight"
    # No claim commits after shutdown began: "b" becomes due but must not start.
    fake_clock.advance(10.0)
    g.release.set()
    assert returned.wait(TIMEOUT)
    t.join(TIMEOUT)
    assert g.finished.is_set()
    assert jobs.calls("b") == []
    assert not [t for t in threading.enumerate() if t.name.startswith("persched-") and t.is_alive()]
    assert_no_running_rows(db_url)
    outcomes = db_sql(db_url, "SELECT outcome FROM persched_runs WHERE job_id = 'a'")
    assert outcomes == [("ok",)]
    # A new scheduler on the same file sees both jobs scheduled, none running.
    again = make_scheduler()
    for job_id in ("a", "b"):
        job = again.get_job(job_id)
        assert job is not None
        assert job.state is JobState.SCHEDULED
    assert [r.outcome for r in again.runs("a")] == ["ok"]
    assert again.runs("b") == []


def test_shutdown_no_wait_returns_at_once(make_scheduler: SchedulerFactory, fake_clock: FakeClock, db_url: str) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    returned = threading.Event()

    def shutdown() -> None:
        sched.shutdown(wait=False)
        returned.set()

    t = threading.Thread(target=shutdown, name="test-shutdown", daemon=True)
    t.start()
    assert returned.wait(TIMEOUT), "shutdown(wait=False) blocked on an in-flight run"
    assert not g.finished.is_set()
    # The in-flight run finishes in the background and is recorded.
    g.release.set()
    wait_until(
        lambda: db_sql(db_url, "SELECT outcome FROM persched_runs WHERE job_id = 'a'") == [("ok",)],
        message="background run recorded",
    )
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("persched-") and t.is_alive()],
        message="threads gone",
    )
    assert_no_running_rows(db_url)


def test_shutdown_timeout_is_bounded(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    """shutdown(wait=True, timeout=t) returns after about t real seconds even if a run hangs."""
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    began = time.monotonic()
    sched.shutdown(wait=True, timeout=0.2)
    assert time.monotonic() - began < TIMEOUT
    assert not g.finished.is_set()
    g.release.set()


def test_a_run_that_outlives_shutdown_leaves_no_connection_open(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.block, 10.0, args=("a",))
    g = jobs.gate("a")
    fake_clock.advance(10.0)
    assert g.started.wait(TIMEOUT)
    sched.shutdown(wait=True, timeout=0.2)
    g.release.set()
    assert g.finished.wait(TIMEOUT)
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("persched-") and t.is_alive()],
        message="the late run's worker gone",
    )
    engine = store_of(sched).engine  # the only view of the pool: nothing public says what is open
    try:
        assert isinstance(engine.pool, QueuePool)
        assert engine.pool.checkedout() == 0
        assert engine.pool.checkedin() == 0, f"{engine.pool.checkedin()} connection(s) left open in the pool"
    finally:
        engine.dispose()  # this test's own clean-up, after the check: the leak is not carried into later tests


def test_shutdown_from_inside_a_job(make_scheduler: SchedulerFactory, fake_clock: FakeClock, db_url: str) -> None:
    """APScheduler #338: a job that shuts its scheduler down must not deadlock."""
    sched = make_scheduler(start=True)
    jobs.register_scheduler("self", sched)
    sched.schedule("self", jobs.shutdown_from_job, 10.0, args=("self",))
    fake_clock.advance(10.0)
    assert jobs.done_event("self").wait(TIMEOUT), "shutdown() inside a job deadlocked"
    with pytest.raises(SchedulerStateError):
        sched.schedule("x", jobs.record, 10.0, args=("x",))
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("persched-") and t.is_alive()],
        message="threads gone",
    )
    assert db_sql(db_url, "SELECT outcome FROM persched_runs WHERE job_id = 'self'") == [("ok",)]
    assert_no_running_rows(db_url)


def test_idle_scheduler_shuts_down_promptly(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("far", jobs.record, 3600.0, args=("far",))
    began = time.monotonic()
    sched.shutdown(wait=True, timeout=TIMEOUT)
    assert time.monotonic() - began < TIMEOUT / 2


def test_jobs_lists_active_jobs_only(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler(start=True)
    for job_id in ("c", "a", "b"):
        sched.schedule(job_id, jobs.record, 10.0, args=(job_id,))
    sched.deschedule("b")
    assert sorted(j.job_id for j in sched.jobs()) == ["a", "c"]
    assert all(j.state is JobState.SCHEDULED for j in sched.jobs())
    assert all(j.next_run_at == at(10) for j in sched.jobs())


def test_runs_limit_and_order(make_scheduler: SchedulerFactory, fake_clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.record, 1.0, args=("a",))
    for k in range(1, 6):
        fake_clock.advance(1.0)
        wait_finished(sched, "a", k)
    assert [r.scheduled_for for r in sched.runs("a", limit=3)] == [at(5), at(4), at(3)]
    assert len(sched.runs("a")) == 5
    assert sched.runs("unknown") == []
