"""Stop signals (persched._interfaces.signals): a handler that runs inside the main thread's wait never deadlocks it.

A Python signal handler runs in the main thread between two bytecodes, possibly
inside the wait it is to end. The reentrancy test calls the handler at every
call and return the wait makes (a profile hook in the main thread): with
``threading.Event`` the handler's ``set()`` takes the lock that ``wait()``
holds right then and the process hangs, as a wall-clock child did in CI.
It runs in a child process, so that a hang is a timeout, not a stuck suite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from persched._interfaces.signals import StopSignals, run_responsively
from tests.support.helpers import TIMEOUT, thread_runs, wait_until

REENTRANT = textwrap.dedent(
    """
    import sys, threading
    from persched._interfaces.signals import StopSignals

    class EventStop:  # what a handler that only sets an Event gives
        def __init__(self):
            self.event = threading.Event()
        def handler(self, signum, frame):
            self.event.set()
        def wait(self, timeout):
            return self.event.wait(timeout)

    stop = EventStop() if sys.argv[1] == "event" else StopSignals()
    calls = 0

    def hook(frame, event, arg):
        global calls
        if event in ("return", "c_return", "c_exception"):
            sys.setprofile(None)  # the handler itself is not profiled
            calls += 1
            stop.handler(15, None)  # as if SIGTERM arrived right here
            sys.setprofile(hook)

    sys.setprofile(hook)
    stop.wait(0.01)
    sys.setprofile(None)
    woke = stop.wait(0)  # the signal is not lost, wherever it came
    print(woke, calls)
    """
)


@pytest.mark.parametrize(
    "kind",
    ["stop-signals", pytest.param("event", marks=pytest.mark.xfail(strict=True, reason="Event.set() deadlocks"))],
)
def test_a_handler_run_anywhere_inside_the_wait_ends_it(kind: str) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", REENTRANT, kind], capture_output=True, text=True, timeout=TIMEOUT / 2
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("the handler, run inside the wait, hung the process") from None
    assert done.returncode == 0, done.stderr
    woke, calls = done.stdout.split()
    assert woke == "True"
    assert int(calls) >= 1


def test_a_signal_ends_the_wait_and_the_previous_handlers_come_back() -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    stop = StopSignals()
    with stop.installed():
        assert not stop.wait(0.001)
        threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGTERM)).start()
        assert stop.wait(TIMEOUT)
        assert stop.received == [signal.SIGTERM]
        assert stop.wait(0)  # and stays ended
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_on_signal_sees_the_signals_received_before_it() -> None:
    seen: list[list[int]] = []
    stop = StopSignals(lambda signum: seen.append(list(stop.received)))
    stop.handler(signal.SIGINT, None)
    stop.handler(signal.SIGTERM, None)
    assert seen == [[], [signal.SIGINT]]  # the CLI's "second signal: exit now" reads this


def test_run_responsively_returns_after_the_action_and_raises_what_it_raised() -> None:
    done: list[str] = []
    run_responsively(lambda: done.append(threading.current_thread().name))
    assert done == ["persched-responsive"]  # on a thread of its own, joined before the return

    def fail() -> None:
        raise ValueError("in the action")

    with pytest.raises(ValueError, match="in the action"):
        run_responsively(fail)


def test_a_signal_handled_on_another_thread_runs_its_handler_during_run_responsively() -> None:
    # The signal is delivered to the action's thread; the main thread is in a timed join slice.
    handled: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: handled.append(signum))
    release = threading.Event()
    seen_by_the_action: list[bool] = []

    def action() -> None:
        joining = threading.Thread.join.__code__  # the main thread waits there, as for a shutdown
        wait_until(lambda: thread_runs(threading.main_thread(), joining), message="the main thread in its join")
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
        release.wait(TIMEOUT)  # until the main thread ran the handler (an untimed join: never)
        seen_by_the_action.append(bool(handled))

    def watch() -> None:
        wait_until(lambda: bool(handled), message="the handler in the main thread")
        release.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        run_responsively(action)
    finally:
        release.set()
        signal.signal(signal.SIGUSR1, previous)
    watcher.join(TIMEOUT)
    assert seen_by_the_action == [True]  # the handler ran while the action was still going
    assert handled == [signal.SIGUSR1]
