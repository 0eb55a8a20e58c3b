"""A dispatch cycle that fails in an unexpected way drops nothing.

The store turns database failures into StoreError; anything else escaping a
claim or a completion (a bug, an unforeseen driver error) must not lose the
due entries, the outcomes, or the in-flight bookkeeping that
deschedule(wait=True) and lease renewal rely on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from unittest.mock import patch

from tests.support import jobs
from tests.support.helpers import TIMEOUT, heartbeat_settled, wait_until

if TYPE_CHECKING:
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory


def _failing_once(real: Any) -> Any:  # noqa: ANN401 - wraps a store method
    failed: list[bool] = []

    def call(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - the store method's result
        if not failed:
            failed.append(True)
            raise RuntimeError("unexpected failure inside the store")
        return real(*args, **kwargs)

    return call


def test_an_unexpected_claim_failure_retries_the_entries(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    # No change pick-up: it would queue the job's own schedule() once more, and that entry could
    # run the slot before the retry does (the flake seen in CI, besides the clock moving too early).
    sched = make_scheduler(start=True, pickup_seconds=3600.0, pickup_check_seconds=3600.0)
    # The heartbeat's first round picks up changes once whatever pickup_seconds says: let it pass
    # first, or on a loaded machine it can queue the schedule() below after the failed claim.
    heartbeat_settled(sched, fake_clock)
    store = sched._store
    with patch.object(store, "claim_runs", side_effect=_failing_once(store.claim_runs)):
        sched.schedule("a", jobs.record, 10.0, args=("a",))
        fake_clock.advance(10.0)
        # Settle: the claim was taken up and failed, its retry queued (a bare "nothing in flight"
        # was already true before the dispatcher took the entry up, so the clock could move first).
        assert sched.wait_idle(TIMEOUT)
        assert not sched._runs._inflight_jobs  # the failed claim released its bookkeeping
        assert jobs.calls("a") == []
        fake_clock.advance(1.0)  # the entry is tried again a second later
        assert sched.wait_idle(TIMEOUT)
        assert len(jobs.calls("a")) == 1, "the retried claim ran"
    assert sched.deschedule("a", wait=True, timeout=TIMEOUT)


def test_an_unexpected_completion_failure_keeps_the_outcome(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock
) -> None:
    sched = make_scheduler(start=True, lease_seconds=3.0, heartbeat_seconds=1.0)
    heartbeat_settled(sched, fake_clock)  # its first round is over: the next beat is the one at 9.5 s
    store, maintenance = sched._store, sched._heartbeat.maintenance
    with patch.object(store, "finish_runs", side_effect=_failing_once(store.finish_runs)):
        sched.schedule("a", jobs.record, 10.0, args=("a",))
        # Settle the heartbeat half a second before the run, so that it beats (and writes the
        # kept outcome) only when the test says: a beat at the run's instant could write the
        # outcome before the test saw it kept.
        rounds = maintenance.rounds
        fake_clock.advance(9.5)
        wait_until(lambda: maintenance.rounds > rounds, message="the heartbeat's round at 9.5 s")
        fake_clock.advance(0.5)
        wait_until(lambda: len(sched._runs._unwritten) == 1, message="the outcome waits to be written again")
        assert sched._runs._inflight_runs  # still in flight: its lease keeps being renewed
        fake_clock.advance(1.0)  # the heartbeat writes it
        wait_until(lambda: [r.outcome for r in sched.runs("a")] == ["ok"], message="the outcome was recorded")
        # The thread that wrote it lets the run go just after its commit, which sched.runs() may see first.
        wait_until(lambda: not sched._runs._inflight_runs, message="the written run is no longer in flight")
    fake_clock.advance(10.0)
    wait_until(lambda: len(jobs.calls("a")) == 2, message="the job went on")
