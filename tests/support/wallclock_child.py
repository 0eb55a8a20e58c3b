"""Child process of the wall-clock test: a scheduler whose wall clock the test steps.

Usage: ``python -m tests.support.wallclock_child DB LOG READY [OFFSET_FILE]``.
Schedules "tick" (every `INTERVAL` s) whose target appends ``monotonic
scheduled_for`` to LOG, writes READY once started, and shuts down gracefully on
SIGTERM.

The wall clock is stepped by the test in one of two ways: with OFFSET_FILE, the
scheduler's clock is `OffsetClock` (the system clock plus the seconds written in
that file, read at every wall-clock reading; monotonic time untouched); without
it, the system clock itself, which the test runs under libfaketime. Jobs never
call `time.sleep` (libfaketime's ``clock_nanosleep`` on CLOCK_MONOTONIC with
TIMER_ABSTIME, which ``time.sleep`` uses, fails with EINVAL).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Final

from persched import JobScheduler, current_run
from persched._interfaces.signals import StopSignals
from persched.clock import SystemClock

INTERVAL: Final = 0.25  # seconds
WORKERS: Final = 2  # few threads: under libfaketime every wait for the GIL costs a system call or more


class OffsetClock(SystemClock):
    """The system clock with its wall time stepped by the number of seconds in `path` (read at each reading)."""

    # It plays this host's whole clock stepped, as libfaketime does; SQLite (the database's clock here)
    # reads the real one, so comparing the two would see skew where the test means a step.
    real_time = False

    def __init__(self, path: str) -> None:
        self._path = Path(path)

    def now_us(self) -> int:
        return super().now_us() + round(float(self._path.read_text()) * 1_000_000)

    def now(self) -> float:
        return self.now_us() / 1_000_000


def tick(log: str) -> None:
    """Append this run's monotonic start time and slot to `log`."""
    run = current_run()
    assert run is not None
    with open(log, "a") as out:
        out.write(f"{time.monotonic()} {run.scheduled_for.isoformat()}\n")


def main(argv: list[str]) -> None:
    """Run the scheduler until SIGTERM."""
    db, log, ready, *offset = argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    clock = OffsetClock(offset[0]) if offset else None
    stop = (
        StopSignals()
    )  # a handler that takes no lock: Event.set() there could deadlock (persched._interfaces.signals)
    with (
        stop.installed(),
        JobScheduler(f"sqlite:///{db}", WORKERS, clock, lease_seconds=2.0, heartbeat_seconds=0.2) as sched,
    ):
        # By reference: run with -m, this module is __main__ here, which another process cannot import.
        sched.schedule("tick", "tests.support.wallclock_child:tick", INTERVAL, args=(log,), start_in=0)
        Path(ready).write_text("ready")
        # Timed waits: under libfaketime an untimed one is not interrupted by the signal,
        # so the handler would never run.
        while not stop.wait(0.2):
            pass


if __name__ == "__main__":
    main(sys.argv[1:])
