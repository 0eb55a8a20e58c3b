"""cancel() from another scheduler (another Store, another instance) stops the run where it runs, on every engine.

The running instance is on a FakeClock at an odd instant; the other one writes
the request, and the runner stops its run at its next change pick-up, which
the test brings by advancing the fake clock past `pickup_seconds`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from persched import JobScheduler
from persched.testing import FakeClock
from tests.support import stop_jobs
from tests.support.helpers import TIMEOUT, db_sql, wait_until

if TYPE_CHECKING:
    import pytest

ODD_INSTANT: Final = 1_700_000_123.456789
PICKUP: Final = 1.0  # fake seconds: pickup_seconds of the runner


def test_cancel_from_another_instance_stops_the_run(db_url: str, request: pytest.FixtureRequest) -> None:
    clock = FakeClock(start=ODD_INSTANT)
    key = f"elsewhere-{request.node.callspec.id}"
    made: list[JobScheduler] = []
    try:
        runner = JobScheduler(db_url, clock=clock, pickup_seconds=PICKUP, instance_id="runner")
        made.append(runner)
        runner.start()
        runner.schedule("export", stop_jobs.thread_cooperate, 60.0, args=(key,), start_in=0)
        assert stop_jobs.started_event(key).wait(TIMEOUT)
        other = JobScheduler(db_url, clock=FakeClock(start=ODD_INSTANT), instance_id="other")  # not started
        made.append(other)
        assert other.cancel("export") is True
        clock.advance(PICKUP)
        wait_until(lambda: runner.runs("export")[0].outcome is not None, message="the run stopped")
        (run,) = runner.runs("export")
        assert run.outcome == "stopped"
        assert run.error is not None
        assert run.error.startswith("stopped: cancel() asked for it\n")
        wait_until(
            lambda: db_sql(db_url, "SELECT cancel_requested_at FROM persched_jobs") == [(None,)],
            message="the request cleared with its run",
        )
        assert other.cancel("export") is False
    finally:
        for sched in reversed(made):
            sched.shutdown(wait=True, timeout=TIMEOUT)
