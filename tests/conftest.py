"""Fixtures shared by the black-box tests of SPEC §1-§2.

`TIMEOUT` bounds every blocking call; `fake_clock` starts at a round epoch so
expected `scheduled_for` values are exact; `make_scheduler` builds schedulers
(FakeClock-driven by default) and shuts every one of them down at teardown;
an autouse check fails a test that leaves a ``persched-*`` thread alive.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler
from persched.errors import SchedulerStateError
from persched.testing import FakeClock
from tests.support import jobs
from tests.support.helpers import EPOCH, TIMEOUT, wait_until
from tests.support.mariadb import MARIADB_URL_ENV, mariadb_base_url, mariadb_required
from tests.support.postgres import PG_URL_ENV, pg_base_url, pg_required

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["EPOCH", "TIMEOUT", "SchedulerFactory", "wait_until"]

THREAD_PREFIX = "persched-"


_PG_NOT_RUN = pytest.StashKey[int]()
_MARIADB_NOT_RUN = pytest.StashKey[int]()
# marker -> (name in messages, URL variable, required?, stash key of the count left out)
_SERVER_ENGINES = (
    ("postgres", "PostgreSQL", PG_URL_ENV, pg_required, _PG_NOT_RUN),
    ("mariadb", "MariaDB", MARIADB_URL_ENV, mariadb_required, _MARIADB_NOT_RUN),
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a server's URL, leave its tests out and say so once (not 69 SKIPPED lines).

    Where the server is required (CI), a missing URL stops the run at once
    with one clear error instead of failing each test: they never skip there.
    """
    for marker, name, env, required, key in _SERVER_ENGINES:
        if os.environ.get(env):
            continue
        marked = [item for item in items if item.get_closest_marker(marker) is not None]
        if not marked:
            continue
        if required():
            raise pytest.UsageError(
                f"{len(marked)} {name} tests need {env}, and CI is set, so they may not skip:"
                f" set {env} (see README, Development), or unset CI to leave them out"
            )
        config.hook.pytest_deselected(items=marked)
        items[:] = [item for item in items if item.get_closest_marker(marker) is None]
        config.stash[key] = len(marked)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """One line per server whose tests were left out."""
    for _, name, env, _, key in _SERVER_ENGINES:
        left_out = config.stash.get(key, 0)
        if left_out:
            terminalreporter.write_line(f"{left_out} {name} tests not run (deselected): {env} is not set; CI runs them")


def pytest_configure(config: pytest.Config) -> None:
    """Register the markers these tests use (also declared in pyproject.toml)."""
    config.addinivalue_line("markers", "slow: subprocess/wheel")
    config.addinivalue_line("markers", "stress: many threads, bounded budget")
    config.addinivalue_line("markers", "postgres: needs PERSCHED_TEST_PG_URL")
    config.addinivalue_line("markers", "mariadb: needs PERSCHED_TEST_MARIADB_URL")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLAlchemy URL of a fresh SQLite file in the test's temp dir."""
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture
def fake_clock() -> FakeClock:
    """A FakeClock at `EPOCH`."""
    return FakeClock(start=EPOCH)


@pytest.fixture
def pg_url() -> str:
    """PERSCHED_TEST_PG_URL; skipped locally without it, a failure in CI."""
    return pg_base_url()


@pytest.fixture
def mariadb_url() -> str:
    """PERSCHED_TEST_MARIADB_URL; skipped locally without it, a failure in CI."""
    return mariadb_base_url()


class SchedulerFactory:
    """Builds schedulers on the test's database and shuts them all down at teardown."""

    def __init__(self, url: str, clock: FakeClock) -> None:
        self.url = url
        self.clock = clock
        self.created: list[JobScheduler] = []

    def __call__(
        self,
        url: str | None = None,
        *,
        clock: FakeClock | None = None,
        real_clock: bool = False,
        workers: int = 8,
        start: bool = False,
        lease_seconds: float = 30.0,
        heartbeat_seconds: float | None = None,
        busy_timeout_seconds: float = 5.0,
        instance_id: str | None = None,
        pickup_seconds: float = 1.0,
    ) -> JobScheduler:
        """Return a new scheduler (FakeClock-driven unless `real_clock`), started if asked."""
        sched = JobScheduler(
            self.url if url is None else url,
            workers=workers,
            clock=None if real_clock else (self.clock if clock is None else clock),
            lease_seconds=lease_seconds,
            heartbeat_seconds=heartbeat_seconds,
            busy_timeout_seconds=busy_timeout_seconds,
            instance_id=instance_id,
            pickup_seconds=pickup_seconds,
        )
        self.created.append(sched)
        if start:
            sched.start()
        return sched

    def close(self) -> None:
        """Release blocked targets, then shut every scheduler down (bounded)."""
        jobs.release_all()
        for sched in reversed(self.created):
            # Never started, or the test already shut it down.
            with contextlib.suppress(SchedulerStateError):
                sched.shutdown(wait=True, timeout=TIMEOUT)


@pytest.fixture
def make_scheduler(sqlite_url: str, fake_clock: FakeClock) -> Iterator[SchedulerFactory]:
    """A factory of schedulers that are all shut down at teardown."""
    factory = SchedulerFactory(sqlite_url, fake_clock)
    yield factory
    factory.close()


@pytest.fixture(autouse=True)
def _reset_jobs() -> Iterator[None]:
    """Start every test with an empty call registry; release gates afterwards."""
    jobs.reset()
    yield
    jobs.release_all()


@pytest.fixture(autouse=True)
def _no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a ``persched-*`` thread alive (after a bounded join)."""
    before = {t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)}
    yield
    jobs.release_all()
    deadline = time.monotonic() + TIMEOUT
    leaked: list[threading.Thread] = []
    for t in threading.enumerate():
        if t.name.startswith(THREAD_PREFIX) and t not in before:
            t.join(max(deadline - time.monotonic(), 0.0))
            if t.is_alive():
                leaked.append(t)
    assert not leaked, f"threads left alive: {[t.name for t in leaked]}"
