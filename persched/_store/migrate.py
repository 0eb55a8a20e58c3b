"""Schema migrations at run time: upgrade to head, or refuse a newer schema.

The migrations ship as ``persched._migrations``; the Alembic ``Config`` is
built in code and the live connection reaches ``env.py`` through
``cfg.attributes``. Locks, in this order: ``_PROCESS_LOCK`` (Alembic's
context is module-global), then the database's (`Dialect.migration_lock`),
then ``_SCRIPT_LOCK``. The revision is read after the database lock is taken,
so the loser of a race sees head and does nothing. Alembic is imported only
when there is something to migrate. Why: docs/explanation/store.md,
"Running migrations".
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

_PROCESS_LOCK: Final = threading.Lock()


def script_location() -> str:
    """Return the directory holding ``env.py`` and ``versions/``."""
    # A source checkout uses its own migrations/: the installed persched._migrations may map another
    # checkout's (a git worktree imported ahead of the editable install).
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

#: How long `upgrade` waits for another process's migration: a large history may take minutes.
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
        # One branch: several rows mean a foreign or future writer; refuse, change nothing.
        raise SchemaVersionError(" + ".join(sorted(heads)), HEAD)
    return heads[0] if heads else None


def current_revision(engine: Engine) -> str | None:
    """Return the schema revision recorded in the database, or None if it has no persched schema.

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
    """Check, without writing, that the database schema is at `HEAD` (for read-only commands).

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

    Safe from many threads and processes at once: one upgrades, the others wait
    up to `migration_timeout_seconds` for its commit and then find the schema at head.

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
                dialect.migration_lock(conn, migration_timeout_seconds)  # MySQL: released below
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
