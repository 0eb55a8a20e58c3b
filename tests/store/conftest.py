"""The `store` fixture: one contract suite over every store engine.

- ``sqlite``: a fresh file per test, migrated to head.
- ``postgres``: one throwaway schema per session (``search_path`` in the URL,
  so the tests neither see nor disturb other suites' tables), migrated to head
  once; every test starts from empty tables (``TRUNCATE ... RESTART
  IDENTITY``), which is much faster than migrating per test. Skipped with a
  visible reason when ``PERSCHED_TEST_PG_URL`` is unset, a failure when ``CI``
  is set.
- ``mariadb``: the same on one throwaway MariaDB database per session
  (``PERSCHED_TEST_MARIADB_URL``); tables emptied with DELETE and the run ids
  restarted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy import text

from persched import _db, _migrate
from persched._store import Store
from tests.support import race_jobs
from tests.support.mariadb import mariadb_database

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(scope="session")
def pg_store_url() -> Iterator[str]:
    """A PostgreSQL URL on a session-wide schema already migrated to head."""
    with race_jobs.pg_schema() as url:
        engine = _db.make_engine(url)
        try:
            _migrate.upgrade(engine)
        finally:
            engine.dispose()
        yield url


@pytest.fixture(scope="session")
def mariadb_store_url() -> Iterator[str]:
    """A MariaDB URL on a session-wide database already migrated to head."""
    with mariadb_database("store") as url:
        engine = _db.make_engine(url)
        try:
            _migrate.upgrade(engine)
        finally:
            engine.dispose()
        yield url


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A `Store` on an empty, migrated database (SQLite file, PostgreSQL or MariaDB)."""
    if request.param == "sqlite":
        engine = _db.make_engine(f"sqlite:///{tmp_path / 'store.db'}")
        _migrate.upgrade(engine)
    elif request.param == "mariadb":
        engine = _db.make_engine(request.getfixturevalue("mariadb_store_url"))
        with engine.begin() as conn:
            conn.execute(text("DELETE FROM persched_runs"))
            conn.execute(text("DELETE FROM persched_jobs"))
            conn.execute(text("ALTER TABLE persched_runs AUTO_INCREMENT = 1"))
    else:
        url: str = request.getfixturevalue("pg_store_url")
        engine = _db.make_engine(url)
        with engine.begin() as conn:
            conn.execute(text("TRUNCATE persched_jobs, persched_runs RESTART IDENTITY"))
    try:
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()
