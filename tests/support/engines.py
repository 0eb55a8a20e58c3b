"""The database engines the tests run on: one `EngineSpec` each, listed in `ENGINES`.

Adding an engine to the tests is one more entry in `ENGINES`, with its
helpers in a module of its own beside tests/support/postgres.py (MariaDB,
marker ``mariadb``, server from ``PERSCHED_TEST_MARIADB_URL``: its helpers
are tests/support/mariadb.py). The rest follows from the entry:

- tests/conftest.py registers its marker, leaves its tests out (one summary
  line) when its variable is unset, and stops the run instead when ``CI`` is
  set, so a server engine never skips silently in CI;
- `engine_params()` parametrises over it: the ``engine_name`` of the
  scheduler modules marked ``every_engine`` (and so `db_url` and
  `make_scheduler`), the store contract suite, the migration tests and the
  multi-instance tests.

Two kinds of database are asked of an engine. `fresh` makes a brand-new,
empty one (never migrated) and removes it afterwards. `baseline`, where set,
records a database migrated once per session and returns what brings it back
to that state before each test: per test much cheaper than a new database
migrated again (see `MigratedDatabases`). Where it is None (SQLite), each test
gets a copy of a file migrated once per session instead (a migration costs
about 60 ms of CPU, a copy nothing).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import pytest

from persched._store import db as _db
from persched._store import migrate as _migrate
from tests.support.mariadb import MARIADB_URL_ENV, mariadb_baseline, mariadb_database
from tests.support.postgres import PG_URL_ENV, pg_baseline, pg_schema

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from contextlib import AbstractContextManager
    from pathlib import Path

    from _pytest.mark.structures import ParameterSet

__all__ = [
    "ENGINES",
    "SQLITE_FILE",
    "EngineSpec",
    "MigratedDatabases",
    "engine_named",
    "engine_params",
    "migrate",
    "required_in_ci",
]


@dataclass(frozen=True)
class EngineSpec:
    """How the tests reach one database engine.

    Attributes:
        name: The test id (``[postgres]``) and, for a server engine, its pytest marker.
        label: How messages name it.
        url_env: The environment variable with the server's URL; None: no server (SQLite files).
        fresh: ``fresh(tmp_path, tag)`` enters a brand-new empty database and yields its
            URL; the database is removed on exit. `tag` names it (for leftovers).
        baseline: ``baseline(url)`` records the state of a just-migrated database and
            enters a function that brings it back to that state (empties it but
            for what migrations seed), until the session ends; None: tests get a
            `fresh` database each instead.
    """

    name: str
    label: str
    url_env: str | None
    fresh: Callable[[Path, str], AbstractContextManager[str]]
    baseline: Callable[[str], AbstractContextManager[Callable[[], None]]] | None = None

    @property
    def marker(self) -> pytest.MarkDecorator | None:
        """The pytest marker of a server engine (None for SQLite)."""
        return None if self.url_env is None else getattr(pytest.mark, self.name)


SQLITE_FILE: Final = "jobs.db"
"""A test's SQLite database in its tmp_path, whatever the tag: `db_url`, `empty_db_url` and
`sqlite_url` all name it, so a test that reads the file behind `db_url` can ask for `sqlite_url` too."""


@contextlib.contextmanager
def _sqlite_file(tmp_path: Path, tag: str) -> Iterator[str]:
    del tag
    yield f"sqlite:///{tmp_path / SQLITE_FILE}"


def _pg_fresh(tmp_path: Path, tag: str) -> AbstractContextManager[str]:
    del tmp_path
    return pg_schema(tag)


def _mariadb_fresh(tmp_path: Path, tag: str) -> AbstractContextManager[str]:
    del tmp_path
    return mariadb_database(tag)


ENGINES: Final[tuple[EngineSpec, ...]] = (
    EngineSpec("sqlite", "SQLite", None, _sqlite_file),
    EngineSpec("postgres", "PostgreSQL", PG_URL_ENV, _pg_fresh, pg_baseline),
    EngineSpec("mariadb", "MariaDB", MARIADB_URL_ENV, _mariadb_fresh, mariadb_baseline),
)


def engine_named(name: str) -> EngineSpec:
    """The entry of `ENGINES` called `name`."""
    for engine in ENGINES:
        if engine.name == name:
            return engine
    raise LookupError(f"no test engine {name!r}; known: {[e.name for e in ENGINES]}")


def engine_params(*names: str) -> list[ParameterSet]:
    """One ``pytest.param`` per engine (of `names` only, if given), id its name, a server engine
    marked with its marker."""
    return [
        pytest.param(engine.name, id=engine.name, marks=() if engine.marker is None else engine.marker)
        for engine in ENGINES
        if not names or engine.name in names
    ]


def required_in_ci() -> bool:
    """True in CI (``CI`` set, as .ci/run does): server-engine tests fail there, never skip."""
    return bool(os.environ.get("CI"))


def migrate(url: str) -> None:
    """Migrate the database behind `url` to head."""
    engine = _db.make_engine(url)
    try:
        _migrate.upgrade(engine)
    finally:
        engine.dispose()


class MigratedDatabases:
    """One database per server engine for the whole session, migrated to head once, on first use.

    `empty` hands it to a test as it was just after the migration
    (`EngineSpec.baseline`): the per-test cost on PostgreSQL is one TRUNCATE
    instead of a schema migrated again; on SQLite, a copy of a migrated file.
    Closing removes the databases.
    """

    def __init__(self, tmp_path: Path) -> None:
        self._tmp_path = tmp_path
        self._stack = contextlib.ExitStack()
        self._made: dict[str, tuple[str, Callable[[], None]]] = {}  # name -> (url, reset)
        self._sqlite_template: Path | None = None

    def empty(self, engine: EngineSpec, tmp_path: Path) -> str:
        """The URL of a database of `engine` as a fresh migration leaves it: for SQLite a new file
        in `tmp_path` (`SQLITE_FILE`), else the session database."""
        if engine.baseline is None:
            return self._sqlite_copy(tmp_path)
        made = self._made.get(engine.name)
        if made is None:
            url = self._stack.enter_context(engine.fresh(self._tmp_path, "session"))
            migrate(url)
            self._made[engine.name] = (url, self._stack.enter_context(engine.baseline(url)))
            return url
        url, reset = made
        reset()
        return url

    def _sqlite_copy(self, tmp_path: Path) -> str:
        if self._sqlite_template is None:
            template = self._tmp_path / "template.db"
            migrate(f"sqlite:///{template}")
            # The last connection's close checkpointed the WAL into the file: the file is all of it.
            assert not template.with_name(template.name + "-wal").exists()
            self._sqlite_template = template
        target = tmp_path / SQLITE_FILE
        shutil.copy(self._sqlite_template, target)  # its mode too: owner-only, as persched makes files
        return f"sqlite:///{target}"

    def close(self) -> None:
        """Remove every session database."""
        self._stack.close()
