"""Fixtures of the multi-instance tests: one fresh database per test, on every engine.

``db_url`` here is `empty_db_url` (tests/conftest.py): a database nobody has
migrated, because these tests start processes that migrate it themselves, at
the same time. The PostgreSQL variant is a dedicated schema per test
(``search_path`` in the URL; created, then dropped at teardown), so these
tests neither see nor disturb other suites running on the same server at the
same time. Without ``PERSCHED_TEST_PG_URL`` the PostgreSQL variants are left
out with a visible reason; with ``CI`` set they fail.

``me`` is one in-process scheduler (`ME`, on ``clock``, a FakeClock at an odd
instant), started with its heartbeat thread stopped, so that a test runs each
membership round itself; the other members are played by hand through a
second `Store` (tests/multi/test_work_sharing.py, test_owner_buckets.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from persched import JobScheduler
from persched.testing import FakeClock
from tests.multi._cluster import ME, ME_LEASE_SECONDS, ME_START
from tests.support import jobs
from tests.support.engines import engine_named, engine_params
from tests.support.helpers import TIMEOUT
from tests.support.postgres import pg_schema

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(params=engine_params())
def engine_name(request: pytest.FixtureRequest) -> str:
    """Each engine of tests/support/engines.py in turn."""
    name: str = request.param
    return name


@pytest.fixture
def db_url(empty_db_url: str) -> str:
    """A URL of an empty database nobody has migrated: a SQLite file, a fresh PostgreSQL schema or MariaDB database."""
    return empty_db_url


@pytest.fixture(params=[param for param in engine_params() if param.values[0] != "sqlite"])
def server_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database on each server engine in turn (the tests that cut network connections)."""
    with engine_named(request.param).fresh(tmp_path, "n") as url:
        yield url


@pytest.fixture
def pg_only_url() -> Iterator[str]:
    """A URL of a fresh PostgreSQL schema (skipped without PERSCHED_TEST_PG_URL)."""
    with pg_schema("p") as url:
        yield url


@pytest.fixture
def clock() -> FakeClock:
    """The FakeClock of ``me``, at an odd instant."""
    return FakeClock(start=ME_START)


@pytest.fixture
def me(db_url: str, clock: FakeClock) -> Iterator[JobScheduler]:
    """A started scheduler (`ME`) whose heartbeat thread is stopped: the test runs its membership rounds."""
    sched = JobScheduler(db_url, clock=clock, instance_id=ME, lease_seconds=ME_LEASE_SECONDS)
    sched.start()
    sched._heartbeat.stop()
    sched._heartbeat.join(TIMEOUT)
    try:
        yield sched
    finally:
        jobs.release_all()
        sched.shutdown(wait=True, timeout=TIMEOUT)
