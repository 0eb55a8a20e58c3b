"""Child process of the migration-wait tests (tests/migrations/test_migration_wait.py): one scheduler's start.

Usage: ``python -m tests.support.migration_child URL BUSY_TIMEOUT MIGRATION_TIMEOUT`` (the
repository root on ``PYTHONPATH``). Logs persched and Alembic at INFO to stderr, prints
``made`` once the scheduler is constructed, then ``started REVISION`` once ``start()``
returned, and shuts it down; a `StoreError` is printed as ``error: MESSAGE`` (exit status 3).
"""

from __future__ import annotations

import logging
import sys

from persched import JobScheduler
from persched._store import db as _db
from persched._store import migrate as _migrate
from persched.errors import StoreError

__all__ = ["main"]


def say(line: str) -> None:
    """One line on stdout, at once: the test reads it while this process runs."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(url: str, busy_timeout: float, migration_timeout: float) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    try:
        sched = JobScheduler(
            url,
            workers=1,
            busy_timeout_seconds=busy_timeout,
            migration_timeout_seconds=migration_timeout,
            max_clock_skew_seconds=None,
        )
        say("made")
        try:
            sched.start()
            engine = _db.make_engine(url, busy_timeout_seconds=busy_timeout)
            try:
                say(f"started {_migrate.current_revision(engine)}")
            finally:
                engine.dispose()
        finally:
            sched.shutdown()
    except StoreError as exc:
        say(f"error: {exc}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3])))
