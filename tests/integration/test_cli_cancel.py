"""`persched cancel JOB`: its exit codes, and the request it leaves for the scheduler that runs the job."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.support import stop_jobs
from tests.support.cli_run import persched
from tests.support.helpers import TIMEOUT, sql, wait_until

if TYPE_CHECKING:
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

pytestmark = pytest.mark.slow


def test_cancel_exit_codes_and_the_request_it_leaves(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, sqlite_url: str
) -> None:
    sched = make_scheduler(sqlite_url, start=True)
    sched.schedule("export", stop_jobs.thread_cooperate, 10.0, args=("cli-export",))

    idle = persched("--db", sqlite_url, "cancel", "export")
    assert (idle.returncode, idle.stderr) == (0, "")
    assert "has no run in flight; nothing to cancel" in idle.stdout

    fake_clock.advance(10.456789)
    assert stop_jobs.started_event("cli-export").wait(TIMEOUT)
    asked = persched("--db", sqlite_url, "cancel", "export")
    assert (asked.returncode, asked.stderr) == (0, "")
    assert "cancel requested for the run of 'export' in flight" in asked.stdout
    (requested,) = sql(sqlite_url, "SELECT cancel_requested_at FROM persched_jobs WHERE job_id = 'export'")
    assert requested[0] is not None

    for job_id, needle in (("nope", "no job 'nope'"),):
        proc = persched("--db", sqlite_url, "cancel", job_id)
        assert (proc.returncode, proc.stdout) == (1, "")
        assert needle in proc.stderr
    usage = persched("--db", sqlite_url, "cancel")
    assert usage.returncode == 2

    sched.cancel("export")  # end the run here; its completion clears the request
    wait_until(lambda: sched.runs("export")[0].outcome == "stopped", message="the run stopped")
    wait_until(
        lambda: sql(sqlite_url, "SELECT cancel_requested_at FROM persched_jobs WHERE job_id = 'export'") == [(None,)],
        message="the request cleared with its run",
    )
