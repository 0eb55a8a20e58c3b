"""Schema migrations at run time: upgrade to head, or refuse a newer schema.

The migrations are the top-level ``migrations/`` directory, shipped as the
package ``persched._migrations`` (STYLE §1), so one lookup,
``importlib.resources.files("persched._migrations")``, finds them in editable
and wheel installs alike. The Alembic ``Config`` is built in code (no ini
file; ``%`` in the path escaped as ``%%``, as Optuna and MLflow do), and the
live connection is handed to ``env.py`` through ``cfg.attributes``.

Locking. Alembic's ``context`` is module-global, so two threads of one
process must never run it at once: ``_PROCESS_LOCK`` serialises `upgrade`
(Prefect does the same). Across processes the database is the lock: on
SQLite the whole check-and-upgrade runs in one ``BEGIN IMMEDIATE``
transaction (the write lock, taken by ``persched._db``'s begin listener); on
PostgreSQL in one transaction holding ``pg_advisory_xact_lock``; on MySQL and
MariaDB under ``GET_LOCK``, a session lock (their DDL commits implicitly, so
no lock that ends with a transaction would last through a migration),
released by `Dialect.release_migration_lock` once the transaction has ended,
and by the server if the session dies (each engine's
`Dialect.migration_lock`). The revision is read *after* the lock is taken, so
the loser of a race sees head and does nothing. SQLite and PostgreSQL have
transactional DDL, so a failed migration leaves the schema as it was; MySQL
commits each DDL statement on its own, so there a migration that fails
half-way (the server gone) leaves the revisions before it applied and that
one partly applied, as with any MySQL migration tool.

Nothing here configures logging: ``env.py`` calls ``fileConfig`` only on the
developer command-line path, never when a connection is passed in.
"""

from __future__ import annotations

import importlib.resources
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Final

from persched._db import READONLY, mask, store_errors
from persched._revision import VERSION_TABLE, quiet_alembic
from persched._store.dialects import dialect_for
from persched.errors import SchemaVersionError, StoreError

with quiet_alembic():  # Alembic's plugins log "setup plugin ..." at INFO when first imported
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "HEAD",
    "VERSION_TABLE",
    "check_at_head",
    "current_revision",
    "script_location",
    "upgrade",
]

logger = logging.getLogger(__name__)

# Alembic's context is process-global (see module docstring).
_PROCESS_LOCK: Final = threading.Lock()


def script_location() -> str:
    """Return the directory holding ``env.py`` and ``versions/``."""
    try:
        return str(importlib.resources.files("persched._migrations"))
    except ModuleNotFoundError:
        # A source checkout ahead of the install on sys.path (pytest from the
        # repo root with a non-editable install): the migrations/ ->
        # persched._migrations mapping exists only in installs, so use the
        # checkout's own migrations/. pyproject.toml marks a checkout, which
        # site-packages never is, so a wheel missing its data still fails.
        root = Path(__file__).resolve().parent.parent
        if (root / "pyproject.toml").is_file() and (root / "migrations" / "env.py").is_file():
            return str(root / "migrations")
        raise


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    # ConfigParser interpolation: a "%" in the install path must be doubled.
    cfg.set_main_option("script_location", script_location().replace("%", "%%"))
    cfg.set_main_option("version_table", VERSION_TABLE)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def _read_script() -> tuple[str, frozenset[str]]:
    script = ScriptDirectory.from_config(_config())
    heads = script.get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"persched migrations must have exactly one head, found {heads}")
    known = frozenset(rev.revision for rev in script.walk_revisions())
    return heads[0], known


_SCRIPT: Final = _read_script()
#: The newest schema revision this code knows (read from the script directory).
HEAD: Final = _SCRIPT[0]
_KNOWN: Final = _SCRIPT[1]


def _revision(conn: Connection) -> str | None:
    with quiet_alembic():
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    heads = ctx.get_current_heads()
    if len(heads) > 1:
        # persched's history has one branch: several rows mean a foreign or
        # future writer touched the version table; refuse, change nothing.
        raise SchemaVersionError(" + ".join(sorted(heads)), HEAD)
    return heads[0] if heads else None


def current_revision(engine: Engine) -> str | None:
    """Return the schema revision recorded in the database.

    Args:
        engine: An engine from `persched._db.make_engine`.

    Returns:
        The revision id, or None if the database has no persched schema.

    Raises:
        StoreError: The database cannot be read.
    """
    with store_errors(engine.url), engine.connect() as conn:
        conn.execution_options(**{READONLY: True})
        with conn.begin():
            return _revision(conn)


def _check_known(found: str | None) -> None:
    if found is not None and found not in _KNOWN:
        raise SchemaVersionError(found, HEAD)


def check_at_head(engine: Engine) -> None:
    """Check, without writing, that the database schema is at `HEAD`.

    For read-only commands that must not migrate.

    Args:
        engine: An engine from `persched._db.make_engine`.

    Raises:
        SchemaVersionError: The database is at a revision this code does not
            know (made by a newer persched).
        StoreError: The database has no persched schema, or an older one, or
            cannot be read.
    """
    found = current_revision(engine)
    _check_known(found)
    if found is None:
        raise StoreError(
            mask(engine.url),
            "no persched schema in this database; run `persched migrate` first",
        )
    if found != HEAD:
        raise StoreError(
            mask(engine.url),
            f"the schema is at revision {found!r}, older than {HEAD!r}; run `persched migrate` to upgrade it",
        )


def upgrade(engine: Engine) -> None:
    """Upgrade the database schema to `HEAD`; do nothing if it is there.

    Safe to call from many threads and processes at once: one upgrades, the
    others wait for its commit and then find the schema at head.

    Args:
        engine: An engine from `persched._db.make_engine` (on SQLite its begin
            listener takes the write lock with ``BEGIN IMMEDIATE``).

    Raises:
        SchemaVersionError: The database is at a revision this code does not
            know (made by a newer persched); nothing is changed.
        StoreError: The database cannot be written (read-only, locked past
            the busy timeout, unreachable).
    """
    dialect = dialect_for(engine)
    with _PROCESS_LOCK, store_errors(engine.url), engine.connect() as conn:
        try:
            with conn.begin():
                # Held until this transaction ends (MySQL: until released below); other upgraders queue here.
                dialect.migration_lock(conn)
                # Read under the lock: a concurrent upgrader may just have finished.
                found = _revision(conn)
                _check_known(found)
                if found == HEAD:
                    return
                with quiet_alembic():
                    command.upgrade(_config(conn), "head")  # "Running upgrade ..." lines stay
                logger.info("migrated %s from revision %s to %s", mask(engine.url), found, HEAD)
        finally:
            dialect.release_migration_lock(conn)
