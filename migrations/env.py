"""Alembic environment for persched.

From ``persched._store.migrate.upgrade``, the live connection arrives in
``config.attributes["connection"]``, inside a transaction holding the
migration lock: run on it and touch nothing else (never ``fileConfig``, which
would clobber the host application's logging). From the ``alembic`` command
line (developers): the URL from ``PERSCHED_DB`` or ``alembic.ini``, the engine
from ``persched._store.db.make_engine``, logging from the ini file.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from alembic import context

if TYPE_CHECKING:
    from sqlalchemy import MetaData
    from sqlalchemy.engine import Connection

VERSION_TABLE = "persched_alembic_version"

config = context.config


def _version_table() -> str:
    return config.get_main_option("version_table") or VERSION_TABLE


def _configure(connection: Connection, target_metadata: MetaData | None) -> None:
    sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=_version_table(),
        # SQLite can't ALTER most things: batch mode recreates the table.
        render_as_batch=sqlite,
        # With isolation_level=None (persched._store.db) SQLite DDL is transactional.
        transactional_ddl=True,
        transaction_per_migration=True,
    )


def _run(connection: Connection, target_metadata: MetaData | None) -> None:
    _configure(connection, target_metadata)
    with context.begin_transaction():
        context.run_migrations()


def _developer_url() -> str:
    url = os.environ.get("PERSCHED_DB") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("set PERSCHED_DB or sqlalchemy.url in alembic.ini")
    return url


def run_migrations_offline() -> None:
    """Emit SQL to stdout (``alembic upgrade head --sql``)."""
    from persched._store.db import to_url

    context.configure(
        url=to_url(_developer_url()),
        version_table=_version_table(),
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run on the shared connection if one was passed, else on a new engine."""
    connection: Connection | None = config.attributes.get("connection")
    if connection is not None:
        _run(connection, None)
        return

    # Developer path only: logging from the ini, models for --autogenerate.
    if config.config_file_name is not None:
        from logging.config import fileConfig

        fileConfig(config.config_file_name, disable_existing_loggers=False)
    from persched._store.db import make_engine
    from persched._store.schema import metadata

    engine = make_engine(_developer_url())
    try:
        with engine.connect() as conn:
            _run(conn, metadata)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
