"""One bad row never stops its job for good, nor holds back another job, on every engine.

- A job whose counters reached their bound runs on, and a clean shutdown
  leaves nothing open (docs/reference/behaviour.md#counters).
- A run whose recovery fails is logged once and tried again each round,
  while the other runs of the round are recovered.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final
from unittest.mock import patch

import pytest

from persched._model.instant import Micros
from persched._store import Claim, OpenRun, Recovery
from persched.errors import StoreError
from tests.support import jobs
from tests.support.helpers import TIMEOUT, at_us, db_sql, finished_runs, wait_finished, wait_until
from tests.support.store_calls import claim_one

if TYPE_CHECKING:
    from collections.abc import Callable

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
        sched._heartbeat.beat()  # first observation
        fake_clock.advance(LEASE)
        with caplog.at_level(logging.WARNING, logger="persched"):
            sched._heartbeat.beat()
            sched._heartbeat.beat()
    wait_until(lambda: len(finished_runs(sched, "a")) == 2, message="a was recovered and carried on")
    lost = finished_runs(sched, "a")[-1]
    assert (lost.instance_id, lost.outcome) == (DEAD, "lost")
    assert [r.outcome for r in sched.runs("bad")] == [None]
    (warned,) = [r.getMessage() for r in caplog.records if "of bad generation" in r.getMessage()]
    assert "the row of bad is refused" in warned
    sched._heartbeat.beat()  # unpatched: recovered at last
    assert sched.runs("bad")[-1].outcome == "lost"
