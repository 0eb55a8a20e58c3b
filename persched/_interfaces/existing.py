"""Open a database that exists already, at the head schema: how the command line and the dashboard reach it.

Never created, never migrated: a missing or older schema is an error saying what to run. Alembic is
imported only to say what is wrong.
"""

from __future__ import annotations

import importlib
import sys

from .._model.models import DEFAULT_NAMESPACE
from .._store import Store
from .._store import db as _db
from .._store import revision as _revision

__all__ = ["open_existing"]


def open_existing(db: str, namespace: str = DEFAULT_NAMESPACE, *, read_only: bool = False) -> Store:
    """Open a store that must already exist at the head schema; never creates or migrates.

    With `read_only`, a database that cannot be written is opened read-only, said in one line on stderr.

    Raises:
        StoreError: Missing database file, no or an older persched schema, unusable database.
        SchemaVersionError: The schema is newer than this persched.
    """
    if read_only:
        engine, note = _db.make_read_only_engine(db)
        if note is not None:
            print(f"persched: note: {note}", file=sys.stderr, flush=True)  # noqa: T201 - one line for the user
    else:
        engine = _db.make_engine(db, create=False)
    try:
        if not _revision.at_head(engine):
            importlib.import_module("persched._store.migrate").check_at_head(engine)  # says what is wrong
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, _db.mask(engine.url), namespace=namespace)
