"""schedule() of a window that is already over is accepted, finished at once, and said."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from persched import JobState
from tests.support import jobs
from tests.support.helpers import TIMEOUT, at, wait_until

if TYPE_CHECKING:
    import pytest

    from tests.conftest import SchedulerFactory


def _window_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
        and r.name.startswith("persched")
        and "no slot left in its window" in r.getMessage()
    ]


def test_a_window_entirely_in_the_past_is_finished_at_once_with_a_warning(
    make_scheduler: SchedulerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    sched = make_scheduler()  # its FakeClock is at EPOCH (helpers.at(0))
    with caplog.at_level(logging.WARNING, logger="persched"):
        job = sched.schedule("campaign", jobs.record, 60.0, args=("campaign",), start_at=at(-7200), end_at=at(-3600))
        assert job.state == JobState.FINISHED
        assert len(_window_warnings(caplog)) == 1
        assert "campaign" in _window_warnings(caplog)[0]
        # Re-declaring the same (finished) definition at the next start-up changes nothing and says nothing new.
        again = sched.schedule("campaign", jobs.record, 60.0, args=("campaign",), start_at=at(-7200), end_at=at(-3600))
        assert again.generation == job.generation
        assert len(_window_warnings(caplog)) == 1


def test_a_window_still_open_gives_no_warning(
    make_scheduler: SchedulerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    sched = make_scheduler()
    with caplog.at_level(logging.WARNING, logger="persched"):
        job = sched.schedule("soon", jobs.record, 60.0, args=("soon",), end_at=at(0) + timedelta(hours=1))
    assert job.state == JobState.SCHEDULED
    assert _window_warnings(caplog) == []


def test_start_up_says_when_runs_of_another_instance_will_be_recovered(
    make_scheduler: SchedulerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    # A run in flight on an instance whose death cannot be proven (a custom id):
    # the restarted scheduler says at once that it waits for the lease.
    elsewhere = make_scheduler(instance_id="worker-elsewhere", start=True, lease_seconds=30.0)
    elsewhere.schedule("slow", jobs.block, 3600.0, args=("slow",), start_in=0)
    assert jobs.gate("slow").started.wait(TIMEOUT)
    with caplog.at_level(logging.INFO, logger="persched"):
        make_scheduler(instance_id="restarted", start=True, lease_seconds=30.0)
        wait_until(lambda: bool(_lease_notes(caplog)), message="the start-up note")
    (note,) = _lease_notes(caplog)
    assert "worker-elsewhere" in note
    assert "after 30 s" in note
    jobs.gate("slow").release.set()


def _lease_notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "in flight on other instances" in r.getMessage()]
