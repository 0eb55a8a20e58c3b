"""`AsyncJobScheduler` under a real asyncio event loop, on SQLite and PostgreSQL.

Each test runs one ``asyncio.run`` bounded by ``asyncio.wait_for``; time comes
from a FakeClock at an odd instant and ``await sched.wait_idle()`` waits for
the runs that became due. Waits for a thread-side effect go through
``asyncio.to_thread(event.wait, TIMEOUT)`` so the loop keeps running.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import TYPE_CHECKING, Any, Final
from unittest import mock

import pytest
from sqlalchemy import create_engine, text

from persched import AsyncJobScheduler, JobScheduler, JobState
from persched._model.instant import to_datetime
from persched.errors import InvalidJobError, SchedulerStateError
from persched.testing import FakeClock
from tests.support import async_jobs, jobs
from tests.support.helpers import TIMEOUT, wait_until
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator
    from pathlib import Path

START: Final = 1_700_000_000.123457
BOUND: Final = 3 * TIMEOUT  # a whole scenario, in real seconds


pytestmark = pytest.mark.every_engine  # db_url: tests/conftest.py


@pytest.fixture(autouse=True)
def _reset_async_jobs() -> Iterator[None]:
    async_jobs.reset()
    yield
    async_jobs.reset()


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(scenario(), BOUND)

    asyncio.run(bounded())


async def wait_loop_event(key: str) -> None:
    await asyncio.wait_for(async_jobs.loop_event(key).wait(), TIMEOUT)


def outcomes(url: str, job_id: str) -> list[tuple[str | None, str | None]]:
    """(outcome, error) of a job's runs, oldest first, read with plain SQL (the scheduler may be shut down)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT outcome, error FROM persched_runs WHERE job_id = :j ORDER BY run_id"), {"j": job_id}
            ).all()
    finally:
        engine.dispose()
    return [(outcome, error) for outcome, error in rows]


def test_async_jobs_run_on_the_applications_loop_and_sync_jobs_on_workers(db_url: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=clock) as sched:
            job = await sched.schedule("coro", async_jobs.on_loop, 60.0, args=("coro",))
            await sched.schedule("plain", jobs.record, 60.0, args=("plain",))
            assert job.state == JobState.SCHEDULED
            clock.advance(60)
            assert await sched.wait_idle(TIMEOUT)
            (call,) = jobs.calls("coro")
            assert call.args == (id(asyncio.get_running_loop()),)  # this very loop
            assert call.thread == threading.current_thread().name
            assert (call.job_id, call.scheduled_for) == ("coro", job.next_run_at)  # current_run() works there
            (plain,) = jobs.calls("plain")
            assert plain.thread.startswith("persched-worker-")
            assert [r.outcome for r in await sched.runs("coro")] == ["ok"]
            assert {j.job_id for j in await sched.jobs()} == {"coro", "plain"}

    run(scenario)


def test_jobs_on_loop_false_runs_coroutines_on_the_workers_own_loops(db_url: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=clock, jobs_on_loop=False) as sched:
            await sched.schedule("coro", async_jobs.on_loop, 1.0, args=("coro",))
            clock.advance(1)
            assert await sched.wait_idle(TIMEOUT)
            (call,) = jobs.calls("coro")
            assert call.args != (id(asyncio.get_running_loop()),)
            assert call.thread.startswith("persched-worker-")

    run(scenario)


def test_an_async_job_that_raises_is_recorded_and_the_loop_goes_on(db_url: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=clock) as sched:
            await sched.schedule("bad", "tests.support.policy_jobs:async_fail", 10.0, args=("bad", "boom"))
            clock.advance(10)
            assert await sched.wait_idle(TIMEOUT)
            clock.advance(10)
            assert await sched.wait_idle(TIMEOUT)
            runs = await sched.runs("bad")
            assert [r.outcome for r in runs] == ["error", "error"]
            assert runs[0].error is not None
            assert "RuntimeError: boom" in runs[0].error
            job = await sched.get_job("bad")
            assert job is not None
            assert (job.state, job.error_count) == (JobState.SCHEDULED, 2)

    run(scenario)


def test_async_runs_at_once_are_bounded_by_workers_and_hold_no_worker(db_url: str) -> None:
    # workers=2: two async runs go at once on the loop, a third waits there for its turn (claimed,
    # its started_at is when its coroutine began); the workers stay free for a sync job meanwhile.
    clock = FakeClock(START)

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, workers=2, clock=clock) as sched:
            for key in ("a", "b", "c"):
                await sched.schedule(key, async_jobs.wait_for_event, 5.0, args=(key,))
            await sched.schedule("sync", async_jobs.set_flag, 5.0, args=("sync",))
            clock.advance(5)
            await wait_until_async(lambda: len(started("abc")) == 2)
            # Both workers are free: the sync job ran while two coroutines hold the loop's slots.
            assert await asyncio.to_thread(async_jobs.thread_flag("sync").wait, TIMEOUT)
            states = {j.job_id: j.state for j in await sched.jobs() if j.job_id in "abc"}
            assert states == dict.fromkeys("abc", JobState.RUNNING)  # all three claimed
            (waiting,) = set("abc") - set(started("abc"))
            clock.advance(1.5)  # the third waits 1.5 s of the clock for its turn
            async_jobs.loop_event(started("abc")[0]).set()
            await wait_loop_event(f"{waiting}:started")
            for key in "abc":
                async_jobs.loop_event(key).set()
            assert await sched.wait_idle(TIMEOUT)
            for key in "abc":
                (run_,) = await sched.runs(key)
                assert run_.outcome == "ok"
                late = run_.started_at - run_.scheduled_for
                assert late.total_seconds() == (1.5 if key == waiting else 0.0), key

    run(scenario)


def started(keys: str) -> list[str]:
    return [k for k in keys if async_jobs.loop_event(f"{k}:started").is_set()]


async def wait_until_async(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.005)  # polling for an effect on this loop, bounded by BOUND


def test_cancelling_the_awaiting_task_does_not_undo_the_call(db_url: str) -> None:
    clock = FakeClock(START)
    entered, release, written = threading.Event(), threading.Event(), threading.Event()

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=clock) as sched:
            store = store_of(sched)
            real = store.upsert_job

            def held(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - a seam around the store
                entered.set()
                assert release.wait(TIMEOUT)
                try:
                    return real(*args, **kwargs)
                finally:
                    written.set()

            with mock.patch.object(store, "upsert_job", side_effect=held):
                task = asyncio.create_task(sched.schedule("kept", jobs.record, 30.0, args=("kept",)))
                assert await asyncio.to_thread(entered.wait, TIMEOUT)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                release.set()
                assert await asyncio.to_thread(written.wait, TIMEOUT)
            job = await sched.get_job("kept")  # the schedule committed all the same
            assert job is not None
            clock.advance(30)
            assert await sched.wait_idle(TIMEOUT)
            assert len(jobs.calls("kept")) == 1

            # A cancelled deschedule(wait=True) still descheduled; the run it waited for finishes.
            await sched.schedule("held", async_jobs.wait_for_event, 30.0, args=("held",))
            clock.advance(30)
            await wait_loop_event("held:started")
            waiter = asyncio.create_task(sched.deschedule("held", wait=True))
            while await sched.get_job("held") is not None:
                await asyncio.sleep(0.005)  # until the deschedule committed, bounded by BOUND
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            async_jobs.loop_event("held").set()
            assert await sched.wait_idle(TIMEOUT)
            assert [r.outcome for r in await sched.runs("held")] == ["ok"]

    run(scenario)


def test_shutdown_lets_async_runs_on_the_loop_finish(db_url: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        sched = AsyncJobScheduler(db_url, clock=clock)
        await sched.start()
        await sched.schedule("long", async_jobs.wait_for_event, 5.0, args=("long",))
        clock.advance(5)
        await wait_loop_event("long:started")
        stopping = asyncio.create_task(sched.shutdown(wait=True))
        while sched.scheduler._lifecycle.state != "stopped":
            await asyncio.sleep(0.005)  # until shutdown began, bounded by BOUND
        assert not stopping.done()  # it waits for the run, which needs this loop: no deadlock
        async_jobs.loop_event("long").set()
        await stopping
        assert jobs.calls("long:done")
        with pytest.raises(SchedulerStateError):
            await sched.jobs()

    run(scenario)
    assert outcomes(db_url, "long") == [("ok", None)]


def test_shutdown_from_inside_an_async_job_does_not_wait_for_itself(db_url: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        sched = AsyncJobScheduler(db_url, clock=clock)
        async_jobs.register("stopper", sched)
        await sched.start()
        await sched.schedule("stopper", async_jobs.shutdown_from_async_job, 5.0, args=("stopper",))
        clock.advance(5)
        while not jobs.calls("stopper"):
            await asyncio.sleep(0.005)  # bounded by BOUND
        await sched.shutdown(wait=True)  # idempotent: returns at once, the job's shutdown goes on

    run(scenario)
    # That shutdown finishes in the background (as JobScheduler's from a job): the run is recorded.
    wait_until(lambda: outcomes(db_url, "stopper") == [("ok", None)], message="the run recorded")


def test_an_async_job_blocking_the_loop_holds_back_the_loop_not_the_sync_jobs(db_url: str) -> None:
    # The documented consequence: a blocking async job stalls the application's loop
    # (this test's coroutine too) while persched's threads and sync jobs carry on.
    clock = FakeClock(START)

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=clock) as sched:
            await sched.schedule("blocker", async_jobs.block_loop_until, 5.0, args=("flag",))
            await sched.schedule("sync", async_jobs.set_flag, 5.0, args=("flag",), start_in=5.000001)
            clock.advance(5.000001)
            assert await sched.wait_idle(TIMEOUT)
            (blocked,) = jobs.calls("flag")
            assert blocked.args == (True,)  # the sync job ran while the loop was blocked
            assert len(jobs.calls("flag:sync")) == 1

    run(scenario)


def test_a_run_cut_off_by_the_end_of_the_loop_is_recorded_as_an_error(db_url: str) -> None:
    # An application that ends without shutdown(): asyncio.run cancels the job's task.
    clock = FakeClock(START)
    holder: list[AsyncJobScheduler] = []

    async def scenario() -> None:
        sched = AsyncJobScheduler(db_url, clock=clock)
        holder.append(sched)
        await sched.start()
        await sched.schedule("cut", async_jobs.wait_for_event, 5.0, args=("cut",))
        clock.advance(5)
        await wait_loop_event("cut:started")

    run(scenario)
    sched = holder[0].scheduler
    assert sched.wait_idle(TIMEOUT)
    (run_,) = sched.runs("cut")
    assert run_.outcome == "error"
    assert run_.error is not None
    assert "CancelledError" in run_.error
    sched.shutdown(wait=True, timeout=TIMEOUT)


def test_jobs_on_loop_must_be_a_bool(tmp_path: Path) -> None:
    with pytest.raises(InvalidJobError) as info:
        AsyncJobScheduler(str(tmp_path / "x.db"), jobs_on_loop="yes")  # type: ignore[arg-type]  # the point
    assert info.value.argument == "jobs_on_loop"


def test_one_shot_jobs_through_the_async_front_end(db_url: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=clock) as sched:
            when = to_datetime(clock.now_us() + 2_500_000)
            await sched.schedule("once", async_jobs.on_loop, args=("once",), run_at=when)
            clock.advance(2.5)
            assert await sched.wait_idle(TIMEOUT)
            job = await sched.get_job("once")
            assert job is not None
            assert (job.state, job.run_count) == (JobState.FINISHED, 1)
            assert len(jobs.calls("once")) == 1

    run(scenario)


# --- parity: the two front ends' public methods stay in step ------------------------------------

_CONTEXT: Final = {"__enter__": "__aenter__", "__exit__": "__aexit__"}
_SYNC_IN_BOTH: Final = {"add_listener", "remove_listener", "set_observer", "runs_in_flight"}  # they never block


def _public(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls)
        if (not name.startswith("_") or name in _CONTEXT or name in _CONTEXT.values()) and callable(member)
    }


def test_the_async_front_end_has_every_public_method_of_the_threaded_one_with_the_same_parameters() -> None:
    threaded, asynchronous = _public(JobScheduler), _public(AsyncJobScheduler)
    expected = {_CONTEXT.get(name, name) for name in threaded}
    assert expected <= set(asynchronous), f"missing: {sorted(expected - set(asynchronous))}"
    for name, method in threaded.items():
        counterpart = asynchronous[_CONTEXT.get(name, name)]
        params = list(inspect.signature(method).parameters.values())
        async_params = list(inspect.signature(counterpart).parameters.values())
        if name == "__init__":
            async_params = [p for p in async_params if p.name != "jobs_on_loop"]  # the one addition
        assert [(p.name, p.kind, p.default) for p in params] == [(p.name, p.kind, p.default) for p in async_params], (
            name
        )
        if name in _SYNC_IN_BOTH or name == "__init__":
            assert not inspect.iscoroutinefunction(counterpart), name
        else:
            assert inspect.iscoroutinefunction(counterpart), f"{name} must be awaitable"
    extra = set(asynchronous) - expected - {"scheduler"}
    assert not extra, f"only in AsyncJobScheduler: {sorted(extra)}"


def test_the_constructor_takes_every_option_of_jobscheduler_with_its_default() -> None:
    # An option added to JobScheduler and forgotten here could not be set by asyncio applications.
    threaded = inspect.signature(JobScheduler.__init__).parameters
    front = inspect.signature(AsyncJobScheduler.__init__).parameters
    missing = [name for name in threaded if name not in front]
    assert not missing, f"AsyncJobScheduler lacks {missing}"
    differing = [name for name, p in threaded.items() if front[name].default != p.default]
    assert not differing, f"AsyncJobScheduler's defaults differ for {differing}"


def test_cancel_cancels_an_async_jobs_task_on_the_applications_loop(db_url: str) -> None:
    clock = FakeClock(START)

    async def scenario() -> None:
        async with AsyncJobScheduler(db_url, clock=clock) as sched:
            await sched.schedule("waits", async_jobs.wait_for_event, 60.0, args=("waits",))
            assert await sched.cancel("waits") is False  # nothing in flight
            clock.advance(60)
            await wait_loop_event("waits:started")
            assert await sched.cancel("waits") is True
            assert await sched.wait_idle(TIMEOUT)
            ((outcome, error),) = outcomes(db_url, "waits")
            assert outcome == "stopped"
            assert error is not None
            assert error.startswith("stopped: cancel() asked for it\n")
            assert jobs.calls("waits:done") == []  # cancelled at its await

    run(scenario)
