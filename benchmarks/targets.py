"""Trivial module-level callables that the schedulers run, recording into memory.

They are deliberately cheap: one clock read and one ``list.append`` (atomic
under the GIL), so that the measurement costs little next to the scheduler
under test. The benchmark process reads the lists after its window.
"""

from __future__ import annotations

import threading
import time

import persched

__all__ = [
    "LATE_APS",
    "LATE_PERSCHED",
    "PROBED",
    "PROBE_AT",
    "STARTS",
    "fail",
    "late_aps",
    "late_persched",
    "noop",
    "probe",
    "tick",
]

# Set by the first probe() run; PROBE_AT holds its time.time().
PROBED = threading.Event()
PROBE_AT: list[float] = []
# time.monotonic() at the start of every tick() run.
STARTS: list[float] = []
# (job_id, scheduled slot in the scheduler's frame, time.monotonic() at start)
LATE_PERSCHED: list[tuple[str, float, float]] = []
# (job_id, time.time() at start); the slot arrives separately in APScheduler's event.
LATE_APS: list[tuple[str, float]] = []


def noop() -> None:
    """Do nothing."""


def tick() -> None:
    """Record the start time of a run (throughput)."""
    STARTS.append(time.monotonic())


def late_persched() -> None:
    """Record (job_id, scheduled slot, start) of a persched run (lateness)."""
    start = time.monotonic()
    run = persched.current_run()
    assert run is not None  # only ever run by persched
    LATE_PERSCHED.append((run.job_id, run.scheduled_for.timestamp(), start))


def late_aps(job_id: str) -> None:
    """Record (job_id, start) of an APScheduler run; its slot comes with the job event."""
    LATE_APS.append((job_id, time.time()))


def probe() -> None:
    """Note when the first run started (start-up workload)."""
    if not PROBED.is_set():
        PROBE_AT.append(time.time())
        PROBED.set()


def fail() -> None:
    """Raise at once: a run that fails (retries), and nothing else."""
    raise RuntimeError("benchmark failure")
