"""A stored schedule that cannot be read (a row changed by hand) costs only its own job.

schedule() validates every argument, but whoever can write the database can
write anything into a row. Such a job is paused when it comes due, with an
"error" record saying why; every other job keeps running.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from persched import JobState
from tests.support import jobs
from tests.support.helpers import finished_runs, sql, wait_until
from tests.support.seams import store_of

if TYPE_CHECKING:
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory


@pytest.mark.parametrize(
    "corruption",
    [
        "cron = '61 * * * *', interval_seconds = NULL",
        "timezone = 'Mars/Olympus_Mons', cron = '* * * * *', interval_seconds = NULL",
        "interval_seconds = NULL",
        "interval_seconds = -5",
        "interval_seconds = 1e305",  # no whole number of microseconds (was an OverflowError)
        "grace_seconds = -1e305",
        "misfire = 'whenever'",
        "misfire = 'catch_up'",  # without max_catch_up
        "exclude = 'not JSON'",
        "exclude = '[\"2026-13-45\"]'",
        "exclude = '[\"2027-01-02/2027-01-01\"]'",
    ],
)
def test_an_unreadable_schedule_pauses_only_its_job(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, caplog: pytest.LogCaptureFixture, corruption: str
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("bad", jobs.record, 10.0, args=("bad",))
    sched.schedule("good", jobs.record, 10.0, args=("good",))
    sql(store_of(sched).url, f"UPDATE persched_jobs SET {corruption} WHERE job_id = 'bad'")  # noqa: S608 - test data
    fake_clock.advance(10.0)
    wait_until(lambda: len(finished_runs(sched, "good")) == 1, message="the good job ran")
    wait_until(lambda: len(sched.runs("bad")) == 1, message="the bad job's error record")
    (record,) = sched.runs("bad")
    assert record.outcome == "error"
    assert record.error is not None
    assert "stored schedule cannot be read" in record.error
    bad = sched.get_job("bad")
    assert bad is not None
    assert (bad.state, bad.paused) == (JobState.PAUSED, True)
    assert jobs.calls("bad") == []
    assert "stored schedule cannot be read" in caplog.text
    fake_clock.advance(10.0)
    wait_until(lambda: len(finished_runs(sched, "good")) == 2, message="the good job keeps running")
    # The way out: schedule it again with a valid definition, then resume it.
    fixed = sched.schedule("bad", jobs.record, 10.0, args=("bad", "fixed"))
    assert fixed.generation == 2
    assert sched.resume("bad") is True
    fake_clock.advance(10.0)
    wait_until(lambda: len(jobs.calls("bad")) == 1, message="the fixed job ran")
    assert jobs.calls("bad")[0].args == ("fixed",)
