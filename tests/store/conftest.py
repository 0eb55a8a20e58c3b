"""The `store` fixture: one contract suite over every store engine (tests/support/engines.py; MariaDB too).

- ``sqlite``: a fresh file per test, migrated to head.
- ``postgres``: the session's schema (``search_path`` in the URL, so the
  tests neither see nor disturb other suites' tables), migrated to head once;
  every test starts from empty tables (``TRUNCATE ... RESTART IDENTITY``),
  which is much faster than migrating per test. Left out with a visible
  reason when ``PERSCHED_TEST_PG_URL`` is unset, a failure when ``CI`` is set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from persched._store import Store
from persched._store import db as _db
from persched._store import migrate as _migrate
from tests.support.engines import engine_named, engine_params

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.fixture(params=engine_params())
def engine_name(request: pytest.FixtureRequest) -> str:
    """Each engine of tests/support/engines.py in turn."""
    name: str = request.param
    return name


@pytest.fixture
def store(engine_name: str, db_url: str) -> Iterator[Store]:
    """A `Store` on an empty, migrated database (SQLite file or PostgreSQL)."""
    engine = _db.make_engine(db_url)
    try:
        if engine_named(engine_name).baseline is None:  # a new file: not migrated yet
            _migrate.upgrade(engine)
        yield Store(engine, _db.mask(engine.url))
    finally:
        engine.dispose()
