"""Fixtures for the migration tests: an empty database on each backend.

PostgreSQL runs in a throwaway schema (``search_path`` set through the URL),
so these tests neither see nor disturb tables that other suites create in the
same database, and clean up by dropping the schema.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


def _pg_base_url() -> str:
    url = os.environ.get("PERSCHED_TEST_PG_URL", "")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI is set but PERSCHED_TEST_PG_URL is not")
        pytest.skip("PERSCHED_TEST_PG_URL is not set (PostgreSQL tests run in CI)")
    return url


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose ``search_path`` is a fresh, empty schema."""
    base = make_url(_pg_base_url()).set(drivername="postgresql+psycopg")
    schema = f"persched_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base)
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        yield base.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: a new SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mig.db'}"
    url: str = request.getfixturevalue("pg_schema_url")
    return url
