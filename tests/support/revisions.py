"""Moving a test database to one revision with Alembic, up or down (the upgrade-in-place tests)."""

from __future__ import annotations

from alembic import command

from persched._store import db as _db
from persched._store import migrate as _migrate


def migrate_to(url: str, revision: str, *, down: bool = False) -> None:
    """Upgrade (or with `down`, downgrade) the database behind `url` to `revision`."""
    engine = _db.make_engine(url)
    try:
        with engine.begin() as conn:
            cfg = _migrate._config(conn)
            (command.downgrade if down else command.upgrade)(cfg, revision)
    finally:
        engine.dispose()
