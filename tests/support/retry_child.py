"""Child process of the attempt crash tests (tests/proof/test_attempt_crashes.py): a scheduler whose job is retried.

Usage: ``python -m tests.support.retry_child URL STARTS MARKER BLOCK RETRY_LOST DELAY`` (the
repository root on ``PYTHONPATH``). Schedules "x" (hourly, its first slot due at once, 2 retries
``DELAY`` seconds apart, ``retry_lost`` as given) with the target `attempt_target`, on the real
clock with a 1 s lease, then waits until it is killed (at most `DEADLINE` seconds).

`attempt_target` appends each start to STARTS (the `proof_jobs.file_tracked` format), then:
attempt 1 fails; attempt BLOCK (0: none) writes MARKER and hangs, so the parent knows that
attempt is in flight and kills the process there; any other attempt succeeds. The test's own
schedulers run the same target on the same files.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Final

from persched import JobScheduler, current_run
from tests.support import proof_jobs

__all__ = ["JOB", "attempt_target", "main"]

JOB: Final = "x"
TARGET: Final = "tests.support.retry_child:attempt_target"
DEADLINE: Final = 60.0  # real seconds: a child never killed exits then (and a hung attempt ends)


class AttemptFailed(Exception):
    """Attempt 1's outcome: "error"."""


def attempt_target(starts: str, marker: str, block: int) -> None:
    """Record the start; attempt 1 fails, attempt `block` hangs after writing `marker`, others succeed."""
    proof_jobs.file_tracked(starts)
    run = current_run()
    assert run is not None
    if run.attempt == 1:
        raise AttemptFailed("attempt 1 fails on purpose")
    if run.attempt == block:
        tmp = Path(f"{marker}.tmp")
        tmp.write_text(f"{run.run_id} {run.attempt}")
        os.replace(tmp, marker)
        threading.Event().wait(DEADLINE)  # until SIGKILL


def main(argv: list[str]) -> None:
    """Run the scheduler until killed."""
    url, starts, marker, block, retry_lost, delay = argv
    sched = JobScheduler(url, lease_seconds=1.0, heartbeat_seconds=0.2, pickup_seconds=0.2, instance_id="child")
    sched.schedule(
        JOB,
        TARGET,
        3600.0,
        args=(starts, marker, int(block)),
        start_in=0,
        retries=2,
        retry_delay_seconds=float(delay),
        retry_backoff=1.0,
        retry_lost=retry_lost == "1",
    )
    sched.start()
    threading.Event().wait(DEADLINE)
    os._exit(3)  # never killed: the parent failed to


if __name__ == "__main__":
    main(sys.argv[1:])
