"""Child process of the fork tests (docs/reference/behaviour.md, "Forks"): real ``os.fork()`` away from pytest.

Usage::

    python -m tests.support.fork_child job --url URL --out PATH --how exit|return|raise
    python -m tests.support.fork_child methods --url URL --out PATH
    python -m tests.support.fork_child busy --url URL --out PATH
    python -m tests.support.fork_child own-sqlite --url URL --out PATH

``job``: a scheduler runs job "forker", which forks; the forked child's code
raises ``SystemExit(7)``, returns, or raises ``ValueError``. The job (in the
parent) waits, bounded, for that child to end and appends one JSON line per
run to PATH: the child's exit status, or ``"hung"`` if it was still alive
after `WAIT` seconds (it is then killed: no orphan outlives the test). Once
two runs were recorded the script shuts down and appends a summary line.

``methods``: a running scheduler's process forks from its main thread; the
child calls every public method, records what each raised, and exits through
``sys.exit`` (so that atexit hooks run); the parent then checks that its
scheduler carries on, and that no pooled connection was checked out or
closed by the child. Both write JSON lines to PATH.

``busy``: a scheduler runs a job every millisecond, so that its threads are
inside SQLite much of the time, and the process forks `BUSY_FORKS` times
from its main thread; each child makes a scheduler of its own on the same
database, lists its jobs and shuts it down. One line lists the children's
statuses (``"hung"`` for a child still alive after `WAIT` seconds).

``own-sqlite``: a scheduler runs job "own", which opens a SQLite database of
its own and holds a write transaction on it open until released; meanwhile
the main thread forks once, and the child opens a SQLite database of its own.
One line gives the child's status and whether the fork waited for the job:
persched's fork gate covers persched's own transactions, never a job's code
(persched._store.fork_gate).

Forking runs here rather than in the pytest process: a forked copy of pytest
would run its own teardown and reporting.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sqlite3
import sys
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import event

from persched import JobScheduler
from persched._store.fork_gate import FORK_WAIT
from persched.errors import SchedulerStateError
from tests.support.seams import store_of

if TYPE_CHECKING:
    from collections.abc import Callable

FORKER: Final = "tests.support.fork_child:fork_and"
TICK: Final = "tests.support.fork_child:tick"
OWN_SQLITE: Final = "tests.support.fork_child:own_sqlite"
WAIT: Final = 10.0  # real seconds a forked child gets to end before it counts as hung
FORKED_CODE: Final = 7
BUSY_FORKS: Final = 20


def _append(path: str, record: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _lines(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _reap(pid: int) -> str:
    """Wait (bounded) for child `pid`; its status as text, or "hung" (then it is killed)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return f"exit {os.waitstatus_to_exitcode(status)}"
        time.sleep(0.01)  # polling a child's exit; nothing else to wait on
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "hung"


def _fork() -> int:
    """``os.fork()``, without 3.12's DeprecationWarning for a fork of a threaded process (the point here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def fork_and(how: str, out: str) -> None:
    """The job: fork; the child's code then raises SystemExit, returns or raises (`how`)."""
    pid = _fork()
    if pid == 0:
        if how == "exit":
            raise SystemExit(FORKED_CODE)
        if how == "raise":
            raise ValueError("raised in the forked child")
        return
    _append(out, {"child": pid, "status": _reap(pid)})


def tick() -> None:
    """A trivial job."""


_HOLDING: Final = threading.Event()  # own_sqlite holds its transaction
_RELEASE: Final = threading.Event()  # ... until this is set


def own_sqlite(path: str) -> None:
    """The job: a SQLite database of its own, with a write transaction held open until released."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (1)")
        _HOLDING.set()
        _RELEASE.wait(3 * WAIT)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _wait(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 3 * WAIT
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def _job_mode(url: str, out: str, how: str) -> None:
    sched = JobScheduler(url, workers=2)
    sched.start()
    sched.schedule("forker", FORKER, 0.3, args=(how, out), start_in=0)
    _wait(lambda: len(_lines(out)) >= 2, "two runs of the forking job")
    sched.shutdown(wait=True, timeout=WAIT)
    reader = JobScheduler(url)
    outcomes = [r.outcome for r in reader.runs("forker")]
    reader.shutdown()
    _append(out, {"outcomes": outcomes, "pid": os.getpid()})


def _child_calls(sched: JobScheduler) -> dict[str, Callable[[], object]]:
    def listener(event: object) -> None:
        pass

    def enter() -> None:
        with sched:
            pass

    return {
        "start": sched.start,
        "shutdown": sched.shutdown,
        "schedule": lambda: sched.schedule("other", TICK, 1.0),
        "deschedule": lambda: sched.deschedule("tick"),
        "pause": lambda: sched.pause("tick"),
        "resume": lambda: sched.resume("tick"),
        "run_now": lambda: sched.run_now("tick"),
        "get_job": lambda: sched.get_job("tick"),
        "jobs": sched.jobs,
        "runs": lambda: sched.runs("tick"),
        "add_listener": lambda: sched.add_listener(listener),
        "remove_listener": lambda: sched.remove_listener(listener),
        "wait_idle": lambda: sched.wait_idle(1.0),
        "with": enter,
    }


def _outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except SchedulerStateError as exc:
        return f"SchedulerStateError: {exc}"
    except BaseException as exc:  # noqa: BLE001 - every outcome is reported to the test
        return f"{type(exc).__name__}: {exc}"
    return "returned"


def _methods_mode(url: str, out: str) -> None:
    parent = os.getpid()
    sched = JobScheduler(url, workers=2)
    engine = store_of(sched).engine  # the test watches the scheduler's own pool

    def note(kind: str) -> Callable[..., None]:
        def on_event(*_: object) -> None:
            if os.getpid() != parent:
                _append(out, {"child_pool_event": kind, "pid": os.getpid()})

        return on_event

    event.listen(engine, "checkout", note("checkout"))
    event.listen(engine, "close", note("close"))
    event.listen(engine, "close_detached", note("close_detached"))
    sched.start()
    sched.schedule("tick", TICK, 0.2, start_in=0)
    _wait(lambda: any(r.outcome == "ok" for r in sched.runs("tick")), "a first run")
    pid = _fork()
    if pid == 0:
        results = {name: _outcome(call) for name, call in _child_calls(sched).items()}
        _append(out, {"child_results": results})
        sys.exit(0)  # a normal exit: the atexit hooks run in the child
    status = _reap(pid)
    before = len(sched.runs("tick", limit=1000))
    _wait(lambda: len(sched.runs("tick", limit=1000)) >= before + 2, "runs after the fork")
    sched.shutdown(wait=True, timeout=WAIT)
    _append(out, {"child_status": status, "parent_carried_on": True})


def _busy_mode(url: str, out: str) -> None:
    sched = JobScheduler(url, workers=2)
    sched.start()
    sched.schedule("tick", TICK, 0.001, start_in=0)
    _wait(lambda: any(r.outcome == "ok" for r in sched.runs("tick")), "a first run")
    statuses = []
    for _ in range(BUSY_FORKS):
        pid = _fork()
        if pid == 0:
            code = 1
            try:
                own = JobScheduler(url)
                code = 0 if [j.job_id for j in own.jobs()] == ["tick"] else 2
                own.shutdown()
            finally:
                os._exit(code)
        statuses.append(_reap(pid))
    sched.shutdown(wait=True, timeout=WAIT)
    _append(out, {"busy_children": statuses})


def _own_sqlite_mode(url: str, out: str) -> None:
    sched = JobScheduler(url, workers=2)
    sched.start()
    folder = os.path.dirname(os.path.abspath(out))
    # The job runs in the module as imported by its reference, not in this __main__: its events.
    job = importlib.import_module(OWN_SQLITE.partition(":")[0])
    sched.schedule("own", OWN_SQLITE, 3600.0, args=(os.path.join(folder, "own.db"),), start_in=0)
    _wait(job._HOLDING.is_set, "the job to hold its own database")
    started = time.monotonic()
    pid = _fork()
    if pid == 0:
        code = 1
        try:
            child = sqlite3.connect(os.path.join(folder, "child.db"))
            code = 0 if child.execute("SELECT 1").fetchone() == (1,) else 2
            child.close()
        finally:
            os._exit(code)
    waited = time.monotonic() - started
    status = _reap(pid)
    job._RELEASE.set()
    sched.shutdown(wait=True, timeout=WAIT)
    _append(out, {"own_sqlite_child": status, "fork_waited_for_the_job": waited >= FORK_WAIT})


def main(argv: list[str]) -> int:
    """Run one scenario; see the module docstring."""
    p = argparse.ArgumentParser(prog="fork_child")
    p.add_argument("mode", choices=["job", "methods", "busy", "own-sqlite"])
    p.add_argument("--url", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--how", choices=["exit", "return", "raise"], default="exit")
    args = p.parse_args(argv)
    if args.mode == "job":
        _job_mode(args.url, args.out, args.how)
    elif args.mode == "busy":
        _busy_mode(args.url, args.out)
    elif args.mode == "own-sqlite":
        _own_sqlite_mode(args.url, args.out)
    else:
        _methods_mode(args.url, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
