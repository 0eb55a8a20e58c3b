"""One bad row never stops its job for good, nor holds back another job, on every engine.

- A job whose counters reached their bound runs on, and a clean shutdown
  leaves nothing open (docs/reference/behaviour.md#counters).
- A run whose recovery fails is logged once and tried again each round,
  while the other runs of the round are recovered.
- A job row left ``running`` with no run in flight, or with a state that is
  not a job state, is freed by the heartbeat once it stood so for a lease
  (docs/reference/behaviour.md#stranded-rows): back on its grid, or paused,
  with an "error" record saying why.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final
from unittest.mock import patch

import pytest
from sqlalchemy import update

from persched import JobState
from persched._model.instant import Micros
from persched._store import Claim, OpenRun, Recovery
from persched._store.schema import jobs as jobs_table
from persched.errors import StoreError
from tests.support import jobs
from tests.support.helpers import TIMEOUT, at, at_us, db_sql, finished_runs, wait_finished, wait_until
from tests.support.seams import store_of
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from collections.abc import Callable

    from persched import JobScheduler
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.every_engine

DEAD: Final = "dead:0:000000"
LEASE: Final = 30.0


@pytest.mark.parametrize("bound", [2**31 - 1, 2**63 - 1], ids=["int32", "int64"])
def test_a_job_whose_counters_reached_their_bound_runs_on(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, bound: int
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("a", jobs.fail, 1.0, args=("a", "boom"))
    db_sql(make_scheduler.url, "UPDATE persched_jobs SET run_count = :n, error_count = :n", n=bound)
    for n in (1, 2):
        fake_clock.advance(1.0)
        wait_finished(sched, "a", n)
    job = sched.get_job("a")
    assert job is not None
    expected = min(bound + 2, 2**63 - 1)
    assert (job.run_count, job.error_count, job.last_outcome) == (expected, expected, "error")
    sched.shutdown(wait=True, timeout=TIMEOUT)
    assert db_sql(make_scheduler.url, "SELECT state FROM persched_jobs") == [("scheduled",)]
    assert db_sql(make_scheduler.url, "SELECT run_id FROM persched_runs WHERE outcome IS NULL") == []


def _refusing(real: Callable[..., Recovery], job_id: str) -> Callable[..., Recovery]:
    def recover_run(run: OpenRun, *args: Any) -> Recovery:  # noqa: ANN401 - recover_run's arguments
        if run.job_id == job_id:
            raise StoreError("db", f"recover run failed: the row of {job_id} is refused")
        return real(run, *args)

    return recover_run


def test_a_run_that_cannot_be_recovered_does_not_hold_back_the_others(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sched = make_scheduler(start=True, instance_id="b", lease_seconds=LEASE)
    sched._heartbeat.stop()  # the test beats by hand
    sched._heartbeat.join(TIMEOUT)
    for job_id in ("bad", "a"):  # bad's run first: the round meets it before a's
        sched.schedule(job_id, jobs.record, 10.0, args=(job_id,))
        claimed = claim_one(sched._store, job_id, 1, at_us(10), at_us(10), DEAD, Micros(30_000_000))
        assert isinstance(claimed, Claim)
    store = sched._store
    with patch.object(store, "recover_run", side_effect=_refusing(store.recover_run, "bad")):
        sched._heartbeat.leases.round()  # first observation
        fake_clock.advance(LEASE)
        with caplog.at_level(logging.WARNING, logger="persched"):
            sched._heartbeat.leases.round()
            sched._heartbeat.leases.round()
    wait_until(lambda: len(finished_runs(sched, "a")) == 2, message="a was recovered and carried on")
    lost = finished_runs(sched, "a")[-1]
    assert (lost.instance_id, lost.outcome) == (DEAD, "lost")
    assert [r.outcome for r in sched.runs("bad")] == [None]
    (warned,) = [r.getMessage() for r in caplog.records if "of bad generation" in r.getMessage()]
    assert "the row of bad is refused" in warned
    sched._heartbeat.leases.round()  # unpatched: recovered at last
    assert sched.runs("bad")[-1].outcome == "lost"


def _edit(sched: JobScheduler, job_id: str, **values: Any) -> None:  # noqa: ANN401 - column values
    with store_of(sched).engine.begin() as conn:
        conn.execute(update(jobs_table).where(jobs_table.c.job_id == job_id).values(**values))


def _hand_beaten(make_scheduler: SchedulerFactory) -> JobScheduler:
    sched = make_scheduler(start=True, instance_id="b", lease_seconds=LEASE)
    sched._heartbeat.stop()  # the test beats by hand
    sched._heartbeat.join(TIMEOUT)
    return sched


def test_a_job_left_running_with_no_run_in_flight_runs_again_after_a_lease(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = _hand_beaten(make_scheduler)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    _edit(sched, "a", state="running", owner="ghost", lease_until=at(10**8), running_for=at(10))
    sched._heartbeat.leases.round()  # first seen
    fake_clock.advance(LEASE - 1)
    sched._heartbeat.leases.round()
    assert sched.runs("a") == [], "freed before a full lease of observation"
    fake_clock.advance(1.0)
    sched._heartbeat.leases.round()
    wait_until(lambda: len(finished_runs(sched, "a")) == 2, message="a ran again")
    ran, note = finished_runs(sched, "a")
    assert (ran.outcome, ran.scheduled_for) == ("ok", at(30))  # its grid, never its slot in flight (T+10)
    assert (note.outcome, note.run_now) == ("error", True)
    assert note.error is not None
    assert "owner ghost" in note.error
    assert [call.scheduled_for for call in jobs.calls("a")] == [at(30)]


def test_a_job_with_an_unknown_state_is_paused_with_its_reason(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = _hand_beaten(make_scheduler)
    sched.schedule("a", jobs.record, 10.0, args=("a",))
    _edit(sched, "a", state="bogus")
    sched._heartbeat.leases.round()
    fake_clock.advance(LEASE)
    sched._heartbeat.leases.round()
    job = sched.get_job("a")
    assert job is not None
    assert (job.state, job.unreadable) == (JobState.PAUSED, None)
    (note,) = sched.runs("a")
    assert note.error is not None
    assert "'bogus' is not a job state" in note.error
    sched.resume("a")
    fake_clock.advance(10.0)
    wait_until(lambda: len(jobs.calls("a")) == 1, message="a ran after its resume")
