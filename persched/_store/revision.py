"""The schema revision a database is at, read without Alembic.

Importing Alembic costs more than a read command itself, so the usual case,
a database at `HEAD_REVISION`, is one indexed read; anything else goes to
`persched._store.migrate` for the precise error, or the upgrade.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Final

from sqlalchemy import inspect, text
from sqlalchemy.exc import SQLAlchemyError

from persched._store.db import READONLY

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sqlalchemy.engine import Connection, Engine

__all__ = ["HEAD_REVISION", "VERSION_TABLE", "at_head", "quiet_alembic", "stored_revisions"]

#: persched's own Alembic version table, apart from an application's.
VERSION_TABLE: Final = "persched_alembic_version"

#: The newest revision in migrations/versions; a new revision changes it.
HEAD_REVISION: Final = "0017"


def at_head(engine: Engine) -> bool:
    """True if the version table holds exactly `HEAD_REVISION`; else the caller asks Alembic what is wrong."""
    try:
        with engine.connect() as conn:
            conn.execution_options(**{READONLY: True})
            with conn.begin():
                found = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()  # noqa: S608 - a constant
    except SQLAlchemyError:
        return False
    return found == [HEAD_REVISION]


def stored_revisions(conn: Connection) -> list[str]:
    """The revisions in the version table, as Alembic reads them; [] without the table.

    The table is looked for first: a missing table's error would abort a PostgreSQL transaction.
    """
    if not inspect(conn).has_table(VERSION_TABLE):
        return []
    return [str(rev) for rev in conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars()]  # noqa: S608 - a constant


# Alembic's routine INFO lines ("setup plugin ...", "Context impl ...", "Will assume transactional DDL."),
# dropped only on a thread where persched works with Alembic: "Running upgrade ..." stays, and an
# application's own Alembic keeps its output.
_QUIET: Final = threading.local()
_NOISE: Final = {
    "alembic.runtime.plugins": ("setup plugin ",),
    "alembic.runtime.migration": ("Context impl ", "Will assume "),
}


class _QuietAlembic(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        noise = _NOISE.get(record.name, ())
        return not (getattr(_QUIET, "active", False) and str(record.msg).startswith(noise))


for _name in _NOISE:
    _logger = logging.getLogger(_name)
    if not any(isinstance(f, _QuietAlembic) for f in _logger.filters):
        _logger.addFilter(_QuietAlembic())


@contextlib.contextmanager
def quiet_alembic() -> Iterator[None]:
    """Drop Alembic's routine INFO lines logged on this thread meanwhile."""
    previous = getattr(_QUIET, "active", False)
    _QUIET.active = True
    try:
        yield
    finally:
        _QUIET.active = previous
