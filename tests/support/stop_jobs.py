"""Jobs of the stopping tests: each tells the test it started by connecting to a port the test listens on.

A test waits for that connection (an event), never for a hopeful sleep;
the job then blocks until it is stopped (or returns what it saw).
`start_running` schedules one and waits until its first run started.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from typing import TYPE_CHECKING, Any, Final

import persched
from persched.errors import RunStopped
from tests.support.helpers import TIMEOUT

if TYPE_CHECKING:
    from collections.abc import Callable

    from persched import Job, JobScheduler
    from persched.testing import FakeClock

_FOREVER = 3600.0  # seconds: longer than any test; a stop ends it
SLOT: Final = 10.0  # seconds: the interval of a job `start_running` schedules


def start_running(
    sched: JobScheduler,
    clock: FakeClock,
    key: str,
    target: Callable[..., object],
    *,
    listener: socket.socket | None = None,
    **options: Any,  # noqa: ANN401 - schedule()'s options
) -> Job:
    """Schedule `target` as the job `key`, every `SLOT` seconds, let its first slot come on `clock`,
    and wait until that run started: a thread or async job is told `key` and sets its event; with
    `listener`, a process job is told the listener's port and connects to it."""
    if listener is None:
        job = sched.schedule(key, target, SLOT, args=(key,), **options)
        let_run(clock, key)
    else:
        job = sched.schedule(key, target, SLOT, args=(listener.getsockname()[1],), executor="process", **options)
        clock.advance(SLOT)
        started_message(listener)
    return job


def let_run(clock: FakeClock, key: str) -> None:
    """Let the first slot of the job `key` come on `clock` and wait until its run started (its event)."""
    clock.advance(SLOT)
    assert started_event(key).wait(TIMEOUT), f"the run of {key} did not start"


def started_message(server: socket.socket) -> str:
    """Wait for a process job's connection to `server` and return what it sent (its "started" message)."""
    conn, _ = server.accept()
    with conn:
        conn.settimeout(TIMEOUT)
        chunks = []
        while chunk := conn.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def _started(port: int, message: str = "started") -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(message.encode())


def context_fields(port: int) -> None:
    """Send the fields of current_run() as JSON."""
    run = persched.current_run()
    assert run is not None
    fields = {
        "job_id": run.job_id,
        "namespace": run.namespace,
        "generation": run.generation,
        "scheduled_for": run.scheduled_for.isoformat(),
        "attempt": run.attempt,
        "run_id": run.run_id,
        "stopping": run.stopping.is_set(),
        "is_run": isinstance(run, persched.Run),
    }
    _started(port, json.dumps(fields))


def fail() -> None:
    raise ValueError("the job failed on purpose")


def exit_3() -> None:
    os._exit(3)


def block_until_stopped(port: int) -> None:
    """Sleep (a process job's SIGTERM raises RunStopped here)."""
    _started(port)
    threading.Event().wait(_FOREVER)


def wait_forever() -> None:
    """Block until a stop ends the run: it never ends by itself, nor says that it started."""
    threading.Event().wait(_FOREVER)


def cooperate(port: int) -> None:
    """Wait for the stop request, then leave by raise_if_stopping()."""
    run = persched.current_run()
    assert run is not None
    _started(port)
    run.stopping.wait(_FOREVER)
    run.raise_if_stopping()


def ignore_stop(port: int) -> None:
    """Catch every RunStopped and go on (a process job is then killed after its grace)."""
    told = False
    while True:
        try:
            if not told:  # inside the try: a stop may come while the message is being sent
                told = True
                _started(port)
            threading.Event().wait(_FOREVER)
        except RunStopped:  # noqa: PERF203 - catching it is the point
            continue


def ignore_stop_then_return(port: int) -> None:
    """See the stop request, and return normally anyway."""
    run = persched.current_run()
    assert run is not None
    _started(port)
    run.stopping.wait(_FOREVER)


async def async_block(port: int) -> None:
    _started(port)
    await asyncio.sleep(_FOREVER)


async def async_context(port: int) -> None:
    run = persched.current_run()
    assert run is not None
    _started(port, json.dumps({"job_id": run.job_id, "namespace": run.namespace}))


# -- jobs run on the scheduler's own threads: they tell the test through events ---------------------

_lock = threading.Lock()
_started_events: dict[str, threading.Event] = {}
_seen: dict[str, object] = {}
_GATE_TIMEOUT = 60.0  # seconds: a job a test forgot to stop ends by itself


def forget() -> None:
    """Forget every key's events and RunContext: a test that reuses another's key starts unseen."""
    with _lock:
        _started_events.clear()
        _seen.clear()


def started_event(key: str) -> threading.Event:
    """The event a job of `key` sets once it runs."""
    with _lock:
        return _started_events.setdefault(key, threading.Event())


def seen(key: str) -> persched.RunContext:
    """What the job of `key` saw of its run (its RunContext)."""
    with _lock:
        context = _seen.get(key)
    assert isinstance(context, persched.RunContext), f"the job {key} kept no RunContext"
    return context


def thread_cooperate(key: str) -> None:
    """Keep its RunContext, say it started, wait for the stop request and leave by raise_if_stopping()."""
    run = persched.current_run()
    assert run is not None
    with _lock:
        _seen[key] = run
    started_event(key).set()
    run.stopping.wait(_GATE_TIMEOUT)
    run.raise_if_stopping()


def thread_ignore(key: str) -> None:
    """Say it started, see the stop request, and return normally anyway."""
    run = persched.current_run()
    assert run is not None
    started_event(key).set()
    run.stopping.wait(_GATE_TIMEOUT)


def gate(key: str) -> threading.Event:
    """The event that lets a `thread_deaf` job of `key` return."""
    with _lock:
        return _started_events.setdefault(f"{key}/gate", threading.Event())


def thread_deaf(key: str) -> None:
    """Say it started, then wait for its gate only: it never looks at the stop request."""
    started_event(key).set()
    gate(key).wait(_GATE_TIMEOUT)


async def async_wait(key: str) -> None:
    """Say it started, then sleep (a stop cancels its task)."""
    started_event(key).set()
    await asyncio.sleep(_GATE_TIMEOUT)
