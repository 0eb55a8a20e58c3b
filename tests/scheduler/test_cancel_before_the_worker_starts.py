"""cancel() of a run this scheduler claimed whose worker has not registered it yet.

The claim commits (the job's row is running, owned here) before a worker takes the run and
registers it for stops (`RunStops.started`); a cancel() in between finds no run in flight here to
stop at once, and its request stays on the row. The next change pick-up reads the requests of the
runs in flight here (the cancel moved the counter) and stops the run then.

The heartbeat is stopped, so the tests run the pick-up rounds themselves: once the run is registered,
and once before it is and again after (a request read before its run was registered is read again).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest

from tests.support import stop_jobs
from tests.support.engines import engine_params
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

every_engine = pytest.mark.parametrize("engine_name", engine_params(), indirect=True)


@every_engine
@pytest.mark.parametrize("read_in_between", [False, True], ids=["pickup-after", "pickup-in-between-and-after"])
def test_a_cancel_made_before_the_worker_registered_the_run_stops_it_at_a_pickup(
    make_scheduler: SchedulerFactory, fake_clock: FakeClock, read_in_between: bool, request: pytest.FixtureRequest
) -> None:
    # read_in_between: a pick-up also comes while the run waits for its worker; it finds no run here to
    # stop, and the counter does not move again for that request, yet a later pick-up still stops it.
    sched = make_scheduler(clock=fake_clock, start=True)
    sched._heartbeat.stop()  # the test runs the pick-up rounds itself
    sched._heartbeat.join(TIMEOUT)
    pickup, stops = sched._heartbeat.pickup, sched._dispatcher.pool.stops
    key = f"early-cancel-{request.node.callspec.id}"  # stop_jobs' events are the process's: a key of its own
    sched.schedule(key, stop_jobs.thread_cooperate, stop_jobs.SLOT, args=(key,))
    pickup.round()  # the mark past the schedule
    registering, go = threading.Event(), threading.Event()
    started = stops.started

    def held(claim: Any) -> Any:  # noqa: ANN401 - RunStops.started's own types
        registering.set()
        assert go.wait(TIMEOUT), "the test never let the worker go on"
        return started(claim)

    stops.started = held  # type: ignore[method-assign]
    try:
        fake_clock.advance(stop_jobs.SLOT)
        assert registering.wait(TIMEOUT), "no worker took the run"
        assert sched.cancel(key) is True  # the row is running: the request is written
        if read_in_between:
            pickup.round()  # the request is read, but no run here is registered to stop yet
        go.set()
        assert stop_jobs.started_event(key).wait(TIMEOUT), "the run did not start"
        pickup.round()  # the cancel moved the counter, or a request still waits: the requests are read
        assert stop_jobs.seen(key).stopping.is_set(), "the cancelled run was never asked to stop"
    finally:
        go.set()
        stops.request(key, "the test ends")
