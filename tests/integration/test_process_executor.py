"""The process executor alone (`persched._engine.processes`): real child processes, no scheduler.

Each job tells the test it started by connecting to a port the test listens
on (tests/support/stop_jobs.py), so a stop is asked only once the job runs.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
from typing import TYPE_CHECKING, Any

import pytest

from persched._engine import processes
from persched._engine.context import StopSignal
from persched._engine.processes import ProcessRun, run_in_process
from persched._model.instant import Micros
from persched._model.policy import RunPolicy
from persched._store.records import Claim
from tests.support import stop_jobs
from tests.support.helpers import TIMEOUT, wait_until

if TYPE_CHECKING:
    import socket

SCHEDULED_FOR = 1_700_000_123_456_789  # µs: an odd instant


def _run(
    target: str, args: list[object] | None = None, *, grace: float = 5.0, allowed: tuple[str, ...] | None = None
) -> ProcessRun:
    claim = Claim(
        job_id="proc-job",
        generation=3,
        target=target,
        args_json=json.dumps(args or []),
        kwargs_json="{}",
        scheduled_for=SCHEDULED_FOR,  # type: ignore[arg-type]  # an Instant
        started_at=SCHEDULED_FOR + 17,  # type: ignore[arg-type]  # an Instant
        run_id=41,
    )
    return ProcessRun(claim, "tenant-a", allowed, RunPolicy("process", "warn", Micros(round(grace * 1_000_000))))


class _InThread:
    """run_in_process on a thread of its own, as a worker calls it."""

    def __init__(self, run: ProcessRun, stop: StopSignal) -> None:
        self.result: tuple[str, str | None] | None = None
        self._thread = threading.Thread(target=self._go, args=(run, stop), name="test-process-run")
        self._thread.start()

    def _go(self, run: ProcessRun, stop: StopSignal) -> None:
        self.result = run_in_process(run, stop)

    def ended(self) -> tuple[str, str | None]:
        self._thread.join(TIMEOUT)
        assert not self._thread.is_alive()
        assert self.result is not None
        return self.result


def test_a_child_sees_its_run_context(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    running = _InThread(_run("tests.support.stop_jobs:context_fields", [port]), StopSignal())
    seen = json.loads(stop_jobs.started_message(listener))
    assert running.ended() == ("ok", None)
    assert seen == {
        "job_id": "proc-job",
        "namespace": "tenant-a",
        "generation": 3,
        "scheduled_for": "2023-11-14T22:15:23.456789+00:00",
        "attempt": 1,
        "run_id": 41,
        "stopping": False,
        "is_run": True,
    }


def test_a_childs_exception_is_recorded_with_its_traceback() -> None:
    outcome, error = run_in_process(_run("tests.support.stop_jobs:fail"), StopSignal())
    assert outcome == "error"
    assert error is not None
    assert "ValueError: the job failed on purpose" in error
    assert "stop_jobs.py" in error
    assert "child.py" not in error  # the traceback starts at the job's own frame


def test_a_child_that_exits_records_its_status() -> None:
    outcome, error = run_in_process(_run("tests.support.stop_jobs:exit_3"), StopSignal())
    assert (outcome, error) == ("error", "the job's child process exited with status 3 before it reported an outcome")


def test_a_child_killed_by_a_signal_records_it(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    running = _InThread(_run("tests.support.stop_jobs:block_until_stopped", [port]), StopSignal())
    stop_jobs.started_message(listener)

    def job_children() -> list[multiprocessing.process.BaseProcess]:
        return [p for p in multiprocessing.active_children() if p.name == "persched-run-proc-job"]

    # A forkserver child can run, and connect, before its parent's start() has counted it as a child.
    wait_until(lambda: len(job_children()) == 1, message="the child counted as one")
    children = job_children()
    assert children[0].pid is not None
    os.kill(children[0].pid, signal.SIGKILL)
    outcome, error = running.ended()
    assert outcome == "error"
    assert error == "the job's child process was killed by signal SIGKILL before it reported an outcome"


def test_an_unimportable_target_is_an_error_that_says_so() -> None:
    outcome, error = run_in_process(_run("tests.support.no_such_module:job"), StopSignal())
    assert outcome == "error"
    assert error is not None
    assert error.startswith("the job's child process could not start it: TargetNotFound: cannot import module")


def test_a_child_that_cannot_be_started_is_an_error_and_the_worker_lives_on(monkeypatch: pytest.MonkeyPatch) -> None:
    real = processes._context

    class Refusing:  # the start method's context, whose processes fail to start
        def Pipe(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401 - multiprocessing's names
            return real().Pipe(*args, **kwargs)

        def Process(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
            process = real().Process(*args, **kwargs)  # type: ignore[attr-defined]  # every context has one

            def start() -> None:
                raise RuntimeError("An attempt has been made to start a new process before bootstrapping")

            process.start = start
            return process

    monkeypatch.setattr(processes, "_context", Refusing)
    outcome, error = run_in_process(_run("tests.support.stop_jobs:fail"), StopSignal())
    assert outcome == "error"
    assert error == (
        "the child process could not be started: RuntimeError: "
        "An attempt has been made to start a new process before bootstrapping"
    )


def test_the_child_respects_allowed_modules() -> None:
    outcome, error = run_in_process(_run("tests.support.stop_jobs:fail", allowed=("myapp",)), StopSignal())
    assert outcome == "error"
    assert error is not None
    assert "TargetRefused: module 'tests.support.stop_jobs' is not in allowed_modules ['myapp']" in error


@pytest.mark.parametrize("reason", ["cancel", "max_runtime", "shutdown"])
def test_a_stop_terminates_the_child_and_says_why(listener: socket.socket, reason: str) -> None:
    port = listener.getsockname()[1]
    stop = StopSignal()
    running = _InThread(_run("tests.support.stop_jobs:block_until_stopped", [port]), stop)
    stop_jobs.started_message(listener)
    stop.request(reason)
    outcome, error = running.ended()
    assert outcome == "stopped"
    assert error is not None
    first, _, rest = error.partition("\n")
    assert (
        first
        == {
            "cancel": "stopped: cancel() asked for it",
            "max_runtime": "stopped: it ran past its max_runtime_seconds (on_overrun='stop')",
            "shutdown": "stopped: the scheduler shut down and its timeout was reached",
        }[reason]
    )
    assert f"RunStopped: the run was asked to stop ({reason})" in rest


def test_a_cooperating_child_sees_stopping_and_raises(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    stop = StopSignal()
    running = _InThread(_run("tests.support.stop_jobs:cooperate", [port]), stop)
    stop_jobs.started_message(listener)
    stop.request("cancel")
    outcome, error = running.ended()
    assert outcome == "stopped"
    assert error is not None
    assert "RunStopped: the run was asked to stop (cancel)" in error


def test_a_child_that_ignores_the_stop_is_killed_after_the_grace(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    stop = StopSignal()
    running = _InThread(_run("tests.support.stop_jobs:ignore_stop", [port], grace=0.2), stop)
    stop_jobs.started_message(listener)
    stop.request("shutdown")
    outcome, error = running.ended()
    assert (outcome, error) == (
        "stopped",
        "stopped: the scheduler shut down and its timeout was reached; the child process was killed by signal SIGKILL",
    )


def test_a_stop_asked_before_the_child_runs_ends_it() -> None:
    stop = StopSignal()
    stop.request("cancel")
    # The job cannot end by itself (one that tells a listener it started may fail first, and keep
    # its own outcome): the SIGTERM ends it wherever the child is when it arrives.
    outcome, error = run_in_process(_run("tests.support.stop_jobs:wait_forever"), stop)
    assert outcome == "stopped", error
    assert error is not None
    assert error.startswith("stopped: cancel() asked for it")
