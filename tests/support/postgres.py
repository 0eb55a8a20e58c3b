"""PostgreSQL for the tests: the URL from the environment, throwaway schemas, emptying one.

Tests read ``PERSCHED_TEST_PG_URL``: without it they skip with a visible
reason (tests/conftest.py leaves the ``postgres``-marked ones out with one
summary line), except when ``CI`` is set, where a missing URL is an error (so
PostgreSQL tests can never skip silently in CI). Each user works in its own
schema (``search_path`` set through the URL), so suites neither see nor
disturb each other's tables, and the schema is dropped afterwards.

`pg_schema` is the one place a test schema is made: the engine registry
(tests/support/engines.py) builds every PostgreSQL fixture on it, and tests
that need a schema of their own call it directly.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import MetaData, create_engine, insert, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["PG_URL_ENV", "pg_base_url", "pg_baseline", "pg_required", "pg_schema"]

PG_URL_ENV = "PERSCHED_TEST_PG_URL"
_VERSION_TABLE = "persched_alembic_version"  # Alembic's, kept: the schema stays at head


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
    """Yield a URL on a fresh, empty schema ``persched_<tag>_<random>``; drop it afterwards."""
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


_DEADLOCK = "40P01"  # PostgreSQL's deadlock_detected
_RESET_ATTEMPTS = 3


@contextlib.contextmanager
def pg_baseline(url: str) -> Iterator[Callable[[], None]]:
    """Record what the migrated schema behind `url` holds; yield a function that brings it back to that.

    Bringing it back is ``TRUNCATE ... RESTART IDENTITY`` of every table but
    the migration version, then the rows the migrations seeded (the change
    counter) inserted again, on one connection kept for the session (a new
    one is a new server process): per test much cheaper than a new schema
    migrated again. The tables are read from the catalogue, so a table or
    seed row that a new migration adds is covered too.
    """
    engine = create_engine(url, pool_size=1, max_overflow=0, pool_pre_ping=True)
    try:
        meta = MetaData()
        with engine.connect() as conn:
            meta.reflect(conn)
            tables = [t for t in meta.sorted_tables if t.name != _VERSION_TABLE]
            seeds = [(t, [dict(row._mapping) for row in conn.execute(select(t))]) for t in tables]
        truncate = text("TRUNCATE " + ", ".join(f'"{t.name}"' for t in tables) + " RESTART IDENTITY")

        def reset() -> None:
            for attempt in range(_RESET_ATTEMPTS):
                try:
                    with engine.begin() as conn:
                        conn.execute(truncate)
                        for table, rows in seeds:
                            if rows:
                                conn.execute(insert(table), rows)
                    return
                except DBAPIError as exc:  # noqa: PERF203 - a retry
                    # The TRUNCATE's exclusive locks, one table after another, can deadlock with the
                    # server's autovacuum (seen once in a full run); the server rolled this one back.
                    if getattr(exc.orig, "sqlstate", None) != _DEADLOCK or attempt == _RESET_ATTEMPTS - 1:
                        raise

        yield reset
    finally:
        engine.dispose()
