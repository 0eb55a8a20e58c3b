"""Which database failures the store retries (docs/multi.md, "When an instance dies"), and which refuse one row."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import create_engine
from sqlalchemy.exc import DataError, IntegrityError, InternalError, OperationalError, ProgrammingError

from persched._store import Store
from persched.errors import StoreError

if TYPE_CHECKING:
    from pathlib import Path

    from sqlalchemy.exc import DBAPIError


def test_a_refused_postgresql_connection_is_retried_then_a_store_error(caplog: pytest.LogCaptureFixture) -> None:
    """A server that is restarting refuses connections: retried with backoff, not given up at once."""
    engine = create_engine("postgresql+psycopg://postgres@127.0.0.1:1/test")  # nothing listens on port 1
    store = Store(engine, "postgresql+psycopg://postgres@127.0.0.1:1/test", retry_attempts=3)
    with caplog.at_level(logging.WARNING, logger="persched"), pytest.raises(StoreError, match="connection"):
        store.get_job("a")
    assert len([r for r in caplog.records if "retrying" in r.getMessage()]) == 2
    engine.dispose()


def test_a_corrupt_sqlite_file_is_not_retried(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Only "busy/locked" is transient on SQLite: other errors fail at once."""
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database" * 100)
    engine = create_engine(f"sqlite:///{path}")
    store = Store(engine, str(path), retry_attempts=3)
    with caplog.at_level(logging.WARNING, logger="persched"), pytest.raises(StoreError):
        store.get_job("a")
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    engine.dispose()


class _DriverError(Exception):
    """A driver's exception: MySQL's carry (errno, message), PostgreSQL's a sqlstate."""

    def __init__(self, *args: object, sqlstate: str | None = None) -> None:
        super().__init__(*args)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("dialect_name", "error", "refused"),
    [
        ("sqlite", IntegrityError("UPDATE", {}, _DriverError("trigger said no")), True),
        ("sqlite", OperationalError("UPDATE", {}, _DriverError("database or disk is full")), False),
        ("sqlite", OperationalError("UPDATE", {}, _DriverError("attempt to write a readonly database")), False),
        ("postgresql", DataError("UPDATE", {}, _DriverError("integer out of range", sqlstate="22003")), True),
        ("postgresql", InternalError("UPDATE", {}, _DriverError("raised", sqlstate="P0001")), True),
        ("postgresql", ProgrammingError("UPDATE", {}, _DriverError("no table", sqlstate="42P01")), False),
        ("mysql", OperationalError("UPDATE", {}, _DriverError(1690, "BIGINT value is out of range")), True),
        ("mysql", OperationalError("UPDATE", {}, _DriverError(1644, "signalled")), True),
        ("mysql", OperationalError("UPDATE", {}, _DriverError(1036, "table is read only")), False),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_which_failures_refuse_a_row(dialect_name: str, error: DBAPIError, refused: bool) -> None:
    """A refused row is written apart (RefusedWrite); a full disk or a missing table is the store's, never one row's."""
    dialect = importlib.import_module(f"persched._store.dialects.{dialect_name}").DIALECT
    assert dialect.refuses_row(error) is refused
