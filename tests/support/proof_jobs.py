"""Job targets of the proof suite (tests/proof), importable by reference.

`tracked(key, ...)` records its run into the `History` registered under
`key` (in this process) and `file_tracked(path)` appends it to a file (child
processes of the crash tests). Both record what `persched.current_run()`
says, with the callable's own start and end on the history's clock.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from persched import current_run
from tests.support.history import Start

if TYPE_CHECKING:
    from tests.support.history import History

__all__ = ["failing_tracked", "file_tracked", "noop", "read_file_starts", "register", "tracked", "unregister"]

_lock = threading.Lock()
_histories: dict[str, History] = {}
MAX_WORK: Final = 0.01  # real seconds a tracked run may take, so that overlaps would show


def register(key: str, history: History) -> None:
    """Make `tracked(key)` record into `history`."""
    with _lock:
        _histories[key] = history


def unregister(key: str) -> None:
    """Forget the history of `key`."""
    with _lock:
        _histories.pop(key, None)


def noop(*args: object) -> None:
    """Do nothing."""


def tracked(key: str, work: float = 0.0) -> None:
    """Record this run's start and end into the history of `key`; `work` stands for a short job."""
    with _lock:
        history = _histories.get(key)
    run = current_run()
    if history is None or run is None or run.run_id is None:
        return
    start = history.now()
    if work > 0:
        time.sleep(min(work, MAX_WORK))  # simulated work, not synchronisation
    history.record_start(
        Start(run.run_id, run.job_id, run.generation, run.scheduled_for.timestamp(), start, history.now(), run.attempt)
    )


class Failed(Exception):
    """What `failing_tracked` raises: the run's outcome is "error"."""


def failing_tracked(key: str, failures: int, work: float = 0.0) -> None:
    """`tracked`, then fail (outcome "error") while the run is one of the first `failures` attempts of its slot;
    a run-now run (never retried) fails when `failures` > 0 as well."""
    tracked(key, work)
    run = current_run()
    if run is not None and run.attempt <= failures:
        raise Failed(f"attempt {run.attempt} fails on purpose")


def file_tracked(path: str) -> None:
    """Append ``run_id job_id generation scheduled_for start end attempt`` (monotonic times) to `path`."""
    run = current_run()
    if run is None or run.run_id is None:
        return
    start = time.monotonic()
    line = f"{run.run_id} {run.job_id} {run.generation} {run.scheduled_for.timestamp()!r} {start!r}"
    with Path(path).open("a") as f:
        f.write(f"{line} {time.monotonic()!r} {run.attempt}\n")
        f.flush()
        os.fsync(f.fileno())


def read_file_starts(path: str) -> list[Start]:
    """Read what `file_tracked` wrote (complete lines only)."""
    p = Path(path)
    if not p.exists():
        return []
    out: list[Start] = []
    for line in p.read_text().splitlines():
        parts = line.split()
        if len(parts) != 7:
            continue
        run_id, job_id, generation, slot, start, end, attempt = parts
        out.append(Start(int(run_id), job_id, int(generation), float(slot), float(start), float(end), int(attempt)))
    return out
