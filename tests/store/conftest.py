"""The `store` fixture: one contract suite over every store engine.

- ``sqlite``: a fresh file per test, migrated to head.
- ``postgres``: one throwaway schema per session (``search_path`` in the URL,
  so the tests neither see nor disturb other suites' tables), migrated to head
  once; every test starts from empty tables (``TRUNCATE ... RESTART
  IDENTITY``), which is much faster than migrating per test. Skipped with a
  visible reason when ``PERSCHED_TEST_PG_URL`` is unset, a failure when ``CI``
  is set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from sqlalchemy import text

from persched import _db, _migrate
from persched._store import Store
from tests.support import race_jobs

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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A `Store` on an empty, migrated database (SQLite file or PostgreSQL)."""
    if request.param == "sqlite":
        engine = _db.make_engine(f"sqlite:///{tmp_path / 'store.db'}")
        _migrate.upgrade(engine)
    else:
        url: str = request.getfixturevalue("pg_store_url")
        engine = _db.make_engine(url)
        with engine.begin() as conn:
            conn.execute(text("TRUNCATE persched_jobs, persched_runs RESTART IDENTITY"))
    try:
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()
