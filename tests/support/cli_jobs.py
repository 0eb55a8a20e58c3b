"""Targets and a ``persched run --import`` module for the CLI and retention tests.

`persched_setup` is the hook `persched run --import tests.support.cli_jobs`
calls with the started scheduler: it schedules one slow job whose marker files
go to the directory named by ``PERSCHED_TEST_MARKERS``, so the test can tell
when the run is in flight and whether it finished.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from persched import JobScheduler

__all__ = ["MARKERS_ENV", "SLEEP_ENV", "deep_failure", "fail_always", "noop", "persched_setup", "slow_with_markers"]

MARKERS_ENV: Final = "PERSCHED_TEST_MARKERS"
SLEEP_ENV: Final = "PERSCHED_TEST_SLEEP"  # seconds the slow job works; default 1


def noop() -> None:
    """Do nothing."""


def fail_always(message: str) -> None:
    """Raise ValueError(message)."""
    raise ValueError(message)


def deep_failure(depth: int) -> None:
    """Recurse `depth` frames, then raise: a traceback far longer than the stored bound."""
    if depth > 0:
        _deeper(depth - 1)  # alternate frames: Python folds identical repeated ones
        return
    raise ValueError("deep failure at the bottom")


def _deeper(depth: int) -> None:
    deep_failure(depth)


def slow_with_markers(directory: str, seconds: float) -> None:
    """Write ``started``, work for `seconds` (a run in flight at SIGTERM), then write ``done``."""
    folder = Path(directory)
    (folder / "started").write_text("started")
    time.sleep(seconds)  # stands for real work; the test signals the process meanwhile
    (folder / "done").write_text("done")


def persched_setup(scheduler: JobScheduler) -> None:
    """`persched run --import` hook: schedule the slow job to start at once."""
    directory = os.environ.get(MARKERS_ENV)
    if directory:
        seconds = float(os.environ.get(SLEEP_ENV, "1.0"))
        scheduler.schedule("slow", slow_with_markers, 3600.0, args=(directory, seconds), start_in=0)
