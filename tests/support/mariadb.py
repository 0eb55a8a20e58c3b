"""MariaDB (or MySQL) for the tests: the URL from the environment, and throwaway databases.

Tests read ``PERSCHED_TEST_MARIADB_URL``: without it the ``mariadb``-marked
ones are left out with one summary line (tests/conftest.py), except when
``CI`` is set, where a missing URL is an error (so MariaDB tests can never
skip silently in CI). MySQL has no schemas inside a database, so each user
gets a DATABASE of its own (``persched_<tag>_<random>``, on the server of the
URL), dropped afterwards: suites running at once neither see nor disturb each
other's tables.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import MetaData, create_engine, insert, select, text
from sqlalchemy.engine import make_url

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["MARIADB_URL_ENV", "mariadb_base_url", "mariadb_baseline", "mariadb_database", "mariadb_required"]

MARIADB_URL_ENV = "PERSCHED_TEST_MARIADB_URL"


def mariadb_required() -> bool:
    """True in CI (``CI`` set, as .ci/run does): MariaDB tests fail there, never skip."""
    return bool(os.environ.get("CI"))


def mariadb_base_url() -> str:
    """PERSCHED_TEST_MARIADB_URL; skip locally without it, fail when CI is set."""
    url = os.environ.get(MARIADB_URL_ENV, "")
    if not url:
        if mariadb_required():
            pytest.fail(f"CI is set but {MARIADB_URL_ENV} is not: MariaDB tests must run in CI")
        pytest.skip(f"{MARIADB_URL_ENV} is not set (MariaDB tests run in CI)")
    return url


@contextlib.contextmanager
def mariadb_database(tag: str = "test") -> Iterator[str]:
    """Yield a URL on a fresh database ``persched_<tag>_<random>``; drop it afterwards."""
    base = make_url(mariadb_base_url()).set(drivername="mysql+pymysql")
    name = f"persched_{tag}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base)
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


_VERSION_TABLE = "persched_alembic_version"


_COUNTERS = text(
    "SELECT TABLE_NAME, AUTO_INCREMENT FROM information_schema.TABLES"
    " WHERE TABLE_SCHEMA = DATABASE() AND AUTO_INCREMENT IS NOT NULL"
)  # MariaDB reads the live counters here (MySQL 8 may cache them: information_schema_stats_expiry)


@contextlib.contextmanager
def mariadb_baseline(url: str) -> Iterator[Callable[[], None]]:
    """Record what the migrated database behind `url` holds; yield a function that brings it back to that.

    Bringing it back is a ``DELETE`` of every table but the migration version
    and the rows the migrations seeded (the change counter) inserted again,
    generated columns left out (the server computes them), in one
    transaction; then each AUTO_INCREMENT counter that moved is set back to
    where the migration left it. Tables are read from the catalogue, so a
    table or seed row that a new migration adds is covered too.

    Per test that is a few ms on one connection kept for the session: a new
    connection costs 0.2-0.9 s on a busy 2-core machine (the server's
    handshake), and ``TRUNCATE`` drops and recreates each table.
    """
    engine = create_engine(url, pool_size=1, max_overflow=0, pool_pre_ping=True)
    try:
        meta = MetaData()
        with engine.connect() as conn:
            meta.reflect(conn)
            tables = [t for t in meta.sorted_tables if t.name != _VERSION_TABLE]
            seeds = []
            for table in tables:
                written = [c for c in table.columns if c.computed is None]
                seeds.append((table, [dict(row._mapping) for row in conn.execute(select(*written))]))
            counters: dict[str, int] = {row[0]: row[1] for row in conn.execute(_COUNTERS)}

        def reset() -> None:
            with engine.connect() as conn:
                for table in reversed(tables):
                    conn.execute(table.delete())
                for table, rows in seeds:
                    if rows:
                        conn.execute(insert(table), rows)
                conn.commit()
                for name, value in conn.execute(_COUNTERS).all():
                    if value != counters[name]:
                        conn.execute(text(f"ALTER TABLE `{name}` AUTO_INCREMENT = {int(counters[name])}"))

        yield reset
    finally:
        engine.dispose()
