"""Fixtures of the multi-instance tests: one fresh database per test, SQLite, PostgreSQL or MariaDB.

``db_url`` is parametrized over the three engines; ``server_url`` over the two
servers (the tests that cut network connections). The MariaDB variants get a
throwaway DATABASE per test (``PERSCHED_TEST_MARIADB_URL``; skipped without
it, failing in CI). The PostgreSQL variant gets a
dedicated schema per test (``search_path`` in the URL; created here, dropped
at teardown), so these tests neither see nor disturb other suites running on
the same server at the same time. Without ``PERSCHED_TEST_PG_URL`` the
PostgreSQL variants skip with a visible reason; with ``CI`` set they fail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.multi._cluster import pg_schema_url
from tests.support.mariadb import mariadb_database

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database: a SQLite file, a fresh PostgreSQL schema or a fresh MariaDB database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
    elif request.param == "mariadb":
        with mariadb_database("t") as url:
            yield url
    else:
        with pg_schema_url("t") as url:
            yield url


@pytest.fixture(
    params=[pytest.param("postgres", marks=pytest.mark.postgres), pytest.param("mariadb", marks=pytest.mark.mariadb)]
)
def server_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A URL of an empty database on a server: a fresh PostgreSQL schema or MariaDB database."""
    with mariadb_database("n") if request.param == "mariadb" else pg_schema_url("n") as url:
        yield url


@pytest.fixture
def pg_only_url() -> Iterator[str]:
    """A URL of a fresh PostgreSQL schema (skipped without PERSCHED_TEST_PG_URL)."""
    with pg_schema_url("p") as url:
        yield url
