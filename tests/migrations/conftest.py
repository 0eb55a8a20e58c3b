"""Fixtures for the migration tests: an empty database on each backend.

PostgreSQL runs in a throwaway schema (``search_path`` set through the URL),
so these tests neither see nor disturb tables that other suites create in the
same database, and clean up by dropping the schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.support.mariadb import mariadb_database
from tests.support.postgres import pg_schema

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A PostgreSQL URL whose ``search_path`` is a fresh, empty schema."""
    with pg_schema("migr") as url:
        yield url


@pytest.fixture
def mariadb_database_url() -> Iterator[str]:
    """A MariaDB URL on a fresh, empty database."""
    with mariadb_database("migr") as url:
        yield url


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database: a new SQLite file, a fresh PostgreSQL schema, or a fresh MariaDB database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'mig.db'}"
    url: str = request.getfixturevalue("pg_schema_url" if request.param == "postgres" else "mariadb_database_url")
    return url
