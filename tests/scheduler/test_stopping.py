"""Stopping a run: current_run()'s RunContext, on_overrun="stop", cancel() and the shutdown's timeout,
for thread, async and process jobs (docs/reference/behaviour.md, "Stopping a run").

Time is a FakeClock at an odd instant; a job tells the test it started through
an event (a process job through a connection), and the test then asks for the stop.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from typing import TYPE_CHECKING, Any

import pytest

import persched
from persched import Event, RunContext
from persched.errors import InvalidJobError, JobNotFoundError
from tests.support import stop_jobs
from tests.support.cli_run import persched as persched_cli
from tests.support.helpers import TIMEOUT, wait_until

if TYPE_CHECKING:
    import socket

    from persched import JobScheduler, Run
    from persched.testing import FakeClock
    from tests.conftest import SchedulerFactory

ODD = 0.456789  # seconds past the fixture's round epoch: an odd instant


@pytest.fixture
def clock(fake_clock: FakeClock) -> FakeClock:
    fake_clock.advance(ODD)
    return fake_clock


def _assert_stopped(run: Run, why: str) -> str:
    """`run` ended stopped, its error saying `why` (then the traceback); that error."""
    assert run.outcome == "stopped"
    assert run.error is not None
    assert run.error.startswith(f"stopped: {why}\n")
    return run.error


def _ended(sched: JobScheduler, job_id: str) -> Run:
    wait_until(lambda: any(r.outcome is not None for r in sched.runs(job_id)), message=f"a run of {job_id} ended")
    (run,) = [r for r in sched.runs(job_id) if r.outcome is not None]
    return run


def test_current_run_is_a_run_context_with_every_run_field(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    job = stop_jobs.start_running(sched, clock, "ctx", stop_jobs.thread_cooperate)
    context = stop_jobs.seen("ctx")
    assert isinstance(context, RunContext)
    assert isinstance(context, persched.Run)  # every field a job read before reads the same
    (run,) = sched.runs("ctx")
    assert (context.job_id, context.generation, context.scheduled_for) == ("ctx", job.generation, run.scheduled_for)
    assert (context.started_at, context.run_id, context.run_now) == (run.started_at, run.run_id, False)
    assert (context.namespace, context.attempt, context.outcome) == ("default", 1, None)
    assert not context.stopping.is_set()
    context.raise_if_stopping()  # not asked: returns
    assert "stopping" not in context.model_dump()
    assert persched.current_run() is None  # outside a run
    sched.cancel("ctx")
    assert _ended(sched, "ctx").outcome == "stopped"


def test_max_runtime_with_on_overrun_stop_stops_a_thread_job(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    seen: queue.Queue[Event] = queue.Queue()
    sched.add_listener(seen.put, kinds=["run_stopped"])
    stop_jobs.start_running(
        sched, clock, "slow", stop_jobs.thread_cooperate, max_runtime_seconds=2.5, on_overrun="stop"
    )
    clock.advance(2.4)
    assert not stop_jobs.seen("slow").stopping.is_set()
    clock.advance(0.1)  # 2.5 s after its start
    run = _ended(sched, "slow")
    error = _assert_stopped(run, "it ran past its max_runtime_seconds (on_overrun='stop')")
    assert run.overran
    assert "RunStopped: the run was asked to stop (max_runtime)" in error
    event = seen.get(timeout=TIMEOUT)
    assert (event.kind, event.job_id) == ("run_stopped", "slow")


def test_with_on_overrun_warn_a_run_is_not_asked_to_stop(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    stop_jobs.start_running(sched, clock, "warned", stop_jobs.thread_cooperate, max_runtime_seconds=2.5)
    clock.advance(2.5)
    wait_until(lambda: sched.runs("warned")[0].overran, message="the overrun recorded")
    assert not stop_jobs.seen("warned").stopping.is_set()
    sched.cancel("warned")
    assert _ended(sched, "warned").outcome == "stopped"


def test_a_run_that_ignores_the_stop_keeps_its_outcome_with_overran(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    sched = make_scheduler(start=True)
    stop_jobs.start_running(sched, clock, "deaf", stop_jobs.thread_ignore, max_runtime_seconds=1.0, on_overrun="stop")
    clock.advance(1.0)
    run = _ended(sched, "deaf")
    assert (run.outcome, run.error, run.overran) == ("ok", None, True)


def test_cancel_stops_the_run_in_flight_here(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    job = sched.schedule("c", stop_jobs.thread_cooperate, 10.0, args=("c",))
    assert sched.cancel("c") is False  # nothing in flight
    stop_jobs.let_run(clock, "c")
    assert sched.cancel("c") is True
    run = _ended(sched, "c")
    _assert_stopped(run, "cancel() asked for it")
    # The schedule goes on, and the request ended with its run.
    after = sched.get_job("c")
    assert after is not None
    assert (after.generation, after.state.value) == (job.generation, "scheduled")
    assert sched.cancel("c") is False


def test_cancel_of_an_unknown_job_raises(make_scheduler: SchedulerFactory) -> None:
    sched = make_scheduler()
    with pytest.raises(JobNotFoundError, match="no job 'nope' in namespace 'default'"):
        sched.cancel("nope")
    sched.schedule("gone", stop_jobs.thread_cooperate, 10.0, args=("gone",))
    sched.deschedule("gone")
    with pytest.raises(JobNotFoundError, match="descheduled"):
        sched.cancel("gone")
    with pytest.raises(InvalidJobError, match="job_id"):
        sched.cancel(42)  # type: ignore[arg-type]  # bad input on purpose


def test_cancel_cancels_an_async_jobs_task(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    stop_jobs.start_running(sched, clock, "aw", stop_jobs.async_wait)
    assert sched.cancel("aw") is True
    run = _ended(sched, "aw")
    assert "CancelledError" in _assert_stopped(run, "cancel() asked for it")


def test_the_shutdown_timeout_stops_the_runs_in_flight(make_scheduler: SchedulerFactory, clock: FakeClock) -> None:
    sched = make_scheduler(start=True)
    stop_jobs.start_running(sched, clock, "long", stop_jobs.thread_cooperate, stop_grace_seconds=30.0)
    sched.shutdown(wait=True, timeout=0.0)
    run = _ended(make_scheduler(), "long")  # a thread run is only asked: it may end just after the return
    _assert_stopped(run, "the scheduler shut down and its timeout was reached")


def test_the_shutdown_timeout_waits_no_stop_grace_for_a_thread_run(
    make_scheduler: SchedulerFactory, clock: FakeClock
) -> None:
    """A thread cannot be made to end: past the timeout, shutdown() asks and returns (its grace is for processes)."""
    sched = make_scheduler(start=True)
    stop_jobs.start_running(sched, clock, "unheeding", stop_jobs.thread_deaf, stop_grace_seconds=60.0)
    returned = threading.Event()

    def shut_down() -> None:
        sched.shutdown(wait=True, timeout=0.0)
        returned.set()

    shutting = threading.Thread(target=shut_down)
    shutting.start()
    try:
        # Within TIMEOUT, far below the job's 60 s grace (which a thread run would wrongly be given).
        assert returned.wait(TIMEOUT), "shutdown() waited past its timeout for a thread run"
    finally:
        stop_jobs.gate("unheeding").set()
        shutting.join(TIMEOUT)
    run = _ended(make_scheduler(), "unheeding")
    assert run.outcome == "ok"  # it ignored the request: its own outcome


def test_cancel_terminates_a_process_job(
    make_scheduler: SchedulerFactory, clock: FakeClock, listener: socket.socket
) -> None:
    sched = make_scheduler(start=True)
    stop_jobs.start_running(sched, clock, "proc", stop_jobs.block_until_stopped, listener=listener)
    assert sched.cancel("proc") is True
    run = _ended(sched, "proc")
    _assert_stopped(run, "cancel() asked for it")


def test_a_process_job_that_exits_records_its_status(
    make_scheduler: SchedulerFactory, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sched = make_scheduler(start=True)
    sched.schedule("exits", stop_jobs.exit_3, 10.0, executor="process")
    with caplog.at_level(logging.ERROR, logger="persched"):
        clock.advance(10.0)
        run = _ended(sched, "exits")
    assert any(r.levelno == logging.ERROR and "job exits generation 1" in r.getMessage() for r in caplog.records)
    assert (run.outcome, run.error) == (
        "error",
        "the job's child process exited with status 3 before it reported an outcome",
    )


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("on_overrun", "kill"),
        ("on_overrun", True),
        ("on_overrun", None),
        ("executor", "fork"),
        ("executor", "Process"),
        ("executor", 1),
        ("stop_grace_seconds", 0),
        ("stop_grace_seconds", -1.0),
        ("stop_grace_seconds", float("nan")),
        ("stop_grace_seconds", float("inf")),
        ("stop_grace_seconds", True),
        ("stop_grace_seconds", "5"),
        ("stop_grace_seconds", None),
    ],
)
def test_bad_stopping_options_are_refused_and_write_nothing(
    make_scheduler: SchedulerFactory, option: str, value: object
) -> None:
    sched = make_scheduler()
    options: dict[str, Any] = {option: value}
    with pytest.raises(InvalidJobError) as raised:
        sched.schedule("bad", stop_jobs.thread_cooperate, 10.0, args=("bad",), **options)
    assert raised.value.argument == option
    with pytest.raises(InvalidJobError) as raised:
        sched.declare([persched.JobSpec("bad", stop_jobs.thread_cooperate, 10.0, **options)])
    assert raised.value.argument == f"specs['bad'].{option}"
    assert sched.get_job("bad") is None


def test_max_runtime_with_on_overrun_stop_terminates_a_process_job(
    make_scheduler: SchedulerFactory, clock: FakeClock, listener: socket.socket
) -> None:
    sched = make_scheduler(start=True)
    stop_jobs.start_running(
        sched,
        clock,
        "proc-slow",
        stop_jobs.block_until_stopped,
        listener=listener,
        max_runtime_seconds=1.5,
        on_overrun="stop",
    )
    clock.advance(1.5)
    run = _ended(sched, "proc-slow")
    _assert_stopped(run, "it ran past its max_runtime_seconds (on_overrun='stop')")
    assert run.overran


def test_the_shutdown_timeout_kills_a_process_job_that_ignores_it(
    make_scheduler: SchedulerFactory, clock: FakeClock, listener: socket.socket
) -> None:
    sched = make_scheduler(start=True)
    stop_jobs.start_running(sched, clock, "proc-deaf", stop_jobs.ignore_stop, listener=listener, stop_grace_seconds=0.2)
    sched.shutdown(wait=True, timeout=0.0)
    (run,) = make_scheduler().runs("proc-deaf")
    assert run.outcome == "stopped"
    assert run.error == (
        "stopped: the scheduler shut down and its timeout was reached; the child process was killed by signal SIGKILL"
    )


def test_stopped_runs_count_as_failures_for_persched_check(
    make_scheduler: SchedulerFactory, clock: FakeClock, sqlite_url: str
) -> None:
    sched = make_scheduler(sqlite_url, start=True)
    sched.schedule("often", stop_jobs.thread_cooperate, 10.0, args=("often",))
    started = stop_jobs.started_event("often")
    for _ in range(3):
        started.clear()
        clock.advance(10.0)
        assert started.wait(TIMEOUT)
        assert sched.cancel("often")
        assert sched.wait_idle(TIMEOUT)
    assert [r.outcome for r in sched.runs("often")] == ["stopped"] * 3
    check = persched_cli("--db", sqlite_url, "check", "--json")
    assert check.returncode == 1, check.stderr
    assert [problem["job_id"] for problem in json.loads(check.stdout) if problem["problem"] == "failing"] == ["often"]
