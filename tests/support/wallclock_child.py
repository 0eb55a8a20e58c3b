"""Child process of the wall-clock test: a scheduler on the real clock, under libfaketime.

Usage: ``python -m tests.support.wallclock_child DB LOG READY``. Schedules "tick"
(every `INTERVAL` s) whose target appends ``monotonic scheduled_for`` to LOG,
writes READY once started, and shuts down gracefully on SIGTERM. Its jobs never
call `time.sleep` (libfaketime's clock_nanosleep fails with EINVAL here).
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Final

from persched import JobScheduler, current_run
from persched._signals import StopSignals

INTERVAL: Final = 0.25  # seconds


def tick(log: str) -> None:
    """Append this run's monotonic start time and slot to `log`."""
    run = current_run()
    assert run is not None
    with open(log, "a") as out:
        out.write(f"{time.monotonic()} {run.scheduled_for.isoformat()}\n")


def main(argv: list[str]) -> None:
    """Run the scheduler until SIGTERM."""
    db, log, ready = argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    stop = StopSignals()  # a handler that takes no lock: Event.set() there could deadlock (persched._signals)
    with stop.installed(), JobScheduler(f"sqlite:///{db}", lease_seconds=2.0, heartbeat_seconds=0.2) as sched:
        # By reference: run with -m, this module is __main__ here, which another process cannot import.
        sched.schedule("tick", "tests.support.wallclock_child:tick", INTERVAL, args=(log,), start_in=0)
        Path(ready).write_text("ready")
        # Timed waits: under libfaketime an untimed one is not interrupted by the signal,
        # so the handler would never run.
        while not stop.wait(0.2):
            pass


if __name__ == "__main__":
    main(sys.argv[1:])
