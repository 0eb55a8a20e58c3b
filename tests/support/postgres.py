"""PostgreSQL for the tests: the URL from the environment, and throwaway schemas.

Tests read ``PERSCHED_TEST_PG_URL``: without it they skip with a visible
reason, except when ``CI`` is set, where a missing URL is a failure (so
PostgreSQL tests can never skip silently in CI). Each user works in its own
schema (``search_path`` set through the URL), so suites neither see nor
disturb each other's tables, and the schema is dropped afterwards.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["pg_base_url", "pg_schema"]


def pg_base_url() -> str:
    """PERSCHED_TEST_PG_URL; skip locally without it, fail when CI is set."""
    url = os.environ.get("PERSCHED_TEST_PG_URL", "")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("CI is set but PERSCHED_TEST_PG_URL is not: PostgreSQL tests must run in CI")
        pytest.skip("PERSCHED_TEST_PG_URL is not set (PostgreSQL tests run in CI)")
    return url


@contextlib.contextmanager
def pg_schema(tag: str = "test") -> Iterator[str]:
    """Yield a URL on a fresh schema ``persched_<tag>_<random>``; drop it afterwards."""
    base = make_url(pg_base_url()).set(drivername="postgresql+psycopg")
    schema = f"persched_{tag}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base)
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        yield base.update_query_dict({"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()
