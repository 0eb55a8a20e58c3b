"""The schema revision a database is at, read without Alembic.

`persched jobs` and the other read commands only need to know that the
database is at the head revision; importing Alembic to find out costs more
than the rest of the command (issue 15). `HEAD_REVISION` is the newest
revision in ``migrations/versions`` (a migration test checks that it is
Alembic's head), so the usual case is one indexed read; anything else goes
to `persched._migrate.check_at_head` for the precise error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from persched._db import READONLY

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

__all__ = ["HEAD_REVISION", "VERSION_TABLE", "at_head"]

#: persched's own Alembic version table, apart from an application's.
VERSION_TABLE: Final = "persched_alembic_version"

#: The newest revision in migrations/versions; a new revision changes it.
HEAD_REVISION: Final = "0003"


def at_head(engine: Engine) -> bool:
    """True if the database's version table holds exactly `HEAD_REVISION`.

    False for anything else (no table, another revision, an unreadable
    database): the caller then asks Alembic, which says precisely what is wrong.
    """
    try:
        with engine.connect() as conn:
            conn.execution_options(**{READONLY: True})
            with conn.begin():
                found = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()  # noqa: S608 - a constant
    except SQLAlchemyError:
        return False
    return found == [HEAD_REVISION]
