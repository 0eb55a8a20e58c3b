"""Module-level targets for the AsyncJobScheduler tests, importable by reference.

Calls are recorded in `tests.support.jobs`'s registry (with the thread and
what `persched.current_run()` said). A test hands a coroutine job an
`asyncio.Event` of its own loop through `loop_event(key)`; every wait is
bounded, so a broken scheduler fails a test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Final

from tests.support import jobs

if TYPE_CHECKING:
    from persched import AsyncJobScheduler

__all__ = [
    "block_loop_until",
    "loop_event",
    "on_loop",
    "reset",
    "set_flag",
    "shutdown_from_async_job",
    "thread_flag",
    "wait_for_event",
]

WAIT: Final = 30.0  # real seconds a target waits at most

_lock = threading.Lock()
_loop_events: dict[str, asyncio.Event] = {}
_flags: dict[str, threading.Event] = {}
_schedulers: dict[str, AsyncJobScheduler] = {}


def reset() -> None:
    """Forget every event and scheduler (between tests)."""
    with _lock:
        for flag in _flags.values():
            flag.set()
        _loop_events.clear()
        _flags.clear()
        _schedulers.clear()


def loop_event(key: str) -> asyncio.Event:
    """The asyncio event of `key` (made on first use; use it on one loop only)."""
    with _lock:
        return _loop_events.setdefault(key, asyncio.Event())


def thread_flag(key: str) -> threading.Event:
    """The thread event of `key` (made on first use)."""
    with _lock:
        return _flags.setdefault(key, threading.Event())


def register(key: str, sched: AsyncJobScheduler) -> None:
    """Make `sched` reachable from `shutdown_from_async_job(key)`."""
    with _lock:
        _schedulers[key] = sched


async def on_loop(key: str) -> None:
    """Record the call with the id of the loop it runs on."""
    await asyncio.sleep(0)
    jobs.record(key, id(asyncio.get_running_loop()))


async def wait_for_event(key: str) -> None:
    """Record the call, set ``<key>:started``, then await the loop event `key` (bounded)."""
    jobs.record(key)
    loop_event(f"{key}:started").set()
    await asyncio.wait_for(loop_event(key).wait(), WAIT)
    jobs.record(f"{key}:done")


async def block_loop_until(key: str) -> None:
    """Block the whole event loop (a sync wait, no await) until the thread flag `key` is set; record whether it was."""
    jobs.record(key, thread_flag(key).wait(WAIT))


def set_flag(key: str) -> None:
    """A sync job: record the call and set the thread flag `key`."""
    jobs.record(f"{key}:sync")
    thread_flag(key).set()


async def shutdown_from_async_job(key: str) -> None:
    """Await ``shutdown()`` of the registered scheduler from inside a run, then record."""
    with _lock:
        sched = _schedulers[key]
    await sched.shutdown(wait=True)
    jobs.record(key)
