"""`persched demo`: schedule a few jobs, watch them run, restart, watch them resume (about 10 seconds).

It uses a new database in a temporary directory, never ``--db``: it reschedules and deschedules ids a
user may well have.
"""

from __future__ import annotations

import logging
import os
import tempfile
import textwrap
import threading
import time
from typing import TYPE_CHECKING

from .. import _loggers
from .._engine.scheduler import JobScheduler, current_run
from ..errors import PerschedError

if TYPE_CHECKING:
    from datetime import datetime

__all__ = ["main"]

_print_lock = threading.Lock()
_flaky_calls = 0


def _say(text: str = "") -> None:
    with _print_lock:
        print(text, flush=True)  # noqa: T201 - the demo talks to a person


def _hhmmss(at: datetime) -> str:
    return at.strftime("%H:%M:%S.%f")[:-3]


def greet(name: str) -> None:
    """A demo job: say hello, with the slot it stands for."""
    run = current_run()
    assert run is not None
    _say(f"  greet      hello, {name}!  slot {_hhmmss(run.scheduled_for)}  generation {run.generation}")


def flaky() -> None:
    """A demo job that fails every other run; persched records it and carries on."""
    global _flaky_calls
    _flaky_calls += 1
    if _flaky_calls % 2 == 0:
        _say("  flaky      raising ValueError (recorded as an error; the job keeps its schedule)")
        raise ValueError("demo failure")
    _say("  flaky      fine this time")


def slow_report() -> None:
    """A demo job that takes longer than its interval: its slots coalesce."""
    _say("  report     working for 1.2 s (longer than its 1 s interval)...")
    time.sleep(1.2)


def _show_jobs(scheduler: JobScheduler) -> None:
    _say(f"  {'job':<10} {'generation':>10}  {'next run (UTC)':<14} {'runs':>4} {'errors':>6}")
    for job in scheduler.jobs():
        _say(
            f"  {job.job_id:<10} {job.generation:>10}  {_hhmmss(job.next_run_at):<14} "
            f"{job.run_count:>4} {job.error_count:>6}"
        )


def _declare(scheduler: JobScheduler) -> None:
    # An application declares its schedules at every start; an unchanged
    # declaration keeps the job's generation and grid.
    scheduler.schedule("greet", greet, 1.0, args=("world",), start_in=0)
    scheduler.schedule("flaky", flaky, 1.5, start_in=0.5)
    scheduler.schedule("report", slow_report, 1.0, start_in=0.2)


class _IndentedHandler(logging.Handler):
    """Shows persched's warnings inside the demo's layout, a traceback indented under its line."""

    def emit(self, record: logging.LogRecord) -> None:
        first, _, rest = record.getMessage().partition("\n")
        text = f"  [log {record.levelname.lower()}] {first}"
        if rest:
            text += "\n" + textwrap.indent(rest.rstrip(), "  " + " " * 8)
        _say(text)


def new_database() -> str:
    """Create a new, empty directory for the demo's own database; return the file path in it."""
    return os.path.join(tempfile.mkdtemp(prefix="persched-demo-"), "demo.db")


def main(path: str | None = None, *, ignored: str | None = None) -> int:
    """Run the demo on a new database; return the exit code.

    Args:
        path: A file that does not exist yet; default: `new_database()`.
        ignored: Where the user named a database ("--db", "PERSCHED_DB"), to say it is left alone.
    """
    path = path or new_database()
    _say(f"persched demo on a database of its own: {path}")
    if ignored:
        _say(f"(the database named by {ignored} is not touched: your jobs there are left as they are)")
    _say()
    url = path
    handler = _IndentedHandler(logging.WARNING)
    persched_logger = logging.getLogger(_loggers.LIBRARY)
    persched_logger.addHandler(handler)
    # The demo shows each warning once, as one line, rather than a traceback
    # through whatever handler the command line set up.
    propagate, persched_logger.propagate = persched_logger.propagate, False
    try:
        _say("1. A scheduler declares three jobs and starts:")
        scheduler = JobScheduler(url, workers=4)
        _declare(scheduler)  # before start(): the table comes before the first run
        _show_jobs(scheduler)
        with scheduler:
            _say("\n   ...running for 4 seconds:")
            time.sleep(4)
            _say("\n2. Shutting down: in-flight runs finish, nothing is left running.")
        _say("\n3. A new scheduler opens the same database; nothing is declared again,")
        _say("   the jobs resume on their grid from the database:")
        scheduler = JobScheduler(url, workers=4)
        _show_jobs(scheduler)
        with scheduler:
            _say("\n   ...running for 4 seconds:")
            time.sleep(4)
            _say("\n4. Shutting down again. What the database recorded:")
        scheduler = JobScheduler(url)  # not started: it only reads and deschedules
        try:
            _show_jobs(scheduler)
            for job_id in ("greet", "flaky", "report"):
                runs = scheduler.runs(job_id, limit=1000)
                outcomes = ", ".join(f"{o}: {sum(r.outcome == o for r in runs)}" for o in ("ok", "error"))
                _say(f"  {job_id:<10} {len(runs)} runs ({outcomes})")
                scheduler.deschedule(job_id)
        finally:
            scheduler.shutdown()
        _say(f"\nThe demo descheduled its jobs; their history stays: try `persched --db {path} runs`.")
    except PerschedError as exc:
        _say(f"persched demo: {exc}")
        return 1
    finally:
        persched_logger.removeHandler(handler)
        persched_logger.propagate = propagate
    return 0
