"""Fixtures of the multi-instance tests: one fresh database per test, SQLite or PostgreSQL.

``db_url`` is parametrized over both engines. The PostgreSQL variant gets a
dedicated schema per test (``search_path`` in the URL; created here, dropped
at teardown), so these tests neither see nor disturb other suites running on
the same server at the same time. Without ``PERSCHED_TEST_PG_URL`` the
PostgreSQL variants skip with a visible reason; with ``CI`` set they fail.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.multi._cluster import pg_schema_url

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database: a SQLite file, or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        with pg_schema_url("t") as url:
            yield url


@pytest.fixture
def pg_only_url() -> Iterator[str]:
    """A URL of a fresh PostgreSQL schema (skipped without PERSCHED_TEST_PG_URL)."""
    with pg_schema_url("p") as url:
        yield url
