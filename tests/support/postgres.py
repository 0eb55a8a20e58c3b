"""PostgreSQL for the tests: the URL from the environment, and throwaway schemas.

Tests read ``PERSCHED_TEST_PG_URL``: without it they skip with a visible
reason (tests/conftest.py leaves the ``postgres``-marked ones out with one
summary line), except when ``CI`` is set, where a missing URL is an error (so
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

__all__ = ["PG_URL_ENV", "pg_base_url", "pg_required", "pg_schema"]

PG_URL_ENV = "PERSCHED_TEST_PG_URL"


def pg_required() -> bool:
    """True in CI (``CI`` set, as .ci/run does): PostgreSQL tests fail there, never skip."""
    return bool(os.environ.get("CI"))


def pg_base_url() -> str:
    """PERSCHED_TEST_PG_URL; skip locally without it, fail when CI is set.

    (tests/conftest.py already leaves out the tests marked ``postgres``
    without it; this guards any other caller.)
    """
    url = os.environ.get(PG_URL_ENV, "")
    if not url:
        if pg_required():
            pytest.fail(f"CI is set but {PG_URL_ENV} is not: PostgreSQL tests must run in CI")
        pytest.skip(f"{PG_URL_ENV} is not set (PostgreSQL tests run in CI)")
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
