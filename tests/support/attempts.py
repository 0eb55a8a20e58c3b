"""Helpers of the tests of retries and repeated failures, on a `FakeClock` at an odd instant.

Each waits for the scheduler to be idle (`JobScheduler.wait_idle`), so an
attempt that is due has run by the time it returns and one that is not due
has not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from persched import Job, JobScheduler, Run
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

__all__ = ["START", "advance", "retried_slot", "settled_runs", "started", "stored_job"]

START: Final = 1_700_000_123.456789  # an odd instant


def started(factory: SchedulerFactory, clock: FakeClock) -> JobScheduler:
    """A started scheduler on `clock`, its heartbeat every second."""
    return factory(clock=clock, heartbeat_seconds=1.0, start=True)


def stored_job(sched: JobScheduler, job_id: str) -> Job:
    """The job `job_id` as stored (it must exist)."""
    job = sched.get_job(job_id)
    assert job is not None
    return job


def settled_runs(sched: JobScheduler, job_id: str) -> list[Run]:
    """The runs of `job_id`, oldest first, each waited for to its outcome."""
    assert sched.wait_idle(TIMEOUT)
    return sorted(sched.runs(job_id, limit=1_000), key=lambda run: run.run_id or 0)


def advance(sched: JobScheduler, clock: FakeClock, seconds: float) -> None:
    """Move `clock` on, and wait for what came due."""
    clock.advance(seconds)
    assert sched.wait_idle(TIMEOUT)


def retried_slot(
    sched: JobScheduler,
    clock: FakeClock,
    plain: str,
    steps: tuple[float, ...],
    **options: Any,  # noqa: ANN401 - schedule()'s keyword options
) -> None:
    """Schedule "flaky", whose first slot fails twice and succeeds at its third attempt (retries=3,
    the first 10 s after an attempt ended, with `options`), and `plain`, without retries; start
    `sched` and advance `clock` by each of `steps`, waiting for what came due."""
    sched.schedule(
        "flaky",
        "tests.support.jobs:follow",
        3600.0,
        args=("flaky", ["error", "error", "ok"]),
        start_in=0,
        retries=3,
        retry_delay_seconds=10,
        **options,
    )
    sched.schedule(plain, "tests.support.jobs:record", 3600.0, args=(plain,), start_in=0)
    sched.start()
    assert sched.wait_idle(TIMEOUT)
    for step in steps:
        advance(sched, clock, step)
