"""persched._store.fork_gate: a fork waits for the SQLite calls of other threads, and for no one else.

Each fork here is of the pytest process; the child only reports through its
exit code and leaves with ``os._exit``, so none of pytest's own code runs
in it.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Final

from persched._store import fork_gate
from persched._store.fork_gate import FORK_GATE, ForkGate
from tests.support.helpers import TIMEOUT, thread_runs, wait_until

if TYPE_CHECKING:
    from collections.abc import Callable

    import pytest

CHILD_OK: Final = 0
CHILD_NOT_ALONE: Final = 3


def _fork_and_reap(child_code: Callable[[], int] = lambda: CHILD_OK) -> int:
    """Fork; the child exits at once with `child_code()`, which sees memory as it was at the fork."""
    pid = os.fork()
    if pid == 0:
        os._exit(child_code())
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def test_a_fork_waits_for_another_threads_share_and_new_shares_wait_for_the_fork() -> None:
    inside: set[str] = set()  # the threads in their guarded block; the child sees it as at the fork
    holding, release = threading.Event(), threading.Event()
    codes: list[int] = []

    def holder() -> None:
        with FORK_GATE.share():
            inside.add("holder")
            holding.set()
            release.wait(TIMEOUT)
            inside.discard("holder")

    def forker() -> None:
        codes.append(_fork_and_reap(lambda: CHILD_OK if not inside else CHILD_NOT_ALONE))

    def latecomer() -> None:
        with FORK_GATE.share():
            inside.add("latecomer")

    threads = [_thread(holder)]
    assert holding.wait(TIMEOUT)
    threads.append(_thread(forker))
    wait_until(lambda: FORK_GATE._forking, message="the fork to wait at the gate")
    threads.append(_thread(latecomer))
    # The latecomer runs share()'s own code, not the block it guards: it waits there.
    share_code = ForkGate.share.__wrapped__.__code__  # type: ignore[attr-defined]  # contextmanager's
    wait_until(lambda: thread_runs(threads[2], share_code), message="the latecomer to wait in share()")
    assert codes == []
    assert inside == {"holder"}  # the late share waits for the fork
    release.set()
    for thread in threads:
        thread.join(TIMEOUT)
    assert codes == [CHILD_OK]  # at the fork neither the holder nor the latecomer was inside SQLite
    assert inside == {"latecomer"}  # which had its share after the fork
    assert (FORK_GATE._shares, FORK_GATE._forking) == (0, False)


def test_a_thread_that_forks_inside_its_own_share_waits_for_no_one() -> None:
    codes: list[int] = []

    def own_fork() -> None:
        with FORK_GATE.share(), FORK_GATE.share():  # nested: one share
            codes.append(_fork_and_reap(lambda: CHILD_OK if FORK_GATE._shares == 1 else CHILD_NOT_ALONE))

    thread = _thread(own_fork)
    thread.join(TIMEOUT)
    assert not thread.is_alive()
    assert codes == [CHILD_OK]  # in the child only the forking thread's share is counted
    assert FORK_GATE._shares == 0


def test_a_fork_goes_ahead_after_the_bound_and_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(fork_gate, "FORK_WAIT", 0.05)
    holding, release = threading.Event(), threading.Event()

    def holder() -> None:
        with FORK_GATE.share():
            holding.set()
            release.wait(TIMEOUT)

    thread = _thread(holder)
    assert holding.wait(TIMEOUT)
    try:
        with caplog.at_level(logging.WARNING, logger="persched"):
            # In the child the holder's thread is gone, and its share with it.
            assert _fork_and_reap(lambda: CHILD_OK if FORK_GATE._shares == 0 else CHILD_NOT_ALONE) == CHILD_OK
    finally:
        release.set()
        thread.join(TIMEOUT)
    (record,) = [r for r in caplog.records if r.name == "persched._store.fork_gate"]
    assert "1 SQLite transaction(s)" in record.getMessage()
    assert "may hang" in record.getMessage()
    assert FORK_GATE._shares == 0
