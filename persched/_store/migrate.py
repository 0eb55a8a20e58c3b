"""Schema migrations at run time: upgrade to head, or refuse a newer schema.

The migrations are the top-level ``migrations/`` directory, shipped as the
package ``persched._migrations``, so one lookup,
``importlib.resources.files("persched._migrations")``, finds them in editable
and wheel installs alike. The Alembic ``Config`` is built in code (no ini
file; ``%`` in the path escaped as ``%%``, as Optuna and MLflow do), and the
live connection is handed to ``env.py`` through ``cfg.attributes``.

Locking. Alembic's ``context`` is module-global, so two threads of one
process must never run it at once: ``_PROCESS_LOCK`` serialises `upgrade`
(Prefect does the same). Across processes the database is the lock: on
SQLite the whole check-and-upgrade runs in one ``BEGIN IMMEDIATE``
transaction (the write lock, taken by `persched._store.dialects.sqlite.open_sqlite`'s begin listener); on
PostgreSQL in one transaction holding ``pg_advisory_xact_lock``; on MySQL and
MariaDB under ``GET_LOCK``, a session lock (their DDL commits implicitly, so
no lock that ends with a transaction would last through a migration),
released by `Dialect.release_migration_lock` once the transaction has ended,
and by the server if the session dies (each engine's
`Dialect.migration_lock`). The revision is read *after* the lock is taken, so
the loser of a race sees head and does nothing. The loser waits for the lock up
to ``migration_timeout_seconds``, not the busy timeout of normal statements: on
a busy machine a migration takes seconds (SQLite waits in `open_sqlite`'s begin
listener, told by the ``LOCK_WAIT`` execution option; PostgreSQL under
``lock_timeout``; MySQL in ``GET_LOCK``). SQLite and PostgreSQL have
transactional DDL, so a failed migration leaves the schema as it was; MySQL
commits each DDL statement on its own, so there a migration that fails
half-way (the server gone) leaves the revisions before it applied and that
one partly applied, as with any MySQL migration tool.

Alembic is imported only when something is to be migrated (or a revision
this code does not know is to be named): the recorded revision is read by a
table check and one SELECT (`persched._store.revision.stored_revisions`), so
`upgrade` of a schema at head, `check_at_head` and `current_revision` never
import it (start-up time). `HEAD` is `persched._store.revision.HEAD_REVISION`; before
migrating, Alembic's own head is checked against it.

Nothing here configures logging: ``env.py`` calls ``fileConfig`` only on the
developer command-line path, never when a connection is passed in.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Final

from persched._store.db import READONLY, mask, store_errors
from persched._store.dialects import LOCK_WAIT, LockWaitExpired, dialect_for
from persched._store.revision import HEAD_REVISION, VERSION_TABLE, quiet_alembic, stored_revisions
from persched.errors import SchemaVersionError, StoreError

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection, Engine

__all__ = [
    "DEFAULT_MIGRATION_TIMEOUT_SECONDS",
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
    # A source checkout (pyproject.toml beside persched/, which site-packages never has) uses its
    # own migrations/: the install's persched._migrations may map another checkout's (a git
    # worktree imported ahead of the editable install), or not exist (a non-editable install).
    root = Path(__file__).resolve().parents[2]  # persched/_store/migrate.py -> the checkout
    if (root / "pyproject.toml").is_file() and (root / "migrations" / "env.py").is_file():
        return str(root / "migrations")
    return str(importlib.resources.files("persched._migrations"))


def _config(connection: Connection | None = None) -> Config:
    with quiet_alembic():  # Alembic's plugins log "setup plugin ..." at INFO when first imported
        from alembic.config import Config

    cfg = Config()
    # ConfigParser interpolation: a "%" in the install path must be doubled.
    cfg.set_main_option("script_location", script_location().replace("%", "%%"))
    cfg.set_main_option("version_table", VERSION_TABLE)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


#: The newest schema revision this code knows.
HEAD: Final = HEAD_REVISION

#: How long `upgrade` waits for another process's migration (`JobScheduler`'s
#: ``migration_timeout_seconds``): a migration of a large history on a busy machine
#: may take minutes, and a process that waits longer than that is more likely stuck.
DEFAULT_MIGRATION_TIMEOUT_SECONDS: Final = 600.0


_SCRIPT_LOCK: Final = threading.Lock()  # one reader of the script directory; taken after _PROCESS_LOCK, never before


def _known() -> frozenset[str]:
    """Every revision in the script directory, after checking that its one head is `HEAD`."""
    with _SCRIPT_LOCK:
        return _read_script()


@functools.cache
def _read_script() -> frozenset[str]:
    with quiet_alembic():
        from alembic.script import ScriptDirectory

        script = ScriptDirectory.from_config(_config())
        heads = script.get_heads()
        if heads != [HEAD]:
            raise RuntimeError(f"persched migrations must have exactly one head, {HEAD!r}; found {heads}")
        return frozenset(rev.revision for rev in script.walk_revisions())


def _revision(conn: Connection) -> str | None:
    heads = stored_revisions(conn)
    if len(heads) > 1:
        # persched's history has one branch: several rows mean a foreign or
        # future writer touched the version table; refuse, change nothing.
        raise SchemaVersionError(" + ".join(sorted(heads)), HEAD)
    return heads[0] if heads else None


def current_revision(engine: Engine) -> str | None:
    """Return the schema revision recorded in the database.

    Args:
        engine: An engine from `persched._store.db.make_engine`.

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
    if found is not None and found != HEAD and found not in _known():
        raise SchemaVersionError(found, HEAD)


def check_at_head(engine: Engine) -> None:
    """Check, without writing, that the database schema is at `HEAD`.

    For read-only commands that must not migrate.

    Args:
        engine: An engine from `persched._store.db.make_engine`.

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


def upgrade(engine: Engine, *, migration_timeout_seconds: float = DEFAULT_MIGRATION_TIMEOUT_SECONDS) -> None:
    """Upgrade the database schema to `HEAD`; do nothing if it is there.

    Safe to call from many threads and processes at once: one upgrades, the
    others wait for its commit (up to `migration_timeout_seconds`, not the
    busy timeout: a migration on a busy machine takes seconds) and then find
    the schema at head.

    Args:
        engine: An engine from `persched._store.db.make_engine` (on SQLite its begin
            listener takes the write lock with ``BEGIN IMMEDIATE``).
        migration_timeout_seconds: How long to wait for the migration's lock
            (`Dialect.migration_lock`) while another process holds it.

    Raises:
        SchemaVersionError: The database is at a revision this code does not
            know (made by a newer persched); nothing is changed.
        StoreError: The database cannot be written (read-only, unreachable),
            or the migration's lock was held past `migration_timeout_seconds`.
    """
    dialect = dialect_for(engine)
    with _PROCESS_LOCK, store_errors(engine.url), engine.connect() as conn:
        conn.execution_options(**{LOCK_WAIT: migration_timeout_seconds})  # SQLite's BEGIN IMMEDIATE waits this long
        try:
            with conn.begin():
                # Held until this transaction ends (MySQL: until released below); other upgraders queue here.
                dialect.migration_lock(conn, migration_timeout_seconds)
                # Read under the lock: a concurrent upgrader may just have finished.
                found = _revision(conn)
                if found == HEAD:
                    return  # the usual case, without Alembic
                _check_known(found)
                _known()  # Alembic's one head must be HEAD before it upgrades to "head"
                with quiet_alembic():
                    from alembic import command

                    command.upgrade(_config(conn), "head")  # "Running upgrade ..." lines stay
                logger.info("migrated %s from revision %s to %s", mask(engine.url), found, HEAD)
        except LockWaitExpired as exc:
            raise StoreError(
                mask(engine.url),
                f"the schema migration's lock was held past migration_timeout_seconds "
                f"({migration_timeout_seconds:g} s) by another process (migrating, or holding a write "
                "transaction open); if a migration is that slow, run `persched migrate` once before "
                "starting the processes, or pass a larger migration_timeout_seconds",
            ) from exc
        finally:
            dialect.release_migration_lock(conn)
