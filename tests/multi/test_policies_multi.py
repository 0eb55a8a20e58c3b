"""Pause, resume and run-now across processes.

Two `tests.support.multi_child` instances run the jobs; the test pauses,
resumes and asks run-now through a scheduler that is never started (as the
CLI does). A pause holds in every process from the moment it returns; a
run-now request is picked up and run exactly once by one of the instances.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Final

import pytest

from persched import JobScheduler
from persched.errors import SchedulerStateError
from tests.multi._cluster import RunRow, cluster, fetch_runs, now_utc
from tests.support.helpers import TIMEOUT, wait_until

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.slow, pytest.mark.processes]

NOOP: Final = "tests.support.race_jobs:noop"
SKEW: Final = timedelta(milliseconds=20)  # instants from different processes' clocks


def test_pause_resume_and_run_now_through_another_process(db_url: str, tmp_path: Path) -> None:
    control = JobScheduler(db_url)
    try:
        with cluster(db_url, tmp_path, lease=1.0, heartbeat=0.2, pickup=0.2) as c:
            c.start("a", "b")
            control.schedule("fast", NOOP, 0.1, start_in=0)
            control.schedule("hourly", NOOP, 3600.0)
            wait_until(lambda: len(_runs(db_url, "fast")) >= 5, timeout=3 * TIMEOUT, message="fast runs")

            assert control.pause("fast") is True
            paused_at = now_utc()
            with pytest.raises(SchedulerStateError, match="paused"):
                control.run_now("fast")
            wait_until(lambda: now_utc() > paused_at + timedelta(seconds=1.0), message="a second paused")
            assert [r for r in _runs(db_url, "fast") if r.started_at > paused_at + SKEW] == []

            assert control.resume("fast") is True
            resumed_at = now_utc()
            wait_until(
                lambda: any(r.started_at > resumed_at for r in _runs(db_url, "fast")),
                timeout=3 * TIMEOUT,
                message="runs again after resume",
            )

            assert control.run_now("hourly") is True
            wait_until(lambda: len(_runs(db_url, "hourly")) == 1, timeout=3 * TIMEOUT, message="the run-now run")
            wait_until(lambda: now_utc() > resumed_at + timedelta(seconds=1.5), message="time for a duplicate")
            c.stop_all()
    finally:
        control.shutdown()
    (extra,) = _runs(db_url, "hourly")
    assert extra.outcome == "ok"
    assert extra.instance_id in ("a", "b")


def _runs(url: str, job_id: str) -> list[RunRow]:
    return [r for r in fetch_runs(url) if r.job_id == job_id]
