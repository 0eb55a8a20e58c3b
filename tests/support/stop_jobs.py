"""Jobs of the stopping tests: each tells the test it started by connecting to a port the test listens on.

A test waits for that connection (an event), never for a hopeful sleep;
the job then blocks until it is stopped (or returns what it saw).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading

import persched
from persched.errors import RunStopped

_FOREVER = 3600.0  # seconds: longer than any test; a stop ends it


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
