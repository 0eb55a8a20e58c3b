"""Fixtures for the migration tests: every test that uses `engine_name` runs on every engine.

`empty_db_url` (tests/conftest.py) is a database nobody has migrated: a new
SQLite file, or a fresh PostgreSQL schema (``search_path`` set through the
URL, so these tests neither see nor disturb tables that other suites create
in the same database; dropped afterwards).
"""

from __future__ import annotations

import pytest

from tests.support.engines import engine_params


@pytest.fixture(params=engine_params())
def engine_name(request: pytest.FixtureRequest) -> str:
    """Each engine of tests/support/engines.py in turn."""
    name: str = request.param
    return name
