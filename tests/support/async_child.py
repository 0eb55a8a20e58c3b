"""Child process of the async-isolation tests: an application that runs ``asyncio.run(main())``.

Usage: ``python -m tests.support.async_child SCENARIO URL RESULT``. The child
runs one scenario and writes what it saw to RESULT as JSON, then exits 0; an
application loop that a job ended shows as another exit code and no RESULT.

- ``escape-on-loop``, ``escape-own-loops``, ``escape-threaded``: jobs that
  raise ``SystemExit(3)`` and ``KeyboardInterrupt`` run twice each, then a
  plain async job, on a FakeClock; with ``AsyncJobScheduler`` on the
  application's loop, with ``jobs_on_loop=False`` (one worker, so its own
  loop runs every job), and with ``JobScheduler`` itself (no application
  loop: its one worker's loop). RESULT: each job's outcomes and errors.
- ``blocked-loop``: on the real clock, 8 async jobs and 1 sync job every
  `INTERVAL` s with ``workers=8``; the first run of one async job blocks the
  loop (a sync wait, no await) until the sync job has run `SYNC_RUNS` times
  since, or `BLOCK_MAX` s. RESULT: whether the sync job got there, when the
  block began and ended, and every async run's slot and start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any, Final

from persched import AsyncJobScheduler, JobScheduler, Run
from persched.testing import FakeClock

__all__ = ["BLOCK_MAX", "INTERVAL", "SYNC_RUNS", "block_once", "interrupt", "noop", "sync_tick", "system_exit"]

START: Final = 1_700_000_000.123457
INTERVAL: Final = 0.1  # seconds, every job of blocked-loop
SYNC_RUNS: Final = 20  # sync runs the blocked loop waits for: 2 s at INTERVAL
BLOCK_MAX: Final = 6.0  # seconds the loop is blocked at most (a starved sync job never gets there)
WAIT: Final = 30.0  # real seconds any wait of a scenario takes at most
ME: Final = "tests.support.async_child"

_lock = threading.Lock()
_block: dict[str, Any] = {"state": "before", "sync_runs": 0, "start": None, "end": None}
_enough = threading.Event()


async def system_exit() -> None:
    await asyncio.sleep(0)
    raise SystemExit(3)


async def interrupt() -> None:
    await asyncio.sleep(0)
    raise KeyboardInterrupt


async def noop() -> None:
    await asyncio.sleep(0)


async def block_once() -> None:
    """Its first run blocks the whole loop until the sync job ran SYNC_RUNS times (or BLOCK_MAX)."""
    with _lock:
        if _block["state"] != "before":
            return
        _block["state"], _block["start"] = "blocking", time.time()
    reached = _enough.wait(BLOCK_MAX)  # no await: the loop runs nothing meanwhile
    with _lock:
        _block["state"], _block["end"], _block["reached"] = "after", time.time(), reached


def sync_tick() -> None:
    """The sync job: count its runs while the loop is blocked."""
    with _lock:
        if _block["state"] == "blocking":
            _block["sync_runs"] += 1
            if _block["sync_runs"] >= SYNC_RUNS:
                _enough.set()


def _runs(runs: list[Run]) -> list[dict[str, Any]]:
    return [
        {
            "outcome": r.outcome,
            "error": r.error,
            "scheduled_for": r.scheduled_for.timestamp(),
            "started_at": r.started_at.timestamp(),
        }
        for r in reversed(runs)  # oldest first
    ]


async def _escape_async(url: str, on_loop: bool) -> dict[str, Any]:
    clock = FakeClock(START)
    async with AsyncJobScheduler(url, workers=1, clock=clock, jobs_on_loop=on_loop) as sched:
        await sched.schedule("exit", f"{ME}:system_exit", 10.0)
        await sched.schedule("interrupt", f"{ME}:interrupt", 10.0)
        for _ in range(2):
            clock.advance(10)
            assert await sched.wait_idle(WAIT)
        await sched.schedule("after", f"{ME}:noop", 10.0)
        clock.advance(10)
        assert await sched.wait_idle(WAIT)
        await asyncio.sleep(0.01)  # the application's loop still runs its own coroutines
        return {job: _runs(await sched.runs(job)) for job in ("exit", "interrupt", "after")}


def _escape_threaded(url: str) -> dict[str, Any]:
    clock = FakeClock(START)
    with JobScheduler(url, workers=1, clock=clock) as sched:
        sched.schedule("exit", f"{ME}:system_exit", 10.0)
        sched.schedule("interrupt", f"{ME}:interrupt", 10.0)
        for _ in range(2):
            clock.advance(10)
            assert sched.wait_idle(WAIT)
        sched.schedule("after", f"{ME}:noop", 10.0)
        clock.advance(10)
        assert sched.wait_idle(WAIT)
        return {job: _runs(sched.runs(job)) for job in ("exit", "interrupt", "after")}


async def _blocked_loop(url: str) -> dict[str, Any]:
    async with AsyncJobScheduler(url, workers=8) as sched:
        for i in range(7):
            await sched.schedule(f"async-{i}", f"{ME}:noop", INTERVAL, start_in=0)
        await sched.schedule("blocker", f"{ME}:block_once", INTERVAL, start_in=0)
        await sched.schedule("sync", f"{ME}:sync_tick", INTERVAL, start_in=0)
        while True:
            with _lock:
                if _block["state"] == "after":
                    break
            await asyncio.sleep(0.01)  # runs once the loop is free again, bounded below
        with _lock:
            end = _block["end"]
        while True:  # until every run claimed before the block ended has started and ended (bounded: WAIT)
            runs = {f"async-{i}": _runs(await sched.runs(f"async-{i}", limit=1000)) for i in range(7)}
            claimed = [r for each in runs.values() for r in each if r["scheduled_for"] <= end]
            if all(r["outcome"] is not None for r in claimed):
                break
            await asyncio.sleep(INTERVAL)
    with _lock:
        return {"block": dict(_block), "runs": runs}


def main(argv: list[str]) -> None:
    scenario, url, result = argv
    logging.basicConfig(level=logging.CRITICAL)  # the jobs' failures are expected: keep stderr for surprises
    seen: dict[str, Any]
    if scenario == "escape-on-loop":
        seen = asyncio.run(asyncio.wait_for(_escape_async(url, True), WAIT))
    elif scenario == "escape-own-loops":
        seen = asyncio.run(asyncio.wait_for(_escape_async(url, False), WAIT))
    elif scenario == "escape-threaded":
        seen = _escape_threaded(url)
    elif scenario == "blocked-loop":
        seen = asyncio.run(asyncio.wait_for(_blocked_loop(url), WAIT))
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    Path(result).write_text(json.dumps(seen))


if __name__ == "__main__":
    # Run as the module the jobs' references import (run with -m, this one is __main__ and
    # would keep a state of its own, which the jobs never see).
    from tests.support.async_child import main as imported_main

    imported_main(sys.argv[1:])
