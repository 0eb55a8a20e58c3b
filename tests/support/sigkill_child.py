"""Child process of the SIGKILL test: run a scheduler whose job hangs, forever.

Usage: ``python -m tests.support.sigkill_child DB_PATH MARKER LOG``. Schedules
"victim" (0.2 s interval, target `block_once_then_record`) with a real clock and
a short lease, then waits until it is killed. The target writes MARKER when
its first run starts and then hangs, so the parent knows a run is in flight.
"""

from __future__ import annotations

import sys
import threading

from persched import JobScheduler
from tests.support import jobs


def main(argv: list[str]) -> None:
    """Run the scheduler until killed."""
    db, marker, log = argv
    sched = JobScheduler(f"sqlite:///{db}", lease_seconds=1.0, heartbeat_seconds=0.2)
    sched.schedule("victim", jobs.block_once_then_record, 0.2, args=(marker, log))
    sched.start()
    threading.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    main(sys.argv[1:])
