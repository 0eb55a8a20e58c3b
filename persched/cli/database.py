"""``migrate`` (create or upgrade the database named) and ``demo`` (one of its own); Alembic is imported only here."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .._store import db as _db
from .exits import EXIT_OK
from .output import say

if TYPE_CHECKING:
    import argparse

__all__ = ["cmd_demo", "cmd_migrate"]


def cmd_migrate(args: argparse.Namespace) -> int:
    from .._store import migrate as _migrate  # Alembic only where it is used

    engine = _db.make_engine(args.db)
    try:
        before = _migrate.current_revision(engine)
        _migrate.upgrade(engine)
        url = _db.mask(engine.url)
    finally:
        engine.dispose()
    if before == _migrate.HEAD:
        say(f"{url}: schema already at revision {_migrate.HEAD}")
    else:
        say(f"{url}: schema upgraded from {before or 'empty'} to revision {_migrate.HEAD}")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    demo = importlib.import_module("persched._interfaces.demo")
    # Never the database of --db or PERSCHED_DB; it only says so.
    result = demo.main(ignored=args.db_given)
    return int(result or EXIT_OK)
